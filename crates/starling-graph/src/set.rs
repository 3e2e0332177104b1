//! One set of actor ids, stored packed while small and as a roaring bitmap when big, and the
//! intersection kernels that social proof runs on.
//!
//! Why two representations: actor ids are spread over the whole id space (5.5M actors span 84
//! roaring chunks of 65,536 ids), so a typical 30-member set lands in ~30 different roaring
//! containers and costs ~45-50 bytes per member, against ~2.5 bytes packed as gaps
//! ([`PackedIds`]). Once a set is big enough that its members share containers (thousands of
//! members), roaring costs ~2 bytes per member and a bitmap container answers `contains` in
//! constant time.

use std::ops::Deref;

use roaring::RoaringBitmap;
use starling_core::ActorId;

use crate::packed::{PACKED_MEMBERS_MAX, PackedIds, PackedIter, PackedRef};

/// The default largest number of members a set keeps packed; bigger sets are roaring.
///
/// Roaring over 5.5M ids costs about `2 * n` bytes plus ~100 bytes per container (container
/// header, `Vec` header and allocator rounding) for up to 84 containers; packed gaps cost
/// ~`2.5 * n`. By size alone the two meet above 10,000 members, but a packed set is rewritten
/// whole on every change and searched by decoding, so sets stay packed only up to 4,096: a
/// change rewrites at most ~10 KiB, and the sets that queries probe most, the followers of
/// popular accounts, get roaring's constant-time `contains`.
pub const ARRAY_MEMBERS_MAX: usize = 4096;

/// A set of actor ids: packed gaps while small, a roaring bitmap when big.
///
/// The enum is 16 bytes (the bitmap variant hides in the null-pointer niche of the packed
/// set's boxed slice), so an actor with no edges costs 32 bytes for its two sets and no
/// allocation.
///
/// Invariants: a `Packed` set has at most `array_members_max` members (the limit the owning
/// graph was built with). A `Bitmap` came from a packed set that outgrew the limit; it turns
/// back into a packed set when it shrinks below half the limit, so that a set hovering around
/// the limit does not flip between representations on every change.
#[derive(Clone, Debug)]
pub(crate) enum IdSet {
    Packed(PackedIds),
    Bitmap(Box<RoaringBitmap>),
}

impl Default for IdSet {
    fn default() -> Self {
        // The empty packed set does not allocate.
        IdSet::Packed(PackedIds::default())
    }
}

impl IdSet {
    /// Builds a set from strictly ascending ids, choosing the representation by size.
    pub(crate) fn from_sorted(ids: &[u32], array_members_max: usize) -> IdSet {
        debug_assert!(ids.windows(2).all(|w| w.first() < w.get(1)));
        if ids.len() <= array_members_max.min(PACKED_MEMBERS_MAX) {
            IdSet::Packed(PackedIds::from_sorted(ids))
        } else {
            let bitmap = RoaringBitmap::from_sorted_iter(ids.iter().copied())
                .unwrap_or_else(|_| ids.iter().copied().collect());
            IdSet::Bitmap(Box::new(bitmap))
        }
    }

    /// The number of members.
    pub(crate) fn len(&self) -> usize {
        self.as_ref().len()
    }

    /// Whether the set has no members.
    pub(crate) fn is_empty(&self) -> bool {
        match self {
            IdSet::Packed(ids) => ids.is_empty(),
            IdSet::Bitmap(bitmap) => bitmap.is_empty(),
        }
    }

    /// Whether `id` is a member.
    #[cfg(test)]
    pub(crate) fn contains(&self, id: u32) -> bool {
        self.as_ref().contains(id)
    }

