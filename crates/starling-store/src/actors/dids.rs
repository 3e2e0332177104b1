//! The DIDs of the actor table, back to back in one buffer, `did:plc:` ones in 15 bytes.
//!
//! Why: a `did:plc:` DID is 32 bytes of text, but its 24 characters after the prefix are base32
//! (5 bits each), so 120 bits hold it. Nearly every actor's DID is one; packed, the table's DIDs
//! take 17 bytes an actor less. Each DID's end is a `u32` from the start of its group of
//! [`GROUP`] actors rather than a `u64` from the start of the buffer: 4 bytes an actor less
//! again, ~110 MB in all at the 2024 network's 5.5M actors.

use std::fmt;
use std::hash::BuildHasher;
use std::ops::Deref;

use rustc_hash::FxBuildHasher;

use starling_core::syntax::DID_BYTES_MAX;

/// The prefix of the DIDs packed.
const PLC_PREFIX: &str = "did:plc:";
/// Characters of a `did:plc:` DID after its prefix.
const PLC_CHARS: usize = 24;
/// Bytes of a `did:plc:` DID spelled out.
const PLC_BYTES: usize = PLC_PREFIX.len() + PLC_CHARS;
/// Bytes of a packed `did:plc:` DID: 24 characters of 5 bits.
const PACKED_BYTES: usize = PLC_CHARS * 5 / 8;

/// Actors per group: each group's DIDs take at most `GROUP * DID_BYTES_MAX` bytes (128 MiB),
/// so an end within the group fits in 31 bits.
const GROUP_BITS: u32 = 16;
const GROUP: usize = 1 << GROUP_BITS;
/// The bit of an end that marks its DID packed.
const PACKED_BIT: u32 = 1 << 31;

const _: () = assert!(GROUP * DID_BYTES_MAX < PACKED_BIT as usize);

/// A DID as [`Dids`] stores it: packed when it is a `did:plc:` one, else its text.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Stored<'a> {
    Packed([u8; PACKED_BYTES]),
    Text(&'a [u8]),
}

impl<'a> Stored<'a> {
    /// How `did` is stored: packed when it is a `did:plc:` DID of lowercase base32.
    pub(crate) fn of(did: &'a str) -> Stored<'a> {
        pack_plc(did).map_or(Stored::Text(did.as_bytes()), Stored::Packed)
    }

    fn bytes(&self) -> &[u8] {
        match self {
            Stored::Packed(bytes) => bytes,
            Stored::Text(bytes) => bytes,
        }
    }

    /// The hash the table finds the DID by.
    pub(crate) fn key_hash(&self) -> u64 {
        FxBuildHasher.hash_one(self)
    }
}

/// The 24 characters of a `did:plc:` DID as 120 bits, if `did` is one.
fn pack_plc(did: &str) -> Option<[u8; PACKED_BYTES]> {
    let chars = did.strip_prefix(PLC_PREFIX)?.as_bytes();
    if chars.len() != PLC_CHARS {
        return None;
    }
    let mut bits = 0u128;
    for &char in chars {
        let value = match char {
            b'a'..=b'z' => char - b'a',
            b'2'..=b'7' => char - b'2' + 26,
            _ => return None,
        };
        bits = bits << 5 | u128::from(value);
    }
    let bytes = bits.to_be_bytes();
    bytes.get(16 - PACKED_BYTES..)?.try_into().ok()
}

/// A DID the table gives back: a packed one spelled out again, or the text it holds.
pub struct Did<'a>(Spelled<'a>);

enum Spelled<'a> {
    Plc([u8; PLC_BYTES]),
    Text(&'a str),
}

impl Did<'_> {
    fn unpacked(packed: &[u8; PACKED_BYTES]) -> Did<'static> {
        let mut wide = [0u8; 16];
        if let Some(low) = wide.get_mut(16 - PACKED_BYTES..) {
            low.copy_from_slice(packed);
        }
        let bits = u128::from_be_bytes(wide);
        let mut text = [0u8; PLC_BYTES];
        let (prefix, chars) = text.split_at_mut(PLC_PREFIX.len());
        prefix.copy_from_slice(PLC_PREFIX.as_bytes());
        for (n, char) in chars.iter_mut().enumerate() {
            let shift = 5 * (PLC_CHARS - 1 - n);
            let value = ((bits >> shift) & 31) as u8;
            *char = if value < 26 {
                b'a' + value
            } else {
                b'2' + value - 26
            };
        }
        Did(Spelled::Plc(text))
    }
}

impl Deref for Did<'_> {
    type Target = str;

    fn deref(&self) -> &str {
        match &self.0 {
            Spelled::Plc(text) => std::str::from_utf8(text).expect("base32 is ASCII"),
            Spelled::Text(text) => text,
        }
    }
}

impl fmt::Display for Did<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self)
    }
}

impl fmt::Debug for Did<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&**self, f)
    }
}

/// DIDs back to back, each found by its actor's number.
#[derive(Default)]
pub(crate) struct Dids {
    bytes: Vec<u8>,
    /// Where each group of [`GROUP`] actors' DIDs start in `bytes`.
    group_starts: Vec<u64>,
    /// Where each DID ends, from its group's start, with [`PACKED_BIT`] set for a packed one.
    ends: Vec<u32>,
}

