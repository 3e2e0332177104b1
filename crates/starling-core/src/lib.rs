//! Starling's domain types: ids, AT Protocol syntax, and Jetstream event decoding.
//!
//! Owns: the newtypes every other crate speaks (`ActorId`, `Cursor`), the syntax checks for DIDs,
//! handles, NSIDs, record keys, AT-URIs, TIDs and datetimes (`syntax`), and the zero-copy decoder
//! of Jetstream v1 JSON events (`jetstream`).
//! Does not: do I/O, allocate per decoded field, or know how anything is stored.
//! Must not depend on: `tokio`, any storage engine, any other `starling-*` crate.

#![cfg_attr(test, allow(clippy::unwrap_used, clippy::indexing_slicing))]

pub mod feed;
pub mod hash;
pub mod ids;
pub mod jetstream;
pub mod labels;
pub mod sample;
pub mod syntax;

pub use ids::{ActorId, Cursor};
