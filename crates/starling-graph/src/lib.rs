//! The follow and block graph, held in memory as sets of dense `u32` actor ids.
//!
//! Owns: forward and reverse adjacency (following, followers, blocking, blocked-by) over
//! [`ActorId`](starling_core::ActorId)s, set intersection (social proof, mutuals), live updates that readers never see
//! half-applied, the graph's snapshot format, and a generator of Bluesky-shaped test graphs.
//! Does not: intern DIDs (the store maps DIDs to `ActorId`s), do I/O other than through the
//! `Read`/`Write` a caller hands to the snapshot functions, spawn tasks or threads, or know
//! how edges are stored.
//! Must not depend on: `tokio`, `starling-store`, `starling-api`, or any `starling-*` crate but
//! `starling-core`.
//!
//! Read first: [`Graph`] (the module docs of `graph.rs` explain sharding and consistency),
//! then `set.rs` for the two set representations and the intersection kernels, `packed.rs` for
//! the packed small sets, `arena.rs` for where a shard keeps them, and `snapshot.rs` for the
//! file format.
//!
//! # Representation and memory
//!
//! Each actor has an 8-byte slot: the handles of its following and followers sets. A set up to
//! [`ARRAY_MEMBERS_MAX`] (4,096) members is packed (`packed.rs`): its gaps at one bit width,
//! with every 64th member whole to search from, ~2.7 bytes a member at this scale. A shard keeps
//! its packed sets back to back in blocks of 256 KiB (`arena.rs`), so 10M sets are not 10M
//! allocations; a bigger set is a roaring bitmap, ~2 bytes a member and 8 KiB per full
//! 65,536-id chunk. Blocks, rare, have handles in a per-shard map beside the slots, and their
//! sets live in the same blocks. An empty set takes no memory beyond its handle.
//!
//! The math at the 2024 network's scale (5.5M actors, 160M follows, from
//! `examples/graph_bench.rs` on the synthetic graph, seed 7):
//!
//! | part | count | bytes |
//! |---|---|---|
//! | slots | 5.5M actors × 8 B | 42 MiB |
//! | packed sets | 10.56M sets, 222M members, ~2.7 B a member | 565 MiB |
//! | roaring sets | 5,594 sets, 98M members | 183 MiB |
//! | room not used yet in the blocks | at most one block per shard | ~12 MiB |
//! | **total** | resident after loading a snapshot | **819 MiB** |
//!
//! (A sorted `u32` array per set, each its own allocation behind a 16-byte handle, took 848 MiB
//! of members, ~190 MiB of allocator rounding and 168 MiB of slots: 1,394 MiB in all.) GraphD,
//! with hash sets of `u64`, held the same graph in ~6.5 GB. Roaring for every set would cost
//! ~45-50 bytes a member for the typical ~30-member set (one container per member); packed sets
//! for every set would turn the biggest follower sets' probes into decodes.

#![cfg_attr(test, allow(clippy::unwrap_used, clippy::indexing_slicing))]

mod arena;
mod build;
mod graph;
mod packed;
mod set;
mod shard;
mod snapshot;
mod suggest;
pub mod synthetic;

pub use build::GraphBuilder;
pub use graph::{
    APPLY_CHUNK_CHANGES_MAX, BlockRelation, EdgeChange, Graph, GraphStats, HighDegree,
    KnownFollowers,
};
pub use set::{ARRAY_MEMBERS_MAX, SortedIds};
pub use snapshot::{SNAPSHOT_ARRAY_MEMBERS_MAX, SNAPSHOT_MAGIC, SNAPSHOT_VERSION, SnapshotError};
pub use suggest::{
    SUGGEST_FOLLOWS_MAX, SUGGEST_FOLLOWS_OF_FOLLOW_MAX, Suggestion, follow_suggestions,
};
