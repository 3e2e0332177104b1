//! The graph's on-disk snapshot: a compact, versioned, checksummed binary format.
//!
//! # Format, version 1
//!
//! All integers are little-endian; `varint` is unsigned LEB128 of a `u32` (at most 5 bytes).
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 8 | magic `STRLGRPH` |
//! | 8 | 4 | format version, `u32` = 1 |
//! | 12 | 4 | flags, `u32`, must be 0 |
//! | 16 | 8 | `n_actors`, `u64`: the id space; every id in the file is below it |
//! | 24 | 4 | CRC-32 (IEEE) of bytes 0..24 |
//! | 28 | .. | follow section: per actor id `0..n_actors` in order, following set, followers set |
//! | .. | .. | block section: the same with the blocking and blocked-by sets |
//! | .. | 8 | `n_follows`, `u64`: the following sets' total size (= the followers sets') |
//! | .. | 8 | `n_blocks`, `u64`: the same for the blocking sets |
//! | .. | 4 | CRC-32 (IEEE) of every byte before it, header included |
//!
//! An id set is `varint len`, then nothing if `len` is 0, else:
//! - if `len <= 4096` ([`SNAPSHOT_ARRAY_MEMBERS_MAX`]): the members as bit-packed gaps. A `u8`
//!   bit width `w` (0 to 32), then `ceil(len * w / 8)` bytes holding `len` gaps of `w` bits
//!   each, least significant bit first: the first gap is the first member, each next one is
//!   the distance from the previous member minus one (members are distinct, so never below 0);
//! - otherwise: a `u32` byte length, then the set in the portable roaring format
//!   (<https://github.com/RoaringBitmap/RoaringFormatSpec>), which every roaring library reads.
//!
//! # Why this shape
//!
//! - Both directions are stored. Rebuilding followers from following on load is a transposition
//!   of 160M edges, a cache miss per edge: measured at ~5 s on the 2-core machine, above the
//!   3 s restart budget on its own. Reading the second direction costs ~2 bytes an edge of disk
//!   and a sequential decode instead.
//! - Gaps packed at one width per set make a typical small set (ids spread over 5.5M, gaps of
//!   ~18 bits) ~2.5 bytes a member, smaller than varints, and decode without a branch per
//!   member: varint decoding, mispredicting on every length change, was the largest cost of
//!   loading. Big sets load from roaring's own format, container by container, without
//!   inserting member by member.
//! - The header has its own checksum, so a corrupt `n_actors` is caught before anything is
//!   allocated from it; the trailing checksum covers everything. Every member is also checked
//!   against the id space and the two directions' totals against each other, so even a
//!   checksummed file from a buggy writer cannot load as an inconsistent graph of another shape.
//!
//! # Writing while the graph is in use
//!
//! [`Graph::write_snapshot`] holds the graph's write gate while it runs: queries go on, but
//! updates wait until the snapshot is written (about 2 s at the 2024 scale), so the file is one
//! moment of the graph. Record the ingest cursor with it; after loading, replay from that cursor
//! (updates are idempotent, so replaying a change the snapshot already holds is harmless).

use std::io::{self, Read, Write};

use crc32fast::Hasher;
use roaring::RoaringBitmap;
use starling_core::ActorId;

use crate::arena::{SetArena, SetHandle};
use crate::build::empty_shards;
use crate::graph::Graph;
use crate::set::{ARRAY_MEMBERS_MAX, SetRef};
use crate::shard::{BlockSlot, Shard, Slot, locate, locate_index};

/// The first eight bytes of every snapshot.
pub const SNAPSHOT_MAGIC: [u8; 8] = *b"STRLGRPH";

/// The format version this build writes and reads.
pub const SNAPSHOT_VERSION: u32 = 1;

/// Sets up to this many members are stored as packed gaps, bigger ones in roaring's format.
///
/// Part of the format, independent of the graph's in-memory [`ARRAY_MEMBERS_MAX`]: the reader
/// picks each set's in-memory representation itself.
pub const SNAPSHOT_ARRAY_MEMBERS_MAX: usize = 4096;

/// The header's size in bytes, its checksum included.
const HEADER_BYTES: usize = 28;

/// How many bytes the reader and writer buffer between calls to the underlying stream.
const BUFFER_BYTES: usize = 1 << 20;

/// The most bytes one packed set can take, with its length, width and the 8 bytes past its
/// end that the decoder's 64-bit loads may touch.
const PACKED_SET_BYTES_MAX: usize = 5 + 1 + 4 * SNAPSHOT_ARRAY_MEMBERS_MAX + 8;

/// The largest id space a snapshot can describe: every `u32` id.
const ACTORS_MAX: u64 = 1 << 32;

