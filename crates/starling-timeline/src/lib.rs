//! Home timelines: fan-out on write into the timelines of recently active readers, lossy
//! timelines for readers who follow very many accounts, and celebrity fan-in at read time.
//!
//! Owns: [`Timelines`], the in-memory timeline heads and celebrity feeds, the lossy rule
//! ([`lossy`]), the pagination of home timelines, and author feed filters ([`author`]).
//! Does not: store anything durably. A timeline is a pure function of the stored author feeds
//! (read through [`FeedSource`]), the follow graph and the lossy follow counts, so it is rebuilt
//! rather than logged: after a restart every reader's timeline reads the same as before.
//! Must not depend on: `starling-store`, `starling-ingest`, `starling-api`, `tokio`.
//!
//! The timeline of a reader is every post and repost (of a post) by the accounts the reader
//! follows and by the reader, newest first by [`FeedKey`], minus the items the lossy rule drops
//! for readers who follow more than `reasonable_limit` accounts. A *head* materialises the
//! newest `length` items of that sequence for a reader who read recently; older pages, and the
//! items of celebrities (never fanned out), are merged in at read time.
//!
//! A page caps the reader's own items as the AppView's reference data plane does: of the
//! newest `limit + 1` own items below the cursor, a page of `limit` holds at most
//! `max(min(limit, 10), limit - followed)`, where `followed` is the number of followed items
//! below the cursor (up to `limit`): own items fill only what followed items leave, and those
//! past the cap that are newer than the page's end show on no page. The rule is in
//! `own_cap.rs`.

#![cfg_attr(test, allow(clippy::unwrap_used, clippy::indexing_slicing))]

mod active;
pub mod author;
mod author_heads;
mod fan_in;
mod head;
pub mod lossy;
mod own_cap;
mod timelines;

use starling_core::ActorId;
use starling_core::feed::{FeedItem, FeedKey};

pub use author::{AuthorFilter, author_feed};
pub use timelines::{AuthorFeeds, Page, TimelineStats, Timelines};

/// Where timelines read author feeds from: the store, in Starling.
pub trait FeedSource: Send + Sync {
    /// Visits `author`'s feed items older than `below` (all when `None`), newest first, until
    /// `visit` returns `false`.
    fn author_feed(
        &self,
        author: ActorId,
        below: Option<FeedKey>,
        visit: &mut dyn FnMut(FeedItem) -> bool,
    ) -> Result<(), SourceError>;

    /// Whether the post `item` shows (the reposted one, for a repost) is live. Author feeds
    /// leave out reposts of posts that are not: the AppView could not show them.
    fn shows_live_post(&self, item: &FeedItem) -> Result<bool, SourceError> {
        let _ = item;
        Ok(true)
    }
}

/// A feed source failed; the message says why.
#[derive(Debug, thiserror::Error)]
#[error("reading author feeds: {message}")]
pub struct SourceError {
    /// What failed.
    pub message: String,
    /// Whether the source failed in a passing way (a store cluster request), so that a reader
    /// may retry elsewhere.
    pub unavailable: bool,
}

impl TimelineError {
    /// Whether the failure is a passing one of the feed source, worth a retry elsewhere.
    pub fn is_unavailable(&self) -> bool {
        match self {
            TimelineError::Source(source) => source.unavailable,
        }
    }
}

/// Errors of timeline reads.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TimelineError {
    /// The feed source failed.
    #[error(transparent)]
    Source(#[from] SourceError),
}

/// Items held per active reader, when not configured.
pub const LENGTH_DEFAULT: usize = 500;
/// The lossy limit of follows, when not configured (Bluesky's value).
pub const REASONABLE_LIMIT_DEFAULT: u32 = 2_000;
/// Followers above which an author is a celebrity, when not configured.
pub const CELEBRITY_THRESHOLD_DEFAULT: u32 = 100_000;
/// Readers whose heads stay in memory, when not configured.
pub const ACTIVE_READERS_DEFAULT: usize = 100_000;
/// Items held per author in the author feed cache, when not configured: two pages of the
/// largest size.
pub const AUTHOR_HEAD_LENGTH_DEFAULT: usize = 2 * PAGE_ITEMS_MAX;
/// Items held in all in the author feed cache, when not configured: 40 MB of items.
pub const AUTHOR_HEADS_ITEMS_DEFAULT: usize = 1_000_000;
/// The largest page a read returns.
pub const PAGE_ITEMS_MAX: usize = 100;

/// How timelines behave; every limit is here.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TimelineConfig {
    /// Items materialised per active reader (the head's target length).
    pub length: usize,
    /// Lossy timelines: readers following more than this many accounts keep
    /// `reasonable_limit / follows` of fanned-out items. `None` turns lossy timelines off.
    pub reasonable_limit: Option<u32>,
    /// Authors with more followers than this are not fanned out but merged at read time.
    /// `None` fans out every author.
    pub celebrity_threshold: Option<u32>,
    /// Readers whose heads stay in memory; the least recently read beyond this are dropped and
    /// rebuilt on their next read.
    pub active_readers_max: usize,
    /// Items held at most per author in the author feed cache: the newest of the feed.
    pub author_head_length: usize,
    /// Items held in all in the author feed cache (heads of recently read author feeds); 0
    /// turns it off.
    pub author_heads_items: usize,
}

impl Default for TimelineConfig {
    fn default() -> TimelineConfig {
        TimelineConfig {
            length: LENGTH_DEFAULT,
            reasonable_limit: Some(REASONABLE_LIMIT_DEFAULT),
            celebrity_threshold: Some(CELEBRITY_THRESHOLD_DEFAULT),
            active_readers_max: ACTIVE_READERS_DEFAULT,
            author_head_length: AUTHOR_HEAD_LENGTH_DEFAULT,
            author_heads_items: AUTHOR_HEADS_ITEMS_DEFAULT,
        }
    }
}
