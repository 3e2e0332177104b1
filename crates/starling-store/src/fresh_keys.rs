//! [`FreshKeys`]: the record, pair-count and count keys a store has written since it was
//! opened empty (or holding only imported follows, none of which are such keys), as a Bloom
//! filter, so that the apply rules skip the engine read before
//! writing a key the store has never held.
//!
//! Replaying a network into an empty store creates almost every record once: before each write
//! the rules read the key to tell a create from an update, and on the embedded store that read
//! searches every memtable and table for a key that is not there. The filter answers "never
//! written" without the engine. It has no false negatives (every key written is added before
//! any later read can ask for it), so a "maybe" costs only the read the rules did before.
//!
//! It is kept only for a store that was empty when opened, or held only the follows
//! `import-follows` wrote (the usual start of a large replay or backfill): a store with other
//! data would need every key read back first. Once it holds more keys than it was sized for, its "maybe" answers
//! grow more frequent (and reads come back), but it stays exact in the only direction that
//! matters.

use std::hash::Hasher;
use std::sync::atomic::{AtomicU64, Ordering};

use rustc_hash::FxHasher;
use starling_core::hash::mix64;

/// Bits of the filter: 32 MiB, for ~27M keys at a 1% false-positive rate (4 bits set per
/// key). A 100M-event replay writes ~80M keys; by its end about a quarter of the reads come
/// back.
const BITS: usize = 1 << 28;
/// Bits set per key.
const HASHES: u64 = 4;

/// A Bloom filter over keys, safe to add to from one thread while others read it.
pub(crate) struct FreshKeys {
    words: Box<[AtomicU64]>,
}

impl FreshKeys {
    /// An empty filter of [`BITS`] bits.
    pub(crate) fn new() -> FreshKeys {
        FreshKeys::with_bits(BITS)
    }

    /// An empty filter of `bits` bits (a power of two, at least 64).
    fn with_bits(bits: usize) -> FreshKeys {
        assert!(bits.is_power_of_two() && bits >= 64, "{bits} bits");
        FreshKeys {
            words: (0..bits / 64).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    /// The bits of `key`: double hashing over one 64-bit hash, mixed so that both halves are
    /// well spread.
    fn bits(&self, key: &[u8]) -> impl Iterator<Item = u64> + use<> {
        let mut hasher = FxHasher::default();
        hasher.write(key);
        let hash = mix64(hasher.finish());
        let (first, step) = (hash, (hash >> 32) | 1);
        let mask = (self.words.len() * 64 - 1) as u64;
        (0..HASHES).map(move |idx| first.wrapping_add(idx.wrapping_mul(step)) & mask)
    }

    /// Records that `key` is written.
    pub(crate) fn add(&self, key: &[u8]) {
        for bit in self.bits(key) {
            if let Some(word) = self.words.get((bit / 64) as usize) {
                word.fetch_or(1 << (bit % 64), Ordering::Release);
            }
        }
    }

    /// Whether `key` may have been written; `false` means it never was.
    pub(crate) fn may_hold(&self, key: &[u8]) -> bool {
        self.bits(key).all(|bit| {
            self.words
                .get((bit / 64) as usize)
                .is_some_and(|word| word.load(Ordering::Acquire) & (1 << (bit % 64)) != 0)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Every key added is held (no false negatives), and keys never added are mostly not: the
    // false-positive rate of a filter loaded to its design point stays near the 1% it is sized
    // for, counted over keys known to be absent.
    #[test]
    fn holds_every_key_added_and_few_others() {
        let filter = FreshKeys::with_bits(1 << 16);
        let n_keys = (1 << 16) / 10;
        let key = |idx: u32| format!("record/{idx}").into_bytes();
        for idx in 0..n_keys {
            filter.add(&key(idx));
        }
        assert!((0..n_keys).all(|idx| filter.may_hold(&key(idx))));
        let n_false = (n_keys..n_keys + 10_000)
            .filter(|&idx| filter.may_hold(&key(idx)))
            .count();
        assert!(n_false < 400, "{n_false} false positives of 10,000");
    }
}
