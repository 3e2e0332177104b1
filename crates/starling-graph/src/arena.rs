//! The sets of one shard's actors, packed end to end in a few large blocks.
//!
//! Why: at the 2024 network's scale the graph holds 10.5M follow sets. Each in an allocation of
//! its own, behind a 16-byte handle in its actor's slot, they cost ~180 MiB of allocator
//! rounding and 168 MiB of slots, and loading them was 10.5M allocations. Here a shard's packed
//! sets sit back to back in blocks of [`BLOCK_WORDS`] words, and a slot holds 4-byte handles.
//! Blocks have a fixed size so that the buffer grows without ever being copied (a doubling
//! `Vec` copied each shard's sets again at every doubling and kept up to half of it spare).
//!
//! A changed set is packed again and written over its old copy when it fits there (a removal),
//! in place when its old copy is the last of the last block (a set growing again and again),
//! and else appended, its old copy counted as garbage. Once garbage passes a quarter of the
//! words the shard compacts, copying the live sets into new blocks: at the 2024 scale a shard
//! holds ~7 MiB, a copy of a few milliseconds under its write lock, once per tens of thousands
//! of changes to that shard.
//!
//! Sets bigger than the graph's packing limit are roaring bitmaps, kept in a side list the
//! handle points into; there are a few thousand of them.

use roaring::RoaringBitmap;

use crate::packed::{CHUNK, PackedRef, header_of, pack_into, pack_with, words_of};
use crate::set::SetRef;

/// Bits of a packed handle that give the word offset within a block.
const BLOCK_BITS: u32 = 16;

/// Words per block: 256 KiB, so a shard wastes at most one partly filled block.
const BLOCK_WORDS: usize = 1 << BLOCK_BITS;

/// The most members a packed set may have, so that any packed set fits in one block: its
/// header, one whole member per chunk and the other gaps at up to 32 bits each.
const PACKED_MEMBERS_MAX: usize = 1 << 15;

const _: () = assert!(1 + PACKED_MEMBERS_MAX.div_ceil(CHUNK) + PACKED_MEMBERS_MAX <= BLOCK_WORDS);

/// Marks a handle that points into the bitmaps rather than the packed blocks.
const BITMAP_BIT: u32 = 1 << 31;

/// The shard compacts once garbage is more than 1 in this many words.
const GARBAGE_SHARE_MAX: usize = 4;

/// Below this many words of garbage the shard never compacts: a small shard would copy itself
/// after every few changes.
const GARBAGE_WORDS_MIN: usize = 1 << 14;

/// Whether a set of `len` members is packed under the limit `packed_max`.
fn fits_packed(len: usize, packed_max: usize) -> bool {
    len <= packed_max.min(PACKED_MEMBERS_MAX)
}

/// Where one set is: nowhere (the empty set), a packed set at a block and word offset, or a
/// bitmap.
///
/// Encoded in a `u32`: 0 is empty, `(block << BLOCK_BITS | offset) + 1` below [`BITMAP_BIT`]
/// a packed set, and `BITMAP_BIT | index` a bitmap.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct SetHandle(u32);

impl SetHandle {
    fn packed(block: usize, offset: usize) -> SetHandle {
        debug_assert!(offset < BLOCK_WORDS);
        let handle = u32::try_from((block << BLOCK_BITS | offset) + 1)
            .ok()
            .filter(|&handle| handle < BITMAP_BIT);
        // 2^15 blocks of 256 KiB is 8 GiB of one shard's sets, 1 TiB over all shards.
        SetHandle(handle.expect("a shard's packed sets outgrew 8 GiB"))
    }

    fn bitmap(index: usize) -> SetHandle {
        let index = u32::try_from(index)
            .ok()
            .filter(|&index| index < BITMAP_BIT);
        SetHandle(BITMAP_BIT | index.expect("a shard holds more than 2^31 bitmaps"))
    }