/// Why a snapshot could not be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SnapshotError {
    /// The stream does not start with [`SNAPSHOT_MAGIC`].
    #[error("not a graph snapshot: it starts with {found:02x?}, a snapshot starts with `STRLGRPH`")]
    BadMagic {
        /// The first eight bytes found.
        found: [u8; 8],
    },
    /// The snapshot was written in a format version this build cannot read.
    #[error(
        "graph snapshot format version {found} is not supported: this build reads version \
         {supported} (rebuild the graph from the store, or run the release that wrote it)"
    )]
    UnsupportedVersion {
        /// The version in the file.
        found: u32,
        /// The version this build reads.
        supported: u32,
    },
    /// The stream ended before the snapshot did.
    #[error("graph snapshot is truncated: it ends inside the {section}")]
    Truncated {
        /// The part being read when the stream ended.
        section: &'static str,
    },
    /// A checksum does not match the bytes it covers.
    #[error(
        "graph snapshot is corrupt: the {section} checksum is {stored:#010x} but the bytes hash \
         to {computed:#010x}"
    )]
    ChecksumMismatch {
        /// Which checksum: `header` or `file`.
        section: &'static str,
        /// The checksum stored in the file.
        stored: u32,
        /// The checksum of the bytes read.
        computed: u32,
    },
    /// The bytes break a rule of the format.
    #[error("graph snapshot is malformed: {problem} in the {section} at actor {actor}")]
    Malformed {
        /// The part being read.
        section: &'static str,
        /// The actor whose data was being read (0 for the header and trailer).
        actor: u64,
        /// The rule broken.
        problem: &'static str,
    },
    /// Bytes follow the trailing checksum.
    #[error("graph snapshot has bytes after its final checksum (are two files joined?)")]
    TrailingBytes,
    /// The underlying reader failed.
    #[error("reading graph snapshot")]
    Io(#[source] io::Error),
}

impl Graph {
    /// Writes the graph in the snapshot format (see the module documentation) to `w`.
    ///
    /// Queries go on meanwhile; updates wait until it returns. Buffers internally, so `w` need
    /// not be buffered, and never writes to `w` while holding a shard lock.
    pub fn write_snapshot(&self, w: &mut impl Write) -> io::Result<()> {
        let _updates_paused = self.pause_updates();
        let n_actors = self.n_actors().min(ACTORS_MAX);
        let mut output = Output::new(w);

        let mut header = [0u8; HEADER_BYTES];
        let (fields, header_crc) = header.split_at_mut(24);
        let (magic, rest) = fields.split_at_mut(8);
        magic.copy_from_slice(&SNAPSHOT_MAGIC);
        let (version, rest) = rest.split_at_mut(4);
        version.copy_from_slice(&SNAPSHOT_VERSION.to_le_bytes());
        let (_flags, n_actors_bytes) = rest.split_at_mut(4);
        n_actors_bytes.copy_from_slice(&n_actors.to_le_bytes());
        let (crc, _) = header_crc.split_at_mut(4);
        crc.copy_from_slice(&crc32fast::hash(fields).to_le_bytes());
        output.bytes(&header)?;

        let n_follows = self.write_section(&mut output, n_actors, |shard, slot_idx| {
            (shard.following(slot_idx), shard.followers(slot_idx))
        })?;
        let n_blocks = self.write_section(&mut output, n_actors, |shard, slot_idx| {
            (shard.blocking(slot_idx), shard.blocked_by(slot_idx))
        })?;
        output.bytes(&n_follows.to_le_bytes())?;
        output.bytes(&n_blocks.to_le_bytes())?;
        output.finish()
    }

    /// Writes a pair of sets per actor; returns the total size of the first sets.
    fn write_section(
        &self,
        output: &mut Output<'_, impl Write>,
        n_actors: u64,
        sets_of: impl Fn(&Shard, usize) -> (SetRef<'_>, SetRef<'_>),
    ) -> io::Result<u64> {
        let mut n_members = 0;
        for id in 0..n_actors {
            let Ok(id) = u32::try_from(id) else {
                break;
            };
            let (shard_idx, slot_idx) = locate(ActorId(id));
            {
                let shard = self.read(shard_idx);
                let (forward, reverse) = sets_of(&shard, slot_idx);
                n_members += forward.len() as u64;
                output.set(forward)?;
                output.set(reverse)?;
            }
            output.flush_if_full()?;
        }
        Ok(n_members)
    }

