//! Byte layouts of keys. Every integer is big-endian so that byte order is numeric order.
//!
//! A record is named by `(actor, collection, rkey)`: 4 + 4 bytes of interned ids and the record
//! key, which never contains a zero byte (record keys are printable ASCII), so a `0` ends it and
//! keys that embed a record reference still sort by their later parts.

use starling_core::ActorId;
use starling_core::feed::{FeedItem, FeedKey, PostRef, flag, rkey_code};

/// An interned collection NSID.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CollectionId(pub u32);

/// Index tags: the first byte of a key in the `index` keyspace.
pub mod tag {
    /// Likes by subject: subject ref, sort_at, liker actor, rkey.
    pub const LIKE_BY_SUBJECT: u8 = b'L';
    /// Reposts by subject: subject ref, sort_at, reposter actor, rkey.
    pub const REPOST_BY_SUBJECT: u8 = b'R';
    /// Quotes by subject: subject ref, sort_at, quoting actor, rkey.
    pub const QUOTE_BY_SUBJECT: u8 = b'Q';
    /// Replies by parent: parent ref, sort_at, replying actor, rkey.
    pub const REPLY_BY_PARENT: u8 = b'P';
    /// Replies by thread root: root ref, sort_at, replying actor, rkey.
    pub const REPLY_BY_ROOT: u8 = b'T';
    /// Follows by actor: actor, sort_at, subject, rkey.
    pub const FOLLOW_BY_ACTOR: u8 = b'F';
    /// Follows by subject: subject, sort_at, actor, rkey.
    pub const FOLLOW_BY_SUBJECT: u8 = b'f';
    /// Follow edges: actor, subject, rkey; answers "does A follow B" and with which record.
    pub const FOLLOW_EDGE: u8 = b'E';
    /// Follow pair counts: actor, subject -> live follow records of the pair (u32). A point
    /// read answers "does A follow B" without scanning duplicates.
    pub const FOLLOW_PAIR: u8 = b'N';
    /// Follows imported in bulk from an adjacency list (no record): actor, subject.
    pub const IMPORTED_FOLLOW: u8 = b'M';
    /// Block pair counts: actor, subject -> live block records of the pair (u32).
    pub const BLOCK_PAIR: u8 = b'n';
    /// Blocks by actor: actor, subject, rkey.
    pub const BLOCK_BY_ACTOR: u8 = b'B';
    /// Blocks by subject: subject, actor, rkey.
    pub const BLOCK_BY_SUBJECT: u8 = b'b';
    /// List items by list: list ref, subject, item actor, rkey.
    pub const LISTITEM_BY_LIST: u8 = b'I';
    /// Author feeds: the actor's posts and reposts; see [`super::author_feed_key`].
    pub const AUTHOR_FEED: u8 = b'A';
    /// A like by actor and subject: actor, subject ref, rkey.
    pub const LIKE_BY_ACTOR: u8 = b'K';
    /// A repost by actor and subject: actor, subject ref, rkey.
    pub const REPOST_BY_ACTOR: u8 = b'k';
    /// A list block by actor and list: actor, list ref, rkey.
    pub const LISTBLOCK_BY_ACTOR: u8 = b'X';
    /// Counts of records by subject: record ref, kind ([`super::count`]) -> u64.
    pub const RECORD_COUNT: u8 = b'C';
    /// Counts of an actor's records: actor, kind ([`super::count`]) -> u64.
    pub const ACTOR_COUNT: u8 = b'c';
    /// The newest repository revision applied for an actor: actor -> u64 (the TID's value).
    pub const LATEST_REV: u8 = b'V';
    /// Notifications by recipient: recipient, sort_at, author, reason, height, rkey, subject; see
    /// [`crate::notify::key`].
    pub const NOTIFICATION: u8 = b'O';
    /// The ancestors a reply notified, stored beside it: reply record key, height -> the
    /// ancestor author's id + 1 (u64, kept with the counts).
    pub const REPLY_ANCESTOR: u8 = b'D';
    /// The subscribers a post notified, as counts ([`crate::notify::subscriber_key`]).
    pub const SUBSCRIBER_NOTIFIED: u8 = b'U';
    /// An actor's records of one collection by time (likes, reposts, feed generators, lists,
    /// starter packs, blocks, list blocks): actor, collection, sort_at, actor, rkey, and the
    /// record's target when it has one ([`super::TARGET_MARK`]).
    pub const ACTOR_RECORDS: u8 = b'G';
    /// List items by list and time (the owner's only): list ref, sort_at, subject, rkey.
    pub const LISTITEM_BY_TIME: u8 = b'J';
    /// Profiles by the starter pack they joined through: starter pack ref, sort_at, actor,
    /// rkey.
    pub const JOIN_BY_STARTERPACK: u8 = b'W';
    /// Verifications by subject: subject, sort_at, verifier, rkey.
    pub const VERIFICATION_BY_SUBJECT: u8 = b'Z';
}

