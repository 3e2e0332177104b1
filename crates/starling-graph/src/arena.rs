//! The follow sets of one shard's actors, packed end to end in one buffer.
//!
//! Why: at the 2024 network's scale the graph holds 10.5M follow sets. Each in an allocation of
//! its own, behind a 16-byte handle in its actor's slot, they cost ~180 MiB of allocator
//! rounding and 168 MiB of slots, and loading them was 10.5M allocations. Here a shard's packed
//! sets sit back to back in one `Vec<u32>` and a slot holds two 4-byte handles.
//!
//! A changed set is packed again and written over its old copy when it fits there (a removal),
//! at the buffer's end when its old copy is the last one (a set growing again and again), and
//! else appended, its old copy counted as garbage. Once garbage passes a quarter of the buffer
//! the shard compacts it, copying the live sets into a new buffer: at the 2024 scale a shard's
//! buffer is ~7 MiB, a copy of a few milliseconds under its write lock, once per tens of
//! thousands of changes to that shard.
//!
//! Sets bigger than the graph's packing limit are roaring bitmaps, kept in a side list the
//! handle points into; there are a few thousand of them.

use roaring::RoaringBitmap;

use crate::packed::{PACKED_MEMBERS_MAX, PackedRef, pack_into};
use crate::set::SetRef;

/// Marks a handle that points into the bitmaps rather than the packed words.
const BITMAP_BIT: u32 = 1 << 31;

/// The shard compacts its buffer once garbage is more than 1 in this many words.
const GARBAGE_SHARE_MAX: usize = 4;

/// Below this many words of garbage the buffer is never compacted: a small shard would copy
/// itself after every few changes.
const GARBAGE_WORDS_MIN: usize = 1 << 14;

/// Whether a set of `len` members is packed under the limit `packed_max`.
fn fits_packed(len: usize, packed_max: usize) -> bool {
    len <= packed_max.min(PACKED_MEMBERS_MAX)
}

/// Where one set is: nowhere (the empty set), a packed set at a word offset, or a bitmap.
///
/// Encoded in a `u32`: 0 is empty, `offset + 1` below [`BITMAP_BIT`] a packed set, and
/// `BITMAP_BIT | index` a bitmap.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct SetHandle(u32);

impl SetHandle {
    fn packed(offset: usize) -> SetHandle {
        let handle = u32::try_from(offset + 1)
            .ok()
            .filter(|&handle| handle < BITMAP_BIT);
        // 2^31 words is 8 GiB of one shard's sets, 1 TiB over all shards.
        SetHandle(handle.expect("a shard's packed sets outgrew 8 GiB"))
    }

    fn bitmap(index: usize) -> SetHandle {
        let index = u32::try_from(index)
            .ok()
            .filter(|&index| index < BITMAP_BIT);
        SetHandle(BITMAP_BIT | index.expect("a shard holds more than 2^31 bitmaps"))
    }

    fn offset(self) -> Option<usize> {
        (self.0 != 0 && self.0 & BITMAP_BIT == 0).then(|| self.0 as usize - 1)
    }

    fn bitmap_index(self) -> Option<usize> {
        (self.0 & BITMAP_BIT != 0).then_some((self.0 & !BITMAP_BIT) as usize)
    }

    /// Whether this is the empty set.
    pub(crate) fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// Whether the set is a roaring bitmap.
    pub(crate) fn is_bitmap(self) -> bool {
        self.bitmap_index().is_some()
    }
}

/// One shard's follow sets; see the module documentation.
#[derive(Debug, Default)]
pub(crate) struct SetArena {
    words: Vec<u32>,
    /// Words of `words` that no handle points at any more.
    garbage: usize,
    bitmaps: Vec<RoaringBitmap>,
    /// Indexes of `bitmaps` that no handle points at (each an empty bitmap).
    free_bitmaps: Vec<usize>,
    /// A set's members while it changes.
    ids: Vec<u32>,
    /// A changed set's words before they find their place.
    packed: Vec<u32>,
}

