//! One set of actor ids, stored packed while small and as a roaring bitmap when big, and the
//! intersection kernels that social proof runs on.
//!
//! Why two representations: actor ids are spread over the whole id space (5.5M actors span 84
//! roaring chunks of 65,536 ids), so a typical 30-member set lands in ~30 different roaring
//! containers and costs ~45-50 bytes per member, against ~2.5 bytes packed as gaps
//! (`packed.rs`). Once a set is big enough that its members share containers (thousands of
//! members), roaring costs ~2 bytes per member and a bitmap container answers `contains` in
//! constant time.

use std::ops::Deref;

use roaring::RoaringBitmap;
use starling_core::ActorId;

use crate::packed::{PackedIter, PackedRef};

/// The default largest number of members a set keeps packed; bigger sets are roaring.
///
/// Roaring over 5.5M ids costs about `2 * n` bytes plus ~100 bytes per container (container
/// header, `Vec` header and allocator rounding) for up to 84 containers; packed gaps cost
/// ~`2.5 * n`. By size alone the two meet above 10,000 members, but a packed set is rewritten
/// whole on every change and searched by decoding, so sets stay packed only up to 4,096: a
/// change rewrites at most ~10 KiB, and the sets that queries probe most, the followers of
/// popular accounts, get roaring's constant-time `contains`.
pub const ARRAY_MEMBERS_MAX: usize = 4096;

/// The length of a bitmap as an in-memory count; a bitmap of `u32`s always fits in `usize` on
/// the 64-bit targets Starling runs on.
fn bitmap_len(bitmap: &RoaringBitmap) -> usize {
    usize::try_from(bitmap.len()).unwrap_or(usize::MAX)
}

/// A borrowed set of ids, read under the owning shard's lock.
#[derive(Clone, Copy, Debug)]
pub(crate) enum SetRef<'a> {
    Packed(PackedRef<'a>),
    Bitmap(&'a RoaringBitmap),
}

impl<'a> SetRef<'a> {
    /// The empty set, for actors the graph has never seen.
    pub(crate) const EMPTY: SetRef<'static> = SetRef::Packed(PackedRef::EMPTY);

    pub(crate) fn len(self) -> usize {
        match self {
            SetRef::Packed(ids) => ids.len(),
            SetRef::Bitmap(bitmap) => bitmap_len(bitmap),
        }
    }

    pub(crate) fn contains(self, id: u32) -> bool {
        match self {
            SetRef::Packed(ids) => ids.contains(id),
            SetRef::Bitmap(bitmap) => bitmap.contains(id),
        }
    }

    /// The members in ascending order.
    pub(crate) fn iter(self) -> SetIter<'a> {
        match self {
            SetRef::Packed(ids) => SetIter::Packed(ids.iter()),
            SetRef::Bitmap(bitmap) => SetIter::Bitmap(bitmap.iter()),
        }
    }

    /// The members greater than `after` (all of them for `None`), in ascending order.
    pub(crate) fn iter_after(self, after: Option<u32>) -> SetIter<'a> {
        let mut iter = self.iter();
        match after.map(|after| after.checked_add(1)) {
            None => {}
            Some(Some(start)) => iter.advance_to(start),
            Some(None) => iter = SetRef::EMPTY.iter(),
        }
        iter
    }

    /// Copies the members, in ascending order, into a `SortedIds`.
    pub(crate) fn to_sorted_ids(self) -> SortedIds {
        SortedIds::from_ascending(self.iter().map(ActorId).collect())
    }
}

/// Iterator over a `SetRef` in ascending order.
///
/// The packed walk carries a decoded chunk, ~300 bytes; an iterator lives on the stack for one
/// query, and boxing it would cost an allocation per walk.
#[allow(clippy::large_enum_variant)]
pub(crate) enum SetIter<'a> {
    Packed(PackedIter<'a>),
    Bitmap(roaring::bitmap::Iter<'a>),
}

impl SetIter<'_> {
    /// Moves forward so that `next` returns the first remaining member not below `target`.
    fn advance_to(&mut self, target: u32) {
        match self {
            SetIter::Packed(iter) => iter.advance_to(target),
            SetIter::Bitmap(iter) => iter.advance_to(target),
        }
    }
}

impl Iterator for SetIter<'_> {
    type Item = u32;

    #[inline]
    fn next(&mut self) -> Option<u32> {
        match self {
            SetIter::Packed(iter) => iter.next(),
            SetIter::Bitmap(iter) => iter.next(),
        }
    }
}

/// Intersects two sets without copying either: counts all common members and appends the
/// first `ids_max` of them, in ascending order, to `ids`. Returns the count.
///
/// Walks the smaller set and seeks each member in the larger, so the cost follows the smaller
/// side: a viewer following 50 accounts against a target with a million followers is 50
/// probes.
pub(crate) fn intersect(a: SetRef<'_>, b: SetRef<'_>, ids_max: usize, ids: &mut Vec<u32>) -> usize {
    let (small, large) = if a.len() <= b.len() { (a, b) } else { (b, a) };
    match (small, large) {
        (SetRef::Bitmap(small), SetRef::Bitmap(large)) => {
            // Roaring intersects container by container, far faster than probing member by
            // member; the ids (usually only a page of them) come from a probe loop that stops
            // early.
            let count = usize::try_from(small.intersection_len(large)).unwrap_or(usize::MAX);
            let wanted = count.min(ids_max);
            ids.extend(small.iter().filter(|&id| large.contains(id)).take(wanted));
            count
        }
        (small, SetRef::Bitmap(large)) => {
            probe(small.iter(), |id| large.contains(id), ids_max, ids)
        }
        (small, SetRef::Packed(large)) => {
            // A walk of the larger set that only moves forward: it skips whole chunks between
            // members of a much smaller set, and decodes in step with one of like size.
            let mut walk = large.iter();
            let seek = |id| {
                walk.advance_to(id);
                walk.peek() == Some(id)
            };
            probe(small.iter(), seek, ids_max, ids)
        }
    }
}

