//! Where each byte key of the store lives in CQL, and the batch log's encoding of writes.
//!
//! The Cassandra backend keeps the embedded store's byte keys (`crate::keys`), so the apply
//! logic and the key orders are the same on both backends. What CQL adds is the partition: each
//! key is split into a partition key `p` (blob), a bucket `b` (bigint) and a clustering key `k`
//! (blob), chosen per index tag so that no partition grows without bound:
//!
//! - Lists that can grow without limit around one record or actor (likes, reposts, quotes and
//!   replies of a post; followers of an actor) are bucketed by `sort_at` in
//!   [`SUBJECT_BUCKET_BITS`] buckets (2^32 µs, ~72 minutes): a viral post's likes or a
//!   celebrity's new followers spread over one partition per ~72 minutes, a few MB at the
//!   heaviest rates the network has seen. An actor's own lists (author feed, follows) grow at
//!   the rate one account writes, and use [`FEED_BUCKET_BITS`] buckets (2^36 µs, ~19 hours).
//!   Each list also has a bucket directory (the `buckets` table, one row per non-empty bucket,
//!   newest first), so a newest-first scan skips empty buckets.
//! - Point lookups (follow edges, blocks, a viewer's like of a post, list items of one subject)
//!   are partitioned by everything but the record key: a few rows each.
//! - Records are partitioned by actor and one of [`RECORD_SHARDS`] shards (a hash of the
//!   collection and record key), so that an account's records can be listed (account deletion)
//!   in 64 partition scans, and an account with 1M records has ~16k rows a partition.

use crate::keys::{tag, time_from_bytes};

/// Record shards per actor.
pub const RECORD_SHARDS: u8 = 64;
/// Bucket width, as a power of two of microseconds, for lists around one subject.
pub const SUBJECT_BUCKET_BITS: u32 = 32;
/// Bucket width, as a power of two of microseconds, for an actor's own lists.
pub const FEED_BUCKET_BITS: u32 = 36;

/// The table a write goes to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum Table {
    /// `records`: key = record key, value = [`crate::value`] bytes.
    Record = 1,
    /// `index_entries` (and `buckets`): key = index key; a value means present, none means removed.
    Entry = 2,
    /// `counts`: key = count or latest-revision key, value = u64.
    Count = 3,
    /// `pairs`: key = pair-count or imported-follow key, value = u32.
    Pair = 4,
    /// `actors`: key = actor id (u32), value = the actor row (DID and state).
    Actor = 5,
    /// `actor_ids`: key = DID, value = actor id (u32).
    ActorId = 6,
    /// `handles`: key = lowercase handle, value = actor id (u32) or none.
    Handle = 7,
    /// `meta`: key = part ‖ 0 ‖ name, value = bytes.
    Meta = 8,
    /// `graph_log`: key = sequence (u64), value = a change log entry ([`encode_log_entry`]).
    GraphLog = 9,
}

impl Table {
    fn from_code(code: u8) -> Option<Table> {
        Some(match code {
            1 => Table::Record,
            2 => Table::Entry,
            3 => Table::Count,
            4 => Table::Pair,
            5 => Table::Actor,
            6 => Table::ActorId,
            7 => Table::Handle,
            8 => Table::Meta,
            9 => Table::GraphLog,
            _ => return None,
        })
    }
}

/// One write of a batch: the newest value of a key (`None` deletes it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Write {
    /// Where.
    pub table: Table,
    /// The key in the embedded store's layout.
    pub key: Vec<u8>,
    /// The value, or `None` to delete.
    pub value: Option<Vec<u8>>,
}

/// A `meta` key: `part ‖ 0 ‖ name`.
pub fn meta_key(part: &str, name: &str) -> Vec<u8> {
    let mut key = Vec::with_capacity(part.len() + 1 + name.len());
    key.extend_from_slice(part.as_bytes());
    key.push(0);
    key.extend_from_slice(name.as_bytes());
    key
}

/// Splits a `meta` key.
pub fn split_meta_key(key: &[u8]) -> Option<(&str, &str)> {
    let zero = key.iter().position(|&b| b == 0)?;
    let part = std::str::from_utf8(key.get(..zero)?).ok()?;
    let name = std::str::from_utf8(key.get(zero + 1..)?).ok()?;
    Some((part, name))
}

/// The partition (`actor ‖ shard`) and clustering key (`collection ‖ rkey ‖ 0`) of a record key.
pub fn record_location(key: &[u8]) -> Option<(Vec<u8>, Vec<u8>)> {
    let actor = key.get(..4)?;
    let rest = key.get(4..)?;
    let mut p = actor.to_vec();
    p.push(record_shard(rest));
    Some((p, rest.to_vec()))
}

/// The shard of a record: FNV-1a of `collection ‖ rkey ‖ 0`, a hash fixed forever since it
/// places stored rows.
pub fn record_shard(rest: &[u8]) -> u8 {
    let mut hash: u32 = 0x811c_9dc5;
    for &byte in rest {
        hash ^= u32::from(byte);
        hash = hash.wrapping_mul(0x0100_0193);
    }
    (hash % u32::from(RECORD_SHARDS)) as u8
}

