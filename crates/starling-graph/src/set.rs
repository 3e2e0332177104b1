//! One set of actor ids, stored as a sorted array while small and as a roaring bitmap when big,
//! and the intersection kernels that social proof runs on.
//!
//! Why two representations: actor ids are spread over the whole id space (5.5M actors span 84
//! roaring chunks of 65,536 ids), so a typical 30-member set lands in ~30 different roaring
//! containers and costs ~45-50 bytes per member, against 4 bytes in a sorted `u32` array. Once a
//! set is big enough that its members share containers (thousands of members), roaring costs ~2
//! bytes per member and a bitmap container answers `contains` in constant time.

use std::ops::Deref;

use roaring::RoaringBitmap;
use starling_core::ActorId;

/// The default largest number of members a set keeps as a sorted array; bigger sets are roaring.
///
/// Chosen from the crossover of the two costs at the 2024 network's scale: an array costs
/// `4 * n` bytes; a roaring bitmap over 5.5M ids costs about `2 * n` bytes plus ~100 bytes per
/// container (container header, `Vec` header and allocator rounding) for up to 84 containers, so
/// the two meet near `n = 84 * 100 / 2 ≈ 4,200`. Above it roaring is smaller, and its bitmap
/// containers make `contains` O(1) for the sets that queries probe most: the followers of
/// popular accounts.
pub const ARRAY_MEMBERS_MAX: usize = 4096;

/// A set of actor ids: a sorted, duplicate-free array while small, a roaring bitmap when big.
///
/// The enum is 16 bytes (the bitmap variant hides in the null-pointer niche of the boxed slice),
/// so an actor with no edges costs 32 bytes for its two sets and no allocation.
///
/// Invariants: an `Array` is strictly ascending and has at most `array_members_max` members
/// (the limit the owning graph was built with). A `Bitmap` came from an array that outgrew the
/// limit; it turns back into an array when it shrinks below half the limit, so that a set
/// hovering around the limit does not flip between representations on every change.
#[derive(Clone, Debug)]
pub(crate) enum IdSet {
    Array(Box<[u32]>),
    Bitmap(Box<RoaringBitmap>),
}

impl Default for IdSet {
    fn default() -> Self {
        // An empty boxed slice does not allocate.
        IdSet::Array(Box::default())
    }
}

impl IdSet {
    /// Builds a set from strictly ascending ids, choosing the representation by size.
    pub(crate) fn from_sorted(ids: &[u32], array_members_max: usize) -> IdSet {
        debug_assert!(ids.windows(2).all(|w| w.first() < w.get(1)));
        if ids.len() <= array_members_max {
            IdSet::Array(Box::from(ids))
        } else {
            let bitmap = RoaringBitmap::from_sorted_iter(ids.iter().copied())
                .unwrap_or_else(|_| ids.iter().copied().collect());
            IdSet::Bitmap(Box::new(bitmap))
        }
    }

    /// The number of members.
    pub(crate) fn len(&self) -> usize {
        match self {
            IdSet::Array(ids) => ids.len(),
            IdSet::Bitmap(bitmap) => bitmap_len(bitmap),
        }
    }

    /// Whether the set has no members.
    pub(crate) fn is_empty(&self) -> bool {
        match self {
            IdSet::Array(ids) => ids.is_empty(),
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
            IdSet::Array(ids) => SetRef::Array(ids),
            IdSet::Bitmap(bitmap) => SetRef::Bitmap(bitmap),
        }
    }

