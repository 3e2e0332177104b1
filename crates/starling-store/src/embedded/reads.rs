//! The stored state the apply rules read, on the embedded store: the batch still being
//! written, then the engine.

use std::sync::Arc;

use rustc_hash::FxHashSet;
use starling_core::ActorId;

use super::{EmbeddedStore, InFlightData, PENDING_TAGS};
use crate::PrivateBackend;
use crate::StoreError;
use crate::apply::{Pair, Records, StoredState};
use crate::codec::{edge_prefix, pair_count};
use crate::keys::tag;

/// The stored state the apply rules read: the batch still being written, then the engine.
pub(super) struct Reads<'s> {
    pub(super) store: &'s EmbeddedStore,
    /// The previous batch, while its write is still running.
    pub(super) previous: Option<Arc<InFlightData>>,
}

impl StoredState for Reads<'_> {
    fn record(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        if let Some(bytes) = self.previous.as_ref().and_then(|p| p.records.get(key)) {
            return Ok(Some(bytes.clone()));
        }
        if !self.store.may_hold(key) {
            return Ok(None);
        }
        Ok(self.store.records.get(key)?.map(|bytes| bytes.to_vec()))
    }

    fn pair_count(&mut self, pair: Pair) -> Result<u32, StoreError> {
        if let Some(&count) = self
            .previous
            .as_ref()
            .and_then(|p| p.pair_counts.get(&pair))
        {
            return Ok(count);
        }
        let (pair_tag, actor, subject) = pair;
        let key = edge_prefix(pair_tag, actor, subject);
        if !self.store.may_hold(&key) {
            return Ok(0);
        }
        match self.store.index.get(key)? {
            Some(bytes) => pair_count(&bytes),
            None => Ok(0),
        }
    }

    fn actor_records(&mut self, actor: ActorId) -> Result<Records, StoreError> {
        self.store.records_of(actor)
    }

    fn counts(&mut self, keys: &[Vec<u8>]) -> Result<Vec<u64>, StoreError> {
        keys.iter()
            .map(|key| self.store.count_value(self.previous.as_deref(), key))
            .collect()
    }

    fn imported(&mut self, pairs: &[(ActorId, ActorId)]) -> Result<Vec<bool>, StoreError> {
        pairs
            .iter()
            .map(|&(actor, subject)| {
                let key = edge_prefix(tag::IMPORTED_FOLLOW, actor, subject);
                Ok(self.store.index.contains_key(key)?)
            })
            .collect()
    }

    fn private(&self) -> &dyn PrivateBackend {
        self.store
    }

    fn has_entry(&mut self, prefix: &[u8]) -> Result<bool, StoreError> {
        Ok(!self.list_tails(prefix)?.is_empty())
    }

    fn list_tails(&mut self, prefix: &[u8]) -> Result<Vec<Vec<u8>>, StoreError> {
        // The in-flight batch keeps only some entries for the next one's reads.
        assert!(
            prefix.first().is_some_and(|t| PENDING_TAGS.contains(t)),
            "list_tails of {prefix:?}"
        );
        let mut tails = FxHashSet::default();
        for guard in self.store.index.prefix(prefix) {
            let key = guard.key()?;
            tails.insert(key.get(prefix.len()..).unwrap_or_default().to_vec());
        }
        // The batch still being written overrides the engine for the keys it wrote.
        let pending = self
            .previous
            .as_deref()
            .map_or(&[][..], |data| &data.entries[..]);
        let start = pending.partition_point(|(key, _)| key[..] < prefix[..]);
        for (key, insert) in pending.get(start..).unwrap_or_default() {
            let Some(tail) = key.strip_prefix(prefix) else {
                break;
            };
            if *insert {
                tails.insert(tail.to_vec());
            } else {
                tails.remove(tail);
            }
        }
        Ok(tails.into_iter().collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A list item the batch still being written adds or removes decides a gate's list rule
    /// over what the engine holds.
    #[test]
    fn has_entry_sees_the_batch_still_being_written() {
        let dir = tempfile::tempdir().unwrap();
        let store = EmbeddedStore::open(dir.path()).unwrap();
        let prefix = vec![tag::LISTITEM_BY_LIST, 1, 2, 3];
        let stored = [&prefix[..], b"stored"].concat();
        store.index.insert(&stored, []).unwrap();
        let pending = |entries: Vec<(Vec<u8>, bool)>| Reads {
            store: &store,
            previous: Some(Arc::new(InFlightData {
                entries,
                ..InFlightData::default()
            })),
        };
        let empty = [tag::LISTITEM_BY_LIST, 1, 2, 5];
        let added = [&empty[..], b"added"].concat();
        let other = [tag::LISTITEM_BY_LIST, 1, 2, 4, 9];
        assert!(pending(vec![(added, true)]).has_entry(&empty).unwrap());
        assert!(
            !pending(vec![(stored.clone(), false)])
                .has_entry(&prefix)
                .unwrap()
        );
        assert!(
            pending(vec![(other.to_vec(), false)])
                .has_entry(&prefix)
                .unwrap()
        );
        assert!(!pending(vec![]).has_entry(&other[..4]).unwrap());
    }
}
