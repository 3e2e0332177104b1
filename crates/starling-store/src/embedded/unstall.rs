//! Restarting the engine's compactions when its writes have halted with none running.
//!
//! fjall takes one compaction step for each memtable it flushes, and none otherwise. It slows
//! the writes to a keyspace whose level 0 holds 20 tables and halts them at 30, until
//! compactions bring that down. But a step may pick a deeper level over level 0, and once
//! writes halt nothing is flushed, so no step is asked for and the halt lasts forever: a
//! 100M-event replay stopped so at 86M events, its engine worker idle and its batch writer
//! asleep in the halt. Flushing the memtable asks for one more step, but only once: the halted
//! batch is then on disk and the memtable stays empty. So the store asks for a step directly,
//! through an ingestion of nothing, which fjall ends with a compaction request. The thread
//! applying batches does that when a batch's write has taken [`CHECK_AFTER`] and the engine is
//! idle, and again each [`CHECK_AFTER`] until the write is done.

use std::time::Duration;

use super::EmbeddedStore;
use crate::StoreError;

/// How long a batch's write may take before the engine is checked for a halt.
pub(super) const CHECK_AFTER: Duration = Duration::from_secs(1);

/// Tables in level 0 at which fjall slows writes down; it halts them at 30.
pub(super) const L0_TABLES_HALTING: usize = 20;

impl EmbeddedStore {
    /// When the engine is neither flushing nor compacting, asks it for a compaction step of
    /// each keyspace that holds at least `l0_tables_min` tables in level 0; returns how many
    /// it asked for.
    pub(super) fn restart_compactions(&self, l0_tables_min: usize) -> Result<usize, StoreError> {
        if self.db.outstanding_flushes() > 0 || self.db.active_compactions() > 0 {
            return Ok(0);
        }
        let mut asked = 0;
        for keyspace in self.keyspaces() {
            let tables = keyspace.l0_table_count();
            if tables >= l0_tables_min {
                tracing::warn!(
                    keyspace = %keyspace.path().display(),
                    tables,
                    "the engine holds writes with level 0 full and no compaction running; \
                     asking it for one"
                );
                // An ingestion of nothing writes nothing (it leaves an empty table file, which
                // the next open deletes) and ends by asking for a compaction step.
                keyspace.start_ingestion()?.finish()?;
                asked += 1;
            }
        }
        Ok(asked)
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

    // An idle engine with nothing in level 0 (a new store, nothing flushed, so no step ever
    // asked for) takes a compaction step of each keyspace it is asked to, and of none below
    // the threshold: the steps are the engine's own, counted by it.
    #[test]
    fn an_idle_engine_takes_the_compaction_steps_asked_for() {
        let dir = tempfile::tempdir().unwrap();
        let store = EmbeddedStore::open(dir.path()).unwrap();
        store.index.insert(b"a", b"1").unwrap();
        assert_eq!(store.db.compactions_completed(), 0);

        assert_eq!(store.restart_compactions(1).unwrap(), 0, "level 0 is empty");
        let asked = store.restart_compactions(0).unwrap();
        assert_eq!(asked, 6, "every keyspace");
        until("the steps", || store.db.compactions_completed() >= asked);
        assert_eq!(store.index.get(b"a").unwrap().as_deref(), Some(&b"1"[..]));

        // Each ingestion left an empty table file behind; the next open deletes them.
        let tables = store.index.path().join("tables");
        let n_empty = || {
            std::fs::read_dir(&tables)
                .unwrap()
                .filter(|entry| entry.as_ref().unwrap().metadata().unwrap().len() == 0)
                .count()
        };
        assert_eq!(n_empty(), 1);
        drop(store);
        let store = EmbeddedStore::open(dir.path()).unwrap();
        assert_eq!(n_empty(), 0);
        assert_eq!(store.index.get(b"a").unwrap().as_deref(), Some(&b"1"[..]));
    }
}
