//! Label signing keys in DID documents: the `#atproto_label` key of a packed `keys` JSON,
//! and base58btc (Bitcoin's alphabet), the encoding of a `Multikey`'s `publicKeyMultibase`
//! (`z`, then the multicodec prefix and the compressed SEC1 point). The keys are parsed and
//! signatures checked by `starling_repo::sign::PublicKey`, which owns the curves.

/// The multicodec prefix of a compressed secp256k1 public key (0xe7, varint).
pub const MULTICODEC_K256: [u8; 2] = [0xe7, 0x01];
/// The multicodec prefix of a compressed P-256 public key (0x1200, varint).
pub const MULTICODEC_P256: [u8; 2] = [0x80, 0x24];

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

    // Checks base58 against the Bitcoin test vectors, and the label key lookup.
    #[test]
    fn base58_and_label_keys() {
        for (bytes, text) in [
            (&b""[..], ""),
            (&[0u8][..], "1"),
            (&[0, 0, 0x28, 0x7f, 0xb4, 0xcd][..], "11233QC4"),
            (&b"Hello World!"[..], "2NEpo7TZRRrLZSi2U"),
        ] {
            assert_eq!(base58_encode(bytes), text);
            assert_eq!(base58_decode(text).unwrap(), bytes);
        }
        assert_eq!(base58_decode("0OIl"), None);
        let keys = br#"{"atproto":{"Type":"Multikey","PublicKeyMultibase":"zA"},"atproto_label":{"Type":"Multikey","PublicKeyMultibase":"zB"}}"#;
        assert_eq!(label_key(keys).as_deref(), Some("zB"));
        assert_eq!(
            label_key(br#"{"atproto":{"Type":"Multikey","PublicKeyMultibase":"zA"}}"#),
            None
        );
    }
}