/// The kinds of counts, the last byte of a count key.
pub mod count {
    /// Likes of a record.
    pub const LIKES: u8 = b'l';
    /// Reposts of a record.
    pub const REPOSTS: u8 = b'r';
    /// Replies whose parent is the record.
    pub const REPLIES: u8 = b'p';
    /// Posts quoting the record.
    pub const QUOTES: u8 = b'q';
    /// Items of a list (written by its owner).
    pub const LIST_ITEMS: u8 = b'i';
    /// An actor's posts.
    pub const POSTS: u8 = b'P';
    /// An actor's lists.
    pub const LISTS: u8 = b'L';
    /// An actor's feed generators.
    pub const FEEDS: u8 = b'F';
    /// An actor's starter packs.
    pub const STARTER_PACKS: u8 = b'S';
    /// Profiles that joined through a starter pack.
    pub const JOINS: u8 = b'j';
}

/// The greatest byte that ends a record key inside an index key when something follows it
/// (a notification's subject, an actor's record's target): record keys are printable ASCII.
pub(crate) const RKEY_END_MAX: u8 = 0x01;

/// Ends the record key of an actor's record entry ([`tag::ACTOR_RECORDS`]) that keeps the
/// record's target: the target's author id, collection, `/` and record key follow.
pub(crate) const TARGET_MARK: u8 = 0x00;

/// Where the record key that starts at `from` in `key` ends: at the first byte at most
/// [`RKEY_END_MAX`], or at the end.
pub(crate) fn rkey_end(key: &[u8], from: usize) -> usize {
    let rest = key.get(from..).unwrap_or_default();
    from + rest
        .iter()
        .position(|&b| b <= RKEY_END_MAX)
        .unwrap_or(rest.len())
}

/// `key` up to the end of the record key that starts at `from`, when something follows it:
/// the key the same entry had before index keys kept what follows.
pub(crate) fn without_tail_after_rkey(key: &[u8], from: usize) -> Option<Vec<u8>> {
    let end = rkey_end(key, from);
    if end == key.len() {
        return None;
    }
    key.get(..end).map(<[u8]>::to_vec)
}

/// The prefix of `actor`'s records of `collection` in time order ([`tag::ACTOR_RECORDS`]).
pub fn actor_records_key(actor: ActorId, collection: CollectionId) -> Vec<u8> {
    let mut key = Vec::with_capacity(48);
    key.push(tag::ACTOR_RECORDS);
    key.extend_from_slice(&actor_collection_prefix(actor, collection));
    key
}

/// The key of one of `actor`'s counts.
pub fn actor_count_key(actor: ActorId, kind: u8) -> [u8; 6] {
    let mut key = [tag::ACTOR_COUNT; 6];
    if let Some(id) = key.get_mut(1..5) {
        id.copy_from_slice(&actor.0.to_be_bytes());
    }
    if let Some(last) = key.last_mut() {
        *last = kind;
    }
    key
}

/// The key of `actor`'s newest applied revision.
pub fn latest_rev_key(actor: ActorId) -> [u8; 5] {
    let [a, b, c, d] = actor.0.to_be_bytes();
    [tag::LATEST_REV, a, b, c, d]
}

