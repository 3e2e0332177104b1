//! A small set of ids packed as fixed-width gaps, with a skip table for searching it.
//!
//! Why: a sorted `u32` array costs 4 bytes a member, but the members of a typical set are
//! spread over the whole id space with gaps of ~18 bits (30 members among 5.5M ids), so most of
//! each member's bits are known from the one before it. Packing the gaps at the set's widest
//! gap costs ~2.5 bytes a member, and the graph's arrays are most of its memory.
//!
//! Layout, in `u32` words:
//! - word 0: the member count (low [`LEN_BITS`] bits) and the gap width in bits (the rest);
//! - one word per chunk of [`CHUNK`] members: that chunk's first member, whole;
//! - the gaps of every other member, `member - previous - 1`, each `width` bits, least
//!   significant bit first, chunk after chunk.
//!
//! The whole first members make a search a binary search over the chunks, then a decode of at
//! most `CHUNK - 1` gaps, and make a walk that skips ahead (an intersection with a much bigger
//! set) jump whole chunks. The empty set takes no words.

/// Members per chunk; each chunk's first member is stored whole.
///
/// 64 costs half a bit a member for the whole first members and bounds a search's decode at
/// 63 gaps (~60 ns); 32 would halve that decode for twice the skip table.
pub(crate) const CHUNK: usize = 64;

/// Bits of the header word that hold the member count.
const LEN_BITS: u32 = 26;

/// The most members a packed set can hold; the graph keeps far smaller sets packed.
pub(crate) const PACKED_MEMBERS_MAX: usize = (1 << LEN_BITS) - 1;

/// Words before the skip table.
const HEADER_WORDS: usize = 1;

/// Appends strictly ascending `ids`, packed, to `words`; nothing for no ids. At most
/// [`PACKED_MEMBERS_MAX`] ids.
pub(crate) fn pack_into(ids: &[u32], words: &mut Vec<u32>) {
    if !ids.is_empty() {
        pack_with(ids, header_of(ids), words);
    }
}

/// The header of non-empty, strictly ascending `ids` packed: their count and gap width. With
/// [`words_of`] it tells how much room the set needs before it is packed.
pub(crate) fn header_of(ids: &[u32]) -> u32 {
    debug_assert!(ids.windows(2).all(|w| w.first() < w.get(1)));
    assert!(
        ids.len() <= PACKED_MEMBERS_MAX,
        "a packed set holds at most {PACKED_MEMBERS_MAX} members, not {}",
        ids.len()
    );
    let width = 32 - gap_bits(ids).leading_zeros();
    // The count fits in LEN_BITS (asserted above) and the width in the 6 bits above it.
    ids.len() as u32 | width << LEN_BITS
}

/// Appends non-empty `ids` packed under `header`, which [`header_of`] gave for them.
pub(crate) fn pack_with(ids: &[u32], header: u32, words: &mut Vec<u32>) {
    let width = header >> LEN_BITS;
    let start = words.len();
    words.reserve(words_of(header));
    words.push(header);
    words.extend(ids.iter().step_by(CHUNK));
    let mut bits = 0u64;
    let mut n_bits = 0;
    for chunk in ids.chunks(CHUNK) {
        for (previous, id) in chunk.iter().zip(chunk.iter().skip(1)) {
            bits |= u64::from(id - previous - 1) << n_bits;
            n_bits += width;
            if n_bits >= 32 {
                words.push(bits as u32);
                bits >>= 32;
                n_bits -= 32;
            }
        }
    }
    if n_bits > 0 {
        words.push(bits as u32);
    }
    debug_assert_eq!(words.len() - start, words_of(header));
}

/// How many words the packed set with this header takes, the header included.
pub(crate) fn words_of(header: u32) -> usize {
    let len = header as usize & PACKED_MEMBERS_MAX;
    let width = (header >> LEN_BITS) as usize;
    let n_chunks = len.div_ceil(CHUNK);
    HEADER_WORDS + n_chunks + ((len - n_chunks) * width).div_ceil(32)
}