/// Counts the members of `small` that `holds` accepts and appends the first `ids_max` of them
/// to `ids`.
fn probe(
    small: SetIter<'_>,
    mut holds: impl FnMut(u32) -> bool,
    ids_max: usize,
    ids: &mut Vec<u32>,
) -> usize {
    let mut count = 0;
    for id in small {
        if holds(id) {
            if count < ids_max {
                ids.push(id);
            }
            count += 1;
        }
    }
    count
}

/// Actor ids in ascending order, without duplicates.
///
/// Every list the graph returns is one of these, so callers can binary-search it, page it by
/// the last id seen, or merge it without sorting.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct SortedIds(Vec<ActorId>);

impl SortedIds {
    /// Wraps ids the caller knows to be strictly ascending.
    pub(crate) fn from_ascending(ids: Vec<ActorId>) -> SortedIds {
        debug_assert!(ids.windows(2).all(|w| w.first() < w.get(1)));
        SortedIds(ids)
    }

    /// Sorts and deduplicates arbitrary ids.
    pub fn from_unsorted(mut ids: Vec<ActorId>) -> SortedIds {
        ids.sort_unstable();
        ids.dedup();
        SortedIds(ids)
    }

    /// The ids as a slice, ascending.
    pub fn as_slice(&self) -> &[ActorId] {
        &self.0
    }

    /// The ids as a `Vec`, ascending.
    pub fn into_vec(self) -> Vec<ActorId> {
        self.0
    }

    /// Whether `id` is present, by binary search.
    pub fn contains(&self, id: ActorId) -> bool {
        self.0.binary_search(&id).is_ok()
    }
}

impl Deref for SortedIds {
    type Target = [ActorId];

    fn deref(&self) -> &[ActorId] {
        &self.0
    }
}

impl IntoIterator for SortedIds {
    type Item = ActorId;
    type IntoIter = std::vec::IntoIter<ActorId>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.into_iter()
    }
}

impl<'a> IntoIterator for &'a SortedIds {
    type Item = &'a ActorId;
    type IntoIter = std::slice::Iter<'a, ActorId>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing)]

    use proptest::prelude::*;

    use super::*;
    use crate::arena::SetArena;

    proptest! {
        // Checks every intersection kernel (bitmap x bitmap, a walk of a packed set, probes of
        // a bitmap) and every limit against BTreeSet's intersection, by storing both sides in
        // both representations from random sets whose sizes differ by up to 100x.
        #[test]
        fn intersect_agrees_with_btreeset(
            a in proptest::collection::btree_set(0u32..3000, 0..60),
            b in proptest::collection::btree_set(0u32..3000, 0..1500),
            ids_max in 0usize..80,
        ) {
            let expected: Vec<u32> = a.intersection(&b).copied().collect();
            let (a, b): (Vec<u32>, Vec<u32>) = (a.into_iter().collect(), b.into_iter().collect());
            let mut arena = SetArena::default();
            let packed = [arena.store(&a, usize::MAX), arena.store(&b, usize::MAX)];
            let bitmaps = [arena.store(&a, 0), arena.store(&b, 0)];
            for [set_a, set_b] in [packed, bitmaps, [packed[0], bitmaps[1]], [bitmaps[0], packed[1]]] {
                for (x, y) in [(set_a, set_b), (set_b, set_a)] {
                    let mut ids = Vec::new();
                    let count = intersect(arena.get(x), arena.get(y), ids_max, &mut ids);
                    prop_assert_eq!(count, expected.len());
                    prop_assert_eq!(&ids[..], &expected[..expected.len().min(ids_max)]);
                }
            }
        }

        // Checks paging (`iter_after`) of both representations against a BTreeSet.
        #[test]
        fn iter_after_agrees_with_btreeset(
            ids in proptest::collection::btree_set(0u32..5000, 0..300),
            after in proptest::option::of(0u32..5100),
        ) {
            let sorted: Vec<u32> = ids.iter().copied().collect();
            let expected: Vec<u32> = match after {
                Some(after) => ids.range(after + 1..).copied().collect(),
                None => sorted.clone(),
            };
            let mut arena = SetArena::default();
            for limit in [0, usize::MAX] {
                let set = arena.store(&sorted, limit);
                let paged: Vec<u32> = arena.get(set).iter_after(after).collect();
                prop_assert_eq!(&paged, &expected);
            }
        }
    }

    #[test]
    fn iter_after_max_id_is_empty() {
        // Checks that paging after the largest possible id returns nothing rather than
        // overflowing, for both representations.
        let ids = [1, u32::MAX];
        let mut arena = SetArena::default();
        for limit in [0, 10] {
            let handle = arena.store(&ids, limit);
            let set = arena.get(handle);
            assert_eq!(set.iter_after(Some(u32::MAX)).count(), 0);
            assert_eq!(set.iter_after(Some(1)).collect::<Vec<_>>(), vec![u32::MAX]);
        }
    }
}
