//! Ingest: Jetstream events from a live websocket or a recorded file, applied to the store in
//! durable batches.
//!
//! Owns: reading recorded `.jsonl` / `.jsonl.zst` files and resuming them, the Jetstream
//! websocket client (reconnect, cursor rewind, zstd dictionary, collection filter), batching,
//! back-pressure, drop counting and rate-limited drop logs; feeding each commit's changes to
//! the in-memory graph and timelines.
//! Does not: decide what an event means for the store (that is `starling-store`), parse flags,
//! or serve requests.
//! Must not depend on: `starling-api`, the storage engine directly.

#![cfg_attr(test, allow(clippy::unwrap_used, clippy::indexing_slicing))]

mod applier;
pub mod graph_sync;
pub mod import;
pub mod live;
pub mod replay;
pub mod timeline_sync;

pub use applier::{Applier, BatchLimits, CommitSink};
pub use live::{LiveOptions, run_live};
pub use replay::{ReplayOptions, ReplayReport, replay_file};

/// Errors that stop ingest. Malformed events never do: they are counted and skipped.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum IngestError {
    /// The store failed; the process must exit and recover from the journal.
    #[error(transparent)]
    Store(#[from] starling_store::StoreError),
    /// A recorded file cannot be read.
    #[error("reading `{path}`: {source}")]
    File {
        /// The file.
        path: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The zstd dictionary cannot be loaded.
    #[error("zstd dictionary `{path}`: {reason}")]
    Dictionary {
        /// The dictionary file.
        path: String,
        /// Why it cannot be used.
        reason: String,
    },
    /// The thread applying live events panicked: a bug; the process must exit.
    #[error("the live ingest thread panicked (a bug: please report it with the log)")]
    ApplierPanicked,
    /// A Jetstream URL is not usable.
    #[error("jetstream URL `{url}`: {reason}")]
    BadUrl {
        /// The URL.
        url: String,
        /// What is wrong with it.
        reason: String,
    },
}
