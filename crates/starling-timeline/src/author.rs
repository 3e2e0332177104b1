//! Author feeds: an actor's own posts and reposts, newest first, with the AppView's filters.
//! A repost shows only while the post it reposts is live, as in the reference dataplane (its
//! author feed joins the post table): the AppView would drop it anyway, leaving a short page.

use starling_core::ActorId;
use starling_core::feed::{FeedItem, FeedKey, flag};

use crate::{FeedSource, PAGE_ITEMS_MAX, Page, SourceError};

/// Items an author feed read may skip over for a filter before it returns a short page, so
/// that a rare filter (say, video) on a long feed costs a bounded amount of work.
pub const FILTER_SCAN_MAX: usize = 10_000;

/// Which of an author's items a feed shows (the AppView's `filter` of getAuthorFeed).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum AuthorFilter {
    /// Posts, replies and reposts.
    #[default]
    PostsWithReplies,
    /// Reposts, top-level posts, and replies in threads the author started.
    PostsAndAuthorThreads,
    /// Reposts and top-level posts.
    PostsNoReplies,
    /// The author's own posts with images or video.
    PostsWithMedia,
    /// The author's own posts with video.
    PostsWithVideo,
}

impl AuthorFilter {
    /// Whether the filter shows `item`.
    pub fn shows(self, item: &FeedItem) -> bool {
        let has = |bits: u8| item.flags & bits != 0;
        match self {
            AuthorFilter::PostsWithReplies => true,
            AuthorFilter::PostsAndAuthorThreads => {
                has(flag::REPOST) || !has(flag::REPLY) || has(flag::SELF_THREAD)
            }
            AuthorFilter::PostsNoReplies => has(flag::REPOST) || !has(flag::REPLY),
            AuthorFilter::PostsWithMedia => !has(flag::REPOST) && has(flag::IMAGES | flag::VIDEO),
            AuthorFilter::PostsWithVideo => !has(flag::REPOST) && has(flag::VIDEO),
        }
    }

    /// The filter by its lexicon name.
    pub fn from_name(name: &str) -> Option<AuthorFilter> {
        Some(match name {
            "posts_with_replies" => AuthorFilter::PostsWithReplies,
            "posts_and_author_threads" => AuthorFilter::PostsAndAuthorThreads,
            "posts_no_replies" => AuthorFilter::PostsNoReplies,
            "posts_with_media" => AuthorFilter::PostsWithMedia,
            "posts_with_video" => AuthorFilter::PostsWithVideo,
            _ => return None,
        })
    }
}

/// A page of `author`'s feed: up to `limit` items (at most [`PAGE_ITEMS_MAX`]) older than
/// `cursor` that `filter` shows, newest first, without reposts of posts that are not live.
pub fn author_feed(
    source: &dyn FeedSource,
    author: ActorId,
    filter: AuthorFilter,
    limit: usize,
    cursor: Option<FeedKey>,
) -> Result<Page, SourceError> {
    let limit = limit.clamp(1, PAGE_ITEMS_MAX);
    let mut items = Vec::with_capacity(limit + 1);
    let mut scanned = 0usize;
    let mut last_scanned = None;
    let mut failed = None;
    source.author_feed(author, cursor, &mut |item| {
        scanned += 1;
        last_scanned = Some(item.key);
        if filter.shows(&item) {
            match item.is_repost().then(|| source.shows_live_post(&item)) {
                None | Some(Ok(true)) => items.push(item),
                Some(Ok(false)) => {}
                Some(Err(err)) => {
                    failed = Some(err);
                    return false;
                }
            }
        }
        items.len() <= limit && scanned < FILTER_SCAN_MAX
    })?;
    if let Some(err) = failed {
        return Err(err);
    }
    let cursor = if items.len() > limit {
        items.truncate(limit);
        items.last().map(|item| item.key)
    } else if scanned >= FILTER_SCAN_MAX {
        // A short page: the next one goes on from where the scan stopped.
        last_scanned
    } else {
        None
    };
    Ok(Page { items, cursor })
}
