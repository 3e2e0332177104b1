//! Decoding and batching shared by the live and the replay paths.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use starling_core::Cursor;
use starling_core::jetstream::{self, DropReason};
use starling_store::{Batch, Committed, Outcome, Progress, Store};
use tracing::{debug, warn};

use crate::IngestError;

/// Receives what each committed batch changed, in commit order.
pub trait CommitSink {
    /// Applies the changes of one committed batch.
    fn apply(&mut self, committed: &Committed);

    /// A lock that keeps this sink's batches in commit order when several appliers feed it
    /// (live ingest and a backfill in `serve`): an [`Applier`] holds it from before its batch
    /// commits until [`CommitSink::apply`] returns. `None`, the default, for a sink that one
    /// applier alone feeds.
    fn commit_order(&self) -> Option<Arc<Mutex<()>>> {
        None
    }
}

/// One sink fed by several appliers of one store, each through a clone: their batches reach it
/// one at a time and in the order they committed (see [`CommitSink::commit_order`]), so that
/// absolute graph changes are never applied out of order and the sink may take the store's
/// newest change log sequence as the batch's own.
#[derive(Clone)]
pub struct SharedSink {
    inner: Arc<Mutex<Box<dyn CommitSink + Send>>>,
    order: Arc<Mutex<()>>,
}

impl SharedSink {
    /// Shares `sink`.
    pub fn new(sink: Box<dyn CommitSink + Send>) -> SharedSink {
        SharedSink {
            inner: Arc::new(Mutex::new(sink)),
            order: Arc::new(Mutex::new(())),
        }
    }
}

impl CommitSink for SharedSink {
    fn apply(&mut self, committed: &Committed) {
        self.inner
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .apply(committed);
    }

    fn commit_order(&self) -> Option<Arc<Mutex<()>>> {
        Some(self.order.clone())
    }
}

impl<F: FnMut(&Committed)> CommitSink for F {
    fn apply(&mut self, committed: &Committed) {
        self(committed);
    }
}

/// The next message of an applying thread's queue: waited for until `due` when a batch is open
/// (`None` once it is due), else for as long as it takes (`Some(None)` once the queue closed).
/// The wait runs in `handle`'s `block_on`, where its timer must be created.
pub(crate) fn next_until_due<T>(
    due: Option<Instant>,
    rx: &mut tokio::sync::mpsc::Receiver<T>,
    handle: &tokio::runtime::Handle,
) -> Option<Option<T>> {
    match due {
        Some(due) => handle
            .block_on(async { tokio::time::timeout_at(due.into(), rx.recv()).await })
            .ok(),
        None => Some(rx.blocking_recv()),
    }
}

/// When a batch closes: at `events_max` events or `wait_max` after its first event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BatchLimits {
    /// Events per batch at most.
    pub events_max: usize,
    /// How long the first event of a live batch waits for the batch to commit, at most.
    pub wait_max: Duration,
}

impl Default for BatchLimits {
    fn default() -> BatchLimits {
        BatchLimits {
            events_max: 20_000,
            wait_max: Duration::from_millis(100),
        }
    }
}

/// How far ahead of this machine's clock an event's `time_us` may be; a later event is dropped
/// as [`DropReason::FutureTime`].
///
/// Jetstream stamps `time_us` with its own clock when it receives an event, so a live event is
/// never ahead of ours by more than the two clocks' skew. The stored cursor only moves forward:
/// one event dated years ahead would fix it there, and every reconnect would ask Jetstream for
/// the future. Recorded files are older than now, so replay never meets the bound.
pub const FUTURE_SKEW_MAX: Duration = Duration::from_secs(300);

/// This machine's clock in microseconds since the epoch, as `time_us` counts.
pub fn now_us() -> u64 {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    now.as_micros().try_into().unwrap_or(u64::MAX)
}

/// The newest `time_us` accepted now: this machine's clock plus [`FUTURE_SKEW_MAX`].
pub fn time_us_max() -> u64 {
    now_us().saturating_add(FUTURE_SKEW_MAX.as_micros() as u64)
}

/// How often a drop reason may be logged.
const DROP_LOG_INTERVAL: Duration = Duration::from_secs(10);

/// Decodes events and applies them to the store in batches.
pub struct Applier<'s, 'g, S: Store> {
    store: &'s S,
    batch: Option<S::Batch<'s>>,
    batch_started: Option<Instant>,
    sink: &'g mut dyn CommitSink,
    limits: BatchLimits,
    newest_cursor: Option<Cursor>,
    drop_logged: [Option<Instant>; DropReason::ALL.len()],
}

impl<'s, 'g, S: Store> Applier<'s, 'g, S> {
    /// An applier writing to `store` and feeding what each batch changed to `sink`.
    pub fn new(
        store: &'s S,
        sink: &'g mut dyn CommitSink,
        limits: BatchLimits,
    ) -> Result<Self, IngestError> {
        // The stored cursor only moves forward, whichever source a later batch comes from; one
        // past the future bound (stored before the bound existed) is forgotten, or it would stay.
        let newest_cursor = match store.progress(None)? {
            Some(Progress::Live(cursor)) if cursor.0 > time_us_max() => {
                warn!(%cursor, "the stored cursor is in the future: starting it over");
                None
            }
            Some(Progress::Live(cursor)) => Some(cursor),
            _ => None,
        };
        Ok(Applier {
            store,
            batch: None,
            batch_started: None,
            sink,
            limits,
            newest_cursor,
            drop_logged: [None; DropReason::ALL.len()],
        })
    }

