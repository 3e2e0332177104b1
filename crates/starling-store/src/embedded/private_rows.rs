//! Private-state rows (`crate::private`) in the `private` keyspace: keys are partition ‖
//! clustering key (partitions are self-delimiting), values as the rules encode them.
//!
//! The keyspace is new in store format 2 (created empty when a format 1 directory opens) and
//! is never touched by event batches. Writes take the store's writer lock, so a private write
//! and an event batch never interleave, and commit one fjall batch with `fdatasync`.

use super::*;
use crate::private::decide;
use crate::{BsyncStream, PrivateBackend, PrivateKey, PrivateOp, PrivateRows};

impl PrivateBackend for EmbeddedStore {
    fn apply(
        &self,
        ops: &[PrivateOp],
        now_us: i64,
        cursor: Option<(BsyncStream, &str)>,
    ) -> Result<(), StoreError> {
        let _writer = lock(&self.writer);
        let keyspace = &self.private;
        let mut writes = self.db.batch().durability(Some(PersistMode::SyncData));
        for (key, value) in decide(self, ops, now_us, cursor)? {
            match value {
                Some(value) => writes.insert(keyspace, key.flat(), value),
                None => writes.remove(keyspace, key.flat()),
            }
        }
        writes.commit()?;
        Ok(())
    }

    fn value(&self, key: &PrivateKey) -> Result<Option<Vec<u8>>, StoreError> {
        Ok(self.private.get(key.flat())?.map(|value| value.to_vec()))
    }

    fn rows(
        &self,
        partition: &PrivateKey,
        below: Option<&[u8]>,
        limit: usize,
    ) -> Result<PrivateRows, StoreError> {
        let keyspace = &self.private;
        let prefix = partition.partition.clone();
        let range = match below {
            Some(below) => keyspace.range(prefix.clone()..[&prefix[..], below].concat()),
            None => keyspace.prefix(prefix.clone()),
        };
        let mut res = Vec::new();
        for guard in range.rev().take(limit) {
            let (key, value) = guard.into_inner()?;
            let clustering = key.get(prefix.len()..).unwrap_or_default().to_vec();
            res.push((clustering, value.to_vec()));
        }
        Ok(res)
    }
}
