//! Feed items: the compact references to posts and reposts that author feeds and home
//! timelines are made of.
//!
//! A feed item is 40 bytes and `Copy`, so that a timeline of hundreds of items is one small
//! allocation. A record key is held as a 64-bit code: the value of a TID, which is what every
//! Bluesky client uses, or a hash of any other record key, whose text is kept in a process-wide
//! table ([`rkey_text`]) so the URI can be rebuilt.

use std::collections::HashMap;
use std::fmt;
use std::sync::{LazyLock, RwLock};

use crate::ActorId;
use crate::syntax::parse_tid;

/// Where an item sorts in a feed: newest first means descending order of this key.
///
/// `sort_at = min(createdAt, indexedAt)` comes first; the record key code, the author and the
/// kind break ties, so that two items never compare equal unless they are the same record.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FeedKey {
    /// `min(createdAt, indexedAt)` in microseconds.
    pub sort_at_us: i64,
    /// The record key's code (see [`rkey_code`]).
    pub code: u64,
    /// Who posted or reposted.
    pub author: ActorId,
    /// Whether the item is a repost record.
    pub repost: bool,
}

impl FeedKey {
    /// The smallest key of a given instant, for bounds.
    pub fn at(sort_at_us: i64) -> FeedKey {
        FeedKey {
            sort_at_us,
            code: 0,
            author: ActorId(0),
            repost: false,
        }
    }

    /// Encodes the key as an opaque cursor: four dot-separated fields, never `::`.
    pub fn to_cursor(&self) -> String {
        format!(
            "{}.{:x}.{}.{}",
            self.sort_at_us,
            self.code,
            self.author.0,
            if self.repost { 'r' } else { 'p' }
        )
    }

    /// Decodes [`FeedKey::to_cursor`]; `None` if the text is not such a cursor.
    pub fn from_cursor(text: &str) -> Option<FeedKey> {
        let mut parts = text.split('.');
        let sort_at_us = parts.next()?.parse().ok()?;
        let code = u64::from_str_radix(parts.next()?, 16).ok()?;
        let author = ActorId(parts.next()?.parse().ok()?);
        let repost = match parts.next()? {
            "r" => true,
            "p" => false,
            _ => return None,
        };
        let key = FeedKey {
            sort_at_us,
            code,
            author,
            repost,
        };
        // Only the canonical spelling decodes, so one key has one cursor.
        (parts.next().is_none() && key.to_cursor() == text).then_some(key)
    }
}

/// Flags of a feed item, as bits of [`FeedItem::flags`].
pub mod flag {
    /// The item is a repost record.
    pub const REPOST: u8 = 1;
    /// The post is a reply.
    pub const REPLY: u8 = 1 << 1;
    /// The post replies within a thread whose root is by the same author.
    pub const SELF_THREAD: u8 = 1 << 2;
    /// The post quotes a record.
    pub const QUOTE: u8 = 1 << 3;
    /// The post embeds images.
    pub const IMAGES: u8 = 1 << 4;
    /// The post embeds a video.
    pub const VIDEO: u8 = 1 << 5;
    /// The item's own record key is not a TID; its text is in the record key table.
    pub const RKEY_TEXT: u8 = 1 << 6;
    /// The reposted post's record key is not a TID.
    pub const SUBJECT_RKEY_TEXT: u8 = 1 << 7;
}

/// A post, by author and record key code.
///
/// Packed to 4-byte alignment (12 bytes), so that a [`FeedItem`] is 40 bytes rather than 48:
/// read its fields by value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(C, packed(4))]
pub struct PostRef {
    /// The post's author.
    pub actor: ActorId,
    /// The post's record key code.
    pub code: u64,
}

/// One entry of a feed: a post by its author, or a repost of someone's post.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FeedItem {
    /// Where the item sorts.
    pub key: FeedKey,
    /// [`flag`] bits.
    pub flags: u8,
    /// The reposted post, for a repost; for a post, the post itself.
    pub post: PostRef,
}

impl FeedItem {
    /// Whether the item is a repost.
    pub fn is_repost(&self) -> bool {
        self.flags & flag::REPOST != 0
    }

    /// The record key of the item's own record (the post, or the repost).
    pub fn rkey(&self) -> String {
        rkey_text(self.key.code, self.flags & flag::RKEY_TEXT != 0)
    }

    /// Appends `at://{did}/{collection}/{rkey}` of the item's own record to `out`.
    pub fn push_uri(&self, did: &str, collection: &str, out: &mut String) {
        push_uri(
            did,
            collection,
            self.key.code,
            self.flags & flag::RKEY_TEXT != 0,
            out,
        );
    }