    /// Reads a graph written by [`Graph::write_snapshot`], with the default array limit.
    ///
    /// Reads `r` to its end, which must be the snapshot's end. Never panics on bad input: a
    /// truncated, corrupt or foreign stream is a [`SnapshotError`].
    pub fn read_snapshot(r: &mut impl Read) -> Result<Graph, SnapshotError> {
        Graph::read_snapshot_with_array_members_max(r, ARRAY_MEMBERS_MAX)
    }

    /// [`Graph::read_snapshot`] with sets above `array_members_max` members as roaring bitmaps.
    pub fn read_snapshot_with_array_members_max(
        r: &mut impl Read,
        array_members_max: usize,
    ) -> Result<Graph, SnapshotError> {
        let mut input = Input::new(r);
        let n_actors = read_header(&mut input)?;
        let n_actors_len = usize::try_from(n_actors)
            .map_err(|_| malformed("header", 0, "the id space is too large"))?;
        let mut shards = empty_shards(n_actors_len);
        let mut sets = SetReader {
            n_actors,
            array_members_max,
            scratch: Vec::new(),
            ids: Vec::new(),
        };

        let push_slot = |shard: &mut Shard, _, following, followers, n_following| {
            shard.n_follows += n_following;
            shard.slots.push(Slot {
                following,
                followers,
            });
        };
        let (n_following, n_followers) =
            sets.read_section(&mut input, &mut shards, "follow section", push_slot)?;
        let insert_blocks = |shard: &mut Shard, slot_idx, blocking, blocked_by, n_blocking| {
            let blocks = BlockSlot {
                blocking,
                blocked_by,
            };
            if let (false, Ok(key)) = (blocks.is_empty(), u32::try_from(slot_idx)) {
                shard.n_blocks += n_blocking;
                shard.blocks.insert(key, blocks);
            }
        };
        let (n_blocking, n_blocked_by) =
            sets.read_section(&mut input, &mut shards, "block section", insert_blocks)?;

        let stored_n_follows = u64::from_le_bytes(input.array("trailer")?);
        let stored_n_blocks = u64::from_le_bytes(input.array("trailer")?);
        let computed = input.hash();
        let stored = u32::from_le_bytes(input.array("trailer")?);
        if stored != computed {
            return Err(SnapshotError::ChecksumMismatch {
                section: "file",
                stored,
                computed,
            });
        }
        if stored_n_follows != n_following || n_following != n_followers {
            return Err(malformed("trailer", 0, "the follow counts disagree"));
        }
        if stored_n_blocks != n_blocking || n_blocking != n_blocked_by {
            return Err(malformed("trailer", 0, "the block counts disagree"));
        }
        if !input.at_end()? {
            return Err(SnapshotError::TrailingBytes);
        }
        Ok(Graph::from_shards(shards, n_actors, array_members_max))
    }
}

fn malformed(section: &'static str, actor: u64, problem: &'static str) -> SnapshotError {
    SnapshotError::Malformed {
        section,
        actor,
        problem,
    }
}

/// Reads and checks the header; returns `n_actors`.
fn read_header(input: &mut Input<'_, impl Read>) -> Result<u64, SnapshotError> {
    let magic: [u8; 8] = input.array("header")?;
    if magic != SNAPSHOT_MAGIC {
        return Err(SnapshotError::BadMagic { found: magic });
    }
    let version = u32::from_le_bytes(input.array("header")?);
    if version != SNAPSHOT_VERSION {
        return Err(SnapshotError::UnsupportedVersion {
            found: version,
            supported: SNAPSHOT_VERSION,
        });
    }
    let flags = u32::from_le_bytes(input.array("header")?);
    let n_actors = u64::from_le_bytes(input.array("header")?);
    let computed = input.hash();
    let stored = u32::from_le_bytes(input.array("header")?);
    if stored != computed {
        return Err(SnapshotError::ChecksumMismatch {
            section: "header",
            stored,
            computed,
        });
    }
    if flags != 0 {
        return Err(malformed("header", 0, "unknown flags are set"));
    }
    if n_actors > ACTORS_MAX {
        return Err(malformed("header", 0, "the id space is larger than 2^32"));
    }
    Ok(n_actors)
}

/// The most bytes a roaring set over `n_actors` ids can serialize to: a header, then per
/// 65,536-id chunk a description, an offset and at most a full 8 KiB bitmap.
fn roaring_bytes_max(n_actors: u64) -> u64 {
    8 + n_actors.div_ceil(1 << 16) * (4 + 4 + 8192)
}

/// The buffered, checksumming writer side.
struct Output<'w, W: Write> {
    inner: &'w mut W,
    buf: Vec<u8>,
    hasher: Hasher,
}