/// Where an index key lives: partition key, bucket, clustering key, and whether the list is
/// bucketed by time (then the bucket directory lists the bucket).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EntryLocation {
    /// Partition key bytes.
    pub p: Vec<u8>,
    /// Time bucket (0 for lists that are not bucketed).
    pub b: i64,
    /// Clustering key bytes: the rest of the index key.
    pub k: Vec<u8>,
    /// Whether `b` is a time bucket recorded in the bucket directory.
    pub bucketed: bool,
}

/// The index of the zero byte ending a record reference that starts at `from`.
fn ref_end(key: &[u8], from: usize) -> Option<usize> {
    // A reference is actor (4) ‖ collection (4) ‖ rkey ‖ 0; ids may contain zero bytes, the
    // record key never does.
    let start = from + 8;
    key.get(start..)?
        .iter()
        .position(|&b| b == 0)
        .map(|at| start + at)
}

/// The bucket of a time.
pub fn bucket(time_us: i64, bits: u32) -> i64 {
    time_us >> bits
}

/// The bucket width of a time-ordered index tag, if it is one.
pub fn bucket_bits(index_tag: u8) -> Option<u32> {
    match index_tag {
        tag::LIKE_BY_SUBJECT
        | tag::REPOST_BY_SUBJECT
        | tag::QUOTE_BY_SUBJECT
        | tag::REPLY_BY_PARENT
        | tag::REPLY_BY_ROOT
        | tag::FOLLOW_BY_SUBJECT
        | tag::NOTIFICATION
        | tag::LISTITEM_BY_TIME
        | tag::JOIN_BY_STARTERPACK => Some(SUBJECT_BUCKET_BITS),
        tag::AUTHOR_FEED | tag::FOLLOW_BY_ACTOR | tag::ACTOR_RECORDS => Some(FEED_BUCKET_BITS),
        _ => None,
    }
}

/// The length of the partition prefix of an index key (or of a list prefix) with this tag.
pub fn partition_len(key: &[u8]) -> Option<usize> {
    let &index_tag = key.first()?;
    Some(match index_tag {
        tag::LIKE_BY_SUBJECT
        | tag::REPOST_BY_SUBJECT
        | tag::QUOTE_BY_SUBJECT
        | tag::REPLY_BY_PARENT
        | tag::REPLY_BY_ROOT
        | tag::LISTITEM_BY_TIME
        | tag::JOIN_BY_STARTERPACK => ref_end(key, 1)? + 1,
        tag::ACTOR_RECORDS => 9,
        tag::AUTHOR_FEED
        | tag::FOLLOW_BY_ACTOR
        | tag::FOLLOW_BY_SUBJECT
        | tag::NOTIFICATION
        | tag::VERIFICATION_BY_SUBJECT => 5,
        tag::FOLLOW_EDGE | tag::BLOCK_BY_ACTOR | tag::BLOCK_BY_SUBJECT => 9,
        tag::LIKE_BY_ACTOR | tag::REPOST_BY_ACTOR | tag::LISTBLOCK_BY_ACTOR => ref_end(key, 5)? + 1,
        tag::LISTITEM_BY_LIST => ref_end(key, 1)? + 5,
        _ => return None,
    })
}

/// Where an index entry lives; `None` for a key that is not an entry (a bug).
pub fn entry_location(key: &[u8]) -> Option<EntryLocation> {
    let &index_tag = key.first()?;
    let split = partition_len(key)?;
    let p = key.get(..split)?.to_vec();
    let k = key.get(split..)?.to_vec();
    let (b, bucketed) = match bucket_bits(index_tag) {
        Some(bits) => {
            let time: [u8; 8] = k.get(..8)?.try_into().ok()?;
            (bucket(time_from_bytes(time), bits), true)
        }
        None => (0, false),
    };
    Some(EntryLocation { p, b, k, bucketed })
}

/// Encodes a change log entry: the graph changes (as the embedded graph log encodes them),
/// the batch's cursor (0 for none), then each feed change as a byte (1 added, 0 removed), a
/// length and the item's author feed key.
pub fn encode_log_entry(graph: &[u8], cursor: u64, feed: &[(bool, Vec<u8>)]) -> Vec<u8> {
    let mut out = Vec::with_capacity(12 + graph.len() + feed.len() * 40);
    out.extend_from_slice(&(graph.len() as u32).to_be_bytes());
    out.extend_from_slice(graph);
    out.extend_from_slice(&cursor.to_be_bytes());
    for (added, key) in feed {
        out.push(u8::from(*added));
        out.extend_from_slice(&(key.len() as u32).to_be_bytes());
        out.extend_from_slice(key);
    }
    out
}