    /// Appends the URI of the post shown (`did` is its author's) to `out`.
    pub fn push_post_uri(&self, did: &str, out: &mut String) {
        if self.is_repost() {
            let is_text = self.flags & flag::SUBJECT_RKEY_TEXT != 0;
            push_uri(did, "app.bsky.feed.post", self.post.code, is_text, out);
        } else {
            self.push_uri(did, "app.bsky.feed.post", out);
        }
    }

    /// The record key of the post shown.
    pub fn post_rkey(&self) -> String {
        if self.is_repost() {
            rkey_text(self.post.code, self.flags & flag::SUBJECT_RKEY_TEXT != 0)
        } else {
            self.rkey()
        }
    }
}

/// What a batch did to one feed item, in the order it happened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FeedChange {
    /// The item became live.
    Add(FeedItem),
    /// The item went away.
    Remove(FeedItem),
}

/// Text of record keys that are not TIDs, by code. Entries are never removed: there are few such
/// keys (clients write TIDs), and a code must resolve for as long as any timeline holds it.
static RKEY_TEXT: LazyLock<RwLock<HashMap<u64, Box<str>>>> = LazyLock::new(Default::default);

/// The code of a record key, and whether it is a text code (not a TID). Remembers the text of
/// non-TID keys so that [`rkey_text`] can give it back.
pub fn rkey_code(rkey: &str) -> (u64, bool) {
    if let Some(value) = parse_tid(rkey) {
        return (value, false);
    }
    let code = fnv1a(rkey.as_bytes());
    let known = RKEY_TEXT
        .read()
        .unwrap_or_else(|e| e.into_inner())
        .contains_key(&code);
    if !known {
        RKEY_TEXT
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(code, rkey.into());
    }
    (code, true)
}

/// The record key text of a code from [`rkey_code`].
pub fn rkey_text(code: u64, is_text: bool) -> String {
    if is_text
        && let Some(text) = RKEY_TEXT
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(&code)
    {
        return text.to_string();
    }
    Tid(code).to_string()
}

fn push_uri(did: &str, collection: &str, code: u64, is_text: bool, out: &mut String) {
    use std::fmt::Write;
    out.push_str("at://");
    out.push_str(did);
    out.push('/');
    out.push_str(collection);
    out.push('/');
    if is_text {
        out.push_str(&rkey_text(code, true));
    } else {
        // Writing to a String cannot fail.
        let _ = write!(out, "{}", Tid(code));
    }
}

/// A TID value, displayed in its 13-character base32-sortable form.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tid(pub u64);

impl fmt::Display for Tid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const ALPHABET: &[u8; 32] = b"234567abcdefghijklmnopqrstuvwxyz";
        let mut out = [0u8; 13];
        for (i, slot) in out.iter_mut().enumerate() {
            let shift = 5 * (12 - i);
            let digit = (self.0 >> shift) & 31;
            *slot = ALPHABET.get(digit as usize).copied().unwrap_or(b'2');
        }
        f.write_str(std::str::from_utf8(&out).unwrap_or_default())
    }
}

/// FNV-1a, 64 bits: stable across versions and platforms, unlike the standard hasher, because
/// codes end up in stored keys.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, &byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    // Timelines hold millions of items: the size is part of the design.
    #[test]
    fn a_feed_item_is_40_bytes() {
        assert_eq!(size_of::<FeedItem>(), 40);
    }

    proptest! {
        // Checks that every TID string survives code and back, against the parser.
        #[test]
        fn tid_codes_round_trip(value in any::<u64>()) {
            // Only the top 4 bits' first digit below 16 is valid; every u64 qualifies.
            let text = Tid(value).to_string();
            prop_assert_eq!(parse_tid(&text), Some(value));
            prop_assert_eq!(rkey_code(&text), (value, false));
            prop_assert_eq!(rkey_text(value, false), text);
        }

        // Checks that cursors round-trip and that garbage never decodes to a key.
        #[test]
        fn cursors_round_trip(sort_at in any::<i64>(), code in any::<u64>(), author in any::<u32>(), repost in any::<bool>()) {
            let key = FeedKey { sort_at_us: sort_at, code, author: ActorId(author), repost };
            let cursor = key.to_cursor();
            prop_assert!(!cursor.contains("::"));
            prop_assert_eq!(FeedKey::from_cursor(&cursor), Some(key));
        }

        #[test]
        fn bad_cursors_are_none(text in ".{0,40}") {
            if let Some(key) = FeedKey::from_cursor(&text) {
                prop_assert_eq!(key.to_cursor(), text);
            }
        }
    }

    // Checks that a non-TID record key is given back by its code.
    #[test]
    fn text_rkeys_round_trip() {
        for rkey in ["self", "a-b_c~d", "3jzfcijpj2z2aa"] {
            let (code, is_text) = rkey_code(rkey);
            assert!(is_text);
            assert_eq!(rkey_text(code, true), rkey);
        }
    }
}