    /// Adds `id`; returns whether it was absent.
    ///
    /// An array insert copies the array into a new allocation one element longer: arrays are at
    /// most `array_members_max` ids (16 KiB by default), so a write never rewrites a big set. A
    /// bitmap insert is in place.
    pub(crate) fn insert(&mut self, id: u32, array_members_max: usize) -> bool {
        match self {
            IdSet::Bitmap(bitmap) => bitmap.insert(id),
            IdSet::Array(ids) => {
                let Err(position) = ids.binary_search(&id) else {
                    return false;
                };
                if ids.len() >= array_members_max {
                    let mut bitmap = RoaringBitmap::from_sorted_iter(ids.iter().copied())
                        .unwrap_or_else(|_| ids.iter().copied().collect());
                    bitmap.insert(id);
                    *self = IdSet::Bitmap(Box::new(bitmap));
                } else {
                    let (before, after) = ids.split_at(position);
                    let mut grown = Vec::with_capacity(ids.len() + 1);
                    grown.extend_from_slice(before);
                    grown.push(id);
                    grown.extend_from_slice(after);
                    *ids = grown.into_boxed_slice();
                }
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
                    *self = IdSet::Array(ids.into_boxed_slice());
                }
                removed
            }
            IdSet::Array(ids) => {
                let Ok(position) = ids.binary_search(&id) else {
                    return false;
                };
                let (before, after) = ids.split_at(position);
                let mut shrunk = Vec::with_capacity(ids.len().saturating_sub(1));
                shrunk.extend_from_slice(before);
                shrunk.extend(after.iter().skip(1));
                *ids = shrunk.into_boxed_slice();
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
            IdSet::Array(ids) => 4 * ids.len() as u64,
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
    Array(&'a [u32]),
    Bitmap(&'a RoaringBitmap),
}

impl<'a> SetRef<'a> {
    /// The empty set, for actors the graph has never seen.
    pub(crate) const EMPTY: SetRef<'static> = SetRef::Array(&[]);

    pub(crate) fn len(self) -> usize {
        match self {
            SetRef::Array(ids) => ids.len(),
            SetRef::Bitmap(bitmap) => bitmap_len(bitmap),
        }
    }

    pub(crate) fn contains(self, id: u32) -> bool {
        match self {
            SetRef::Array(ids) => ids.binary_search(&id).is_ok(),
            SetRef::Bitmap(bitmap) => bitmap.contains(id),
        }
    }

    /// The members in ascending order.
    pub(crate) fn iter(self) -> SetIter<'a> {
        match self {
            SetRef::Array(ids) => SetIter::Array(ids.iter()),
            SetRef::Bitmap(bitmap) => SetIter::Bitmap(bitmap.iter()),
        }
    }

    /// The members greater than `after` (all of them for `None`), in ascending order.
    pub(crate) fn iter_after(self, after: Option<u32>) -> SetIter<'a> {
        let Some(after) = after else {
            return self.iter();
        };
        let Some(start) = after.checked_add(1) else {
            return SetIter::Array([].iter());
        };
        match self {
            SetRef::Array(ids) => {
                let position = ids.partition_point(|&id| id < start);
                SetIter::Array(ids.get(position..).unwrap_or_default().iter())
            }
            SetRef::Bitmap(bitmap) => {
                let mut iter = bitmap.iter();
                iter.advance_to(start);
                SetIter::Bitmap(iter)
            }
        }
    }

    /// Copies the members, in ascending order, into a `SortedIds`.
    pub(crate) fn to_sorted_ids(self) -> SortedIds {
        SortedIds::from_ascending(self.iter().map(ActorId).collect())
    }
}

/// Iterator over a `SetRef` in ascending order.
pub(crate) enum SetIter<'a> {
    Array(std::slice::Iter<'a, u32>),
    Bitmap(roaring::bitmap::Iter<'a>),
}

impl Iterator for SetIter<'_> {
    type Item = u32;

    #[inline]
    fn next(&mut self) -> Option<u32> {
        match self {
            SetIter::Array(iter) => iter.next().copied(),
            SetIter::Bitmap(iter) => iter.next(),
        }
    }
}

/// Intersects two sets without copying either: counts all common members and appends the
/// first `ids_max` of them, in ascending order, to `ids`. Returns the count.
///
/// Iterates the smaller set and probes the larger, so the cost follows the smaller side: a
/// viewer following 50 accounts against a target with a million followers is 50 probes.
pub(crate) fn intersect(a: SetRef<'_>, b: SetRef<'_>, ids_max: usize, ids: &mut Vec<u32>) -> usize {
    let (small, large) = if a.len() <= b.len() { (a, b) } else { (b, a) };
    match (small, large) {
        (SetRef::Array(small), SetRef::Array(large)) => {
            intersect_arrays(small, large, ids_max, ids)
        }
        (SetRef::Bitmap(small), SetRef::Bitmap(large)) => {
            // Roaring intersects container by container, far faster than probing member by
            // member; the ids (usually only a page of them) come from a probe loop that stops
            // early.
            let count = usize::try_from(small.intersection_len(large)).unwrap_or(usize::MAX);
            let wanted = count.min(ids_max);
            ids.extend(small.iter().filter(|&id| large.contains(id)).take(wanted));
            count
        }
        (small, large) => {
            let mut count = 0;
            for id in small.iter() {
                if large.contains(id) {
                    if count < ids_max {
                        ids.push(id);
                    }
                    count += 1;
                }
            }
            count
        }
    }
}

/// How much larger one array must be than the other before probing by binary search beats a
/// linear merge of the two.
const MERGE_RATIO_MAX: usize = 16;

/// Intersects two sorted arrays, `small` no longer than `large`; see [`intersect`].
fn intersect_arrays(small: &[u32], large: &[u32], ids_max: usize, ids: &mut Vec<u32>) -> usize {
    if large.len() / MERGE_RATIO_MAX > small.len() {
        intersect_by_search(small, large, ids_max, ids)
    } else {
        intersect_by_merge(small, large, ids_max, ids)
    }
}

/// Binary-searches each member of `small` in the part of `large` not yet passed.
fn intersect_by_search(small: &[u32], large: &[u32], ids_max: usize, ids: &mut Vec<u32>) -> usize {
    let mut count = 0;
    let mut rest = large;
    for &id in small {
        let position = rest.partition_point(|&other| other < id);
        rest = rest.get(position..).unwrap_or_default();
        if rest.first() == Some(&id) {
            if count < ids_max {
                ids.push(id);
            }
            count += 1;
        }
    }
    count
}

/// Walks both sorted arrays in step.
fn intersect_by_merge(a: &[u32], b: &[u32], ids_max: usize, ids: &mut Vec<u32>) -> usize {
    let mut count = 0;
    let mut a_iter = a.iter().copied();
    let mut b_iter = b.iter().copied();
    let (Some(mut x), Some(mut y)) = (a_iter.next(), b_iter.next()) else {
        return 0;
    };
    loop {
        match x.cmp(&y) {
            std::cmp::Ordering::Less => match a_iter.next() {
                Some(next) => x = next,
                None => break,
            },
            std::cmp::Ordering::Greater => match b_iter.next() {
                Some(next) => y = next,
                None => break,
            },
            std::cmp::Ordering::Equal => {
                if count < ids_max {
                    ids.push(x);
                }
                count += 1;
                match (a_iter.next(), b_iter.next()) {
                    (Some(next_x), Some(next_y)) => {
                        x = next_x;
                        y = next_y;
                    }
                    _ => break,
                }
            }
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