impl<'w, W: Write> Output<'w, W> {
    fn new(inner: &'w mut W) -> Self {
        Output {
            inner,
            buf: Vec::with_capacity(BUFFER_BYTES + PACKED_SET_BYTES_MAX),
            hasher: Hasher::new(),
        }
    }

    fn bytes(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.buf.extend_from_slice(bytes);
        self.flush_if_full()
    }

    fn varint(&mut self, mut value: u32) {
        while value >= 0x80 {
            self.buf.push((value as u8) | 0x80);
            value >>= 7;
        }
        self.buf.push(value as u8);
    }

    /// Encodes one id set.
    fn set(&mut self, set: SetRef<'_>) -> io::Result<()> {
        let len = set.len();
        self.varint(u32::try_from(len).unwrap_or(u32::MAX));
        if len == 0 {
            return Ok(());
        }
        if len <= SNAPSHOT_ARRAY_MEMBERS_MAX {
            let gaps = || {
                let mut next_min = 0;
                set.iter().map(move |id| {
                    let gap = id - next_min;
                    next_min = id.wrapping_add(1);
                    gap
                })
            };
            let width = 32 - gaps().fold(0, |all, gap| all | gap).leading_zeros();
            self.buf.push(width as u8);
            let mut bits = 0u64;
            let mut n_bits = 0;
            for gap in gaps() {
                bits |= u64::from(gap) << n_bits;
                n_bits += width;
                while n_bits >= 8 {
                    self.buf.push(bits as u8);
                    bits >>= 8;
                    n_bits -= 8;
                }
            }
            if n_bits > 0 {
                self.buf.push(bits as u8);
            }
            return Ok(());
        }
        let converted;
        let bitmap = match set {
            SetRef::Bitmap(bitmap) => bitmap,
            SetRef::Packed(_) => {
                converted = set.iter().collect::<RoaringBitmap>();
                &converted
            }
        };
        let bytes = u32::try_from(bitmap.serialized_size()).map_err(io::Error::other)?;
        self.buf.extend_from_slice(&bytes.to_le_bytes());
        bitmap.serialize_into(&mut self.buf)
    }

    fn flush_if_full(&mut self) -> io::Result<()> {
        if self.buf.len() >= BUFFER_BYTES {
            self.flush()?;
        }
        Ok(())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.hasher.update(&self.buf);
        self.inner.write_all(&self.buf)?;
        self.buf.clear();
        Ok(())
    }

    /// Writes the trailing checksum and flushes everything.
    fn finish(mut self) -> io::Result<()> {
        self.flush()?;
        let crc = self.hasher.clone().finalize();
        self.inner.write_all(&crc.to_le_bytes())?;
        self.inner.flush()
    }
}

/// Decodes id sets and checks each against the format's rules.
struct SetReader {
    n_actors: u64,
    array_members_max: usize,
    /// Holds a big set's roaring bytes when they straddle the input buffer's end.
    scratch: Vec<u8>,
    /// Holds a set's members between decoding and packing them for memory.
    ids: Vec<u32>,
}

/// A set as [`SetReader::read`] found it.
enum ReadSet {
    /// Its members are in `SetReader::ids`.
    Ids,
    /// Too big to pack: the bitmap as read.
    Bitmap(RoaringBitmap),
}

impl SetReader {
    /// Reads one section, a pair of sets for each actor in id order, into the shards' arenas,
    /// and hands each pair to `place` with the actor's shard and slot number and the size of
    /// the first set. Returns the sizes of all first and all second sets.
    fn read_section(
        &mut self,
        input: &mut Input<'_, impl Read>,
        shards: &mut [Shard],
        section: &'static str,
        mut place: impl FnMut(&mut Shard, usize, SetHandle, SetHandle, u64),
    ) -> Result<(u64, u64), SnapshotError> {
        let (mut n_forward, mut n_reverse) = (0u64, 0u64);
        for id in 0..self.n_actors {
            let (shard_idx, slot_idx) = locate_index(id as usize);
            let Some(shard) = shards.get_mut(shard_idx) else {
                return Err(malformed(section, id, "an actor has no shard"));
            };
            let (forward, n_out) = self.read_into(input, id, section, &mut shard.sets)?;
            let (reverse, n_in) = self.read_into(input, id, section, &mut shard.sets)?;
            n_forward += n_out;
            n_reverse += n_in;
            place(shard, slot_idx, forward, reverse, n_out);
        }
        Ok((n_forward, n_reverse))
    }

    /// Reads a set of actor `id` into `arena`; returns its handle and size.
    fn read_into(
        &mut self,
        input: &mut Input<'_, impl Read>,
        id: u64,
        section: &'static str,
        arena: &mut SetArena,
    ) -> Result<(SetHandle, u64), SnapshotError> {
        Ok(match self.read(input, id, section)? {
            ReadSet::Ids => (
                arena.store(&self.ids, self.array_members_max),
                self.ids.len() as u64,
            ),
            ReadSet::Bitmap(bitmap) => {
                let len = bitmap.len();
                (arena.store_bitmap(bitmap), len)
            }
        })
    }

