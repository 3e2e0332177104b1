//! The DIDs of the actor table, 16 bytes an actor, `did:plc:` ones packed in 15 of them.
//!
//! Why: a `did:plc:` DID is 32 bytes of text, but its 24 characters after the prefix are base32
//! (5 bits each), so 120 bits hold it. Nearly every actor's DID is one, so each actor has a slot
//! of 16 bytes that holds its packed DID, or where the text of another DID is kept. An actor's
//! DID is then one read at a known place, a single cache miss where the table finds DIDs by id
//! (every answer that names accounts) and compares them (every DID looked up).

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

/// A slot's last byte when it holds a packed DID.
const SLOT_PACKED: u8 = 1;

/// Each actor's DID in a slot of its own, found by its actor's number.
#[derive(Default)]
pub(crate) struct Dids {
    /// One slot per actor: a packed DID in the first 15 bytes and [`SLOT_PACKED`] in the last;
    /// or, for a DID kept as text, where its text starts in `text` (a `u64`) and its length (a
    /// `u16`), and 0 in the last byte.
    slots: Vec<[u8; 16]>,
    /// The DIDs kept as text, back to back.
    text: Vec<u8>,
}

const _: () = assert!(DID_BYTES_MAX <= u16::MAX as usize);

impl Dids {
    /// Room for `n` more DIDs.
    pub(crate) fn reserve(&mut self, n: usize) {
        self.slots.reserve_exact(n);
    }

    /// Appends a DID as [`Stored::of`] gave it.
    pub(crate) fn push(&mut self, stored: &Stored<'_>) {
        let mut slot = [0u8; 16];
        let (body, kind) = slot.split_at_mut(15);
        match stored {
            Stored::Packed(packed) => {
                body.copy_from_slice(packed);
                kind.fill(SLOT_PACKED);
            }
            Stored::Text(text) => {
                assert!(
                    text.len() <= DID_BYTES_MAX,
                    "a {}-byte DID: DIDs are at most {DID_BYTES_MAX} bytes",
                    text.len()
                );
                let (start, rest) = body.split_at_mut(8);
                let (len, _) = rest.split_at_mut(2);
                start.copy_from_slice(&(self.text.len() as u64).to_le_bytes());
                // Fits: DIDs are at most `DID_BYTES_MAX` bytes, below 2^16.
                len.copy_from_slice(&(text.len() as u16).to_le_bytes());
                self.text.extend_from_slice(text);
            }
        }
        self.slots.push(slot);
    }

    /// The DID of actor `n` as stored.
    pub(crate) fn stored(&self, n: usize) -> Option<Stored<'_>> {
        let (&kind, body) = self.slots.get(n)?.split_last()?;
        if kind == SLOT_PACKED {
            return Some(Stored::Packed(body.get(..PACKED_BYTES)?.try_into().ok()?));
        }
        let start = u64::from_le_bytes(body.get(..8)?.try_into().ok()?);
        let len = u16::from_le_bytes(body.get(8..10)?.try_into().ok()?);
        let start = usize::try_from(start).ok()?;
        Some(Stored::Text(
            self.text.get(start..start + usize::from(len))?,
        ))
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

    /// DIDs of every shape come back as they went in, and only `did:plc:` ones of lowercase
    /// base32 are packed.
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
        for n in 0..20_000 {
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
