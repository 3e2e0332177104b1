//! The in-place upgrade of a data directory written in an older format (1 to 3) to the current
//! one. Format 4's keys need nothing: format 3's stay readable. From format 1 or 2, the
//! time-ordered list indexes that format 3 added (an actor's likes, reposts, feed
//! generators, lists, starter packs, blocks and list blocks; list items by time; starter pack
//! joins and their counts, `apply/lists.rs`) are built from the stored records, by the same
//! rules that ingest applies.
//!
//! The build runs at open, before anything else writes, in batches of at most
//! [`UPGRADE_ENTRIES_MAX`] entries; each batch stores how many records it has read (as the
//! progress of the reserved source [`UPGRADE_SOURCE`]) in the same atomic write as its entries
//! and counts, so a build stopped by a crash resumes where it stopped and never counts a join
//! twice. The format marker moves on only once the build is durable.

use super::*;

/// The progress source under which the build records how many records it has read.
pub(super) const UPGRADE_SOURCE: &str = "starling format 3 upgrade";

/// Index entries per upgrade batch: bounds the memory of one batch.
const UPGRADE_ENTRIES_MAX: usize = 200_000;

impl EmbeddedStore {
    /// Brings a data directory written in format `found` to the current one and marks it.
    /// Format 4 (index keys that keep a notification's subject and a record's target) reads
    /// format 3's keys as they are: only older formats have something to build.
    pub(super) fn upgrade(&self, dir: &Path, found: u32) -> Result<(), StoreError> {
        if found < 3 {
            self.build_list_indexes()?;
        }
        if found < format::STORE_FORMAT {
            format::mark(dir)?;
        }
        Ok(())
    }

    /// Builds format 3's list indexes from the stored records; see the module documentation.
    pub(super) fn build_list_indexes(&self) -> Result<(), StoreError> {
        let done = match self.progress(Some(UPGRADE_SOURCE))? {
            Some(Progress::File { offset, .. }) => offset,
            _ => 0,
        };
        let mut n_read: u64 = 0;
        let mut batch = self.batch();
        for guard in self.records.iter() {
            n_read += 1;
            if n_read <= done {
                continue;
            }
            let (key, bytes) = guard.into_inner()?;
            batch.rules.index_stored_lists(&key, &bytes)?;
            if batch.rules.n_entries() >= UPGRADE_ENTRIES_MAX {
                batch.set_progress(upgrade_progress(n_read));
                batch.commit()?;
                batch = self.batch();
            }
        }
        batch.set_progress(upgrade_progress(n_read));
        batch.commit()?;
        self.sync()
    }
}

fn upgrade_progress(n_read: u64) -> Progress {
    Progress::File {
        source: UPGRADE_SOURCE.to_owned(),
        offset: n_read,
        cursor: None,
    }
}
