//! The in-memory tables both backends keep beside their stored data: interned collection names
//! and the store-wide counters. (The actor table has a module of its own, `actors`.)

use std::collections::BTreeMap;
use std::sync::RwLock;

use rustc_hash::FxHashMap;
use starling_core::jetstream::DropReason;

use crate::actors::ActorTable;
use crate::keys::CollectionId;
use crate::locks::{read, write};

/// Interned collection NSIDs: ids are dense, in order of first sight, never reused.
#[derive(Default)]
pub(crate) struct Collections {
    pub(crate) by_name: FxHashMap<Box<str>, CollectionId>,
    pub(crate) names: Vec<Box<str>>,
}

impl Collections {
    pub(crate) fn name(&self, id: CollectionId) -> Option<&str> {
        self.names.get(id.0 as usize).map(|name| &**name)
    }

    /// The collection and record key of each live record of `records` (record keys and
    /// stored values, as the `records` table holds them).
    pub(crate) fn live_keys(
        &self,
        records: &[(Vec<u8>, Vec<u8>)],
    ) -> Result<Vec<(String, String)>, crate::StoreError> {
        let mut res = Vec::with_capacity(records.len());
        for (key, bytes) in records {
            let corrupt = || crate::StoreError::corrupt("record key", key);
            let (_, collection, rkey) = crate::keys::parse_record_key(key).ok_or_else(corrupt)?;
            let name = self.name(collection).ok_or_else(corrupt)?;
            if let crate::value::StoredValue::Live(_) = crate::value::decode(bytes)? {
                res.push((name.to_owned(), rkey.to_owned()));
            }
        }
        Ok(res)
    }

    /// Adds `name` with the next id; `false` when stored ids are not dense (a damaged store).
    pub(crate) fn restore(&mut self, id: u32, name: &str) -> bool {
        if id as usize != self.names.len() {
            return false;
        }
        self.by_name.insert(name.into(), CollectionId(id));
        self.names.push(name.into());
        true
    }
}

/// Store-wide counters, mirrored in memory by the writer and written (absolute) with each
/// batch.
#[derive(Default, Clone)]
pub(crate) struct Counters {
    /// Actors that authored an applied event and are not deleted.
    pub(crate) actors: u64,
    /// Live records per collection.
    pub(crate) records: FxHashMap<CollectionId, u64>,
    /// Dropped events per reason.
    pub(crate) dropped: BTreeMap<DropReason, u64>,
}

/// The in-memory tables the apply rules read and intern into, borrowed from a store.
#[derive(Clone, Copy)]
pub(crate) struct Catalog<'s> {
    pub(crate) actors: &'s RwLock<ActorTable>,
    pub(crate) collections: &'s RwLock<Collections>,
}

impl Catalog<'_> {
    /// The id of a collection NSID, and whether it is new.
    pub(crate) fn intern_collection(&self, name: &str) -> (CollectionId, bool) {
        if let Some(&id) = read(self.collections).by_name.get(name) {
            return (id, false);
        }
        let mut collections = write(self.collections);
        if let Some(&id) = collections.by_name.get(name) {
            return (id, false);
        }
        let id = CollectionId(collections.names.len() as u32);
        collections.by_name.insert(name.into(), id);
        collections.names.push(name.into());
        (id, true)
    }

    /// The NSID of an interned collection id.
    pub(crate) fn collection_name(&self, id: CollectionId) -> Option<String> {
        read(self.collections).name(id).map(str::to_owned)
    }
}
