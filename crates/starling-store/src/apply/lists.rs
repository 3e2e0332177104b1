//! The per-actor and per-list indexes in time order: an actor's likes, reposts, feed
//! generators, lists, starter packs, blocks, list blocks and verifications
//! ([`tag::ACTOR_RECORDS`]), a list's items ([`tag::LISTITEM_BY_TIME`]), the profiles that
//! joined through a starter pack ([`tag::JOIN_BY_STARTERPACK`], counted) and an actor's
//! verifications ([`tag::VERIFICATION_BY_SUBJECT`]). Format 3 added them; the upgrade of an older
//! data directory builds them from the stored records with [`Rules::index_lists`].

use starling_core::jetstream::{Refs, nsid};
use starling_core::syntax::RecordUri;

use super::{IndexedRecord, Rules, push_author_tail};
use crate::StoreError;
use crate::keys::{self, count, tag};
use crate::value::{self, StoredValue};

/// The collections an actor's records are listed by, newest first.
pub(crate) const ACTOR_LISTED: [&str; 8] = [
    nsid::LIKE,
    nsid::REPOST,
    nsid::GENERATOR,
    nsid::LIST,
    nsid::STARTERPACK,
    nsid::BLOCK,
    nsid::LISTBLOCK,
    nsid::VERIFICATION,
];

/// The record a record points at, which its entry among its author's records keeps: a like's
/// or repost's subject, a list block's list, a starter pack's list.
pub(crate) fn record_target<'r, 'a>(refs: &'r Refs<'a>) -> Option<&'r RecordUri<'a>> {
    match refs {
        Refs::Subject { subject, .. } | Refs::Target { target: subject } => Some(subject),
        _ => None,
    }
}

impl Rules<'_> {
    /// The time-ordered list entries of one record, added (`insert`) or removed, with the
    /// starter pack join count it moves.
    pub(super) fn list_keys(&mut self, record: &IndexedRecord<'_>, insert: bool) -> Vec<Vec<u8>> {
        let mut res = Vec::new();
        if ACTOR_LISTED.contains(&record.collection) {
            let collection = self.intern_collection(record.collection);
            let mut key = keys::actor_records_key(record.actor, collection);
            push_author_tail(&mut key, record);
            if let Some(target) = record_target(record.refs) {
                // The record may have been indexed before these keys kept their target.
                if !insert {
                    res.push(key.clone());
                }
                key.push(keys::TARGET_MARK);
                key.extend_from_slice(&self.intern_actor(target.did).0.to_be_bytes());
                key.extend_from_slice(target.collection.as_bytes());
                key.push(b'/');
                key.extend_from_slice(target.rkey.as_bytes());
            }
            res.push(key);
        }
        res.extend(self.target_list_keys(record, insert));
        res
    }

    /// The entries of one record in lists around what it names.
    fn target_list_keys(&mut self, record: &IndexedRecord<'_>, insert: bool) -> Vec<Vec<u8>> {
        match (record.collection, record.refs) {
            (nsid::VERIFICATION, Refs::Actor { subject }) => {
                let subject = self.intern_actor(subject);
                let mut key = vec![tag::VERIFICATION_BY_SUBJECT];
                key.extend_from_slice(&subject.0.to_be_bytes());
                push_author_tail(&mut key, record);
                vec![key]
            }
            (nsid::LISTITEM, Refs::ListItem { subject, list })
                if self.intern_actor(list.did) == record.actor =>
            {
                let subject = self.intern_actor(subject);
                let mut key = self.ref_key(tag::LISTITEM_BY_TIME, list);
                key.extend_from_slice(&keys::time_bytes(record.sort_at_us));
                key.extend_from_slice(&subject.0.to_be_bytes());
                key.extend_from_slice(record.rkey.as_bytes());
                vec![key]
            }
            (nsid::PROFILE, Refs::Profile { joined_via }) => {
                let mut key = self.ref_key(tag::JOIN_BY_STARTERPACK, joined_via);
                self.count(&key, count::JOINS, insert);
                push_author_tail(&mut key, record);
                vec![key]
            }
            _ => Vec::new(),
        }
    }
}

impl Rules<'_> {
    /// Adds the time-ordered list entries of one stored record (`key`, `bytes` as the
    /// `records` keyspace holds them), for the upgrade that builds them in a data directory
    /// written before they existed; a tombstone or a collection without such entries adds
    /// nothing.
    pub(crate) fn index_stored_lists(
        &mut self,
        key: &[u8],
        bytes: &[u8],
    ) -> Result<(), StoreError> {
        let Some((actor, collection, rkey)) = keys::parse_record_key(key) else {
            return Err(StoreError::corrupt("record key", key));
        };
        let name = self
            .catalog
            .collection_name(collection)
            .ok_or_else(|| StoreError::corrupt("record key of an unknown collection", key))?;
        let listed = ACTOR_LISTED.contains(&name.as_str())
            || name == nsid::LISTITEM
            || name == nsid::PROFILE;
        if !listed {
            return Ok(());
        }
        let StoredValue::Live(record) = value::decode(bytes)? else {
            return Ok(());
        };
        let refs = super::stored_refs(&name, record.json, key)?;
        let indexed = IndexedRecord {
            actor,
            collection: &name,
            rkey,
            sort_at_us: record.sort_at_us,
            refs: &refs,
            removed_at_us: None,
        };
        let entries = self.list_keys(&indexed, true);
        self.entries
            .extend(entries.into_iter().map(|key| (key, true)));
        Ok(())
    }

    /// Index entries decided so far.
    pub(crate) fn n_entries(&self) -> usize {
        self.entries.len()
    }

    /// Takes the starter pack join counts moved so far out of the batch: a build that may
    /// find joins already counted counts them itself, then stores them with
    /// [`Rules::set_recounted`].
    pub(crate) fn take_join_deltas(&mut self) -> Vec<(Vec<u8>, i64)> {
        let is_join = |key: &Vec<u8>| {
            key.first() == Some(&tag::RECORD_COUNT) && key.last() == Some(&count::JOINS)
        };
        let keys: Vec<Vec<u8>> = self
            .count_deltas
            .keys()
            .filter(|k| is_join(k))
            .cloned()
            .collect();
        keys.into_iter()
            .filter_map(|key| self.count_deltas.remove_entry(&key))
            .collect()
    }

    /// Stores `counts` as they are, whatever the stored values.
    pub(crate) fn set_recounted(&mut self, counts: Vec<(Vec<u8>, u64)>) {
        self.recounted.extend(counts);
    }
}
