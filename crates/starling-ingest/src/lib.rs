//! Ingest: Jetstream events from a live websocket or a recorded file, applied to the store in
//! durable batches.
//!
//! Owns: reading recorded `.jsonl` / `.jsonl.zst` files and resuming them, the Jetstream
//! websocket client (reconnect, cursor rewind, zstd dictionary, collection filter), batching,
//! back-pressure, drop counting and rate-limited drop logs; feeding each commit's changes to
//! the in-memory graph and timelines; the replica protocol of a shared store (`replica`: the
//! writer lease, following the change log, taking over); `serve`'s background threads (graph
//! snapshots, timeline cache refreshes); the bsync consumer of each user's private state
//! (`bsync`); the relay firehose with signature checks (`relay`).
//! Does not: decide what an event means for the store (that is `starling-store`), parse flags,
//! serve requests, or exit the process (a lost writer lease is an error the binary exits on).
//! Must not depend on: `starling-api`, the storage engine directly.

#![cfg_attr(test, allow(clippy::unwrap_used, clippy::indexing_slicing))]

mod applier;
pub mod backfill;
pub mod bsync;
pub mod graph_sync;
pub mod import;
pub mod labels;
pub mod live;
pub mod periodic;
pub mod relay;
pub mod replay;
pub mod replica;
pub mod search_sync;
pub mod timeline_sync;

pub use applier::{Applier, BatchLimits, CommitSink, FUTURE_SKEW_MAX, SharedSink};
pub use backfill::{BackfillOptions, BackfillProgress, BackfillSource, run_backfill};
pub use bsync::{BsyncOptions, check_bsync_url, run_bsync};
pub use labels::run_labelers;
pub use live::{LiveOptions, run_live};
pub use relay::{RelayOptions, run_relay};
pub use replay::{ReplayOptions, ReplayReport, replay_file, replay_stdin};

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
    /// A replica could not read the change log of its shared store.
    #[error("reading the change log: {0}")]
    ChangeLog(starling_store::StoreError),
    /// A replica took the writer lease but could not make the store ready for its writes.
    #[error("taking over as the writer: {0}")]
    TakeOver(starling_store::StoreError),
    /// The bsync consumer cannot run (a bad URL, or a task that failed).
    #[error("bsync: {0}")]
    Bsync(String),
    /// A labeler consumer task failed.
    #[error("labels: {0}")]
    Labels(String),
    /// This replica lost the writer lease: it must stop writing at once (see
    /// [`IngestError::is_lease_lost`]).
    #[error("lost the writer lease: {0}")]
    LeaseLost(replica::LeaseLoss),
    /// The timelines' caches could not be refreshed.
    #[error("refreshing the timeline caches: {0}")]
    TimelineRefresh(starling_timeline::TimelineError),
    /// The search index could not be opened, rebuilt or committed.
    #[error("search index: {0}")]
    Search(String),
    /// A background thread's task failed.
    #[error("the {thread} thread: {error}")]
    Background {
        /// The thread's name.
        thread: &'static str,
        /// What failed.
        error: Box<IngestError>,
    },
    /// A thread or task could not start, panicked, or was cancelled: a bug, or the runtime
    /// shutting down.
    #[error("{what}: {reason}")]
    Task {
        /// The thread or task.
        what: &'static str,
        /// What happened to it.
        reason: String,
    },
}

impl IngestError {
    /// Whether this replica lost the writer lease. Writing on could race the next writer: the
    /// process must exit at once, without the graceful shutdown that would commit what ingest
    /// holds, and its supervisor restart it as a follower.
    pub fn is_lease_lost(&self) -> bool {
        matches!(self, IngestError::LeaseLost(_))
    }

    /// Whether the store failed a write or a read of ingest. The store is poisoned: nothing
    /// more may be written, and a graceful shutdown (which flushes the store) could wait
    /// forever on the engine's failed background work. The process must exit at once and
    /// recover from the journal (or the batch log) on its next start.
    pub fn is_store_failure(&self) -> bool {
        matches!(self, IngestError::Store(_))
    }
}