    /// The block and word offset of a packed set.
    fn place(self) -> Option<(usize, usize)> {
        (self.0 != 0 && self.0 & BITMAP_BIT == 0).then(|| {
            let at = self.0 as usize - 1;
            (at >> BLOCK_BITS, at & (BLOCK_WORDS - 1))
        })
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

/// Packed sets in blocks that never move; see the module documentation.
#[derive(Debug, Default)]
struct Blocks {
    /// Each allocated with room for [`BLOCK_WORDS`] words, and never grown past it.
    blocks: Vec<Vec<u32>>,
    /// Words in all blocks, live or not.
    n_words: usize,
}

impl Blocks {
    fn get(&self, block: usize, offset: usize) -> PackedRef<'_> {
        PackedRef::at(self.blocks.get(block).map_or(&[], Vec::as_slice), offset)
    }

    /// Appends a packed set.
    fn append(&mut self, words: &[u32]) -> SetHandle {
        self.append_with(words.len(), |block| block.extend_from_slice(words))
    }

    /// Appends the `len` words that `write` appends to a block, in a new block if the last one
    /// has no room for them.
    fn append_with(&mut self, len: usize, write: impl FnOnce(&mut Vec<u32>)) -> SetHandle {
        let room = |block: &Vec<u32>| block.len() + len <= BLOCK_WORDS;
        if !self.blocks.last().is_some_and(room) {
            self.blocks.push(Vec::with_capacity(BLOCK_WORDS));
        }
        let block_idx = self.blocks.len() - 1;
        let Some(block) = self.blocks.last_mut() else {
            unreachable!("a block was just pushed");
        };
        let offset = block.len();
        write(block);
        debug_assert_eq!(block.len(), offset + len);
        self.n_words += len;
        SetHandle::packed(block_idx, offset)
    }

    /// Writes `words` in place of the `old_len` words at `block`, `offset`, if they fit there
    /// or the old words end the last block and the block has room. Returns whether it did.
    fn overwrite(&mut self, block: usize, offset: usize, old_len: usize, words: &[u32]) -> bool {
        let is_last = block + 1 == self.blocks.len();
        let Some(data) = self.blocks.get_mut(block) else {
            return false;
        };
        if words.len() <= old_len {
            if let Some(place) = data.get_mut(offset..offset + words.len()) {
                place.copy_from_slice(words);
                return true;
            }
        } else if is_last && offset + old_len == data.len() && offset + words.len() <= BLOCK_WORDS {
            data.truncate(offset);
            data.extend_from_slice(words);
            self.n_words += words.len() - old_len;
            return true;
        }
        false
    }
}

/// One shard's sets; see the module documentation.
#[derive(Debug, Default)]
pub(crate) struct SetArena {
    packed: Blocks,
    /// Words of the blocks that no handle points at any more.
    garbage: usize,
    bitmaps: Vec<RoaringBitmap>,
    /// Indexes of `bitmaps` that no handle points at (each an empty bitmap).
    free_bitmaps: Vec<usize>,
    /// A set's members while it changes.
    ids: Vec<u32>,
    /// A set's words before they find their place.
    scratch: Vec<u32>,
}

impl SetArena {
    /// The set `handle` points at.
    pub(crate) fn get(&self, handle: SetHandle) -> SetRef<'_> {
        if let Some((block, offset)) = handle.place() {
            return SetRef::Packed(self.packed.get(block, offset));
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
        // Packed straight into its block: a snapshot's load stores every set through here.
        let header = header_of(ids);
        self.packed
            .append_with(words_of(header), |block| pack_with(ids, header, block))
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
        let Some((block, offset)) = old.place() else {
            *handle = self.store(ids, packed_max);
            return;
        };
        let old_len = self.packed.get(block, offset).words().len();
        if ids.is_empty() || !fits_packed(ids.len(), packed_max) {
            self.garbage += old_len;
            *handle = self.store(ids, packed_max);
            return;
        }
        let mut words = std::mem::take(&mut self.scratch);
        words.clear();
        pack_into(ids, &mut words);
        if self.packed.overwrite(block, offset, old_len, &words) {
            // A shorter set leaves the tail of its old words behind.
            self.garbage += old_len.saturating_sub(words.len());
        } else {
            self.garbage += old_len;
            *handle = self.packed.append(&words);
        }
        self.scratch = words;
    }

    fn bitmap_mut(&mut self, handle: SetHandle) -> Option<&mut RoaringBitmap> {
        handle
            .bitmap_index()
            .and_then(|index| self.bitmaps.get_mut(index))
    }

    /// Whether garbage has passed its share and the shard should call [`SetArena::compact`].
    pub(crate) fn wants_compaction(&self) -> bool {
        self.garbage >= GARBAGE_WORDS_MIN && self.garbage * GARBAGE_SHARE_MAX > self.packed.n_words
    }

    /// Copies the live sets, those `handles` point at, into new blocks, and points the handles
    /// there. `handles` must be every handle into this arena.
    pub(crate) fn compact<'h>(&mut self, handles: impl Iterator<Item = &'h mut SetHandle>) {
        let live = self.packed.n_words - self.garbage;
        let old = std::mem::take(&mut self.packed);
        for handle in handles {
            if let Some((block, offset)) = handle.place() {
                *handle = self.packed.append(old.get(block, offset).words());
            }
        }
        debug_assert_eq!(
            self.packed.n_words, live,
            "a handle was missed or counted twice"
        );
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

    /// Bytes of old copies of changed sets, until the next compaction.
    pub(crate) fn garbage_bytes(&self) -> u64 {
        4 * self.garbage as u64
    }

    /// Bytes of room in the blocks not used yet.
    pub(crate) fn spare_bytes(&self) -> u64 {
        let capacity = self.packed.blocks.len() * BLOCK_WORDS;
        4 * (capacity - self.packed.n_words) as u64
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use proptest::prelude::*;

    use super::*;

    proptest! {
        // Checks an arena of a few sets under random inserts and removals against a BTreeSet
        // per set, with a packing limit of 40 so sets cross to bitmaps and back, move, grow in
        // place at the end and shrink in place; compaction is called here whenever garbage
        // passes half of the words (the shard's own threshold needs more words than these
        // sets ever hold; `tests/model.rs` reaches it).
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
                if arena.garbage > arena.packed.n_words / 2 {
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
            prop_assert_eq!(arena.packed.n_words - arena.garbage, live);
        }
    }

    #[test]
    fn a_handle_is_four_bytes() {
        // Checks the memory claim in the module docs: a slot's two handles take 8 bytes.
        assert_eq!(std::mem::size_of::<SetHandle>(), 4);
    }
}