/// Bytes of an author feed key before its optional record key texts.
const AUTHOR_FEED_FIXED: usize = 35;

/// The author feed entry of a feed item: `A`, author, sort_at, code, repost, flags, shown post
/// (actor, code), then the text of each record key that is not a TID, zero-terminated.
///
/// Everything a timeline needs is in the key, so reading a feed is one range scan and the
/// value stays empty. Keys of one author sort by [`FeedKey`] order.
pub fn author_feed_key(item: &FeedItem, rkey: &str, post_rkey: &str) -> Vec<u8> {
    let mut key = author_feed_bound(item.key.author, Some(&item.key));
    key.push(item.flags);
    key.extend_from_slice(&item.post.actor.0.to_be_bytes());
    key.extend_from_slice(&item.post.code.to_be_bytes());
    if item.flags & flag::RKEY_TEXT != 0 {
        key.extend_from_slice(rkey.as_bytes());
        key.push(0);
    }
    if item.flags & flag::SUBJECT_RKEY_TEXT != 0 {
        key.extend_from_slice(post_rkey.as_bytes());
        key.push(0);
    }
    key
}

/// The prefix of `author`'s feed entries, or with `below`, the exclusive upper bound of the
/// entries older than that key.
pub fn author_feed_bound(author: ActorId, below: Option<&FeedKey>) -> Vec<u8> {
    let mut key = Vec::with_capacity(AUTHOR_FEED_FIXED + 16);
    key.push(tag::AUTHOR_FEED);
    key.extend_from_slice(&author.0.to_be_bytes());
    if let Some(below) = below {
        key.extend_from_slice(&time_bytes(below.sort_at_us));
        key.extend_from_slice(&below.code.to_be_bytes());
        key.push(u8::from(below.repost));
    }
    key
}

/// Decodes an author feed key, remembering the text of record keys that are not TIDs.
pub fn parse_author_feed_key(key: &[u8]) -> Option<FeedItem> {
    let fixed = key.get(..AUTHOR_FEED_FIXED)?;
    let u32_at = |at: usize| Some(u32::from_be_bytes(fixed.get(at..at + 4)?.try_into().ok()?));
    let u64_at = |at: usize| Some(u64::from_be_bytes(fixed.get(at..at + 8)?.try_into().ok()?));
    let flags = *fixed.get(22)?;
    let mut texts = key.get(AUTHOR_FEED_FIXED..)?.split(|&byte| byte == 0);
    for (bit, code_at) in [(flag::RKEY_TEXT, 13), (flag::SUBJECT_RKEY_TEXT, 27)] {
        if flags & bit != 0 {
            let text = std::str::from_utf8(texts.next()?).ok()?;
            if rkey_code(text) != (u64_at(code_at)?, true) {
                return None;
            }
        }
    }
    Some(FeedItem {
        key: FeedKey {
            sort_at_us: time_from_bytes(fixed.get(5..13)?.try_into().ok()?),
            code: u64_at(13)?,
            author: ActorId(u32_at(1)?),
            repost: *fixed.get(21)? != 0,
        },
        flags,
        post: PostRef {
            actor: ActorId(u32_at(23)?),
            code: u64_at(27)?,
        },
    })
}

/// Appends a record reference: actor, collection, rkey, and a terminating zero byte.
pub fn push_record_ref(key: &mut Vec<u8>, actor: ActorId, collection: CollectionId, rkey: &str) {
    key.extend_from_slice(&actor.0.to_be_bytes());
    key.extend_from_slice(&collection.0.to_be_bytes());
    key.extend_from_slice(rkey.as_bytes());
    key.push(0);
}

/// The key of a record in the `records` keyspace (actor, collection, rkey).
pub fn record_key(actor: ActorId, collection: CollectionId, rkey: &str) -> Vec<u8> {
    let mut key = Vec::with_capacity(9 + rkey.len());
    push_record_ref(&mut key, actor, collection, rkey);
    key
}

/// The prefix of every record of `actor` in the `records` keyspace.
pub fn actor_records_prefix(actor: ActorId) -> [u8; 4] {
    actor.0.to_be_bytes()
}

