//! A post leaving the index takes its reposts out of feeds. The reference's post deletion (and
//! an update, which deletes and inserts again) deletes every feed row that shows the post, its
//! reposts' rows included, while the reposts themselves stay counted. Here the reposts' author
//! feed entries go and the timelines are told to drop them; a repost written after that is
//! indexed as any other.

use rustc_hash::FxHashSet;
use starling_core::ActorId;
use starling_core::feed::{FeedItem, FeedKey, PostRef, flag, rkey_code};

use super::{IndexedRecord, Rules, StoredState};
use crate::StoreError;
use crate::codec::feed_change;
use crate::keys::{self, tag};

/// A repost of a post, as its entry by subject tells it.
struct Repost {
    sort_at_us: i64,
    actor: ActorId,
    rkey: String,
}

impl Rules<'_> {
    /// The author feed entries (to remove) of every live repost of `post`, which is leaving
    /// the index; each also goes from the timelines.
    pub(super) fn unfeed_reposts(
        &mut self,
        state: &mut impl StoredState,
        post: &IndexedRecord<'_>,
    ) -> Result<Vec<Vec<u8>>, StoreError> {
        let collection = self.intern_collection(post.collection);
        let mut prefix = vec![tag::REPOST_BY_SUBJECT];
        keys::push_record_ref(&mut prefix, post.actor, collection, post.rkey);
        let mut tails: FxHashSet<Vec<u8>> = state.list_tails(&prefix)?.into_iter().collect();
        // This batch's own reposts of the post, added or removed before now.
        for (tail, insert) in self.batch_reposts.get(&prefix).into_iter().flatten() {
            if *insert {
                tails.insert(tail.clone());
            } else {
                tails.remove(tail);
            }
        }
        let mut keys = Vec::with_capacity(tails.len());
        for tail in tails {
            let repost = parse_tail(&tail).ok_or_else(|| {
                StoreError::corrupt("repost entry", &[&prefix[..], &tail[..]].concat())
            })?;
            let item = repost_item(
                repost.actor,
                &repost.rkey,
                repost.sort_at_us,
                post.actor,
                post.rkey,
            );
            self.feed.push(feed_change(item, false));
            keys.push(keys::author_feed_key(&item, &repost.rkey, post.rkey));
        }
        Ok(keys)
    }
}

/// The feed item of a repost by `actor` (record key `rkey`) of the post `post_rkey` of
/// `post_actor`.
pub(super) fn repost_item(
    actor: ActorId,
    rkey: &str,
    sort_at_us: i64,
    post_actor: ActorId,
    post_rkey: &str,
) -> FeedItem {
    let (code, text) = rkey_code(rkey);
    let (post_code, post_text) = rkey_code(post_rkey);
    let mut flags = flag::REPOST;
    if text {
        flags |= flag::RKEY_TEXT;
    }
    if post_text {
        flags |= flag::SUBJECT_RKEY_TEXT;
    }
    FeedItem {
        key: FeedKey {
            sort_at_us,
            code,
            author: actor,
            repost: true,
        },
        flags,
        post: PostRef {
            actor: post_actor,
            code: post_code,
        },
    }
}

/// What follows the subject in an entry by subject: `sort_at`, the author, the record key.
fn parse_tail(tail: &[u8]) -> Option<Repost> {
    let time: [u8; 8] = tail.get(..8)?.try_into().ok()?;
    let actor: [u8; 4] = tail.get(8..12)?.try_into().ok()?;
    Some(Repost {
        sort_at_us: keys::time_from_bytes(time),
        actor: ActorId(u32::from_be_bytes(actor)),
        rkey: String::from_utf8(tail.get(12..)?.to_vec()).ok()?,
    })
}