    /// Reads the id set of actor `id`: into `self.ids` unless it stays a bitmap.
    fn read(
        &mut self,
        input: &mut Input<'_, impl Read>,
        id: u64,
        section: &'static str,
    ) -> Result<ReadSet, SnapshotError> {
        let bad = |problem| malformed(section, id, problem);
        // One refill up front lets the whole packed set decode from the buffer.
        if input.buffered() < PACKED_SET_BYTES_MAX {
            input.refill()?;
        }
        let len = input
            .varint(section)?
            .ok_or_else(|| bad("a set length is not a valid varint"))?;
        self.ids.clear();
        if len == 0 {
            return Ok(ReadSet::Ids);
        }
        if u64::from(len) >= self.n_actors {
            return Err(bad("a set is larger than the id space"));
        }
        let len = len as usize;
        let set = if len <= SNAPSHOT_ARRAY_MEMBERS_MAX {
            let width = u32::from(input.byte(section)?);
            if width > 32 {
                return Err(bad("a gap width is above 32 bits"));
            }
            let n_bytes = (len * width as usize).div_ceil(8);
            // Eight more bytes than the gaps take, for the decoder's 64-bit loads; past the end
            // of the stream they come from zero padding in `scratch`.
            let packed = input.bytes_padded(n_bytes, 8, section, &mut self.scratch)?;
            unpack_gaps(packed, len, width, id, self.n_actors, &mut self.ids).map_err(bad)?;
            ReadSet::Ids
        } else {
            let bitmap = self.read_bitmap(input, section, id)?;
            if bitmap.len() != len as u64 {
                return Err(bad("a roaring set's size differs from its length"));
            }
            if bitmap
                .max()
                .is_none_or(|max| u64::from(max) >= self.n_actors)
            {
                return Err(bad("a member is outside the id space"));
            }
            if u32::try_from(id).is_ok_and(|id| bitmap.contains(id)) {
                return Err(bad(SELF_MEMBER));
            }
            if len > self.array_members_max {
                ReadSet::Bitmap(bitmap)
            } else {
                self.ids.extend(bitmap.iter());
                ReadSet::Ids
            }
        };
        Ok(set)
    }

    fn read_bitmap(
        &mut self,
        input: &mut Input<'_, impl Read>,
        section: &'static str,
        id: u64,
    ) -> Result<RoaringBitmap, SnapshotError> {
        let n_bytes = u32::from_le_bytes(input.array(section)?);
        if u64::from(n_bytes) > roaring_bytes_max(self.n_actors) {
            return Err(malformed(
                section,
                id,
                "a roaring set is longer than any over the id space",
            ));
        }
        let bytes = input.bytes(n_bytes as usize, section, &mut self.scratch)?;
        let mut reader = bytes;
        let bitmap = RoaringBitmap::deserialize_from(&mut reader)
            .map_err(|_| malformed(section, id, "a roaring set is not valid"))?;
        if !reader.is_empty() {
            return Err(malformed(
                section,
                id,
                "a roaring set is shorter than its byte length",
            ));
        }
        Ok(bitmap)
    }
}

/// The buffered, checksumming reader side.
struct Input<'r, R: Read> {
    inner: &'r mut R,
    buf: Box<[u8]>,
    /// The next unread byte in `buf`.
    pos: usize,
    /// One past the last valid byte in `buf`.
    end: usize,
    /// Bytes of `buf` before this have been fed to `hasher`.
    hashed_to: usize,
    hasher: Hasher,
    /// The stream has ended; no more reads.
    eof: bool,
}

impl<'r, R: Read> Input<'r, R> {
    fn new(inner: &'r mut R) -> Self {
        Input {
            inner,
            buf: vec![0u8; BUFFER_BYTES].into_boxed_slice(),
            pos: 0,
            end: 0,
            hashed_to: 0,
            hasher: Hasher::new(),
            eof: false,
        }
    }

    /// How many read bytes are waiting in the buffer.
    fn buffered(&self) -> usize {
        self.end - self.pos
    }

    /// The checksum of every byte consumed so far.
    fn hash(&mut self) -> u32 {
        self.hasher
            .update(self.buf.get(self.hashed_to..self.pos).unwrap_or_default());
        self.hashed_to = self.pos;
        self.hasher.clone().finalize()
    }

