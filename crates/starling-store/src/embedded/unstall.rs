//! Restarting the engine's compactions when its writes have halted with none running.
//!
//! fjall runs one compaction step for each memtable it flushes, and none otherwise. It slows the
//! writes to a keyspace whose level 0 holds 20 tables and halts them at 30, until compactions
//! bring that down. But a step may pick a deeper level over level 0, and once writes halt,
//! nothing is flushed, so no step is asked for and the halt lasts forever: a 100M-event replay
//! stopped so at 86M events, its engine worker idle and its batch writer asleep in the halt.
//! A flush of the halted keyspace's memtable asks for one more step. The thread applying
//! batches does that when a batch's write has taken [`CHECK_AFTER`] and the engine is idle,
//! again each [`CHECK_AFTER`] until the write is done.

use std::time::Duration;

use super::EmbeddedStore;
use crate::StoreError;

/// How long a batch's write may take before the engine is checked for a halt.
pub(super) const CHECK_AFTER: Duration = Duration::from_secs(1);

/// Tables in level 0 at which fjall slows writes down; it halts them at 30.
pub(super) const L0_TABLES_HALTING: usize = 20;

impl EmbeddedStore {
    /// When the engine is neither flushing nor compacting, flushes each keyspace that holds at
    /// least `l0_tables_min` tables in level 0 and has something in its memtable, so that the
    /// engine takes a compaction step; returns how many it flushed.
    pub(super) fn restart_compactions(&self, l0_tables_min: usize) -> Result<usize, StoreError> {
        if self.db.outstanding_flushes() > 0 || self.db.active_compactions() > 0 {
            return Ok(0);
        }
        let keyspaces = [
            &self.records,
            &self.index,
            &self.actor_rows,
            &self.meta,
            &self.graph_log,
            &self.private,
        ];
        let mut flushed = 0;
        for keyspace in keyspaces {
            let tables = keyspace.l0_table_count();
            if tables >= l0_tables_min && keyspace.rotate_memtable()? {
                tracing::warn!(
                    keyspace = %keyspace.path().display(),
                    tables,
                    "the engine halted writes with level 0 full and no compaction running; \
                     flushing the memtable to start one"
                );
                flushed += 1;
            }
        }
        Ok(flushed)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::*;

    /// Waits until `done` holds, failing the test after a minute.
    fn until(what: &str, done: impl Fn() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while !done() {
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            std::thread::yield_now();
        }
    }

    // With the engine idle, a keyspace is flushed only when its level 0 holds enough tables
    // and its memtable holds something; the flush is the engine's own (a new table appears).
    #[test]
    fn an_idle_engine_is_flushed_where_level_0_is_full() {
        let dir = tempfile::tempdir().unwrap();
        let store = EmbeddedStore::open(dir.path()).unwrap();
        let idle = || store.db.outstanding_flushes() == 0 && store.db.active_compactions() == 0;
        store.index.insert(b"a", b"1").unwrap();
        store.index.rotate_memtable_and_wait().unwrap();
        until("the engine to go idle", idle);
        let tables = store.index.table_count();
        let l0 = store.index.l0_table_count();
        store.index.insert(b"b", b"2").unwrap();

        assert_eq!(
            store.restart_compactions(l0 + 1).unwrap(),
            0,
            "below the threshold"
        );
        assert_eq!(
            store.restart_compactions(l0).unwrap(),
            1,
            "only the index has data"
        );
        until("the flush", || store.index.table_count() == tables + 1);
        until("the engine to go idle", idle);
        assert_eq!(
            store.restart_compactions(0).unwrap(),
            0,
            "every memtable is empty"
        );
        assert_eq!(store.index.get(b"b").unwrap().as_deref(), Some(&b"2"[..]));
    }
}
