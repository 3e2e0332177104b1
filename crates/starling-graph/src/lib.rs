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
//! then `set.rs` for the two set representations and the intersection kernels, and
//! `snapshot.rs` for the file format.
//!
//! # Representation and memory
//!
//! Each actor has a 32-byte slot: its following and followers sets, each a 16-byte enum that is
//! either a boxed sorted `u32` array or a boxed roaring bitmap. An empty set allocates nothing.
//! A set up to [`ARRAY_MEMBERS_MAX`] (4,096) members is an array, 4 bytes a member; a bigger one
//! is a roaring bitmap, ~2 bytes a member and 8 KiB per full 65,536-id chunk. Blocks, rare,
//! live in a per-shard map beside the slots.
//!
//! The math at the 2024 network's scale (5.5M actors, 160M follows, from
//! `examples/graph_bench.rs` on the synthetic graph, seed 7):
//!
//! | part | count | bytes |
//! |---|---|---|
//! | slots | 5.5M actors × 32 B | 168 MiB |
//! | array members | 10.56M non-empty arrays, 222M members × 4 B | 848 MiB |
//! | allocator overhead of the arrays | ~19 B each (header, rounding to 16) | ~190 MiB |
//! | roaring sets | 5,594 sets, 98M members | 183 MiB |
//! | **total** | resident after loading a snapshot | **1,394 MiB** |
//!
//! (A graph built in bulk from edges shows 1,489 MiB: roaring grows its containers by doubling
//! while it is built, where loading from the snapshot allocates them at their exact size.)
//! GraphD, with hash sets of `u64`, held the same graph in ~6.5 GB. Roaring for every set would
//! cost ~45-50 bytes a member for the typical ~30-member set (one container per member); sorted
//! arrays for every set would cost ~1.2 GiB of members alone and turn the biggest follower
//! sets' probes into binary searches over megabytes.

#![cfg_attr(test, allow(clippy::unwrap_used, clippy::indexing_slicing))]

mod build;
mod graph;
mod set;
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
