//! The newest notification entries of recently read recipients, in memory.
//!
//! A page of notifications and an unread count are both a reverse scan of the recipient's
//! entries, newest first, and nearly all of them end within the newest hundred or two. On a
//! store of millions of entries most of such a scan's time is the engine's range setup and
//! block decoding, so the first read of a recipient keeps their newest [`HEAD_ENTRIES`]
//! entries ([`NotifyHead`]) and later reads walk those, going on to the engine below them
//! only when they must.
//!
//! A head is forgotten when a batch writes or removes any entry of its recipient: the batch's
//! write forgets them once the engine holds it, and a head read before that write is never
//! kept (the [`ValueCache`] protocol). Whether a notification is still shown (its record and
//! reason subject live) is decided at each read from the entry, as without the cache, so a
//! deleted subject needs no change here.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use starling_core::ActorId;

use super::EmbeddedStore;
use crate::StoreError;
use crate::keys::tag;
use crate::notify;
use crate::value_cache::ValueCache;

/// Entries a head keeps by default: two pages of the largest size a client asks for, which also covers
/// most unread counts.
pub(super) const HEAD_ENTRIES: usize = 200;

/// Heads kept, by recipient: about 50 bytes an entry, so at most ~80 MB when every head is
/// full (ARCHITECTURE.md's resource model); most recipients have far fewer entries.
pub(super) const NOTIFY_HEADS: usize = 8_192;

/// A recipient's newest entries (each key after the recipient's prefix), newest first.
pub(super) struct NotifyHead {
    /// The entries, one after the other.
    bytes: Box<[u8]>,
    /// Where each entry ends in `bytes`.
    ends: Box<[u32]>,
    /// Whether these are all of the recipient's entries.
    complete: bool,
}

impl NotifyHead {
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

/// The heads a batch's index entries change: the prefixes of their recipients, once each.
pub(super) fn notified<'a>(entries: impl Iterator<Item = &'a [u8]>) -> Vec<[u8; 5]> {
    let mut res: Vec<[u8; 5]> = entries
        .filter(|key| key.first() == Some(&tag::NOTIFICATION))
        .filter_map(|key| key.first_chunk::<5>().copied())
        .collect();
    res.sort_unstable();
    res.dedup();
    res
}

impl EmbeddedStore {
    /// [`crate::Store::notification_entries`] through the recipient's head: its entries below
    /// `below`, then the engine's below the head when the head is not the whole list.
    pub(super) fn notification_entries_cached(
        &self,
        recipient: ActorId,
        below: Option<&[u8]>,
        visit: &mut dyn FnMut(&[u8]) -> Result<bool, StoreError>,
    ) -> Result<(), StoreError> {
        let prefix = notify::prefix(recipient);
        let entries_max = self.notify_head_entries.load(Ordering::Relaxed);
        let head = match self.notify_heads.get(&prefix) {
            Some(head) => head,
            // Only a first page or count fills a head: a page with a cursor is past it.
            None if below.is_none() && entries_max > 0 => {
                self.fill_notify_head(recipient, &prefix, entries_max)?
            }
            None => return self.scan_notifications(recipient, below, visit),
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
        self.scan_notifications(recipient, Some(from), visit)
    }

    /// Reads `recipient`'s newest entries from the engine and keeps them, unless a batch's
    /// write ran meanwhile.
    fn fill_notify_head(
        &self,
        recipient: ActorId,
        prefix: &[u8; 5],
        entries_max: usize,
    ) -> Result<Arc<NotifyHead>, StoreError> {
        let ticket = self.notify_heads.ticket();
        let (mut bytes, mut ends) = (Vec::new(), Vec::new());
        self.scan_notifications(recipient, None, &mut |entry| {
            bytes.extend_from_slice(entry);
            ends.push(u32::try_from(bytes.len()).expect("a head's entries fit in 4 GB"));
            Ok(ends.len() < entries_max)
        })?;
        let head = Arc::new(NotifyHead {
            bytes: bytes.into(),
            complete: ends.len() < entries_max,
            ends: ends.into(),
        });
        self.notify_heads.fill(prefix, head.clone(), ticket);
        Ok(head)
    }
}

/// The cache of heads, empty.
pub(super) fn new_cache() -> Arc<ValueCache<Arc<NotifyHead>>> {
    Arc::new(ValueCache::new(NOTIFY_HEADS))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_names_each_recipient_once_and_nothing_else() {
        let a = notify::prefix(ActorId(7));
        let b = notify::prefix(ActorId(300));
        let entry = |prefix: &[u8; 5], tail: &[u8]| [&prefix[..], tail].concat();
        let keys = [
            entry(&b, b"x"),
            entry(&a, b"y"),
            vec![tag::AUTHOR_FEED, 0, 0, 0, 7, 1],
            entry(&b, b"z"),
            vec![tag::NOTIFICATION, 1],
        ];
        assert_eq!(notified(keys.iter().map(Vec::as_slice)), vec![a, b]);
    }

    #[test]
    fn a_head_walks_its_entries_newest_first() {
        let head = NotifyHead {
            bytes: b"cccbba".as_slice().into(),
            ends: [3, 5, 6].into(),
            complete: false,
        };
        let entries: Vec<&[u8]> = head.entries().collect();
        assert_eq!(entries, [b"ccc".as_slice(), b"bb", b"a"]);
        assert_eq!(head.floor(), Some(b"a".as_slice()));
    }
}
