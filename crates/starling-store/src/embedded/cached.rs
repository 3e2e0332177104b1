//! Point reads through the value caches (counts, record liveness) and the fresh-key filter:
//! each answers from the batch being written first, then from memory, and reads the engine
//! only when both miss.

use rustc_hash::FxHashMap;
use starling_core::ActorId;

use super::{EmbeddedStore, InFlightData, read};
use crate::StoreError;
use crate::codec::u64_value;
use crate::keys::{self, count, tag};
use crate::value;

impl EmbeddedStore {
    /// The `records` key of a record, if its actor and collection are known (else it was
    /// never stored).
    pub(super) fn record_key_of(&self, did: &str, collection: &str, rkey: &str) -> Option<Vec<u8>> {
        let actor = read(&self.actors).get(did)?;
        self.actor_record_key(actor, collection, rkey)
    }

    /// The `records` key of a record of `actor`, if its collection is known (else it was
    /// never stored).
    pub(super) fn actor_record_key(
        &self,
        actor: ActorId,
        collection: &str,
        rkey: &str,
    ) -> Option<Vec<u8>> {
        let collection_id = *read(&self.collections).by_name.get(collection)?;
        Some(keys::record_key(actor, collection_id, rkey))
    }

    /// Whether the record, pair-count or count `key` may be stored: `false` only when the
    /// store was empty at open and has never written it ([`super::FreshKeys`]).
    pub(super) fn may_hold(&self, key: &[u8]) -> bool {
        self.fresh_keys
            .as_ref()
            .is_none_or(|fresh| fresh.may_hold(key))
    }

    /// A count, from the batch being written if it changed it, else from the engine.
    pub(super) fn count_value(
        &self,
        in_flight: Option<&InFlightData>,
        key: &[u8],
    ) -> Result<u64, StoreError> {
        if let Some(&count) = in_flight.and_then(|data| data.counts.get(key)) {
            return Ok(count);
        }
        if let Some(count) = self.count_cache.get(key) {
            return Ok(count);
        }
        if !self.may_hold(key) {
            return Ok(0);
        }
        let ticket = self.count_cache.ticket();
        let count = match self.index.get(key)? {
            Some(bytes) => u64_value(&bytes)?,
            None => 0,
        };
        self.count_cache.fill(key, count, ticket);
        Ok(count)
    }

    /// Whether the record under `key` is live: from the batch being written if it wrote it,
    /// else from the cache or the engine.
    pub(super) fn record_key_is_live(&self, key: &[u8]) -> Result<bool, StoreError> {
        if let Some(data) = self.in_flight_data()
            && let Some(bytes) = data.records.get(key)
        {
            return value::is_live(bytes);
        }
        if let Some(live) = self.live_cache.get(key) {
            return Ok(live == 1);
        }
        if !self.may_hold(key) {
            return Ok(false);
        }
        let ticket = self.live_cache.ticket();
        let live = match self.record_value(key)? {
            Some(bytes) => value::is_live(&bytes)?,
            None => false,
        };
        self.live_cache.fill(key, u64::from(live), ticket);
        Ok(live)
    }
}

/// Count rows kept in memory: every count of one record (5) or actor (4) under one key, for
/// the serving reads; ~140 B a row, ~28 MB when full (ARCHITECTURE.md's resource model).
pub(super) const ROW_CACHE_ENTRIES: usize = 200_000;

/// Every count of one record or actor, in the order of its kinds ([`RECORD_COUNT_KINDS`],
/// [`ACTOR_COUNT_KINDS`]); zero past the last kind.
pub(super) type CountRow = [u64; 5];

/// The kinds of a record's count row.
pub(super) const RECORD_COUNT_KINDS: [u8; 5] = [
    count::LIKES,
    count::REPOSTS,
    count::REPLIES,
    count::QUOTES,
    count::LIST_ITEMS,
];

/// The kinds of an actor's count row.
pub(super) const ACTOR_COUNT_KINDS: [u8; 4] = [
    count::POSTS,
    count::LISTS,
    count::FEEDS,
    count::STARTER_PACKS,
];

impl EmbeddedStore {
    /// The counts of `kinds` under `row` (a count key without its kind: a record's or an
    /// actor's), from the batch being written if it moved one of them, else in one lookup of
    /// the row cache, else count by count.
    pub(super) fn count_row(
        &self,
        row: &mut Vec<u8>,
        kinds: &[u8],
    ) -> Result<CountRow, StoreError> {
        let in_flight = self.in_flight_data();
        let moved = in_flight
            .as_deref()
            .is_some_and(|data| moves_row(data, row, kinds));
        if !moved && let Some(counts) = self.row_cache.get(row) {
            return Ok(counts);
        }
        let ticket = self.row_cache.ticket();
        let mut counts = CountRow::default();
        for (count, &kind) in counts.iter_mut().zip(kinds) {
            row.push(kind);
            let value = self.count_value(in_flight.as_deref(), row);
            row.pop();
            *count = value?;
        }
        if !moved {
            self.row_cache.fill(row, counts, ticket);
        }
        Ok(counts)
    }
}

/// Whether the batch `data` moved one of the counts of `kinds` under `row`.
fn moves_row(data: &InFlightData, row: &mut Vec<u8>, kinds: &[u8]) -> bool {
    kinds.iter().any(|&kind| {
        row.push(kind);
        let moved = data.counts.contains_key(row.as_slice());
        row.pop();
        moved
    })
}

/// The count rows whose counts a batch moved (`counts`, by count key), to be forgotten by
/// the row cache: the batch holds only the counts it moved, not the whole row.
pub(super) fn rows_moved(
    counts: &FxHashMap<Vec<u8>, u64>,
) -> impl Iterator<Item = (&[u8], Option<CountRow>)> {
    counts
        .keys()
        .filter(|key| matches!(key.first(), Some(&(tag::RECORD_COUNT | tag::ACTOR_COUNT))))
        .filter_map(|key| Some((key.split_last()?.1, None)))
}

/// Each record key of a batch with 1 if it wrote a live record, 0 for a tombstone, for the
/// liveness cache.
pub(super) fn records_liveness(
    records: &FxHashMap<Vec<u8>, Vec<u8>>,
) -> impl Iterator<Item = (&Vec<u8>, Option<u64>)> {
    records.iter().map(|(key, bytes)| {
        let live = value::is_live(bytes).expect("a batch writes only values it encoded");
        (key, Some(u64::from(live)))
    })
}
