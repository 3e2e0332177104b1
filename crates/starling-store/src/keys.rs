//! Byte layouts of keys. Every integer is big-endian so that byte order is numeric order.
//!
//! A record is named by `(actor, collection, rkey)`: 4 + 4 bytes of interned ids and the record
//! key, which never contains a zero byte (record keys are printable ASCII), so a `0` ends it and
//! keys that embed a record reference still sort by their later parts.

use starling_core::ActorId;

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

    // Checks that a record key round-trips through its parser.
    #[test]
    fn record_key_round_trips() {
        let key = record_key(ActorId(7), CollectionId(3), "3l3qo2vuowo2b");
        let parsed = parse_record_key(&key);
        assert_eq!(parsed, Some((ActorId(7), CollectionId(3), "3l3qo2vuowo2b")));
    }
}
