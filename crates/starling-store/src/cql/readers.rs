//! Change log readers: where each live replica is in the change log, so that pruning keeps
//! every entry one of them has not read yet.
//!
//! Every opened store has a random id. When it reads the change log (`changes_since`,
//! `graph_log_since`) it first writes its position, the `after` of the read (it needs every
//! entry above it), to `log_readers` with a TTL of [`READER_TTL`]. A task on the store's
//! runtime rewrites the row every [`READER_REFRESH`] while the store is open, so a replica that
//! is alive but slow to read keeps its entries however long it waits, and a dead one's row
//! expires. Dropping the store deletes the row.
//!
//! Pruning (`prune_graph_log(upto)`) deletes only up to the lowest position of the other live
//! readers; the caller's own position moves up to `upto`, which its snapshot covers. It writes
//! the watermark first (`meta` `graph/pruned_upto`, with the watermark as its write timestamp,
//! so that concurrent pruners leave the highest), then deletes. A reader whose first position
//! lands while a prune that did not see it runs can lose entries; it notices, because the log
//! is dense (one entry per sequence number): an entry missing at the start of a read, with the
//! watermark at or above it, fails the read with [`StoreError::Pruned`] instead of skipping.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use futures_util::TryStreamExt;
use scylla::client::session::Session;
use scylla::statement::prepared::PreparedStatement;

use super::{CassandraStore, Ctx};
use crate::StoreError;

/// How long a reader's position outlives its last refresh: a replica dead this long no longer
/// holds back pruning.
pub const READER_TTL: Duration = Duration::from_secs(30);
/// How often an open store rewrites its position.
pub const READER_REFRESH: Duration = Duration::from_secs(5);

/// How long a reader's row lives and how often it is rewritten.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ReaderTiming {
    pub ttl: Duration,
    pub refresh: Duration,
}

impl ReaderTiming {
    pub(crate) const DEFAULT: ReaderTiming = ReaderTiming {
        ttl: READER_TTL,
        refresh: READER_REFRESH,
    };
}

/// One store's position in the change log.
pub(crate) struct ReaderState {
    timing: ReaderTiming,
    /// Entries above this are still needed.
    position: AtomicU64,
    /// Whether the row has been written (the store has read the log).
    registered: AtomicBool,
    /// The write timestamp of the last write of the row, in microseconds: each write takes a
    /// higher one, so the row holds the newest position whichever coordinator answers.
    last_ts: AtomicU64,
    /// Set when the row is deleted at close: no write may bring it back.
    closed: AtomicBool,
    /// One write of the row at a time.
    writing: tokio::sync::Mutex<()>,
}

impl ReaderState {
    pub(crate) fn new(timing: ReaderTiming) -> ReaderState {
        assert!(
            timing.refresh < timing.ttl,
            "a reader row is refreshed before it expires"
        );
        ReaderState {
            timing,
            position: AtomicU64::new(0),
            registered: AtomicBool::new(false),
            last_ts: AtomicU64::new(0),
            closed: AtomicBool::new(false),
            writing: tokio::sync::Mutex::new(()),
        }
    }

    pub(crate) fn is_registered(&self) -> bool {
        self.registered.load(Ordering::Acquire)
    }

    fn next_ts(&self) -> i64 {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_micros() as u64);
        let prev = self
            .last_ts
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |last| {
                Some(now.max(last + 1))
            })
            .unwrap_or(0);
        now.max(prev + 1) as i64
    }
}

/// Writes the row of reader `id` with its current position.
async fn write_row(
    session: &Session,
    put: &PreparedStatement,
    state: &ReaderState,
    id: i64,
) -> Result<(), StoreError> {
    let _one = state.writing.lock().await;
    if state.closed.load(Ordering::Acquire) {
        return Ok(());
    }
    let position = state.position.load(Ordering::Acquire);
    session
        .execute_unpaged(
            put,
            (
                id,
                position as i64,
                state.timing.ttl.as_secs().clamp(1, i32::MAX as u64) as i32,
                state.next_ts(),
            ),
        )
        .await
        .ctx("writing a change log reader's position")?;
    Ok(())
}

/// Records that this store needs every entry after `after`, durably before it returns.
pub(crate) async fn record(store: &CassandraStore, after: u64) -> Result<(), StoreError> {
    let state = &store.reader;
    let moved = state.position.swap(after, Ordering::AcqRel) != after;
    if moved || !state.is_registered() {
        write_row(
            &store.session,
            &store.st.writer.put_reader,
            state,
            store.store_id,
        )
        .await?;
        state.registered.store(true, Ordering::Release);
    }
    Ok(())
}

/// Moves this store's position up to `upto` (its snapshot covers the entries up to it).
pub(crate) async fn advance(store: &CassandraStore, upto: u64) -> Result<(), StoreError> {
    let state = &store.reader;
    if state.is_registered() && state.position.fetch_max(upto, Ordering::AcqRel) < upto {
        write_row(
            &store.session,
            &store.st.writer.put_reader,
            state,
            store.store_id,
        )
        .await?;
    }
    Ok(())
}

/// The lowest position of the live readers other than this store, if any.
pub(crate) async fn lowest_other(store: &CassandraStore) -> Result<Option<u64>, StoreError> {
    let mut rows = store
        .session
        .execute_iter(store.st.writer.scan_readers.clone(), ())
        .await
        .ctx("reading the change log readers")?
        .rows_stream::<(i64, i64)>()
        .ctx("reading the change log readers")?;
    let mut lowest: Option<u64> = None;
    while let Some((reader, seq)) = rows
        .try_next()
        .await
        .ctx("reading the change log readers")?
    {
        if reader != store.store_id {
            let seq = seq.max(0) as u64;
            lowest = Some(lowest.map_or(seq, |lowest| lowest.min(seq)));
        }
    }
    Ok(lowest)
}

/// Rewrites the row of reader `id` every refresh interval once it is registered; runs until
/// the store's runtime shuts down.
pub(crate) async fn refresh(
    session: Arc<Session>,
    put: PreparedStatement,
    state: Arc<ReaderState>,
    id: i64,
) {
    loop {
        tokio::time::sleep(state.timing.refresh).await;
        if !state.is_registered() {
            continue;
        }
        if let Err(err) = write_row(&session, &put, &state, id).await {
            tracing::warn!(error = %err, "refreshing the change log reader's position");
        }
    }
}

/// Deletes the row of reader `id`, so pruning need not wait for its TTL.
pub(crate) async fn forget(
    session: &Session,
    delete: &PreparedStatement,
    state: &ReaderState,
    id: i64,
) -> Result<(), StoreError> {
    let _one = state.writing.lock().await;
    state.closed.store(true, Ordering::Release);
    session
        .execute_unpaged(delete, (state.next_ts(), id))
        .await
        .ctx("removing a change log reader")?;
    Ok(())
}
