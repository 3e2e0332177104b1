//! The set of readers with a head in memory, as one bit per actor id.
//!
//! Fan-out visits every follower of an author, most of whom have no head; testing a bit first
//! skips the loss factor, the shard lock and the hash probe for them. The bitmap costs one bit
//! per actor id (690 KB at 5.5M actors).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{RwLock, RwLockReadGuard};

use starling_core::ActorId;

/// Bits by actor id; grows to the largest id set.
#[derive(Default)]
pub(crate) struct ActiveSet {
    words: RwLock<Vec<AtomicU64>>,
}

/// A read view of the bitmap, for testing many ids under one lock.
pub(crate) struct ActiveView<'a>(RwLockReadGuard<'a, Vec<AtomicU64>>);

impl ActiveView<'_> {
    pub(crate) fn contains(&self, id: ActorId) -> bool {
        let (word, bit) = position(id);
        self.0
            .get(word)
            .is_some_and(|w| w.load(Ordering::Relaxed) & bit != 0)
    }
}

fn position(id: ActorId) -> (usize, u64) {
    (id.0 as usize / 64, 1 << (id.0 % 64))
}

impl ActiveSet {
    pub(crate) fn view(&self) -> ActiveView<'_> {
        ActiveView(self.words.read().unwrap_or_else(|e| e.into_inner()))
    }

    pub(crate) fn insert(&self, id: ActorId) {
        let (word, bit) = position(id);
        {
            let words = self.view();
            if let Some(w) = words.0.get(word) {
                w.fetch_or(bit, Ordering::Relaxed);
                return;
            }
        }
        let mut words = self.words.write().unwrap_or_else(|e| e.into_inner());
        if words.len() <= word {
            // Grow by a quarter at least, so that ids arriving in order do not regrow it often.
            let len = (word + 1).max(words.len() + words.len() / 4);
            words.resize_with(len, AtomicU64::default);
        }
        if let Some(w) = words.get(word) {
            w.fetch_or(bit, Ordering::Relaxed);
        }
    }

    pub(crate) fn remove(&self, id: ActorId) {
        let (word, bit) = position(id);
        if let Some(w) = self.view().0.get(word) {
            w.fetch_and(!bit, Ordering::Relaxed);
        }
    }
}
