//! What the store holds, by kind, for capacity planning (`starling stats --usage`): records by
//! collection and index entries by tag, each with its count and its bytes of keys and values
//! as stored before compression; and, where the backend knows it, the bytes on disk.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::catalog::Collections;
use crate::keys::{self, tag};

/// Entries of one kind and their bytes (keys and values, before compression).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct KindUsage {
    /// Entries (records, index entries, counts, rows).
    pub entries: u64,
    /// Bytes of their keys and values.
    pub bytes: u64,
}

/// The store's contents by kind; see the module documentation.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Usage {
    /// By kind: `record <collection>`, `index <tag>: <what>`, or a table of its own.
    pub kinds: BTreeMap<String, KindUsage>,
    /// Bytes on disk, compressed, journal included; `None` for a store cluster, whose own
    /// tools say it (`nodetool tablestats`).
    pub disk_bytes: Option<u64>,
}

impl Usage {
    /// Counts one entry of `kind`.
    pub(crate) fn add(&mut self, kind: &str, key: &[u8], value: &[u8]) {
        let usage = self.kinds.entry(kind.to_owned()).or_default();
        usage.entries += 1;
        usage.bytes += (key.len() + value.len()) as u64;
    }

    /// Counts one stored record (live or a tombstone) under its collection.
    pub(crate) fn add_record(&mut self, collections: &Collections, key: &[u8], value: &[u8]) {
        let name = keys::parse_record_key(key)
            .and_then(|(_, collection, _)| collections.name(collection))
            .unwrap_or("(unknown collection)");
        self.add(&format!("record {name}"), key, value);
    }

    /// Counts one index entry (or count) under its tag.
    pub(crate) fn add_entry(&mut self, key: &[u8], value: &[u8]) {
        let kind = match key.first() {
            Some(&t) => format!("index {}: {}", char::from(t), tag_name(t)),
            None => "index (empty key)".to_owned(),
        };
        self.add(&kind, key, value);
    }
}

/// What an index tag holds, in a few words.
fn tag_name(t: u8) -> &'static str {
    match t {
        tag::LIKE_BY_SUBJECT => "likes by subject",
        tag::REPOST_BY_SUBJECT => "reposts by subject",
        tag::QUOTE_BY_SUBJECT => "quotes by subject",
        tag::REPLY_BY_PARENT => "replies by parent",
        tag::REPLY_BY_ROOT => "replies by root",
        tag::FOLLOW_BY_ACTOR => "follows by actor",
        tag::FOLLOW_BY_SUBJECT => "follows by subject",
        tag::FOLLOW_EDGE => "follow edges",
        tag::FOLLOW_PAIR => "follow pair counts",
        tag::IMPORTED_FOLLOW => "imported follows",
        tag::BLOCK_PAIR => "block pair counts",
        tag::BLOCK_BY_ACTOR => "blocks by actor",
        tag::BLOCK_BY_SUBJECT => "blocks by subject",
        tag::LISTITEM_BY_LIST => "list items by list",
        tag::AUTHOR_FEED => "author feeds",
        tag::LIKE_BY_ACTOR => "likes by actor and subject",
        tag::REPOST_BY_ACTOR => "reposts by actor and subject",
        tag::LISTBLOCK_BY_ACTOR => "list blocks by actor",
        tag::RECORD_COUNT => "counts per record",
        tag::ACTOR_COUNT => "counts per actor",
        tag::LATEST_REV => "latest revisions",
        tag::NOTIFICATION => "notifications",
        tag::REPLY_ANCESTOR => "ancestors a reply notified",
        tag::SUBSCRIBER_NOTIFIED => "subscribers a post notified",
        tag::ACTOR_RECORDS => "actor records by time",
        tag::LISTITEM_BY_TIME => "list items by time",
        tag::JOIN_BY_STARTERPACK => "joins by starter pack",
        tag::VERIFICATION_BY_SUBJECT => "verifications by subject",
        _ => "other",
    }
}
