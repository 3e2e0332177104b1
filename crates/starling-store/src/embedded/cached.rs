//! Point reads through the value caches (counts, record liveness) and the fresh-key filter:
//! each answers from the batch being written first, then from memory, and reads the engine
//! only when both miss.

use rustc_hash::FxHashMap;

use super::{EmbeddedStore, InFlightData};
use crate::StoreError;
use crate::codec::u64_value;
use crate::value;

impl EmbeddedStore {
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

/// Each record key of a batch with 1 if it wrote a live record, 0 for a tombstone, for the
/// liveness cache.
pub(super) fn records_liveness(
    records: &FxHashMap<Vec<u8>, Vec<u8>>,
) -> impl Iterator<Item = (&Vec<u8>, u64)> {
    records.iter().map(|(key, bytes)| {
        let live = value::is_live(bytes).expect("a batch writes only values it encoded");
        (key, u64::from(live))
    })
}