/// A decoded change log entry: graph bytes, cursor, feed changes (added, author feed key).
pub type LogEntry<'a> = (&'a [u8], u64, Vec<(bool, &'a [u8])>);

/// Decodes [`encode_log_entry`]; `None` if the bytes are damaged.
pub fn decode_log_entry(bytes: &[u8]) -> Option<LogEntry<'_>> {
    let (len, rest) = bytes.split_first_chunk::<4>()?;
    let (graph, rest) = rest.split_at_checked(u32::from_be_bytes(*len) as usize)?;
    let (cursor, mut rest) = rest.split_first_chunk::<8>()?;
    let mut feed = Vec::new();
    while let Some((&added, tail)) = rest.split_first() {
        let (len, tail) = tail.split_first_chunk::<4>()?;
        let (key, tail) = tail.split_at_checked(u32::from_be_bytes(*len) as usize)?;
        feed.push((added != 0, key));
        rest = tail;
    }
    Some((graph, u64::from_be_bytes(*cursor), feed))
}

/// Encodes writes for the batch log: per write the table, the key and the value, each length
/// prefixed.
pub fn encode_writes(writes: &[Write], out: &mut Vec<u8>) {
    for write in writes {
        out.push(write.table as u8);
        out.extend_from_slice(&(write.key.len() as u32).to_be_bytes());
        out.extend_from_slice(&write.key);
        match &write.value {
            Some(value) => {
                out.push(1);
                out.extend_from_slice(&(value.len() as u32).to_be_bytes());
                out.extend_from_slice(value);
            }
            None => out.push(0),
        }
    }
}

/// Decodes [`encode_writes`]; `None` if the bytes are damaged.
pub fn decode_writes(mut bytes: &[u8]) -> Option<Vec<Write>> {
    fn take<'a>(bytes: &mut &'a [u8], n: usize) -> Option<&'a [u8]> {
        let (head, tail) = bytes.split_at_checked(n)?;
        *bytes = tail;
        Some(head)
    }
    fn len(bytes: &mut &[u8]) -> Option<usize> {
        let raw: [u8; 4] = take(bytes, 4)?.try_into().ok()?;
        Some(u32::from_be_bytes(raw) as usize)
    }
    let mut writes = Vec::new();
    while !bytes.is_empty() {
        let table = Table::from_code(*take(&mut bytes, 1)?.first()?)?;
        let n = len(&mut bytes)?;
        let key = take(&mut bytes, n)?.to_vec();
        let value = match *take(&mut bytes, 1)?.first()? {
            0 => None,
            _ => {
                let n = len(&mut bytes)?;
                Some(take(&mut bytes, n)?.to_vec())
            }
        };
        writes.push(Write { table, key, value });
    }
    Some(writes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys::{CollectionId, push_record_ref, time_bytes};
    use starling_core::ActorId;

    // Checks that writes survive the batch log encoding, deletes and empty values included.
    #[test]
    fn writes_round_trip() {
        let writes = vec![
            Write {
                table: Table::Entry,
                key: vec![b'L', 0, 1],
                value: Some(Vec::new()),
            },
            Write {
                table: Table::Count,
                key: vec![b'C'],
                value: None,
            },
            Write {
                table: Table::Meta,
                key: meta_key("progress", "file"),
                value: Some(vec![7; 300]),
            },
        ];
        let mut bytes = Vec::new();
        encode_writes(&writes, &mut bytes);
        assert_eq!(decode_writes(&bytes), Some(writes));
        assert_eq!(decode_writes(&bytes[..bytes.len() - 1]), None);
    }

    // Checks that a change log entry round-trips, feed keys and cursor included.
    #[test]
    fn log_entries_round_trip() {
        let feed = vec![(true, vec![b'A', 1, 2]), (false, Vec::new())];
        let bytes = encode_log_entry(&[b'F', 0, 0, 0, 1, 0, 0, 0, 2], 77, &feed);
        let (graph, cursor, decoded) = decode_log_entry(&bytes).unwrap();
        assert_eq!(graph, &[b'F', 0, 0, 0, 1, 0, 0, 0, 2]);
        assert_eq!(cursor, 77);
        let decoded: Vec<_> = decoded.into_iter().map(|(a, k)| (a, k.to_vec())).collect();
        assert_eq!(decoded, feed);
        assert_eq!(decode_log_entry(&bytes[..bytes.len() - 1]), None);
    }

    // Checks that a like's entry is partitioned by its subject and bucketed by its time, with
    // zero bytes in the ids (which must not end the reference early).
    #[test]
    fn like_entries_split_after_the_subject() {
        let mut key = vec![tag::LIKE_BY_SUBJECT];
        push_record_ref(&mut key, ActorId(0), CollectionId(0), "3kabc");
        let subject_len = key.len();
        let time = 5_i64 << SUBJECT_BUCKET_BITS;
        key.extend_from_slice(&time_bytes(time + 9));
        key.extend_from_slice(&0u32.to_be_bytes());
        key.extend_from_slice(b"3kdef");
        let location = entry_location(&key).unwrap();
        assert_eq!(location.p, key[..subject_len].to_vec());
        assert_eq!(location.b, 5);
        assert!(location.bucketed);
        assert_eq!([location.p, location.k].concat(), key);
    }
}
