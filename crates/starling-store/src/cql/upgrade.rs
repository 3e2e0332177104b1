//! The upgrade of a keyspace at schema version 2 to the current one: the list indexes (an
//! actor's likes, reposts, feed generators, lists, starter packs, blocks, list blocks and
//! verifications; list items by time; starter pack joins and their counts) built from the
//! stored records by the rules ingest applies (`apply/lists.rs`).
//!
//! Version 2 keyspaces were written both before and after those indexes existed, and the row
//! cannot tell which. So the build must be harmless where they are already there: every entry
//! is written again (the same key, the same value), and the join counts, the only counts the
//! indexes move, are recounted over the whole scan and stored as absolute values at its end.
//! A build stopped half-way (a crash, a lost lease) leaves the keyspace at version 2 and
//! starts again from the beginning next time.
//!
//! The build runs in [`CassandraStore::recover`], so at open and when a replica takes the
//! writer lease, and only where this store may write: it holds the lease, or nobody does (then
//! its first batch takes an epoch, as `starling replay` does). A replica that follows another
//! writer leaves the build to it, and serves list pages without the older records until then.

use rustc_hash::FxHashMap;

use super::lease::{Fence, WriterRow};
use super::schema::{meta_row, put_version};
use super::{CassandraStore, SCHEMA_VERSION, u64_value};
use crate::locks::lock;
use crate::{Batch, Store, StoreError};

/// Index entries per build batch: bounds the memory and the size of one logged batch.
const BUILD_ENTRIES_MAX: usize = 20_000;

impl CassandraStore {
    /// Builds the list indexes and marks the current schema version, if the keyspace is at
    /// version 2 and this store may write; see the module documentation.
    pub(super) fn finish_schema_upgrade(&self, row: &WriterRow) -> Result<(), StoreError> {
        let version = match self.block(meta_row(&self.session, &self.st, "schema", "version"))? {
            Some(bytes) => u64_value(&bytes)?,
            None => SCHEMA_VERSION,
        };
        if version >= SCHEMA_VERSION {
            return Ok(());
        }
        let may_write = match &*lock(&self.fence) {
            Fence::Writer { .. } => true,
            Fence::Reader { .. } => row.owner.is_none(),
            Fence::Taken { .. } | Fence::Lost => false,
        };
        if !may_write {
            tracing::info!(
                holder = row.owner.as_deref().unwrap_or("none"),
                "the keyspace is at schema version {version}: its list indexes are built by \
                 the writer"
            );
            return Ok(());
        }
        tracing::info!(
            from = version,
            to = SCHEMA_VERSION,
            "upgrading the keyspace schema: building the list indexes from the stored records"
        );
        let n_records = self.build_list_indexes()?;
        self.block(put_version(&self.session, &self.st, SCHEMA_VERSION))?;
        tracing::info!(records = n_records, "the list indexes are built");
        Ok(())
    }

    /// Adds the list entries of every stored record and stores the recounted join counts;
    /// returns how many records it read.
    pub(super) fn build_list_indexes(&self) -> Result<u64, StoreError> {
        let records = self.scan_records();
        let mut joins: FxHashMap<Vec<u8>, i64> = FxHashMap::default();
        let mut n_records = 0;
        let mut batch = self.batch();
        for record in records {
            let (key, bytes) = record?;
            n_records += 1;
            for (join, delta) in batch.index_stored_lists(&key, &bytes)? {
                *joins.entry(join).or_default() += delta;
            }
            if batch.n_entries() >= BUILD_ENTRIES_MAX {
                batch.commit()?;
                batch = self.batch();
            }
        }
        let mut counts = Vec::with_capacity(joins.len());
        for (key, n_joins) in joins {
            let n_joins = u64::try_from(n_joins)
                .map_err(|_| StoreError::corrupt("a negative join count", &key))?;
            counts.push((key, n_joins));
        }
        // Nothing to write (a keyspace without such records): no batch, so no epoch taken.
        if batch.n_entries() > 0 || !counts.is_empty() {
            batch.set_recounted(counts);
            batch.commit()?;
        }
        Ok(n_records)
    }
}
