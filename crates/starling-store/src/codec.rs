//! Byte codecs both backends store: counters, pair counts, actor rows, graph log entries, file
//! progress, and the index keys decoded back into entries.

use starling_core::ActorId;
use starling_core::feed::{FeedChange, FeedItem};
use starling_core::jetstream::nsid;
use starling_core::syntax::RecordUri;

use crate::actors::ActorState;
use crate::keys::{self, TARGET_MARK};
use crate::{GraphChange, ListEntry, ListOf, StoreError};

pub(crate) fn u64_value(bytes: &[u8]) -> Result<u64, StoreError> {
    let array: [u8; 8] = bytes
        .try_into()
        .map_err(|_| StoreError::corrupt(format!("{}-byte counter", bytes.len()), &[]))?;
    Ok(u64::from_be_bytes(array))
}

/// `tag ++ actor ++ subject ref ++ rkey` from a subject index key (`tag ++ subject ref`).
pub(crate) fn by_actor_key(index_tag: u8, actor: ActorId, ref_key: &[u8], rkey: &str) -> Vec<u8> {
    let subject = ref_key.get(1..).unwrap_or_default();
    let mut key = Vec::with_capacity(5 + subject.len() + rkey.len());
    key.push(index_tag);
    key.extend_from_slice(&actor.0.to_be_bytes());
    key.extend_from_slice(subject);
    key.extend_from_slice(rkey.as_bytes());
    key
}

pub(crate) fn feed_change(item: FeedItem, insert: bool) -> FeedChange {
    if insert {
        FeedChange::Add(item)
    } else {
        FeedChange::Remove(item)
    }
}

pub(crate) fn parse_feed_key(key: &[u8]) -> Result<FeedItem, StoreError> {
    keys::parse_author_feed_key(key).ok_or_else(|| StoreError::corrupt("author feed key", &[]))
}

/// `tag ++ actor ++ subject`: the prefix of the edge entries of one pair.
pub(crate) fn edge_prefix(edge_tag: u8, actor: ActorId, subject: ActorId) -> [u8; 9] {
    let mut prefix = [edge_tag; 9];
    if let Some(tail) = prefix.get_mut(1..) {
        tail.copy_from_slice(&[actor.0.to_be_bytes(), subject.0.to_be_bytes()].concat());
    }
    prefix
}

/// Decodes the tail of a key of `list`'s index (sort_at (8), the other actor (4), rkey, and in
/// an actor's record entry the record's target) into its entry; `did` names actors. Both
/// backends keep list keys this way.
pub(crate) fn list_entry(
    list: &ListOf<'_>,
    tail: &[u8],
    mut did: impl FnMut(ActorId) -> Option<String>,
) -> Result<ListEntry, StoreError> {
    let corrupt = || StoreError::corrupt("list index key", &[]);
    let sort_at_us = keys::time_from_bytes(
        tail.get(..8)
            .ok_or_else(corrupt)?
            .try_into()
            .map_err(|_| corrupt())?,
    );
    let other = ActorId(u32::from_be_bytes(
        tail.get(8..12)
            .ok_or_else(corrupt)?
            .try_into()
            .map_err(|_| corrupt())?,
    ));
    let rkey_end = keys::rkey_end(tail, 12);
    let rkey = key_text(tail.get(12..rkey_end))?;
    let target = match tail.get(rkey_end..) {
        Some([TARGET_MARK, rest @ ..]) => Some(target(rest, &mut did).ok_or_else(corrupt)?),
        Some([]) => None,
        _ => return Err(corrupt()),
    };
    let (author, subject, entry_nsid) = match list {
        ListOf::Follows(actor) => (*actor, Some(other), nsid::FOLLOW),
        ListOf::Followers(actor) => (other, Some(*actor), nsid::FOLLOW),
        ListOf::Likes(_) => (other, None, nsid::LIKE),
        ListOf::Replies(_) | ListOf::Quotes(_) => (other, None, nsid::POST),
        ListOf::Reposts(_) => (other, None, nsid::REPOST),
        ListOf::ListItems { owner, .. } => (*owner, Some(other), nsid::LISTITEM),
        ListOf::Joins(_) => (other, None, nsid::PROFILE),
        ListOf::ActorRecords { collection, .. } => (other, None, *collection),
        ListOf::Verifications(actor) => (other, Some(*actor), nsid::VERIFICATION),
    };
    let did = did(author).ok_or_else(corrupt)?;
    Ok(ListEntry {
        uri: RecordUri {
            did: &did,
            collection: entry_nsid,
            rkey,
        }
        .to_uri(),
        author,
        subject,
        sort_at_us,
        target,
    })
}

/// The target an actor's record entry keeps after [`TARGET_MARK`]: its author's id,
/// collection, `/` and record key, as a URI.
fn target(bytes: &[u8], did: &mut impl FnMut(ActorId) -> Option<String>) -> Option<String> {
    let (author, path) = bytes.split_first_chunk::<4>()?;
    let author = did(ActorId(u32::from_be_bytes(*author)))?;
    let path = std::str::from_utf8(path).ok()?;
    path.contains('/')
        .then(|| ["at://", &author, "/", path].concat())
}

/// The record key at the end of an index key.
pub(crate) fn key_text(bytes: Option<&[u8]>) -> Result<&str, StoreError> {
    bytes
        .and_then(|bytes| std::str::from_utf8(bytes).ok())
        .ok_or_else(|| StoreError::corrupt("record key in an index key", &[]))
}

