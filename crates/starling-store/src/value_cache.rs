//! Engine values in memory: the stored value of each key read or written lately, so that hot
//! point reads skip the engine. The embedded store keeps three: counts (the apply rules' read
//! of every count a batch moves, and the serving reads that miss the next cache), whole count
//! rows (every count of one record or actor, the interaction counts of a feed page and a
//! profile's counts in one lookup) and whether a record is live (a repost's post in an author
//! feed, a notification's subject).
//!
//! The cache only ever holds a key's current stored value:
//! - the thread that writes batches puts each batch's values in (or forgets the keys whose
//!   value it cannot tell) once the engine holds them, and marks the time of its write (a
//!   generation, odd while writing);
//! - a reader that missed fills the value it read from the engine only when no write began
//!   between its read and its fill ([`ValueCache::ticket`], [`ValueCache::fill`]); a write
//!   that began later puts its own value in after the fill, under the fill lock.
//!
//! A write still in flight is read from the batch itself before the cache, by the backend.

use std::sync::RwLock;
use std::sync::atomic::{AtomicU64, Ordering};

use quick_cache::UnitWeighter;
use quick_cache::sync::{Cache, DefaultLifecycle};
use rustc_hash::FxBuildHasher;

use crate::CacheStats;
use crate::locks::{read, write};

/// Keys' values in memory, or nothing (the next read goes to the engine).
pub(crate) struct ValueCache<V = u64> {
    values: Cache<Key, V, UnitWeighter, FxBuildHasher>,
    /// Bumped when a batch's write begins and when it ends: odd while one is writing.
    generation: AtomicU64,
    /// Held shared by a fill from its check to its insert, and exclusively by a write
    /// putting its counts in, so that a write's value always lands after a fill it raced.
    fill_lock: RwLock<()>,
    /// Fills offered since the cache was made: reads that missed it and read the engine.
    fills: AtomicU64,
}

/// Bytes of the longest key kept: a post's counts with a TID record key take 24, its record
/// key 22. Longer keys (record keys of free text) are always read from the engine.
pub(crate) const KEY_BYTES_MAX: usize = 31;

/// A key, inline: one memory read fewer per lookup than a key on the heap.
#[derive(Clone, PartialEq, Eq, Hash)]
struct Key {
    len: u8,
    bytes: [u8; KEY_BYTES_MAX],
}

impl Key {
    fn new(key: &[u8]) -> Option<Key> {
        let mut bytes = [0; KEY_BYTES_MAX];
        bytes.get_mut(..key.len())?.copy_from_slice(key);
        Some(Key {
            len: u8::try_from(key.len()).ok()?,
            bytes,
        })
    }
}

/// The generation a reader saw before reading the engine; see [`ValueCache::fill`].
#[derive(Clone, Copy)]
pub(crate) struct Ticket(u64);

impl<V: Clone> ValueCache<V> {
    /// A cache of at most `entries` keys.
    pub(crate) fn new(entries: usize) -> ValueCache<V> {
        ValueCache {
            values: Cache::with(
                entries,
                entries as u64,
                UnitWeighter,
                FxBuildHasher,
                DefaultLifecycle::default(),
            ),
            generation: AtomicU64::new(0),
            fill_lock: RwLock::new(()),
            fills: AtomicU64::new(0),
        }
    }

    /// What the cache holds and how often reads missed it, for the operator's metrics.
    pub(crate) fn stats(&self, name: &'static str) -> CacheStats {
        CacheStats {
            name,
            entries: self.values.len() as u64,
            capacity: self.values.capacity(),
            engine_reads: self.fills.load(Ordering::Relaxed),
        }
    }

    pub(crate) fn get(&self, key: &[u8]) -> Option<V> {
        self.values.get(&Key::new(key)?)
    }

    /// Taken before reading a missed key from the engine.
    pub(crate) fn ticket(&self) -> Ticket {
        Ticket(self.generation.load(Ordering::SeqCst))
    }

