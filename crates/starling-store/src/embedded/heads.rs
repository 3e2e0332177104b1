//! The newest entries of recently read lists, in memory: notifications, follows and
//! followers, verifications, a list's items, and an actor's records of one collection (likes,
//! reposts...).
//!
//! A page of notifications, an unread count and a page of such a list are each a reverse scan
//! of the entries under one prefix, newest first, and nearly all of them end within the newest
//! hundred or two. On a store of millions of entries most of such a scan's time is the engine's
//! range setup and block decoding, so the first read of a list keeps its newest
//! [`HEAD_ENTRIES`] entries ([`Head`]) and later reads walk those, going on to the engine below
//! them only when they must.
//!
//! A head is forgotten when a batch writes or removes any entry under its prefix: the batch's
//! write forgets them once the engine holds it, and a head read before that write is never
//! kept (the [`ValueCache`] protocol). Whatever a read decides from an entry (whether a
//! notification's record and subject are live, an account's DID) it decides at each read, as
//! without the cache, so only the entries themselves are kept.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::EmbeddedStore;
use crate::StoreError;
use crate::keys::tag;
use crate::value_cache::{KEY_BYTES_MAX, ValueCache};

/// Entries a head keeps by default: two pages of the largest size a client asks for, which
/// also covers most unread counts.
pub(super) const HEAD_ENTRIES: usize = 200;

/// Heads kept: about 45 bytes an entry, so at most ~74 MB when every head is full
/// (ARCHITECTURE.md's resource model); most lists have far fewer entries.
const HEADS: usize = 8_192;

/// The cache of heads, by prefix.
pub(super) type Heads = ValueCache<Arc<Head>>;

/// A list's newest entries (each key after the list's prefix), newest first.
pub(super) struct Head {
    /// The entries, one after the other.
    bytes: Box<[u8]>,
    /// Where each entry ends in `bytes`.
    ends: Box<[u32]>,
    /// Whether these are all of the list's entries.
    complete: bool,
}

impl Head {
    fn entries(&self) -> impl Iterator<Item = &[u8]> {
        let starts = std::iter::once(0).chain(self.ends.iter().copied());
        starts.zip(self.ends.iter().copied()).map(|(start, end)| {
            let entry = self.bytes.get(start as usize..end as usize);
            entry.expect("a head's ends lie within its bytes, in order")
        })
    }

    /// The oldest entry kept.
    fn floor(&self) -> Option<&[u8]> {
        self.entries().last()
    }
}

/// The prefix of the list whose head holds the index entry `key`, for the lists kept in
/// heads: a tag and an actor; for an actor's records the collection too; for a list's items
/// the list's record reference, ended by a zero byte (record keys are printable ASCII), if
/// the cache can keep a key that long (a record key of free text may not be).
fn head_prefix(key: &[u8]) -> Option<&[u8]> {
    let len = match *key.first()? {
        tag::NOTIFICATION
        | tag::FOLLOW_BY_ACTOR
        | tag::FOLLOW_BY_SUBJECT
        | tag::VERIFICATION_BY_SUBJECT => 5,
        tag::ACTOR_RECORDS => 9,
        tag::LISTITEM_BY_TIME => 10 + key.get(9..)?.iter().position(|&byte| byte == 0)?,
        _ => return None,
    };
    if len > KEY_BYTES_MAX {
        return None;
    }
    key.get(..len)
}

/// The heads a batch's index entries change: their lists' prefixes, once each.
pub(super) fn touched<'a>(entries: impl Iterator<Item = &'a [u8]>) -> Vec<Vec<u8>> {
    let mut prefixes: Vec<&[u8]> = entries.filter_map(head_prefix).collect();
    prefixes.sort_unstable();
    prefixes.dedup();
    prefixes.into_iter().map(<[u8]>::to_vec).collect()
}

/// The cache of heads, empty.
pub(super) fn new_cache() -> Arc<Heads> {
    Arc::new(ValueCache::new(HEADS))
}