    /// Moves the unread bytes to the front and reads more after them; returns how many
    /// arrived (0 at the end of the stream or when the buffer is full).
    fn refill(&mut self) -> Result<usize, SnapshotError> {
        self.hash();
        self.buf.copy_within(self.pos..self.end, 0);
        self.end -= self.pos;
        self.pos = 0;
        self.hashed_to = 0;
        loop {
            let free = self.buf.get_mut(self.end..).unwrap_or_default();
            if free.is_empty() || self.eof {
                return Ok(0);
            }
            match self.inner.read(free) {
                Ok(n_read) => {
                    self.end += n_read;
                    self.eof = n_read == 0;
                    return Ok(n_read);
                }
                Err(err) if err.kind() == io::ErrorKind::Interrupted => continue,
                Err(err) => return Err(SnapshotError::Io(err)),
            }
        }
    }

    /// Whether the stream has nothing after the bytes consumed so far.
    fn at_end(&mut self) -> Result<bool, SnapshotError> {
        Ok(self.pos == self.end && self.refill()? == 0)
    }

    fn byte(&mut self, section: &'static str) -> Result<u8, SnapshotError> {
        if self.pos == self.end && self.refill()? == 0 {
            return Err(SnapshotError::Truncated { section });
        }
        let byte = self
            .buf
            .get(self.pos)
            .copied()
            .ok_or(SnapshotError::Truncated { section })?;
        self.pos += 1;
        Ok(byte)
    }

    fn array<const N: usize>(&mut self, section: &'static str) -> Result<[u8; N], SnapshotError> {
        let mut res = [0u8; N];
        for byte in &mut res {
            *byte = self.byte(section)?;
        }
        Ok(res)
    }

    /// The next `len` bytes: borrowed from the buffer when they fit, else gathered in `scratch`.
    fn bytes<'s>(
        &'s mut self,
        len: usize,
        section: &'static str,
        scratch: &'s mut Vec<u8>,
    ) -> Result<&'s [u8], SnapshotError> {
        self.bytes_padded(len, 0, section, scratch)
            .map(|bytes| bytes.get(..len).unwrap_or_default())
    }

    /// Consumes the next `len` bytes and returns them followed by at least `padding` more:
    /// the bytes after them in the stream (not consumed), or zeros where the stream ends.
    fn bytes_padded<'s>(
        &'s mut self,
        len: usize,
        padding: usize,
        section: &'static str,
        scratch: &'s mut Vec<u8>,
    ) -> Result<&'s [u8], SnapshotError> {
        let wanted = len + padding;
        if self.buffered() < wanted && wanted <= self.buf.len() {
            while self.buffered() < wanted && self.refill()? > 0 {}
        }
        if self.buffered() >= wanted {
            let start = self.pos;
            self.pos += len;
            return Ok(self.buf.get(start..start + wanted).unwrap_or_default());
        }
        scratch.clear();
        while scratch.len() < len {
            if self.pos == self.end && self.refill()? == 0 {
                return Err(SnapshotError::Truncated { section });
            }
            let take = (len - scratch.len()).min(self.buffered());
            scratch.extend_from_slice(self.buf.get(self.pos..self.pos + take).unwrap_or_default());
            self.pos += take;
        }
        scratch.resize(wanted, 0);
        Ok(scratch)
    }

    /// Decodes one varint; `None` if it is longer than five bytes or overflows a `u32`.
    fn varint(&mut self, section: &'static str) -> Result<Option<u32>, SnapshotError> {
        let mut value = 0u32;
        for byte_idx in 0..5 {
            let byte = self.byte(section)?;
            value |= u32::from(byte & 0x7f) << (7 * byte_idx);
            if byte < 0x80 {
                return Ok((byte_idx < 4 || byte <= 0x0f).then_some(value));
            }
        }
        Ok(None)
    }
}

/// The problem reported for an actor listed in its own set.
const SELF_MEMBER: &str = "an actor is in its own set";

/// Unpacks `len` gaps of `width` bits from `packed` (which holds at least 8 bytes past them)
/// into `ids`, the ascending members of actor `actor`'s set, all below `n_actors`.
///
/// Straight-line per member: one unaligned 64-bit load, a shift and a mask, so the loop runs
/// without the data-dependent branches that varints need.
fn unpack_gaps(
    packed: &[u8],
    len: usize,
    width: u32,
    actor: u64,
    n_actors: u64,
    ids: &mut Vec<u32>,
) -> Result<(), &'static str> {
    let mask = (1u64 << width) - 1;
    ids.clear();
    ids.reserve(len);
    let mut next_min = 0u64;
    let mut bit_idx = 0usize;
    let mut holds_actor = false;
    for _ in 0..len {
        let word = packed
            .get(bit_idx / 8..bit_idx / 8 + 8)
            .and_then(|bytes| <[u8; 8]>::try_from(bytes).ok())
            .map(u64::from_le_bytes)
            .ok_or(TRUNCATED_GAPS)?;
        let id = next_min + ((word >> (bit_idx % 8)) & mask);
        holds_actor |= id == actor;
        // Truncation is harmless: members ascend, so if any is out of range the last is, and
        // the check below rejects the set.
        ids.push(id as u32);
        next_min = id + 1;
        bit_idx += width as usize;
    }
    if next_min > n_actors {
        return Err("a member is outside the id space");
    }
    if holds_actor {
        return Err(SELF_MEMBER);
    }
    Ok(())
}