    /// A borrowed view for the read-side kernels.
    pub(crate) fn as_ref(&self) -> SetRef<'_> {
        match self {
            IdSet::Packed(ids) => SetRef::Packed(ids.as_ref()),
            IdSet::Bitmap(bitmap) => SetRef::Bitmap(bitmap),
        }
    }

    /// Adds `id`; returns whether it was absent.
    ///
    /// A packed insert unpacks the set and packs it again with `id`: packed sets are at most
    /// `array_members_max` ids (~10 KiB by default), so a write never rewrites a big set. A
    /// bitmap insert is in place.
    pub(crate) fn insert(&mut self, id: u32, array_members_max: usize) -> bool {
        match self {
            IdSet::Bitmap(bitmap) => bitmap.insert(id),
            IdSet::Packed(packed) => {
                let mut ids: Vec<u32> = packed.as_ref().iter().collect();
                let Err(position) = ids.binary_search(&id) else {
                    return false;
                };
                ids.insert(position, id);
                *self = IdSet::from_sorted(&ids, array_members_max);
                true
            }
        }
    }

    /// Removes `id`; returns whether it was present.
    pub(crate) fn remove(&mut self, id: u32, array_members_max: usize) -> bool {
        match self {
            IdSet::Bitmap(bitmap) => {
                let removed = bitmap.remove(id);
                if removed && bitmap_len(bitmap) < array_members_max / 2 {
                    let ids: Vec<u32> = bitmap.iter().collect();
                    *self = IdSet::Packed(PackedIds::from_sorted(&ids));
                }
                removed
            }
            IdSet::Packed(packed) => {
                let mut ids: Vec<u32> = packed.as_ref().iter().collect();
                let Ok(position) = ids.binary_search(&id) else {
                    return false;
                };
                ids.remove(position);
                *packed = PackedIds::from_sorted(&ids);
                true
            }
        }
    }

    /// Whether this set is stored as a roaring bitmap.
    pub(crate) fn is_bitmap(&self) -> bool {
        matches!(self, IdSet::Bitmap(_))
    }

    /// Bytes of heap this set's members use, without allocator overhead or spare capacity.
    pub(crate) fn heap_bytes(&self) -> u64 {
        match self {
            IdSet::Packed(ids) => ids.heap_bytes(),
            // The portable size: 2 bytes per array-container member, 8 KiB per bitmap
            // container, 8 bytes of header per container. (`statistics()` counts array
            // containers at 4 bytes per member of capacity, which overstates them.)
            IdSet::Bitmap(bitmap) => bitmap.serialized_size() as u64,
        }
    }
}

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
                let mut peek = walk.clone();
                peek.next() == Some(id)
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

    use std::collections::BTreeSet;

    use proptest::prelude::*;

    use super::*;

    fn build(ids: &BTreeSet<u32>, bitmap: bool) -> IdSet {
        let sorted: Vec<u32> = ids.iter().copied().collect();
        IdSet::from_sorted(&sorted, if bitmap { 0 } else { usize::MAX })
    }

    proptest! {
        // Checks every intersection kernel (merge, binary search, array x bitmap, bitmap x
        // bitmap) and every limit against BTreeSet's intersection, by building both sides in
        // both representations from random sets whose sizes differ by up to 100x.
        #[test]
        fn intersect_agrees_with_btreeset(
            a in proptest::collection::btree_set(0u32..3000, 0..60),
            b in proptest::collection::btree_set(0u32..3000, 0..1500),
            ids_max in 0usize..80,
        ) {
            let expected: Vec<u32> = a.intersection(&b).copied().collect();
            let representations = [(false, false), (false, true), (true, false), (true, true)];
            for (a_bitmap, b_bitmap) in representations {
                let set_a = build(&a, a_bitmap);
                let set_b = build(&b, b_bitmap);
                for (x, y) in [(&set_a, &set_b), (&set_b, &set_a)] {
                    let mut ids = Vec::new();
                    let count = intersect(x.as_ref(), y.as_ref(), ids_max, &mut ids);
                    prop_assert_eq!(count, expected.len());
                    prop_assert_eq!(&ids[..], &expected[..expected.len().min(ids_max)]);
                }
            }
        }

        // Checks insert/remove/contains/iter_after of one set against a BTreeSet, with a limit
        // of 8 so the set crosses between array and bitmap (and back, below 4) many times.
        #[test]
        fn insert_remove_agree_with_btreeset(
            ops in proptest::collection::vec((any::<bool>(), 0u32..40), 0..200),
            after in proptest::option::of(0u32..45),
        ) {
            let mut set = IdSet::default();
            let mut model = BTreeSet::new();
            for (insert, id) in ops {
                let (changed, expected) = if insert {
                    (set.insert(id, 8), model.insert(id))
                } else {
                    (set.remove(id, 8), model.remove(&id))
                };
                prop_assert_eq!(changed, expected);
                prop_assert_eq!(set.len(), model.len());
                prop_assert!(!set.is_bitmap() || set.len() >= 4);
                prop_assert!(set.is_bitmap() || set.len() <= 8);
                prop_assert_eq!(set.contains(id), model.contains(&id));
                let listed: Vec<u32> = set.as_ref().iter().collect();
                prop_assert_eq!(listed, model.iter().copied().collect::<Vec<_>>());
            }
            let paged: Vec<u32> = set.as_ref().iter_after(after).collect();
            let expected: Vec<u32> = match after {
                Some(after) => model.range(after + 1..).copied().collect(),
                None => model.iter().copied().collect(),
            };
            prop_assert_eq!(paged, expected);
        }
    }

    #[test]
    fn id_set_is_two_words() {
        // Checks the memory claim in IdSet's doc: two sets per actor cost 32 bytes, which the
        // graph's per-actor overhead (and ARCHITECTURE.md's math) relies on.
        assert_eq!(std::mem::size_of::<IdSet>(), 16);
    }

    #[test]
    fn iter_after_max_id_is_empty() {
        // Checks that paging after the largest possible id returns nothing rather than
        // overflowing, for both representations.
        let ids = [1, u32::MAX];
        for limit in [0, 10] {
            let set = IdSet::from_sorted(&ids, limit);
            assert_eq!(set.as_ref().iter_after(Some(u32::MAX)).count(), 0);
            assert_eq!(
                set.as_ref().iter_after(Some(1)).collect::<Vec<_>>(),
                vec![u32::MAX]
            );
        }
    }
}