impl Dids {
    /// Room for `n` more DIDs, most of them `did:plc:` ones.
    pub(crate) fn reserve(&mut self, n: usize) {
        self.ends.reserve_exact(n);
        self.bytes.reserve(n * PACKED_BYTES);
    }

    /// Appends a DID as [`Stored::of`] gave it.
    pub(crate) fn push(&mut self, stored: &Stored<'_>) {
        let n = self.ends.len();
        if n.is_multiple_of(GROUP) {
            self.group_starts.push(self.bytes.len() as u64);
        }
        let bytes = stored.bytes();
        assert!(
            bytes.len() <= DID_BYTES_MAX,
            "a {}-byte DID: DIDs are at most {DID_BYTES_MAX} bytes",
            bytes.len()
        );
        self.bytes.extend_from_slice(bytes);
        let group_start = self
            .group_start(n)
            .expect("the group's start is pushed above");
        // Below 2^31: the group's DIDs take at most `GROUP * DID_BYTES_MAX` bytes.
        let end = (self.bytes.len() as u64 - group_start) as u32;
        let packed = matches!(stored, Stored::Packed(_));
        self.ends.push(if packed { end | PACKED_BIT } else { end });
    }

    fn group_start(&self, n: usize) -> Option<u64> {
        self.group_starts.get(n >> GROUP_BITS).copied()
    }

    /// The DID of actor `n` as stored.
    pub(crate) fn stored(&self, n: usize) -> Option<Stored<'_>> {
        let end = *self.ends.get(n)?;
        let start = match n % GROUP {
            0 => 0,
            _ => self.ends.get(n - 1)? & !PACKED_BIT,
        };
        let group_start = usize::try_from(self.group_start(n)?).ok()?;
        let bytes = self
            .bytes
            .get(group_start + start as usize..group_start + (end & !PACKED_BIT) as usize)?;
        Some(if end & PACKED_BIT == 0 {
            Stored::Text(bytes)
        } else {
            Stored::Packed(bytes.try_into().ok()?)
        })
    }

    /// The DID of actor `n`.
    pub(crate) fn get(&self, n: usize) -> Option<Did<'_>> {
        Some(match self.stored(n)? {
            Stored::Packed(packed) => Did::unpacked(&packed),
            Stored::Text(text) => Did(Spelled::Text(std::str::from_utf8(text).ok()?)),
        })
    }
}

impl From<Did<'_>> for String {
    fn from(did: Did<'_>) -> String {
        (*did).to_owned()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing)]

    use super::*;

    /// The characters of a `did:plc:` DID after its prefix.
    const BASE32: &[u8; 32] = b"abcdefghijklmnopqrstuvwxyz234567";

    /// A `did:plc:` DID of 24 characters drawn from `chars` with the seeded `draw`.
    fn plc_of(draw: &mut impl FnMut() -> u64, chars: &[u8]) -> String {
        let tail: String = (0..PLC_CHARS)
            .map(|_| char::from(chars[(draw() % chars.len() as u64) as usize]))
            .collect();
        format!("{PLC_PREFIX}{tail}")
    }

    /// DIDs of every shape stored across several groups come back as they went in, and only
    /// `did:plc:` ones of lowercase base32 are packed.
    #[test]
    fn dids_come_back_as_they_went_in() {
        let mut state = 5u64;
        let mut draw = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let mut dids = Dids::default();
        let mut model = Vec::new();
        // Whether a DID is one the table packs, said naively.
        let packable = |did: &str| {
            did.strip_prefix(PLC_PREFIX).is_some_and(|tail| {
                tail.len() == PLC_CHARS && tail.bytes().all(|b| BASE32.contains(&b))
            })
        };
        for n in 0..(2 * GROUP + 1_000) {
            let did = match draw() % 6 {
                0 => plc_of(&mut draw, b"abcXYZ237"),
                1 => format!("did:web:host{n}.example.com"),
                2 => format!("{PLC_PREFIX}{n}"),
                3 => plc_of(&mut draw, b"0189a"),
                _ => plc_of(&mut draw, BASE32),
            };
            let stored = Stored::of(&did);
            assert_eq!(matches!(stored, Stored::Packed(_)), packable(&did), "{did}");
            dids.push(&stored);
            model.push(did);
        }
        for (n, did) in model.iter().enumerate() {
            assert_eq!(&*dids.get(n).unwrap(), did.as_str());
            assert_eq!(dids.stored(n), Some(Stored::of(did)));
        }
        assert!(dids.get(model.len()).is_none());
    }

    /// A text DID whose bytes are those of a packed one is still another DID.
    #[test]
    fn text_and_packed_of_the_same_bytes_differ() {
        let text = "did:web:abc.com";
        let packed: [u8; PACKED_BYTES] = text.as_bytes().try_into().unwrap();
        let plc = String::from(Did::unpacked(&packed));
        assert_eq!(Stored::of(&plc), Stored::Packed(packed));
        assert_ne!(Stored::of(&plc), Stored::of(text));
    }
}
