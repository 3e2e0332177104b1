//! The cap on a reader's own items in a page of their home timeline, as the AppView's reference
//! data plane pages it (`getTimeline`): the items of the accounts followed fill the page, the
//! reader's own items fill what they leave, and at least `min(limit, 10)` own items may always
//! show. A reader who posts much more than the accounts they follow so sees at most that many
//! of their own items per page.
//!
//! The reference reads `limit + 1` rows of each kind below the cursor, `followed` and `own`,
//! then pages their merge:
//!
//! ```text
//! own_max = max(min(limit, 10), limit - min(followed.len, limit))
//! merged  = followed ++ own[..own_max], newest first
//! page    = merged[..limit]
//! cursor  = the page's last key if merged.len > limit,
//!           else the page's last key if own.len > own_max, else none
//! ```

use starling_core::ActorId;
use starling_core::feed::{FeedItem, FeedKey};

use crate::fan_in::Next;

/// Own items a page may hold however many followed items could fill it.
const OWN_ITEMS_MIN: usize = 10;

/// Takes the items of one newest-first source of a reader's timeline (the head and the author
/// feeds below it, or a celebrity's feed) that a page of `limit` can need, and says when the
/// rest cannot change the page.
///
/// Walking newest first, every followed item and the first `min(limit, 10)` own items are sure
/// to be merged; once `limit + 1` of those are taken, the page is among them and its cursor is
/// set, so older items of the source cannot change it. A reader who seldom posts so reads no
/// further than without the cap. Own items past the first `limit + 1` never count either.
pub(crate) struct Gather {
    reader: ActorId,
    limit: usize,
    n_followed: usize,
    n_own: usize,
}

impl Gather {
    /// Nothing taken yet, for a page of `limit` (at least 1) of `reader`'s timeline.
    pub(crate) fn new(reader: ActorId, limit: usize) -> Gather {
        Gather {
            reader,
            limit,
            n_followed: 0,
            n_own: 0,
        }
    }

    /// Items sure to be merged, taken so far.
    fn n_merged(&self) -> usize {
        self.n_followed + self.n_own.min(self.limit.min(OWN_ITEMS_MIN))
    }

    /// About how many more items the source must give.
    pub(crate) fn n_missing(&self) -> usize {
        (self.limit + 1).saturating_sub(self.n_merged())
    }

    /// Appends `item`, the next of the source, to `out` if the page can need it, and says what
    /// the page needs next.
    pub(crate) fn offer(&mut self, item: &FeedItem, out: &mut Vec<FeedItem>) -> Next {
        if item.key.author != self.reader {
            out.push(*item);
            self.n_followed += 1;
        } else if self.n_own <= self.limit {
            out.push(*item);
            self.n_own += 1;
        } else {
            return Next::AuthorDone;
        }
        if self.n_merged() > self.limit {
            Next::Done
        } else {
            Next::More
        }
    }
}

/// Cuts `items`, the candidates of every source newest first and distinct, to the page of
/// `limit` (at least 1) of `reader`'s timeline, and returns the page's cursor.
pub(crate) fn cap_own_items(
    reader: ActorId,
    limit: usize,
    items: &mut Vec<FeedItem>,
) -> Option<FeedKey> {
    let n_own_all = items
        .iter()
        .filter(|item| item.key.author == reader)
        .count();
    // As the reference reads them: `limit + 1` rows of each kind at most.
    let n_followed = (items.len() - n_own_all).min(limit + 1);
    let n_own = n_own_all.min(limit + 1);
    let own_max = limit.min(OWN_ITEMS_MIN).max(limit - n_followed.min(limit));
    let (mut followed_idx, mut own_idx) = (0, 0);
    items.retain(|item| {
        if item.key.author == reader {
            own_idx += 1;
            own_idx <= own_max
        } else {
            followed_idx += 1;
            followed_idx <= limit + 1
        }
    });
    let has_more = items.len() > limit || n_own > own_max;
    items.truncate(limit);
    has_more
        .then(|| items.last().map(|item| item.key))
        .flatten()
}

#[cfg(test)]
mod tests {
    use super::*;
    use starling_core::feed::PostRef;

    fn item(author: u32, sort_at_us: i64) -> FeedItem {
        FeedItem {
            key: FeedKey {
                sort_at_us,
                code: sort_at_us as u64,
                author: ActorId(author),
                repost: false,
            },
            flags: 0,
            post: PostRef {
                actor: ActorId(author),
                code: sort_at_us as u64,
            },
        }
    }

    // A reader with 40 new own items over 40 older followed ones: a page of 30 holds the 10
    // newest own items and 20 followed ones, and the next page starts below the 20th.
    #[test]
    fn own_items_are_capped_when_followed_items_fill_the_page() {
        let reader = ActorId(1);
        let mut items: Vec<FeedItem> = (0..40)
            .map(|idx| item(1, 1_000 - idx))
            .chain((0..40).map(|idx| item(2, 500 - idx)))
            .collect();
        let cursor = cap_own_items(reader, 30, &mut items);
        let n_own = items
            .iter()
            .filter(|item| item.key.author == reader)
            .count();
        assert_eq!((items.len(), n_own), (30, 10));
        assert_eq!(cursor, Some(item(2, 481).key));
    }

    // With fewer followed items than the page, own items fill the rest; one own item more than
    // that cap still gives a cursor, as the reference's `selfHasMore` does.
    #[test]
    fn own_items_fill_what_followed_items_leave() {
        let reader = ActorId(1);
        let mut items: Vec<FeedItem> = (0..40)
            .map(|idx| item(1, 1_000 - idx))
            .chain((0..5).map(|idx| item(2, 500 - idx)))
            .collect();
        let cursor = cap_own_items(reader, 30, &mut items);
        let n_own = items
            .iter()
            .filter(|item| item.key.author == reader)
            .count();
        assert_eq!((items.len(), n_own), (30, 25));
        assert_eq!(cursor, Some(item(2, 496).key));
    }
}