/// Every gap of `ids` but those of the chunk starts, ORed: its bit length is the set's width.
/// Chunk by chunk, so that the inner loop has no branch for the chunk starts.
fn gap_bits(ids: &[u32]) -> u32 {
    ids.chunks(CHUNK)
        .map(|chunk| {
            chunk
                .iter()
                .zip(chunk.iter().skip(1))
                .fold(0, |all, (previous, id)| all | (id - previous - 1))
        })
        .fold(0, |all, chunk| all | chunk)
}

/// A packed set, borrowed from the words [`pack_into`] appended it to.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PackedRef<'a>(&'a [u32]);

impl<'a> PackedRef<'a> {
    /// The empty set.
    pub(crate) const EMPTY: PackedRef<'static> = PackedRef(&[]);

    /// The packed set that [`pack_into`] appended to `words` at `offset`.
    pub(crate) fn at(words: &'a [u32], offset: usize) -> PackedRef<'a> {
        let header = words.get(offset).copied().unwrap_or(0);
        let end = offset + words_of(header);
        PackedRef(words.get(offset..end).unwrap_or_default())
    }

    /// The set's words, to copy elsewhere.
    pub(crate) fn words(self) -> &'a [u32] {
        self.0
    }

    /// The number of members.
    pub(crate) fn len(self) -> usize {
        self.header() as usize & PACKED_MEMBERS_MAX
    }

    /// Whether `id` is a member.
    pub(crate) fn contains(self, id: u32) -> bool {
        let mut iter = self.iter();
        iter.advance_to(id);
        iter.peek() == Some(id)
    }

    /// The members in ascending order.
    pub(crate) fn iter(self) -> PackedIter<'a> {
        let width = self.header() >> LEN_BITS;
        let n_chunks = self.len().div_ceil(CHUNK);
        let (firsts, gaps) = self
            .0
            .get(HEADER_WORDS.min(self.0.len())..)
            .unwrap_or_default()
            .split_at_checked(n_chunks)
            .unwrap_or_default();
        PackedIter {
            firsts,
            gaps,
            len: self.len(),
            width,
            mask: (1u64 << width) - 1,
            next_chunk: 0,
            buf: [0; CHUNK],
            buf_len: 0,
            pos: 0,
        }
    }

    fn header(self) -> u32 {
        self.0.first().copied().unwrap_or(0)
    }
}

/// Walks a packed set in ascending order, a chunk at a time: entering a chunk decodes all its
/// members at once, in a loop without branches, and `next` then reads them from a buffer.
/// [`PackedIter::advance_to`] skips whole chunks.
#[derive(Clone, Debug)]
pub(crate) struct PackedIter<'a> {
    firsts: &'a [u32],
    gaps: &'a [u32],
    len: usize,
    width: u32,
    mask: u64,
    /// The chunk after the one in `buf`.
    next_chunk: usize,
    /// The members of the decoded chunk; `buf_len` of them.
    buf: [u32; CHUNK],
    buf_len: usize,
    /// The position in `buf` of the member `next` returns.
    pos: usize,
}

impl PackedIter<'_> {
    /// Moves forward so that `next` returns the first remaining member not below `target`.
    /// Never moves back.
    pub(crate) fn advance_to(&mut self, target: u32) {
        let later = self.firsts.get(self.next_chunk..).unwrap_or_default();
        let n_skipped = later.partition_point(|&first| first <= target);
        if n_skipped > 0 {
            // The last chunk that starts at or below `target`.
            self.decode(self.next_chunk + n_skipped - 1);
        }
        let rest = self.buf.get(self.pos..self.buf_len).unwrap_or_default();
        self.pos += rest.partition_point(|&id| id < target);
    }

    /// The member `next` would return, without moving.
    pub(crate) fn peek(&mut self) -> Option<u32> {
        if self.pos == self.buf_len && !self.decode(self.next_chunk) {
            return None;
        }
        self.buf.get(self.pos).copied()
    }

    /// Decodes chunk `chunk` into `buf`; returns false past the last chunk.
    fn decode(&mut self, chunk: usize) -> bool {
        let Some(&first) = self.firsts.get(chunk) else {
            return false;
        };
        let n = (self.len - chunk * CHUNK).min(CHUNK);
        let width = self.width as usize;
        let mut bit = chunk * (CHUNK - 1) * width;
        let mut value = first;
        let (head, rest) = self.buf.split_at_mut(1);
        head.fill(first);
        for slot in rest.iter_mut().take(n - 1) {
            let word = bit / 32;
            let low = u64::from(self.gaps.get(word).copied().unwrap_or(0));
            let high = u64::from(self.gaps.get(word + 1).copied().unwrap_or(0));
            let gap = (((low | high << 32) >> (bit % 32)) & self.mask) as u32;
            // The set was packed from ascending u32s, so this cannot pass u32::MAX.
            value += gap + 1;
            *slot = value;
            bit += width;
        }
        self.next_chunk = chunk + 1;
        self.buf_len = n;
        self.pos = 0;
        true
    }
}