impl SetArena {
    /// The set `handle` points at.
    pub(crate) fn get(&self, handle: SetHandle) -> SetRef<'_> {
        if let Some(offset) = handle.offset() {
            return SetRef::Packed(PackedRef::at(&self.words, offset));
        }
        match handle
            .bitmap_index()
            .and_then(|index| self.bitmaps.get(index))
        {
            Some(bitmap) => SetRef::Bitmap(bitmap),
            None => SetRef::EMPTY,
        }
    }

    /// Stores a new set of strictly ascending `ids`: packed up to `packed_max` members, a
    /// bitmap above.
    pub(crate) fn store(&mut self, ids: &[u32], packed_max: usize) -> SetHandle {
        if ids.is_empty() {
            return SetHandle::default();
        }
        if !fits_packed(ids.len(), packed_max) {
            let bitmap = RoaringBitmap::from_sorted_iter(ids.iter().copied())
                .unwrap_or_else(|_| ids.iter().copied().collect());
            return self.store_bitmap(bitmap);
        }
        let offset = self.words.len();
        pack_into(ids, &mut self.words);
        SetHandle::packed(offset)
    }

    /// Stores a new set held as a bitmap, whatever its size.
    pub(crate) fn store_bitmap(&mut self, bitmap: RoaringBitmap) -> SetHandle {
        if bitmap.is_empty() {
            return SetHandle::default();
        }
        match self.free_bitmaps.pop() {
            Some(index) => {
                if let Some(slot) = self.bitmaps.get_mut(index) {
                    *slot = bitmap;
                }
                SetHandle::bitmap(index)
            }
            None => {
                self.bitmaps.push(bitmap);
                SetHandle::bitmap(self.bitmaps.len() - 1)
            }
        }
    }

    /// Adds `id` to the set at `handle`, which may move; returns whether it was absent.
    pub(crate) fn insert(&mut self, handle: &mut SetHandle, id: u32, packed_max: usize) -> bool {
        if let Some(bitmap) = self.bitmap_mut(*handle) {
            return bitmap.insert(id);
        }
        let mut ids = std::mem::take(&mut self.ids);
        ids.clear();
        ids.extend(self.get(*handle).iter());
        let inserted = match ids.binary_search(&id) {
            Ok(_) => false,
            Err(position) => {
                ids.insert(position, id);
                self.replace(handle, &ids, packed_max);
                true
            }
        };
        self.ids = ids;
        inserted
    }

    /// Removes `id` from the set at `handle`, which may move; returns whether it was present.
    ///
    /// A bitmap that shrinks below half of `packed_max` is packed again, so that a set
    /// hovering around the limit does not flip between the two on every change.
    pub(crate) fn remove(&mut self, handle: &mut SetHandle, id: u32, packed_max: usize) -> bool {
        let mut ids = std::mem::take(&mut self.ids);
        ids.clear();
        let removed = match self.bitmap_mut(*handle) {
            Some(bitmap) => {
                let removed = bitmap.remove(id);
                if removed && bitmap.len() < (packed_max / 2) as u64 {
                    ids.extend(bitmap.iter());
                    self.replace(handle, &ids, packed_max);
                }
                removed
            }
            None => {
                ids.extend(self.get(*handle).iter());
                match ids.binary_search(&id) {
                    Ok(position) => {
                        ids.remove(position);
                        self.replace(handle, &ids, packed_max);
                        true
                    }
                    Err(_) => false,
                }
            }
        };
        self.ids = ids;
        removed
    }

    /// Points `handle` at `ids` instead of its old set, packed if they fit in `packed_max`.
    fn replace(&mut self, handle: &mut SetHandle, ids: &[u32], packed_max: usize) {
        let old = *handle;
        if let Some(index) = old.bitmap_index() {
            if let Some(slot) = self.bitmaps.get_mut(index) {
                *slot = RoaringBitmap::new();
            }
            self.free_bitmaps.push(index);
            *handle = self.store(ids, packed_max);
            return;
        }
        let Some(offset) = old.offset() else {
            *handle = self.store(ids, packed_max);
            return;
        };
        let old_words = PackedRef::at(&self.words, offset).words().len();
        if ids.is_empty() || !fits_packed(ids.len(), packed_max) {
            self.garbage += old_words;
            *handle = self.store(ids, packed_max);
            return;
        }
        let mut packed = std::mem::take(&mut self.packed);
        packed.clear();
        pack_into(ids, &mut packed);
        if packed.len() <= old_words {
            // Over the old copy; its tail words are garbage.
            if let Some(place) = self.words.get_mut(offset..offset + packed.len()) {
                place.copy_from_slice(&packed);
            }
            self.garbage += old_words - packed.len();
        } else if offset + old_words == self.words.len() {
            // The old copy is the last one: the set grows in place.
            self.words.truncate(offset);
            self.words.extend_from_slice(&packed);
        } else {
            self.garbage += old_words;
            *handle = SetHandle::packed(self.words.len());
            self.words.extend_from_slice(&packed);
        }
        self.packed = packed;
    }

    fn bitmap_mut(&mut self, handle: SetHandle) -> Option<&mut RoaringBitmap> {
        handle
            .bitmap_index()
            .and_then(|index| self.bitmaps.get_mut(index))
    }

    /// Whether garbage has passed its share and the shard should call [`SetArena::compact`].
    pub(crate) fn wants_compaction(&self) -> bool {
        self.garbage >= GARBAGE_WORDS_MIN && self.garbage * GARBAGE_SHARE_MAX > self.words.len()
    }

    /// Copies the live sets, those `handles` point at, into a new buffer of their size, and
    /// points the handles there. `handles` must be every handle into this arena.
    pub(crate) fn compact<'h>(&mut self, handles: impl Iterator<Item = &'h mut SetHandle>) {
        let live = self.words.len() - self.garbage;
        let mut words = Vec::with_capacity(live + live / 8);
        for handle in handles {
            if let Some(offset) = handle.offset() {
                let set = PackedRef::at(&self.words, offset);
                *handle = SetHandle::packed(words.len());
                words.extend_from_slice(set.words());
            }
        }
        debug_assert_eq!(words.len(), live, "a handle was missed or counted twice");
        self.words = words;
        self.garbage = 0;
    }

    /// Bytes of the set at `handle`, without allocator overhead: its words, or a bitmap's
    /// portable size.
    pub(crate) fn heap_bytes(&self, handle: SetHandle) -> u64 {
        match self.get(handle) {
            SetRef::Packed(set) => 4 * set.words().len() as u64,
            SetRef::Bitmap(bitmap) => bitmap.serialized_size() as u64,
        }
    }

    /// Bytes the packed buffer holds for garbage and spare capacity.
    pub(crate) fn spare_bytes(&self) -> u64 {
        4 * (self.words.capacity() - self.words.len() + self.garbage) as u64
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use proptest::prelude::*;

    use super::*;

    proptest! {
        // Checks an arena of a few sets under random inserts and removals against a BTreeSet
        // per set, with a packing limit of 40 so sets cross to bitmaps and back, sets move,
        // grow in place at the end and shrink in place, and compaction runs (its minimum is
        // lowered by using many changes on few words: it is checked after every change).
        #[test]
        fn an_arena_agrees_with_btreesets(
            ops in proptest::collection::vec((0usize..4, any::<bool>(), 0u32..120), 0..600),
        ) {
            let mut arena = SetArena::default();
            let mut handles = [SetHandle::default(); 4];
            let mut models = vec![BTreeSet::new(); 4];
            for (set, insert, id) in ops {
                let (changed, expected) = if insert {
                    (arena.insert(&mut handles[set], id, 40), models[set].insert(id))
                } else {
                    (arena.remove(&mut handles[set], id, 40), models[set].remove(&id))
                };
                prop_assert_eq!(changed, expected);
                if arena.garbage > arena.words.len() / 2 {
                    arena.compact(handles.iter_mut());
                    prop_assert_eq!(arena.garbage, 0);
                }
                for (handle, model) in handles.iter().zip(&models) {
                    let listed: Vec<u32> = arena.get(*handle).iter().collect();
                    prop_assert_eq!(listed, model.iter().copied().collect::<Vec<_>>());
                    prop_assert_eq!(handle.is_empty(), model.is_empty());
                    prop_assert!(!handle.is_bitmap() || model.len() >= 20);
                    prop_assert!(handle.is_bitmap() || model.len() <= 40);
                }
            }
            let live: usize = handles
                .iter()
                .map(|&handle| match arena.get(handle) {
                    SetRef::Packed(set) => set.words().len(),
                    SetRef::Bitmap(_) => 0,
                })
                .sum();
            prop_assert_eq!(arena.words.len() - arena.garbage, live);
        }
    }

    #[test]
    fn a_handle_is_four_bytes() {
        // Checks the memory claim in the module docs: a slot's two handles take 8 bytes.
        assert_eq!(std::mem::size_of::<SetHandle>(), 4);
    }
}