/// The prefix of every record of `actor` in `collection`.
pub fn actor_collection_prefix(actor: ActorId, collection: CollectionId) -> [u8; 8] {
    let mut prefix = [0u8; 8];
    let (left, right) = prefix.split_at_mut(4);
    left.copy_from_slice(&actor.0.to_be_bytes());
    right.copy_from_slice(&collection.0.to_be_bytes());
    prefix
}

/// Splits a `records` key into its parts; `None` if it is not one.
pub fn parse_record_key(key: &[u8]) -> Option<(ActorId, CollectionId, &str)> {
    let actor = u32::from_be_bytes(key.get(0..4)?.try_into().ok()?);
    let collection = u32::from_be_bytes(key.get(4..8)?.try_into().ok()?);
    let rkey = key.get(8..key.len().checked_sub(1)?)?;
    Some((
        ActorId(actor),
        CollectionId(collection),
        std::str::from_utf8(rkey).ok()?,
    ))
}

/// Encodes a signed time so that byte order is time order.
pub fn time_bytes(micros: i64) -> [u8; 8] {
    ((micros as u64) ^ (1 << 63)).to_be_bytes()
}

/// Decodes [`time_bytes`].
pub fn time_from_bytes(bytes: [u8; 8]) -> i64 {
    (u64::from_be_bytes(bytes) ^ (1 << 63)) as i64
}

#[cfg(test)]
mod tests {
    use super::*;

    // Checks that the time encoding preserves order across the sign boundary, by sorting
    // encoded values and comparing with the sorted integers.
    #[test]
    fn time_bytes_sort_like_integers() {
        let mut values = vec![i64::MIN, -5, -1, 0, 1, 7, 1_700_000_000_000_000, i64::MAX];
        let mut encoded: Vec<_> = values.iter().map(|&v| time_bytes(v)).collect();
        encoded.sort();
        values.sort();
        let decoded: Vec<_> = encoded.into_iter().map(time_from_bytes).collect();
        assert_eq!(decoded, values);
    }

    // Checks that author feed keys round-trip, text record keys included, and sort by FeedKey.
    #[test]
    fn author_feed_keys_round_trip_in_order() {
        let item = |sort_at_us, rkey: &str, repost: bool| {
            let (code, text) = rkey_code(rkey);
            let (post_code, post_text) = rkey_code("post-rkey");
            let mut flags = if text { flag::RKEY_TEXT } else { 0 };
            if repost {
                flags |= flag::REPOST
                    | if post_text {
                        flag::SUBJECT_RKEY_TEXT
                    } else {
                        0
                    };
            }
            let post = if repost {
                PostRef {
                    actor: ActorId(9),
                    code: post_code,
                }
            } else {
                PostRef {
                    actor: ActorId(3),
                    code,
                }
            };
            let item = FeedItem {
                key: FeedKey {
                    sort_at_us,
                    code,
                    author: ActorId(3),
                    repost,
                },
                flags,
                post,
            };
            (
                item,
                author_feed_key(&item, rkey, if repost { "post-rkey" } else { rkey }),
            )
        };
        let mut items = vec![
            item(-5, "3l3qo2vuowo2b", false),
            item(7, "self", false),
            item(7, "3l3qo2vuowo2b", true),
            item(7, "3l3qo2vuowo2b", false),
            item(1_700_000_000_000_000, "a~b", true),
        ];
        for (item, key) in &items {
            assert_eq!(parse_author_feed_key(key).as_ref(), Some(item));
            assert!(key.starts_with(&author_feed_bound(ActorId(3), None)));
        }
        items.sort_by(|a, b| a.1.cmp(&b.1));
        assert!(items.windows(2).all(|w| w[0].0.key < w[1].0.key));
    }

    // Checks that a record key round-trips through its parser.
    #[test]
    fn record_key_round_trips() {
        let key = record_key(ActorId(7), CollectionId(3), "3l3qo2vuowo2b");
        let parsed = parse_record_key(&key);
        assert_eq!(parsed, Some((ActorId(7), CollectionId(3), "3l3qo2vuowo2b")));
    }
}