/// Encodes graph changes for the log: per change a kind byte, the actor and the subject.
pub(crate) fn encode_graph_changes(changes: &[GraphChange]) -> Vec<u8> {
    let mut out = Vec::with_capacity(changes.len() * 9);
    for change in changes {
        let (kind, actor, subject) = match *change {
            GraphChange::Follow(a, b) => (b'F', a, b),
            GraphChange::Unfollow(a, b) => (b'f', a, b),
            GraphChange::Block(a, b) => (b'B', a, b),
            GraphChange::Unblock(a, b) => (b'b', a, b),
        };
        out.push(kind);
        out.extend_from_slice(&actor.0.to_be_bytes());
        out.extend_from_slice(&subject.0.to_be_bytes());
    }
    out
}

pub(crate) fn decode_graph_changes(
    bytes: &[u8],
    visit: &mut dyn FnMut(GraphChange),
) -> Result<(), StoreError> {
    let corrupt = || StoreError::corrupt("graph log entry", &[]);
    for entry in bytes.chunks(9) {
        let (&kind, ids) = entry.split_first().ok_or_else(corrupt)?;
        let (actor, subject) = ids.split_first_chunk::<4>().ok_or_else(corrupt)?;
        let subject: [u8; 4] = subject.try_into().map_err(|_| corrupt())?;
        let (actor, subject) = (
            ActorId(u32::from_be_bytes(*actor)),
            ActorId(u32::from_be_bytes(subject)),
        );
        visit(match kind {
            b'F' => GraphChange::Follow(actor, subject),
            b'f' => GraphChange::Unfollow(actor, subject),
            b'B' => GraphChange::Block(actor, subject),
            b'b' => GraphChange::Unblock(actor, subject),
            _ => return Err(corrupt()),
        });
    }
    Ok(())
}

pub(crate) fn pair_count(bytes: &[u8]) -> Result<u32, StoreError> {
    let array: [u8; 4] = bytes
        .try_into()
        .map_err(|_| StoreError::corrupt(format!("{}-byte pair count", bytes.len()), &[]))?;
    Ok(u32::from_be_bytes(array))
}

pub(crate) fn encode_actor_row(did: &str, state: &ActorState<'_>) -> Vec<u8> {
    let did_len = u16::try_from(did.len()).expect("DIDs are at most 2048 bytes");
    let mut row = did_len.to_be_bytes().to_vec();
    row.extend_from_slice(did.as_bytes());
    row.extend_from_slice(&state.encode());
    row
}

pub(crate) fn decode_actor_row(row: &[u8]) -> Result<(&str, ActorState<'_>), StoreError> {
    let corrupt = || StoreError::corrupt("actor row", &[]);
    let (len, rest) = row.split_first_chunk::<2>().ok_or_else(corrupt)?;
    let (did, state) = rest
        .split_at_checked(usize::from(u16::from_be_bytes(*len)))
        .ok_or_else(corrupt)?;
    let did = std::str::from_utf8(did).map_err(|_| corrupt())?;
    Ok((did, ActorState::decode(state)?))
}

/// The stored progress of a recorded file: the offset after its last applied line and the
/// newest cursor applied (0 for none).
pub(crate) fn encode_file_progress(offset: u64, cursor: Option<starling_core::Cursor>) -> Vec<u8> {
    [
        offset.to_be_bytes(),
        cursor.unwrap_or_default().0.to_be_bytes(),
    ]
    .concat()
}

/// Reads back [`encode_file_progress`]'s value for the file `source`.
pub(crate) fn decode_file_progress(
    source: &str,
    bytes: &[u8],
) -> Result<crate::Progress, StoreError> {
    let (offset, cursor) = bytes
        .split_at_checked(8)
        .ok_or_else(|| StoreError::corrupt(format!("progress of {source}"), bytes))?;
    let cursor = u64_value(cursor)?;
    Ok(crate::Progress::File {
        source: source.to_owned(),
        offset: u64_value(offset)?,
        cursor: (cursor != 0).then_some(starling_core::Cursor(cursor)),
    })
}

/// A stored record value as the API returns it, for `at://{did}/{collection}/{rkey}`; `None`
/// for a tombstone.
pub(crate) fn stored_record(
    did: &str,
    collection: &str,
    rkey: &str,
    bytes: &[u8],
) -> Result<Option<crate::StoredRecord>, StoreError> {
    Ok(match crate::value::decode(bytes)? {
        crate::value::StoredValue::Tombstone { .. } => None,
        crate::value::StoredValue::Live(record) => Some(crate::StoredRecord {
            uri: RecordUri {
                did,
                collection,
                rkey,
            }
            .to_uri(),
            cid: record.cid.to_owned(),
            json: record.json.to_owned(),
            created_at_us: record.created_at_us,
            indexed_at_us: record.indexed_at_us,
            sort_at_us: record.sort_at_us,
        }),
    })
}

/// Key bytes as text: printable ASCII as is, other bytes as `\xNN`, cut at 128 bytes.
pub(crate) struct HexKey<'a>(pub(crate) &'a [u8]);

impl std::fmt::Display for HexKey<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        const SHOWN_MAX: usize = 128;
        for &byte in self.0.iter().take(SHOWN_MAX) {
            if byte.is_ascii_graphic() && byte != b'\\' {
                write!(f, "{}", byte as char)?;
            } else {
                write!(f, "\\x{byte:02x}")?;
            }
        }
        if self.0.len() > SHOWN_MAX {
            write!(f, "... ({} bytes)", self.0.len())?;
        }
        Ok(())
    }
}
