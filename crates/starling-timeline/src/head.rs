//! A materialised stretch of one feed: its newest items, in key order, and the key below which
//! it knows nothing.

use std::collections::VecDeque;

use starling_core::ActorId;
use starling_core::feed::{FeedItem, FeedKey};

/// The newest items of a feed (a reader's timeline, or a celebrity's own feed).
///
/// Invariant: `items` holds exactly the feed's items with keys at or above `floor` (every item
/// when `floor` is `None`), ascending. Items below the floor are read from author feeds.
#[derive(Clone, Debug)]
pub(crate) struct Head {
    items: VecDeque<FeedItem>,
    /// The newest key held: most inserts are newer items, and comparing with this copy does
    /// not touch the item buffer (a cache miss per follower in a fan-out).
    newest: Option<FeedKey>,
    floor: Option<FeedKey>,
    /// Whether the floor is the front item's key: a trimming insert sets this rather than
    /// loading the new front item from the buffer; `settle_floor` writes it into `floor`
    /// before any other change.
    floor_at_front: bool,
    /// For a reader: the celebrities the reader follows, merged in at read time.
    pub(crate) celebrities: Vec<ActorId>,
    /// For a reader: the read clock when the head was last read, for eviction.
    pub(crate) last_read: u64,
}

impl Head {
    /// A head from items newest first; `complete` when they are the whole feed. It has room
    /// for a few more items than it holds (new posts arrive), up to `length`.
    pub(crate) fn from_newest_first(
        mut newest_first: Vec<FeedItem>,
        complete: bool,
        length: usize,
    ) -> Head {
        newest_first.reverse();
        let floor = if complete {
            None
        } else {
            newest_first.first().map(|item| item.key)
        };
        let len = newest_first.len();
        let room = (len / 4).max(4).min(length.saturating_sub(len));
        newest_first.shrink_to(len + room);
        Head {
            newest: newest_first.last().map(|item| item.key),
            items: VecDeque::from(newest_first),
            floor,
            floor_at_front: false,
            celebrities: Vec::new(),
            last_read: 0,
        }
    }

    /// The key below which the head knows nothing, if any.
    pub(crate) fn floor(&self) -> Option<FeedKey> {
        match self.items.front() {
            Some(front) if self.floor_at_front => Some(front.key),
            _ => self.floor,
        }
    }

    /// Makes `floor` the floor again, before a change that may move the front item.
    fn settle_floor(&mut self) {
        self.floor = self.floor();
        self.floor_at_front = false;
    }

    /// Items held.
    pub(crate) fn len(&self) -> usize {
        self.items.len()
    }

    /// Bytes of item storage.
    pub(crate) fn bytes(&self) -> usize {
        self.items.capacity() * size_of::<FeedItem>()
    }

    /// Inserts an item unless it is already there or below the floor; keeps at most `length`
    /// items. Returns whether it was inserted.
    pub(crate) fn insert(&mut self, item: FeedItem, length: usize) -> bool {
        let length = length.max(1);
        let newest_of_all = match self.newest {
            Some(newest) => item.key > newest,
            None => self.floor.is_none_or(|floor| item.key >= floor),
        };
        if newest_of_all {
            if self.items.len() >= length {
                self.items.pop_front();
                self.floor_at_front = true;
            }
            self.grow_for_one(length);
            self.items.push_back(item);
            self.newest = Some(item.key);
            return true;
        }
        self.settle_floor();
        if self.floor.is_some_and(|floor| item.key < floor) {
            return false;
        }
        let Err(idx) = self
            .items
            .binary_search_by(|probe| probe.key.cmp(&item.key))
        else {
            return false;
        };
        self.grow_for_one(length);
        self.items.insert(idx, item);
        while self.items.len() > length {
            self.items.pop_front();
            self.floor = self.items.front().map(|item| item.key);
        }
        true
    }

    /// Makes room for one more item, growing the buffer by half at a time but never past
    /// `length` (+1 for an insert before the trim), so that heads hold what they need.
    fn grow_for_one(&mut self, length: usize) {
        let (len, capacity) = (self.items.len(), self.items.capacity());
        if len == capacity {
            let room = (len / 2).max(8).min(length + 1 - len.min(length));
            self.items.reserve_exact(room);
        }
    }

    /// Forgets everything below `floor`: the head stays exact only from there up.
    pub(crate) fn raise_floor(&mut self, floor: FeedKey) {
        self.settle_floor();
        if self.floor.is_some_and(|current| current >= floor) {
            return;
        }
        while self.items.front().is_some_and(|item| item.key < floor) {
            self.items.pop_front();
        }
        self.newest = self.items.back().map(|item| item.key);
        self.floor = Some(floor);
    }

    /// Removes the item with `key`, if held.
    pub(crate) fn remove(&mut self, key: &FeedKey) -> bool {
        self.settle_floor();
        let removed = match self.items.binary_search_by(|probe| probe.key.cmp(key)) {
            Ok(idx) => self.items.remove(idx).is_some(),
            Err(_) => false,
        };
        self.newest = self.items.back().map(|item| item.key);
        removed
    }

    /// Removes every item by `author`.
    pub(crate) fn remove_author(&mut self, author: ActorId) {
        self.settle_floor();
        self.items.retain(|item| item.key.author != author);
        self.newest = self.items.back().map(|item| item.key);
    }

    /// Visits the items with keys below `below` (all when `None`), newest first, while `visit`
    /// returns `true` (wants more). Returns whether the head ran out first (so that older items
    /// must come from below the floor).
    pub(crate) fn page(
        &self,
        below: Option<FeedKey>,
        mut visit: impl FnMut(&FeedItem) -> bool,
    ) -> bool {
        let end = match below {
            Some(below) => self.items.partition_point(|item| item.key < below),
            None => self.items.len(),
        };
        for item in self.items.range(..end).rev() {
            if !visit(item) {
                return false;
            }
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use starling_core::feed::PostRef;

    fn item(sort_at_us: i64) -> FeedItem {
        FeedItem {
            key: FeedKey::at(sort_at_us),
            flags: 0,
            post: PostRef {
                actor: ActorId(0),
                code: 0,
            },
        }
    }

    proptest! {
        // Inserts and removes in random order against a sorted Vec trimmed to the length: the
        // head always holds exactly the model's items at or above its floor.
        #[test]
        fn head_matches_a_sorted_vec(ops in proptest::collection::vec((0..40i64, any::<bool>()), 1..200), length in 1..12usize) {
            let mut head = Head::from_newest_first(Vec::new(), true, 8);
            let mut all: Vec<i64> = Vec::new();
            for (t, add) in ops {
                if add {
                    if !all.contains(&t) { all.push(t); }
                    head.insert(item(t), length);
                } else {
                    all.retain(|&x| x != t);
                    head.remove(&FeedKey::at(t));
                }
                all.sort_unstable();
                let want: Vec<i64> = all.iter().copied().filter(|&x| head.floor().is_none_or(|f| FeedKey::at(x) >= f)).collect();
                let have: Vec<i64> = head.items.iter().map(|i| i.key.sort_at_us).collect();
                prop_assert_eq!(have, want);
                prop_assert!(head.len() <= length);
            }
        }
    }
}
