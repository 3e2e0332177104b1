//! The newest items of recently read author feeds, in memory: a page of an author feed from
//! here is a copy of a few dozen items, where the store walks an index range backwards through
//! its tables (most of GetAuthorFeed's CPU on a store of millions of posts).
//!
//! Each head is an immutable [`Head`] behind an `Arc`: a reader takes it and pages without a
//! lock, a change replaces it. Heads are weighed by the items they hold, and the least useful
//! go first (S3-FIFO, `quick_cache`) once they hold `items_max`.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use quick_cache::Weighter;
use quick_cache::sync::Cache;
use rustc_hash::FxBuildHasher;
use starling_core::ActorId;
use starling_core::feed::{FeedChange, FeedItem, FeedKey};

use crate::head::Head;
use crate::{FeedSource, SourceError};

#[derive(Clone)]
struct ByItems;

impl Weighter<ActorId, Arc<Head>> for ByItems {
    fn weight(&self, _author: &ActorId, head: &Arc<Head>) -> u64 {
        // An author with no items still takes an entry: weigh it as one item.
        head.len().max(1) as u64
    }
}

/// Heads of author feeds. Consistency is the home timelines' (see [`crate::Timelines`]): a
/// head is filled under the shared apply lock and changed under the exclusive one, after the
/// store committed the change, so a head never misses a change; changes are idempotent, so a
/// head filled after its batch committed but before the batch was applied stays right.
pub(crate) struct AuthorHeads {
    heads: Cache<ActorId, Arc<Head>, ByItems, FxBuildHasher>,
    /// Items a head holds at most: the newest of its author's feed.
    length: usize,
    fills: AtomicU64,
}

impl AuthorHeads {
    /// Heads of `length` items at most, `items_max` in all.
    pub(crate) fn new(length: usize, items_max: usize) -> AuthorHeads {
        // Most authors have few items: guess heads of 16 on average.
        AuthorHeads {
            heads: Cache::with(
                (items_max / 16).max(16),
                items_max as u64,
                ByItems,
                FxBuildHasher,
                Default::default(),
            ),
            length,
            fills: AtomicU64::new(0),
        }
    }

    /// Visits `author`'s items older than `below` as [`FeedSource::author_feed`] does: from
    /// the author's head, then from `source` below the head's floor. A first page (no `below`)
    /// of an author without a head reads the head from `source` first; a later page does not,
    /// as it may well lie below any head. The caller holds the apply lock, shared or exclusive.
    pub(crate) fn author_feed(
        &self,
        source: &dyn FeedSource,
        author: ActorId,
        below: Option<FeedKey>,
        visit: &mut dyn FnMut(FeedItem) -> bool,
    ) -> Result<(), SourceError> {
        let head = match (self.heads.get(&author), below) {
            (Some(head), _) => head,
            (None, None) => self.fill(source, author)?,
            (None, Some(_)) => return source.author_feed(author, below, visit),
        };
        if !head.page(below, |item| visit(*item)) {
            return Ok(());
        }
        match head.floor() {
            // The head holds the whole feed.
            None => Ok(()),
            Some(floor) => {
                let below = below.map_or(floor, |below| below.min(floor));
                source.author_feed(author, Some(below), visit)
            }
        }
    }

    /// Reads `author`'s newest items from `source` into a new head.
    fn fill(&self, source: &dyn FeedSource, author: ActorId) -> Result<Arc<Head>, SourceError> {
        let mut items = Vec::new();
        source.author_feed(author, None, &mut |item| {
            items.push(item);
            items.len() < self.length
        })?;
        let complete = items.len() < self.length;
        let head = Arc::new(Head::from_newest_first(items, complete, self.length));
        self.heads.insert(author, head.clone());
        self.fills.fetch_add(1, Ordering::Relaxed);
        Ok(head)
    }

    /// Takes a committed change into its author's head, if the author has one. The caller
    /// holds the apply lock exclusively.
    pub(crate) fn apply(&self, change: &FeedChange) {
        let (item, add) = match change {
            FeedChange::Add(item) => (item, true),
            FeedChange::Remove(item) => (item, false),
        };
        let author = item.key.author;
        let Some(head) = self.heads.peek(&author) else {
            return;
        };
        let mut head = Head::clone(&head);
        let changed = if add {
            head.insert(*item, self.length)
        } else {
            head.remove(&item.key)
        };
        if changed {
            self.heads.insert(author, Arc::new(head));
        }
    }

    /// Drops every head.
    pub(crate) fn clear(&self) {
        self.heads.clear();
    }

    /// Heads held, items in them, and heads filled since start.
    pub(crate) fn stats(&self) -> (u64, u64, u64) {
        (
            self.heads.len() as u64,
            self.heads.weight(),
            self.fills.load(Ordering::Relaxed),
        )
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use starling_core::feed::PostRef;

    use super::*;

    /// One author's feed, oldest first, as the store would hold it.
    struct OneFeed(Mutex<Vec<FeedItem>>);

    impl FeedSource for OneFeed {
        fn author_feed(
            &self,
            _author: ActorId,
            below: Option<FeedKey>,
            visit: &mut dyn FnMut(FeedItem) -> bool,
        ) -> Result<(), SourceError> {
            let items = self.0.lock().unwrap().clone();
            for item in items.into_iter().rev() {
                if below.is_none_or(|below| item.key < below) && !visit(item) {
                    break;
                }
            }
            Ok(())
        }
    }

    fn item(sort_at_us: i64) -> FeedItem {
        let author = ActorId(1);
        FeedItem {
            key: FeedKey {
                author,
                ..FeedKey::at(sort_at_us)
            },
            flags: 0,
            post: PostRef {
                actor: author,
                code: 0,
            },
        }
    }

    /// Every item of the feed through `heads`, in pages of `limit`.
    fn all_pages(heads: &AuthorHeads, source: &OneFeed, limit: usize) -> Vec<i64> {
        let (mut all, mut below) = (Vec::new(), None);
        loop {
            let mut page = Vec::new();
            heads
                .author_feed(source, ActorId(1), below, &mut |item| {
                    page.push(item);
                    page.len() < limit
                })
                .unwrap();
            all.extend(page.iter().map(|item| item.key.sort_at_us));
            match page.last() {
                Some(last) if page.len() == limit => below = Some(last.key),
                _ => return all,
            }
        }
    }

    // A head holds the newest items of a long feed, pages go on below it from the store, and
    // new items keep it at its length; the feed is read into it once.
    #[test]
    fn pages_go_below_a_head_and_new_items_keep_it_current() {
        let source = OneFeed(Mutex::new((0..300).map(item).collect()));
        let heads = AuthorHeads::new(200, 10_000);
        let want: Vec<i64> = (0..300).rev().collect();
        assert_eq!(all_pages(&heads, &source, 50), want);
        assert_eq!(heads.stats(), (1, 200, 1));
        for t in 300..450 {
            source.0.lock().unwrap().push(item(t));
            heads.apply(&FeedChange::Add(item(t)));
        }
        let want: Vec<i64> = (0..450).rev().collect();
        assert_eq!(all_pages(&heads, &source, 37), want);
        assert_eq!(heads.stats(), (1, 200, 1));
    }
}