impl EmbeddedStore {
    /// Visits the entries under `prefix` below `below` (each key after the prefix), or all of
    /// them, newest first, until `visit` returns `false`: through the list's head when the list
    /// is one kept in heads, going on to the engine below the head when it is not the whole
    /// list.
    pub(super) fn newest_first(
        &self,
        prefix: &[u8],
        below: Option<&[u8]>,
        visit: &mut dyn FnMut(&[u8]) -> Result<bool, StoreError>,
    ) -> Result<(), StoreError> {
        let entries_max = self.head_entries.load(Ordering::Relaxed);
        let head = match self.heads.get(prefix) {
            Some(head) => head,
            // Only a first page or count fills a head: a page with a cursor is past it.
            None if below.is_none() && entries_max > 0 && head_prefix(prefix) == Some(prefix) => {
                self.fill_head(prefix, entries_max)?
            }
            None => return self.scan_newest_first(prefix, below, visit),
        };
        for entry in head.entries() {
            if below.is_some_and(|below| entry >= below) {
                continue;
            }
            if !visit(entry)? {
                return Ok(());
            }
        }
        let Some(floor) = head.floor().filter(|_| !head.complete) else {
            return Ok(());
        };
        let from = below.map_or(floor, |below| below.min(floor));
        self.scan_newest_first(prefix, Some(from), visit)
    }

    /// Reads the newest entries under `prefix` from the engine and keeps them, unless a
    /// batch's write ran meanwhile.
    fn fill_head(&self, prefix: &[u8], entries_max: usize) -> Result<Arc<Head>, StoreError> {
        let ticket = self.heads.ticket();
        let (mut bytes, mut ends) = (Vec::new(), Vec::new());
        self.scan_newest_first(prefix, None, &mut |entry| {
            bytes.extend_from_slice(entry);
            ends.push(u32::try_from(bytes.len()).expect("a head's entries fit in 4 GB"));
            Ok(ends.len() < entries_max)
        })?;
        let head = Arc::new(Head {
            bytes: bytes.into(),
            complete: ends.len() < entries_max,
            ends: ends.into(),
        });
        self.heads.fill(prefix, head.clone(), ticket);
        Ok(head)
    }

    /// [`EmbeddedStore::newest_first`] from the engine alone.
    fn scan_newest_first(
        &self,
        prefix: &[u8],
        below: Option<&[u8]>,
        visit: &mut dyn FnMut(&[u8]) -> Result<bool, StoreError>,
    ) -> Result<(), StoreError> {
        let range = match below {
            Some(below) => self.index.range(prefix.to_vec()..[prefix, below].concat()),
            None => self.index.prefix(prefix),
        };
        for guard in range.rev() {
            let key = guard.key()?;
            if !visit(key.get(prefix.len()..).unwrap_or_default())? {
                break;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::notify;
    use starling_core::ActorId;

    #[test]
    fn a_batch_names_each_list_once_and_no_other_entry() {
        let a = notify::prefix(ActorId(7));
        let b = [tag::FOLLOW_BY_SUBJECT, 0, 0, 1, 44];
        let likes = [tag::ACTOR_RECORDS, 0, 0, 0, 7, 0, 0, 0, 3];
        let items = [
            &[tag::LISTITEM_BY_TIME, 0, 0, 0, 7, 0, 0, 0, 4][..],
            b"3abc\0",
        ]
        .concat();
        let long_items = [&items[..9], b"a-record-key-of-free-text-here\0"].concat();
        let entry = |prefix: &[u8], tail: &[u8]| [prefix, tail].concat();
        let keys = [
            entry(&long_items, &[0, 0, 0, 0, 0, 0, 1, 2, 0, 0, 0, 9, b'r']),
            entry(&items, &[0, 0, 0, 0, 0, 0, 1, 2, 0, 0, 0, 9, b'r']),
            entry(&b, b"x"),
            entry(&a, b"y"),
            entry(&likes, b"z"),
            vec![tag::AUTHOR_FEED, 0, 0, 0, 7, 1],
            entry(&b, b"z"),
            vec![tag::NOTIFICATION, 1],
        ];
        assert_eq!(
            touched(keys.iter().map(Vec::as_slice)),
            vec![likes.to_vec(), items, a.to_vec(), b.to_vec()]
        );
    }

    #[test]
    fn a_head_walks_its_entries_newest_first() {
        let head = Head {
            bytes: b"cccbba".as_slice().into(),
            ends: [3, 5, 6].into(),
            complete: false,
        };
        let entries: Vec<&[u8]> = head.entries().collect();
        assert_eq!(entries, [b"ccc".as_slice(), b"bb", b"a"]);
        assert_eq!(head.floor(), Some(b"a".as_slice()));
    }
}
