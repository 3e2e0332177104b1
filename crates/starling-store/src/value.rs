//! Byte layout of a stored record, live or deleted.
//!
//! ```text
//! live:      [1: version=1][1: state=1][8: rev][8: created_at][8: indexed_at][8: sort_at]
//!            [1: cid length][cid][record JSON]
//! tombstone: [1: version=1][1: state=2][8: rev]
//! ```
//! A tombstone keeps the revision of the delete so that an older create, replayed or arriving
//! late, does not bring the record back. Times are microseconds since the epoch; `created_at` is
//! `i64::MIN` when the record has none.

use crate::StoreError;

const VERSION: u8 = 1;
const STATE_LIVE: u8 = 1;
const STATE_TOMBSTONE: u8 = 2;
const LIVE_HEADER_BYTES: usize = 1 + 1 + 8 * 4 + 1;

/// A stored record, borrowed from its value bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LiveRecord<'a> {
    /// The revision that wrote it.
    pub rev: u64,
    /// `createdAt`, if the record has one.
    pub created_at_us: Option<i64>,
    /// When Starling indexed it: the Jetstream `time_us` of the event.
    pub indexed_at_us: i64,
    /// `min(created_at, indexed_at)`: the time feeds sort by, immune to clients that post-date.
    pub sort_at_us: i64,
    /// The record's CID.
    pub cid: &'a str,
    /// The record's JSON, as received.
    pub json: &'a str,
}

/// What the `records` keyspace holds under a key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoredValue<'a> {
    /// The record exists.
    Live(LiveRecord<'a>),
    /// The record was deleted at this revision.
    Tombstone {
        /// The revision of the delete.
        rev: u64,
    },
}

impl StoredValue<'_> {
    /// The revision that wrote this value.
    pub fn rev(&self) -> u64 {
        match self {
            StoredValue::Live(record) => record.rev,
            StoredValue::Tombstone { rev } => *rev,
        }
    }
}

/// Encodes a live record.
pub fn encode_live(record: &LiveRecord<'_>) -> Vec<u8> {
    assert!(
        record.cid.len() <= usize::from(u8::MAX),
        "cid checked at decode"
    );
    let mut out = Vec::with_capacity(LIVE_HEADER_BYTES + record.cid.len() + record.json.len());
    out.push(VERSION);
    out.push(STATE_LIVE);
    out.extend_from_slice(&record.rev.to_be_bytes());
    out.extend_from_slice(&record.created_at_us.unwrap_or(i64::MIN).to_be_bytes());
    out.extend_from_slice(&record.indexed_at_us.to_be_bytes());
    out.extend_from_slice(&record.sort_at_us.to_be_bytes());
    out.push(record.cid.len() as u8);
    out.extend_from_slice(record.cid.as_bytes());
    out.extend_from_slice(record.json.as_bytes());
    out
}

/// Encodes a tombstone.
pub fn encode_tombstone(rev: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(10);
    out.push(VERSION);
    out.push(STATE_TOMBSTONE);
    out.extend_from_slice(&rev.to_be_bytes());
    out
}

/// Whether a stored value is a live record, from its header alone; an error means the store is
/// corrupt.
pub fn is_live(bytes: &[u8]) -> Result<bool, StoreError> {
    match bytes {
        [VERSION, STATE_LIVE, ..] => Ok(true),
        [VERSION, STATE_TOMBSTONE, ..] => Ok(false),
        _ => decode(bytes).map(|value| matches!(value, StoredValue::Live(_))),
    }
}

/// Decodes a stored value; an error means the store is corrupt.
pub fn decode(bytes: &[u8]) -> Result<StoredValue<'_>, StoreError> {
    let corrupt = |what: &str| StoreError::corrupt(format!("record value: {what}"), &[]);
    let (&version, rest) = bytes.split_first().ok_or_else(|| corrupt("empty"))?;
    if version != VERSION {
        return Err(corrupt(&format!("unknown format version {version}")));
    }
    let (&state, rest) = rest.split_first().ok_or_else(|| corrupt("no state"))?;
    let (rev, rest) = take_u64(rest).ok_or_else(|| corrupt("no revision"))?;
    match state {
        STATE_TOMBSTONE => Ok(StoredValue::Tombstone { rev }),
        STATE_LIVE => {
            let (created, rest) = take_u64(rest).ok_or_else(|| corrupt("no created_at"))?;
            let (indexed, rest) = take_u64(rest).ok_or_else(|| corrupt("no indexed_at"))?;
            let (sort, rest) = take_u64(rest).ok_or_else(|| corrupt("no sort_at"))?;
            let (&cid_len, rest) = rest.split_first().ok_or_else(|| corrupt("no cid"))?;
            let (cid, json) = rest
                .split_at_checked(usize::from(cid_len))
                .ok_or_else(|| corrupt("truncated cid"))?;
            let text = |b| std::str::from_utf8(b).map_err(|_| corrupt("not UTF-8"));
            let created = created as i64;
            Ok(StoredValue::Live(LiveRecord {
                rev,
                created_at_us: (created != i64::MIN).then_some(created),
                indexed_at_us: indexed as i64,
                sort_at_us: sort as i64,
                cid: text(cid)?,
                json: text(json)?,
            }))
        }
        other => Err(corrupt(&format!("unknown state {other}"))),
    }
}

fn take_u64(bytes: &[u8]) -> Option<(u64, &[u8])> {
    let (head, rest) = bytes.split_first_chunk::<8>()?;
    Some((u64::from_be_bytes(*head), rest))
}

#[cfg(test)]
mod tests {
    use super::*;

    // Checks that live records and tombstones decode to what was encoded, and that every
    // truncation of a valid value is reported as corrupt rather than misread or panicking.
    #[test]
    fn values_round_trip_and_truncations_are_errors() {
        let record = LiveRecord {
            rev: 42,
            created_at_us: Some(-3),
            indexed_at_us: 1_725_911_162_329_308,
            sort_at_us: -3,
            cid: "bafyreiabc",
            json: r#"{"text":"hé"}"#,
        };
        let bytes = encode_live(&record);
        assert_eq!(decode(&bytes).ok(), Some(StoredValue::Live(record)));
        let tombstone = encode_tombstone(9);
        assert_eq!(
            decode(&tombstone).ok(),
            Some(StoredValue::Tombstone { rev: 9 })
        );
        for len in 0..(LIVE_HEADER_BYTES + record.cid.len()) {
            let cut = bytes.get(..len).unwrap_or_default();
            assert!(decode(cut).is_err(), "prefix of {len} bytes decoded");
        }
        // Liveness from the header agrees with the whole decode, and what has no header is an
        // error, as it is for `decode`.
        assert_eq!(is_live(&bytes).ok(), Some(true));
        assert_eq!(is_live(&tombstone).ok(), Some(false));
        for bad in [
            &[][..],
            &[VERSION],
            &[VERSION + 1, STATE_LIVE],
            &[VERSION, 9],
        ] {
            assert!(is_live(bad).is_err(), "{bad:?} has no liveness");
        }
    }
}