    /// Decodes one event and applies it to the open batch; a bad event is counted, not fatal.
    pub fn push(&mut self, bytes: &[u8]) -> Result<(), IngestError> {
        let store = self.store;
        let batch = self.batch.get_or_insert_with(|| store.batch());
        self.batch_started.get_or_insert_with(Instant::now);
        match jetstream::decode(bytes) {
            Ok(event) if event.time_us > time_us_max() => {
                let err = jetstream::DecodeError {
                    reason: DropReason::FutureTime,
                    detail: format!("time_us {} is ahead of this machine's clock", event.time_us),
                };
                self.log_drop(&err);
                self.drop_event(err.reason);
            }
            Ok(event) => {
                let outcome = batch.apply(&event)?;
                let cursor = Cursor(event.time_us);
                self.newest_cursor = Some(self.newest_cursor.map_or(cursor, |c| c.max(cursor)));
                count_outcome(outcome);
            }
            Err(err) => {
                self.log_drop(&err);
                self.drop_event(err.reason);
            }
        }
        Ok(())
    }

    /// Events the open batch can take before it is full.
    pub fn room(&self) -> usize {
        self.limits.events_max.saturating_sub(self.pending())
    }

    /// Reads ahead what the next `lines` will need, if the store reads remotely (see
    /// [`Batch::prefetch`]); they are decoded here once more when pushed, which costs little
    /// beside a round trip each. Malformed lines are skipped here and counted when pushed.
    pub fn prefetch<'l>(
        &mut self,
        lines: impl Iterator<Item = &'l [u8]>,
    ) -> Result<(), IngestError> {
        if !<S::Batch<'s> as Batch>::PREFETCH {
            return Ok(());
        }
        let events: Vec<_> = lines
            .filter_map(|line| jetstream::decode(line).ok())
            .collect();
        let store = self.store;
        let batch = self.batch.get_or_insert_with(|| store.batch());
        batch.prefetch(&events)?;
        Ok(())
    }

    /// Records the progress of one more source (a completed repository) in the open batch,
    /// durable with it; see [`Batch::add_source_progress`].
    pub fn add_source_progress(&mut self, source: String, offset: u64) {
        let store = self.store;
        let batch = self.batch.get_or_insert_with(|| store.batch());
        self.batch_started.get_or_insert_with(Instant::now);
        batch.add_source_progress(source, offset);
    }

    /// Counts an event dropped before decoding (for example, one that does not decompress).
    pub fn drop_event(&mut self, reason: DropReason) {
        let store = self.store;
        let batch = self.batch.get_or_insert_with(|| store.batch());
        self.batch_started.get_or_insert_with(Instant::now);
        batch.drop_event(reason);
        metrics::counter!("starling_ingest_dropped_total", "reason" => reason.as_str())
            .increment(1);
    }

    fn log_drop(&mut self, err: &jetstream::DecodeError) {
        let Some(slot) = DropReason::ALL
            .iter()
            .position(|&reason| reason == err.reason)
            .and_then(|idx| self.drop_logged.get_mut(idx))
        else {
            return;
        };
        let now = Instant::now();
        if slot.is_none_or(|last| now.duration_since(last) >= DROP_LOG_INTERVAL) {
            *slot = Some(now);
            debug!(reason = %err.reason, detail = %err.detail, cursor = ?self.newest_cursor, "dropping malformed event");
        }
    }

    /// Events in the open batch.
    pub fn pending(&self) -> usize {
        self.batch.as_ref().map_or(0, |batch| batch.len())
    }

    /// Whether the open batch is full.
    pub fn is_full(&self) -> bool {
        self.pending() >= self.limits.events_max
    }

    /// Whether the open batch has waited long enough.
    pub fn is_due(&self, now: Instant) -> bool {
        self.batch_started
            .is_some_and(|started| now.duration_since(started) >= self.limits.wait_max)
    }

    /// When the open batch is due, if one is open.
    pub fn due_at(&self) -> Option<Instant> {
        self.batch_started
            .map(|started| started + self.limits.wait_max)
    }

    /// The newest cursor decoded so far.
    pub fn newest_cursor(&self) -> Option<Cursor> {
        self.newest_cursor
    }

    /// Commits the open batch durably with `progress`, then feeds its changes to the sink.
    /// Returns the number of events committed.
    pub fn commit(&mut self, progress: Option<Progress>) -> Result<usize, IngestError> {
        let mut batch = match self.batch.take() {
            Some(batch) => batch,
            None => self.store.batch(),
        };
        self.batch_started = None;
        let n_events = batch.len();
        if let Some(progress) = progress {
            batch.set_progress(progress);
        }
        // Taken while this applier holds the store's writer (its open batch), released after
        // the sink: another applier's batch then commits, and reaches the sink, after this one.
        let order = self.sink.commit_order();
        let _in_order = order
            .as_deref()
            .map(|order| order.lock().unwrap_or_else(PoisonError::into_inner));
        let started = Instant::now();
        let committed = batch.commit()?;
        metrics::histogram!("starling_ingest_commit_seconds").record(started.elapsed());
        metrics::counter!("starling_ingest_batches_total").increment(1);
        self.sink.apply(&committed);
        Ok(n_events)
    }
}

fn count_outcome(outcome: Outcome) {
    metrics::counter!("starling_ingest_events_total", "outcome" => outcome.as_str()).increment(1);
}
