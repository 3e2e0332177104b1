//! Scans: pages of the index's lists (newest first, `heads.rs`), and an actor's records.

use starling_core::ActorId;
use starling_core::syntax::RecordUri;

use super::EmbeddedStore;
use crate::apply::Records;
use crate::codec::list_entry;
use crate::keys;
use crate::locks::read;
use crate::queries;
use crate::usage::Usage;
use crate::{DidMemo, ListOf, ListPage, StoreError};

impl EmbeddedStore {
    /// Every stored record of `actor` (live or a tombstone): key and value.
    pub(super) fn records_of(&self, actor: ActorId) -> Result<Records, StoreError> {
        // The scan reads the engine: the batch being written must land there first.
        self.wait_in_flight()?;
        let mut res = Vec::new();
        for guard in self.records.prefix(keys::actor_records_prefix(actor)) {
            let (key, bytes) = guard.into_inner()?;
            res.push((key.to_vec(), bytes.to_vec()));
        }
        Ok(res)
    }

    /// [`Store::list_page`].
    pub(super) fn scan_list_page(
        &self,
        list: &ListOf<'_>,
        after: Option<&[u8]>,
        limit: usize,
    ) -> Result<ListPage, StoreError> {
        if limit == 0 {
            return Ok(ListPage::default());
        }
        let Some(prefix) = queries::list(list, &mut |uri| Ok(self.ref_of(uri)))? else {
            return Ok(ListPage::default());
        };
        let mut page = ListPage::default();
        // Every list's keys end in: sort_at (8), the other actor (4), rkey. The cursor is the
        // tail of the last key returned: the next page is everything below it.
        let mut last_tail = Vec::new();
        let mut dids = DidMemo::default();
        self.newest_first(&prefix, after, &mut |tail| {
            if page.entries.len() == limit {
                page.cursor = Some(std::mem::take(&mut last_tail));
                return Ok(false);
            }
            page.entries.push(list_entry(list, tail, |id| {
                dids.did(self, id).map(str::to_owned)
            })?);
            last_tail = tail.to_vec();
            Ok(true)
        })?;
        Ok(page)
    }

    /// `0 ++ record ref` of the record `uri` names, if its actor and collection are known; the
    /// caller puts an index tag in the first byte.
    pub(super) fn ref_of(&self, uri: &RecordUri<'_>) -> Option<Vec<u8>> {
        let actor = read(&self.actors).get(uri.did)?;
        let collection = *read(&self.collections).by_name.get(uri.collection)?;
        let mut key = vec![0];
        keys::push_record_ref(&mut key, actor, collection, uri.rkey);
        Some(key)
    }
}

impl EmbeddedStore {
    /// [`Store::usage`]: one pass over every keyspace.
    pub(super) fn scan_usage(&self) -> Result<Usage, StoreError> {
        self.wait_durable()?;
        let mut usage = Usage::default();
        let collections = read(&self.collections);
        for guard in self.records.iter() {
            let (key, value) = guard.into_inner()?;
            usage.add_record(&collections, &key, &value);
        }
        for guard in self.index.iter() {
            let (key, value) = guard.into_inner()?;
            usage.add_entry(&key, &value);
        }
        for (kind, keyspace) in [
            ("actors", &self.actor_rows),
            ("meta", &self.meta),
            ("graph log", &self.graph_log),
            ("private state", &self.private),
        ] {
            for guard in keyspace.iter() {
                let (key, value) = guard.into_inner()?;
                usage.add(kind, &key, &value);
            }
        }
        usage.disk_bytes = Some(self.db.disk_space()?);
        Ok(usage)
    }
}
