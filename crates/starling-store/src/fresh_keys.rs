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
//! data would need every key read back first.
//!
//! The filter grows as a chain of Bloom filters, each twice the bits of the one before: a key
//! is added to the newest, and a lookup asks each. A single filter sized for the first
//! replays would saturate in a 100M-event replay (~100M keys), and its "maybe" answers would
//! bring the engine reads back just as the store grows large enough to make them slow. The
//! chain stops growing at [`LINKS`] filters; past their capacity the last one fills up, and
//! reads come back, but it stays exact in the only direction that matters.

use std::hash::Hasher;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use rustc_hash::FxHasher;
use starling_core::hash::mix64;

/// Bits of the first filter: 32 MiB, for ~27M keys at a ~1% false-positive rate.
const FIRST_BITS: usize = 1 << 28;
/// Filters in the chain at most: 32 + 64 + 128 MiB, for ~190M keys.
const LINKS: usize = 3;
/// Bits per key a filter is sized for: 10 with 4 bits set gives ~1.2% false positives.
const BITS_PER_KEY: u64 = 10;
/// Bits set per key.
const HASHES: u64 = 4;

/// A growing Bloom filter over keys, safe to add to from one thread while others read it.
pub(crate) struct FreshKeys {
    links: [OnceLock<Bloom>; LINKS],
    /// The newest filter made: keys are added to it.
    newest: AtomicUsize,
    /// Keys added to the newest filter.
    in_newest: AtomicU64,
    first_bits: usize,
}

impl FreshKeys {
    /// An empty chain whose first filter has [`FIRST_BITS`] bits.
    pub(crate) fn new() -> FreshKeys {
        FreshKeys::with_first_bits(FIRST_BITS)
    }

    /// An empty chain whose first filter has `bits` bits (a power of two, at least 64).
    fn with_first_bits(bits: usize) -> FreshKeys {
        assert!(bits.is_power_of_two() && bits >= 64, "{bits} bits");
        let links = [const { OnceLock::new() }; LINKS];
        links[0].get_or_init(|| Bloom::with_bits(bits));
        FreshKeys {
            links,
            newest: AtomicUsize::new(0),
            in_newest: AtomicU64::new(0),
            first_bits: bits,
        }
    }

    /// Records that `key` is written. Only one thread adds (the store's writer).
    pub(crate) fn add(&self, key: &[u8]) {
        let mut newest = self.newest.load(Ordering::Relaxed);
        let full = (self.first_bits << newest) as u64 / BITS_PER_KEY;
        if newest + 1 < LINKS && self.in_newest.load(Ordering::Relaxed) >= full {
            newest += 1;
            self.link(newest)
                .get_or_init(|| Bloom::with_bits(self.first_bits << newest));
            self.newest.store(newest, Ordering::Release);
            self.in_newest.store(0, Ordering::Relaxed);
        }
        let bloom = self.link(newest).get().expect("the newest filter is made");
        bloom.add(hash(key));
        self.in_newest.fetch_add(1, Ordering::Relaxed);
    }

    fn link(&self, idx: usize) -> &OnceLock<Bloom> {
        self.links.get(idx).expect("a link of the chain")
    }

    /// Whether `key` may have been written; `false` means it never was.
    pub(crate) fn may_hold(&self, key: &[u8]) -> bool {
        let hash = hash(key);
        self.links
            .iter()
            .map_while(OnceLock::get)
            .any(|bloom| bloom.may_hold(hash))
    }
}

/// One 64-bit hash of a key, mixed so that both halves are well spread.
fn hash(key: &[u8]) -> u64 {
    let mut hasher = FxHasher::default();
    hasher.write(key);
    mix64(hasher.finish())
}

/// One Bloom filter of the chain.
struct Bloom {
    words: Box<[AtomicU64]>,
}

impl Bloom {
    fn with_bits(bits: usize) -> Bloom {
        Bloom {
            words: (0..bits / 64).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    /// The bits of a key's `hash`, by double hashing.
    fn bits(&self, hash: u64) -> impl Iterator<Item = u64> + use<> {
        let (first, step) = (hash, (hash >> 32) | 1);
        let mask = (self.words.len() * 64 - 1) as u64;
        (0..HASHES).map(move |idx| first.wrapping_add(idx.wrapping_mul(step)) & mask)
    }

    fn add(&self, hash: u64) {
        for bit in self.bits(hash) {
            if let Some(word) = self.words.get((bit / 64) as usize) {
                word.fetch_or(1 << (bit % 64), Ordering::Release);
            }
        }
    }

    fn may_hold(&self, hash: u64) -> bool {
        self.bits(hash).all(|bit| {
            self.words
                .get((bit / 64) as usize)
                .is_some_and(|word| word.load(Ordering::Acquire) & (1 << (bit % 64)) != 0)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(idx: u32) -> Vec<u8> {
        format!("record/{idx}").into_bytes()
    }

    /// False positives among 10,000 keys never added (numbered from `from`).
    fn false_positives(held: impl Fn(&[u8]) -> bool, from: u32) -> usize {
        (from..from + 10_000).filter(|&idx| held(&key(idx))).count()
    }

    // Every key added is held (no false negatives), and keys never added are mostly not: the
    // false-positive rate of a filter loaded to its design point stays near the ~1% it is
    // sized for, counted over keys known to be absent.
    #[test]
    fn holds_every_key_added_and_few_others() {
        let filter = FreshKeys::with_first_bits(1 << 16);
        let n_keys = (1 << 16) / BITS_PER_KEY as u32;
        for idx in 0..n_keys {
            filter.add(&key(idx));
        }
        assert!((0..n_keys).all(|idx| filter.may_hold(&key(idx))));
        let n_false = false_positives(|key| filter.may_hold(key), n_keys);
        assert!(n_false < 250, "{n_false} false positives of 10,000");
    }

    // Loaded with every link's capacity, the chain still holds every key and keeps its false
    // positives near the sum of its links' rates, where one filter of the first size, given
    // the same keys, answers "maybe" for most absent keys.
    #[test]
    fn a_chain_grows_where_one_filter_would_saturate() {
        let first_bits = 1 << 14;
        let chain = FreshKeys::with_first_bits(first_bits);
        let single = Bloom::with_bits(first_bits);
        let capacity: u64 = (0..LINKS)
            .map(|link| (first_bits << link) as u64 / BITS_PER_KEY)
            .sum();
        let n_keys = capacity as u32;
        for idx in 0..n_keys {
            chain.add(&key(idx));
            single.add(hash(&key(idx)));
        }
        assert_eq!(
            chain
                .links
                .iter()
                .filter(|link| link.get().is_some())
                .count(),
            LINKS
        );
        assert!((0..n_keys).all(|idx| chain.may_hold(&key(idx))));
        let in_chain = false_positives(|key| chain.may_hold(key), n_keys);
        let in_single = false_positives(|key| single.may_hold(hash(key)), n_keys);
        assert!(
            in_chain < 600,
            "{in_chain} false positives of 10,000 in the chain"
        );
        assert!(
            in_single > 5_000,
            "{in_single} false positives of 10,000 in one filter"
        );
    }

    // Past the last link's capacity the chain stops growing and still holds every key.
    #[test]
    fn a_full_chain_keeps_every_key() {
        let chain = FreshKeys::with_first_bits(64);
        let n_keys = 1_000;
        for idx in 0..n_keys {
            chain.add(&key(idx));
        }
        assert_eq!(chain.newest.load(Ordering::Relaxed), LINKS - 1);
        assert!((0..n_keys).all(|idx| chain.may_hold(&key(idx))));
    }
}