/// Reported when the packed gaps run past their bytes; the padding rule makes it impossible.
const TRUNCATED_GAPS: &str = "packed gaps run past their bytes";

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing)]

    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    use super::*;
    use crate::GraphBuilder;

    fn a(id: u32) -> ActorId {
        ActorId(id)
    }

    /// A small graph with arrays, bitmaps (limit 8), blocks both ways and an isolated tail.
    fn sample_graph(seed: u64) -> Graph {
        println!("sample graph seed: {seed}");
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut builder = GraphBuilder::new().array_members_max(8);
        for _ in 0..600 {
            // Skewed so that low ids collect big follower sets.
            let actor = rng.random_range(0..120);
            let subject = rng.random_range(0..120u32).min(rng.random_range(0..120));
            builder.follow(a(actor), a(subject));
        }
        for _ in 0..40 {
            builder.block(a(rng.random_range(0..120)), a(rng.random_range(0..120)));
        }
        builder.follow(a(130), a(131));
        builder.build()
    }

    fn write(graph: &Graph) -> Vec<u8> {
        let mut bytes = Vec::new();
        graph.write_snapshot(&mut bytes).unwrap();
        bytes
    }

    #[test]
    fn round_trip_keeps_every_edge() {
        // Checks that write then read gives an equal graph (every actor's four sets), with the
        // same counts, for graphs holding both representations, blocks, and an empty graph.
        for graph in [sample_graph(1), sample_graph(2), Graph::new()] {
            let bytes = write(&graph);
            let read = Graph::read_snapshot_with_array_members_max(&mut &bytes[..], 8).unwrap();
            assert!(read == graph);
            assert_eq!(read.n_follows(), graph.n_follows());
            assert_eq!(read.n_blocks(), graph.n_blocks());
            assert_eq!(read.n_actors(), graph.n_actors());
            // The representation limit is the reader's choice and does not change the edges.
            let read_default = Graph::read_snapshot(&mut &bytes[..]).unwrap();
            assert!(read_default == graph);
        }
        assert!(sample_graph(1).n_blocks() > 0);
        assert!(sample_graph(1).stats().n_bitmap_sets > 0);
    }

    #[test]
    fn every_truncation_is_an_error() {
        // Checks that cutting the snapshot at every possible length gives Truncated (never a
        // panic or a graph), by reading each prefix of a real snapshot.
        let bytes = write(&sample_graph(3));
        for len in 0..bytes.len() {
            let res = Graph::read_snapshot(&mut &bytes[..len]);
            assert!(
                matches!(res, Err(SnapshotError::Truncated { .. })),
                "prefix of {len} bytes: {res:?}"
            );
        }
    }

    #[test]
    fn flipped_bits_are_errors() {
        // Checks that flipping any single bit anywhere gives an Err (a checksum or an earlier
        // check catches it) and never a panic, by flipping each bit of a snapshot in turn.
        let bytes = write(&sample_graph(4));
        for bit_idx in 0..bytes.len() * 8 {
            let mut corrupt = bytes.clone();
            corrupt[bit_idx / 8] ^= 1 << (bit_idx % 8);
            assert!(
                Graph::read_snapshot(&mut &corrupt[..]).is_err(),
                "bit {bit_idx} flipped"
            );
        }
    }

    #[test]
    fn random_garbage_is_an_error() {
        // Checks that random bytes behind a valid header (valid header checksum, huge id space)
        // give an Err without a panic or a huge allocation.
        let seed = 5;
        println!("seed: {seed}");
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut header = write(&Graph::new())[..HEADER_BYTES].to_vec();
        header[16..24].copy_from_slice(&1000u64.to_le_bytes());
        let crc = crc32fast::hash(&header[..24]);
        header[24..28].copy_from_slice(&crc.to_le_bytes());
        for _ in 0..200 {
            let mut bytes = header.clone();
            let len = rng.random_range(0..5000);
            bytes.extend((0..len).map(|_| rng.random::<u8>()));
            assert!(Graph::read_snapshot(&mut &bytes[..]).is_err());
        }
    }

    #[test]
    fn errors_name_the_problem() {
        // Checks the specific error for a foreign file, a future version, trailing bytes and a
        // corrupt body, by editing a valid snapshot and fixing up checksums where needed.
        let bytes = write(&sample_graph(6));

        let mut foreign = bytes.clone();
        foreign[..8].copy_from_slice(b"PK\x03\x04zipx");
        assert!(matches!(
            Graph::read_snapshot(&mut &foreign[..]),
            Err(SnapshotError::BadMagic { found }) if &found == b"PK\x03\x04zipx"
        ));

        let mut future = bytes.clone();
        future[8..12].copy_from_slice(&2u32.to_le_bytes());
        assert!(matches!(
            Graph::read_snapshot(&mut &future[..]),
            Err(SnapshotError::UnsupportedVersion {
                found: 2,
                supported: 1
            })
        ));

        let mut trailing = bytes.clone();
        trailing.push(0);
        assert!(matches!(
            Graph::read_snapshot(&mut &trailing[..]),
            Err(SnapshotError::TrailingBytes)
        ));

        // A flipped bit in the trailer's follow count parses fine; only the checksum sees it.
        let mut corrupt_count = bytes.clone();
        let count_idx = corrupt_count.len() - 4 - 16;
        corrupt_count[count_idx] ^= 0x01;
        let err = Graph::read_snapshot(&mut &corrupt_count[..]).unwrap_err();
        assert!(
            matches!(
                err,
                SnapshotError::ChecksumMismatch {
                    section: "file",
                    ..
                }
            ),
            "{err:?}"
        );
        assert!(err.to_string().contains("corrupt"));

        let mut corrupt_header = bytes.clone();
        corrupt_header[20] ^= 0x01;
        assert!(matches!(
            Graph::read_snapshot(&mut &corrupt_header[..]),
            Err(SnapshotError::ChecksumMismatch {
                section: "header",
                ..
            })
        ));
    }

    #[test]
    fn io_errors_pass_through() {
        // Checks that a failing reader surfaces as SnapshotError::Io with its cause, using a
        // reader that fails after the header.
        struct Failing<'a>(&'a [u8]);
        impl Read for Failing<'_> {
            fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
                if self.0.is_empty() {
                    return Err(io::Error::other("disk on fire"));
                }
                let n = self.0.read(buf)?;
                Ok(n)
            }
        }
        let bytes = write(&sample_graph(7));
        let res = Graph::read_snapshot(&mut Failing(&bytes[..HEADER_BYTES + 3]));
        assert!(matches!(res, Err(SnapshotError::Io(err)) if err.to_string() == "disk on fire"));
    }

    #[test]
    fn snapshots_during_updates_are_one_moment() {
        // Checks that a snapshot written while another thread applies follows is one moment of
        // the graph: the writer adds edges e_0, e_1, ... in order, so every snapshot, once
        // read back, must hold exactly e_0..e_k for some k (both directions, which the reader
        // also cross-checks). Without the update gate a snapshot could hold a later edge
        // without an earlier one, or one direction of an edge without the other.
        let edges: Vec<(ActorId, ActorId)> = (0..100_000u32)
            .map(|idx| (a(idx % 97), a(97 + idx / 97)))
            .collect();
        let graph = std::sync::Arc::new(Graph::with_array_members_max(0, 16));
        let writer = {
            let graph = std::sync::Arc::clone(&graph);
            let edges = edges.clone();
            std::thread::spawn(move || {
                for &(actor, subject) in &edges {
                    assert!(graph.follow(actor, subject));
                }
            })
        };
        // Wait for the writer to be under way; the snapshots below then race it.
        while graph.n_follows() == 0 {
            std::thread::yield_now();
        }
        let mut n_seen = Vec::new();
        while n_seen.len() < 5 && n_seen.last() != Some(&edges.len()) {
            let bytes = write(&graph);
            let read = Graph::read_snapshot_with_array_members_max(&mut &bytes[..], 16).unwrap();
            let n_follows = read.n_follows() as usize;
            let expected = Graph::from_follows(edges[..n_follows].iter().copied());
            assert!(
                read == expected,
                "snapshot with {n_follows} follows is not a prefix"
            );
            n_seen.push(n_follows);
        }
        writer.join().unwrap();
        println!("follows seen by successive snapshots: {n_seen:?}");
        // The writer takes far longer than a snapshot, so some snapshot lands mid-way.
        assert!(n_seen.iter().any(|&n| n > 0 && n < edges.len()));
    }
}