impl Iterator for PackedIter<'_> {
    type Item = u32;

    #[inline]
    fn next(&mut self) -> Option<u32> {
        let id = self.peek()?;
        self.pos += 1;
        Some(id)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let decoded = (self.next_chunk * CHUNK).min(self.len);
        let left = self.len - decoded + (self.buf_len - self.pos);
        (left, Some(left))
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use proptest::prelude::*;

    use super::*;

    /// `ids` packed after one word that is not theirs, so that offsets are exercised.
    fn packed(ids: &[u32]) -> Vec<u32> {
        let mut words = vec![u32::MAX];
        pack_into(ids, &mut words);
        words
    }

    /// Ids of one of three spreads, so sets get narrow gaps, wide gaps and 32-bit gaps.
    fn ids() -> impl Strategy<Value = BTreeSet<u32>> {
        prop_oneof![
            proptest::collection::btree_set(0u32..2_000, 0..600),
            proptest::collection::btree_set(0u32..6_000_000, 0..300),
            proptest::collection::btree_set(any::<u32>(), 0..200),
        ]
    }

    proptest! {
        // Checks packing against the ids it was given: the members listed, the count, and
        // `contains` and `advance_to` for members, non-members and the ends of the id space,
        // over sets that span from no chunk to ten.
        #[test]
        fn a_packed_set_holds_what_it_was_given(ids in ids(), probes in proptest::collection::vec(any::<u32>(), 0..20)) {
            let sorted: Vec<u32> = ids.iter().copied().collect();
            let words = packed(&sorted);
            let packed = PackedRef::at(&words, 1);
            prop_assert_eq!(packed.len(), sorted.len());
            prop_assert_eq!(packed.iter().collect::<Vec<_>>(), sorted.clone());
            let members = sorted.iter().step_by(7).copied();
            let edges = [0, 1, u32::MAX - 1, u32::MAX];
            for probe in probes.into_iter().chain(members).chain(edges) {
                prop_assert_eq!(packed.contains(probe), ids.contains(&probe));
                let mut iter = packed.iter();
                iter.advance_to(probe);
                let rest: Vec<u32> = iter.collect();
                let expected: Vec<u32> = ids.range(probe..).copied().collect();
                prop_assert_eq!(rest, expected);
            }
        }

        // Checks that a walk which skips ahead again and again (as an intersection does)
        // sees exactly the members at or after each target, never going back.
        #[test]
        fn advancing_never_goes_back(ids in ids(), mut targets in proptest::collection::vec(any::<u32>(), 1..40)) {
            let sorted: Vec<u32> = ids.iter().copied().collect();
            let words = packed(&sorted);
            let packed = PackedRef::at(&words, 1);
            targets.sort_unstable();
            let mut iter = packed.iter();
            let mut floor = 0u32;
            for target in targets {
                iter.advance_to(target);
                let next = iter.clone().next();
                let expected = ids.range(target.max(floor)..).next().copied();
                prop_assert_eq!(next, expected);
                if let Some(next) = next {
                    floor = next;
                }
            }
        }
    }

    #[test]
    fn a_set_costs_its_gaps_and_chunk_starts() {
        // Checks the size claim in the module docs: 100 members with gaps below 2^18 take a
        // header word, two chunk starts and 98 gaps of 18 bits.
        let ids: Vec<u32> = (0..100u32).map(|n| n * 200_000 + n % 3).collect();
        assert_eq!(packed(&ids).len(), 1 + 1 + 2 + (98 * 18usize).div_ceil(32));
        assert_eq!(packed(&[]).len(), 1);
        assert_eq!(packed(&[7]).len(), 1 + 2);
    }
}