    /// Keeps `value`, read from the engine after `ticket` was taken, unless a batch's write
    /// was running then or has begun since: the value read may be older than the engine's.
    pub(crate) fn fill(&self, key: &[u8], value: V, ticket: Ticket) {
        self.fills.fetch_add(1, Ordering::Relaxed);
        let Some(key) = Key::new(key) else {
            return;
        };
        let _fill = read(&self.fill_lock);
        let Ticket(generation) = ticket;
        if generation.is_multiple_of(2) && self.generation.load(Ordering::SeqCst) == generation {
            self.values.insert(key, value);
        }
    }

    /// Runs `engine_write`, the write of a batch that stores `values`, and then keeps those
    /// values if it succeeded: a value, or `None` to forget a key whose new value the batch
    /// does not tell. Only one write runs at a time.
    pub(crate) fn write<K: AsRef<[u8]>, E>(
        &self,
        values: impl IntoIterator<Item = (K, Option<V>)>,
        engine_write: impl FnOnce() -> Result<(), E>,
    ) -> Result<(), E> {
        let began = self.generation.fetch_add(1, Ordering::SeqCst);
        assert!(
            began.is_multiple_of(2),
            "two batch writes overlap in the count cache"
        );
        let res = engine_write();
        if res.is_ok() {
            let _writing = write(&self.fill_lock);
            // A key too long to keep is never kept, so never stale.
            for (key, value) in values {
                let Some(key) = Key::new(key.as_ref()) else {
                    continue;
                };
                match value {
                    Some(value) => self.values.insert(key, value),
                    None => {
                        self.values.remove(&key);
                    }
                }
            }
        }
        self.generation.fetch_add(1, Ordering::SeqCst);
        res
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fill_raced_by_a_write_is_dropped_and_the_write_kept() {
        let cache = ValueCache::new(16);
        let before = cache.ticket();
        cache.write([(b"k", Some(2))], || Ok::<(), ()>(())).unwrap();
        // The reader read 1 from the engine before the write landed.
        cache.fill(b"k", 1, before);
        assert_eq!(cache.get(b"k"), Some(2));
        let after = cache.ticket();
        cache.fill(b"j", 5, after);
        assert_eq!(cache.get(b"j"), Some(5));
    }

    #[test]
    fn no_fill_while_a_write_runs_and_a_failed_write_keeps_nothing() {
        let cache = ValueCache::new(16);
        let res = cache.write([(b"k", Some(2))], || {
            let during = cache.ticket();
            cache.fill(b"j", 1, during);
            Err("disk full")
        });
        assert_eq!(res, Err("disk full"));
        assert_eq!(cache.get(b"j"), None);
        assert_eq!(cache.get(b"k"), None);
    }

    #[test]
    fn a_write_forgets_the_keys_it_cannot_tell() {
        let cache = ValueCache::new(16);
        let before = cache.ticket();
        cache.fill(b"row", [1, 2], before);
        cache.fill(b"other", [3, 4], cache.ticket());
        cache.write([(b"row", None)], || Ok::<(), ()>(())).unwrap();
        assert_eq!(cache.get(b"row"), None);
        assert_eq!(cache.get(b"other"), Some([3, 4]));
        // A reader that read the row before the write may not put it back.
        cache.fill(b"row", [1, 2], before);
        assert_eq!(cache.get(b"row"), None);
    }

    #[test]
    fn keys_too_long_are_never_kept() {
        let cache = ValueCache::new(16);
        let long = vec![7; KEY_BYTES_MAX + 1];
        let longest = vec![7; KEY_BYTES_MAX];
        cache
            .write([(&long, Some(3)), (&longest, Some(4))], || Ok::<(), ()>(()))
            .unwrap();
        cache.fill(&long, 3, cache.ticket());
        assert_eq!(cache.get(&long), None);
        assert_eq!(cache.get(&longest), Some(4));
    }
}
