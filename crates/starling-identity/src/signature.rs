//! Signature checks against a DID document's keys: the two curves atproto signs with,
//! secp256k1 and P-256, ECDSA over the SHA-256 of the signed bytes, 64-byte `r ‖ s`
//! signatures, low-S only (the atproto cryptography spec), so a signature has one valid form.
//! Keys are `Multikey` values (`publicKeyMultibase`: `z`, base58btc of the multicodec prefix and
//! the compressed SEC1 point), or `did:key:` strings.

use k256::ecdsa::signature::Verifier as _;

/// A verifying key, parsed once and reused for every signature it checks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PublicKey {
    /// secp256k1 (`zQ3s…`).
    K256(k256::ecdsa::VerifyingKey),
    /// NIST P-256 (`zDn…`).
    P256(p256::ecdsa::VerifyingKey),
}

/// The multicodec prefix of a compressed secp256k1 public key (0xe7, varint).
pub const MULTICODEC_K256: [u8; 2] = [0xe7, 0x01];
/// The multicodec prefix of a compressed P-256 public key (0x1200, varint).
pub const MULTICODEC_P256: [u8; 2] = [0x80, 0x24];

/// Why a key could not be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("public key `{key}`: {reason}")]
pub struct KeyError {
    /// The key as given (truncated to 128 bytes).
    pub key: String,
    /// What is wrong with it.
    pub reason: &'static str,
}

const BASE58: &[u8; 58] = b"123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz";

/// Decodes base58btc (Bitcoin's alphabet).
pub fn base58_decode(text: &str) -> Option<Vec<u8>> {
    let mut bytes: Vec<u8> = Vec::with_capacity(text.len());
    for c in text.bytes() {
        let mut carry = BASE58.iter().position(|&b| b == c)? as u32;
        for byte in bytes.iter_mut().rev() {
            carry += u32::from(*byte) * 58;
            *byte = (carry & 0xff) as u8;
            carry >>= 8;
        }
        while carry > 0 {
            bytes.insert(0, (carry & 0xff) as u8);
            carry >>= 8;
        }
    }
    let zeros = text.bytes().take_while(|&c| c == b'1').count();
    let mut res = vec![0; zeros];
    res.extend(bytes);
    Some(res)
}

/// Encodes base58btc (Bitcoin's alphabet).
pub fn base58_encode(bytes: &[u8]) -> String {
    let mut digits: Vec<u8> = Vec::with_capacity(bytes.len() * 2);
    for &byte in bytes {
        let mut carry = u32::from(byte);
        for digit in digits.iter_mut().rev() {
            carry += u32::from(*digit) << 8;
            *digit = (carry % 58) as u8;
            carry /= 58;
        }
        while carry > 0 {
            digits.insert(0, (carry % 58) as u8);
            carry /= 58;
        }
    }
    let zeros = bytes.iter().take_while(|&&b| b == 0).count();
    let mut res = "1".repeat(zeros);
    // Every digit is below 58: the remainders above.
    res.extend(
        digits
            .iter()
            .filter_map(|&d| BASE58.get(usize::from(d)).copied().map(char::from)),
    );
    res
}

impl PublicKey {
    /// Parses a `publicKeyMultibase` value or a `did:key:` string.
    pub fn from_multikey(text: &str) -> Result<PublicKey, KeyError> {
        let bad = |reason| KeyError {
            key: text.chars().take(128).collect(),
            reason,
        };
        let multibase = text.strip_prefix("did:key:").unwrap_or(text);
        let encoded = multibase
            .strip_prefix('z')
            .ok_or_else(|| bad("not base58btc multibase (must start with `z`)"))?;
        let bytes = base58_decode(encoded).ok_or_else(|| bad("bad base58btc"))?;
        let (prefix, point) = bytes
            .split_first_chunk::<2>()
            .ok_or_else(|| bad("too short"))?;
        match *prefix {
            MULTICODEC_K256 => k256::ecdsa::VerifyingKey::from_sec1_bytes(point)
                .map(PublicKey::K256)
                .map_err(|_| bad("not a secp256k1 point")),
            MULTICODEC_P256 => p256::ecdsa::VerifyingKey::from_sec1_bytes(point)
                .map(PublicKey::P256)
                .map_err(|_| bad("not a P-256 point")),
            _ => Err(bad("neither a secp256k1 nor a P-256 key")),
        }
    }

    /// Whether `signature` (64 bytes, low-S) signs `message` with this key.
    pub fn verify(&self, message: &[u8], signature: &[u8]) -> bool {
        match self {
            PublicKey::K256(key) => k256::ecdsa::Signature::from_slice(signature)
                .is_ok_and(|sig| sig.normalize_s() == sig && key.verify(message, &sig).is_ok()),
            PublicKey::P256(key) => p256::ecdsa::Signature::from_slice(signature)
                .is_ok_and(|sig| sig.normalize_s() == sig && key.verify(message, &sig).is_ok()),
        }
    }
}

/// The `#atproto_label` key's multibase in a packed `keys` JSON (`Identity::keys`), if any.
pub fn label_key(keys_json: &[u8]) -> Option<String> {
    let keys: serde_json::Value = serde_json::from_slice(keys_json).ok()?;
    let key = keys
        .get("atproto_label")?
        .get("PublicKeyMultibase")?
        .as_str()?;
    (!key.is_empty()).then(|| key.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    // Checks base58 against the Bitcoin test vectors, and a real secp256k1 Multikey from a
    // DID document parses; bad keys are errors naming why.
    #[test]
    fn keys_parse_and_base58_round_trips() {
        for (bytes, text) in [
            (&b""[..], ""),
            (&[0u8][..], "1"),
            (&[0, 0, 0x28, 0x7f, 0xb4, 0xcd][..], "11233QC4"),
            (&b"Hello World!"[..], "2NEpo7TZRRrLZSi2U"),
        ] {
            assert_eq!(base58_encode(bytes), text);
            assert_eq!(base58_decode(text).unwrap(), bytes);
        }
        let key = PublicKey::from_multikey("zQ3shrc8v5X6ZiANcZxA6JerfT2T4SskeCGxpmtDfMuHF9KRj");
        assert!(matches!(key, Ok(PublicKey::K256(_))), "{key:?}");
        for (text, reason) in [
            ("Q3sh", "not base58btc"),
            ("z0OIl", "bad base58btc"),
            ("z2NEpo7TZRRrLZSi2U", "neither"),
        ] {
            let err = PublicKey::from_multikey(text).unwrap_err();
            assert!(err.reason.contains(reason), "{text}: {err}");
        }
    }
}
