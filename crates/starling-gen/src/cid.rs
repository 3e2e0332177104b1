//! CID strings for generated records.
//!
//! A record's CID is CIDv1, codec dag-cbor (0x71), multihash sha2-256 (0x12, 32 bytes),
//! written in multibase base32 lower (`b` prefix): 59 characters starting `bafyrei`, the shape
//! of every record CID on the network. The 32 digest bytes are not the SHA-256 of the record's
//! DAG-CBOR encoding (the generator never encodes records as CBOR); they are a seeded 256-bit
//! hash of the record's creation time, which is unique within a generated file, so every record
//! gets its own CID and the same record always gets the same one. Lexicon validation checks a
//! strong reference's `cid` for CID syntax, not against the record's bytes.

use starling_core::sample::SplitMix64;

/// The CIDv1 header: version 1, codec dag-cbor, multihash sha2-256 with a 32-byte digest.
pub const CID_HEADER: [u8; 4] = [0x01, 0x71, 0x12, 0x20];

/// The length of a CID string: `b` and 58 base32 characters for 36 bytes.
pub const CID_STRING_LEN: usize = 59;

const BASE32_LOWER: &[u8; 32] = b"abcdefghijklmnopqrstuvwxyz234567";

/// The digest of the record created at `time_us` in a file generated with `seed`.
pub fn digest(seed: u64, time_us: u64) -> [u8; 32] {
    // splitmix64's first output is a bijection of its state, so distinct times give distinct
    // first words and therefore distinct digests.
    let mut rng = SplitMix64::new(seed.wrapping_mul(0xD6E8_FEB8_6659_FD93) ^ time_us);
    let mut digest = [0u8; 32];
    for word in digest.chunks_exact_mut(8) {
        word.copy_from_slice(&rng.next_u64().to_be_bytes());
    }
    digest
}

/// Appends the CID string of a dag-cbor record with this sha2-256 `digest`.
pub fn push_cid(out: &mut String, digest: &[u8; 32]) {
    // RFC 4648 base32 without padding: each 5 bytes become 8 characters. The 36 bytes are
    // zero-extended to 40, of which the first 58 characters carry the 288 bits.
    let mut bytes = [0u8; 40];
    for (byte, &value) in bytes.iter_mut().zip(CID_HEADER.iter().chain(digest)) {
        *byte = value;
    }
    let mut text = [0u8; 64];
    for (group, chars) in bytes.chunks_exact(5).zip(text.chunks_exact_mut(8)) {
        let bits = group
            .iter()
            .fold(0u64, |bits, &byte| (bits << 8) | u64::from(byte));
        for (idx, char) in chars.iter_mut().enumerate() {
            let digit = (bits >> (35 - 5 * idx)) & 31;
            *char = BASE32_LOWER.get(digit as usize).copied().unwrap_or(b'a');
        }
    }
    out.push('b');
    let text = text.get(..CID_STRING_LEN - 1).unwrap_or_default();
    out.push_str(std::str::from_utf8(text).unwrap_or_default());
}

/// Decodes a CID string written by this crate (or any base32-lower multibase string) into
/// its bytes; `None` if it is not `b` followed by base32 lower characters.
pub fn decode_base32_lower(cid: &str) -> Option<Vec<u8>> {
    let digits = cid.strip_prefix('b')?;
    let mut bytes = Vec::with_capacity(digits.len() * 5 / 8);
    let mut bits = 0u32;
    let mut n_bits = 0u32;
    for char in digits.bytes() {
        let value = BASE32_LOWER.iter().position(|&digit| digit == char)? as u32;
        bits = (bits << 5) | value;
        n_bits += 5;
        if n_bits >= 8 {
            n_bits -= 8;
            bytes.push((bits >> n_bits) as u8);
            bits &= (1 << n_bits) - 1;
        }
    }
    // Leftover bits are padding and must be zero.
    (bits == 0).then_some(bytes)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing)]

    use super::*;

    fn cid_of(digest: &[u8; 32]) -> String {
        let mut cid = String::new();
        push_cid(&mut cid, digest);
        cid
    }

    // Checks the encoder against a CID computed elsewhere: the dag-cbor CID of the empty map
    // `{}` (sha2-256 of the single byte 0xa0), as the multiformats libraries print it.
    #[test]
    fn known_cid_of_the_empty_map() {
        let digest: [u8; 32] = [
            0xc1, 0x9a, 0x79, 0x7f, 0xa1, 0xfd, 0x59, 0x0c, 0xd2, 0xe5, 0xb4, 0x2d, 0x1c, 0xf5,
            0xf2, 0x46, 0xe2, 0x9b, 0x91, 0x68, 0x4e, 0x2f, 0x87, 0x40, 0x4b, 0x81, 0xdc, 0x34,
            0x5c, 0x7a, 0x56, 0xa0,
        ];
        assert_eq!(
            cid_of(&digest),
            "bafyreigbtj4x7ip5legnfznufuopl4sg4knzc2cof6duas4b3q2fy6swua"
        );
    }

    // Checks that encoding then decoding gives back the header and digest, for several digests,
    // and that the strings have the length and prefix of network CIDs.
    #[test]
    fn round_trips_and_has_the_network_shape() {
        for time_us in [0, 1, 1_735_689_600_000_000, u64::MAX] {
            let digest = digest(7, time_us);
            let cid = cid_of(&digest);
            assert_eq!(cid.len(), CID_STRING_LEN);
            assert!(cid.starts_with("bafyrei"), "{cid}");
            assert!(starling_core::syntax::is_valid_cid(&cid));
            let bytes = decode_base32_lower(&cid).unwrap();
            assert_eq!(bytes[..4], CID_HEADER);
            assert_eq!(bytes[4..], digest);
        }
        assert_ne!(digest(7, 1), digest(7, 2));
        assert_ne!(digest(7, 1), digest(8, 1));
    }
}
