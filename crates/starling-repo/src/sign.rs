//! Public keys and signatures: the two curves atproto signs with, secp256k1 (`k256`) and
//! P-256 (`p256`), both ECDSA over the SHA-256 of the signed bytes, 64-byte `r ‖ s`
//! signatures, and low-S only (atproto cryptography spec), so a signature has one valid form.

use ipld_core::cid::multibase;
use ipld_core::ipld::Ipld;
use k256::ecdsa::signature::Verifier as _;

use crate::RepoError;
use crate::error::truncated;

/// A verifying key, parsed once and reused for every signature of its DID.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PublicKey {
    /// secp256k1 (`did:key:zQ3s…`).
    K256(k256::ecdsa::VerifyingKey),
    /// NIST P-256 (`did:key:zDn…`).
    P256(p256::ecdsa::VerifyingKey),
}

/// The multicodec prefix of a compressed secp256k1 public key (0xe7, varint).
const MULTICODEC_K256: [u8; 2] = [0xe7, 0x01];
/// The multicodec prefix of a compressed P-256 public key (0x1200, varint).
const MULTICODEC_P256: [u8; 2] = [0x80, 0x24];

impl PublicKey {
    /// Parses a `publicKeyMultibase` value of a DID document's `Multikey` method, or a
    /// `did:key:` string: `z` and base58btc of the multicodec prefix and the SEC1 point.
    pub fn from_multikey(text: &str) -> Result<PublicKey, RepoError> {
        let bad = |detail| RepoError::BadKey {
            key: truncated(text),
            detail,
        };
        let multibase_text = text.strip_prefix("did:key:").unwrap_or(text);
        if !multibase_text.starts_with('z') {
            return Err(bad("not base58btc multibase (must start with `z`)"));
        }
        let (_, bytes) = multibase::decode(multibase_text).map_err(|_| bad("bad base58btc"))?;
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

    /// Checks `signature` (64 bytes, `r ‖ s`, low-S) over `message`; `did` names the signer
    /// in the error.
    pub fn verify(&self, did: &str, message: &[u8], signature: &[u8]) -> Result<(), RepoError> {
        let bad = |detail| RepoError::BadSignature {
            did: did.to_owned(),
            detail,
        };
        match self {
            PublicKey::K256(key) => {
                let sig = k256::ecdsa::Signature::from_slice(signature)
                    .map_err(|_| bad("not a 64-byte signature"))?;
                if sig.normalize_s() != sig {
                    return Err(bad("high-S signature"));
                }
                key.verify(message, &sig).map_err(|_| bad("no match"))
            }
            PublicKey::P256(key) => {
                let sig = p256::ecdsa::Signature::from_slice(signature)
                    .map_err(|_| bad("not a 64-byte signature"))?;
                if sig.normalize_s() != sig {
                    return Err(bad("high-S signature"));
                }
                key.verify(message, &sig).map_err(|_| bad("no match"))
            }
        }
    }
}

/// Splits a signed DAG-CBOR object (a commit, a label) into the bytes that were signed (the
/// object without its `sig` field, canonically re-encoded) and the signature.
///
/// `object` must be a map with a `sig` byte string; `what` and `cid` name it in errors.
pub fn unsigned_bytes(
    object: &Ipld,
    what: &'static str,
    cid: &str,
) -> Result<(Vec<u8>, Vec<u8>), RepoError> {
    let bad = |detail: &str| RepoError::BadBlock {
        cid: cid.to_owned(),
        what,
        detail: detail.to_owned(),
    };
    let Ipld::Map(map) = object else {
        return Err(bad("not a map"));
    };
    let mut unsigned = map.clone();
    let Some(Ipld::Bytes(sig)) = unsigned.remove("sig") else {
        return Err(bad("no `sig` bytes"));
    };
    let bytes = serde_ipld_dagcbor::to_vec(&Ipld::Map(unsigned))
        .map_err(|err| bad(&format!("re-encoding without `sig`: {err}")))?;
    Ok((bytes, sig))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k256::ecdsa::signature::Signer as _;

    fn multikey(prefix: [u8; 2], point: &[u8]) -> String {
        let mut bytes = prefix.to_vec();
        bytes.extend_from_slice(point);
        multibase::encode(multibase::Base::Base58Btc, bytes)
    }

    #[test]
    fn both_curves_verify_low_s_and_refuse_high_s_and_other_messages() {
        // Signs with each curve's RustCrypto signer, encodes the key as a Multikey and checks
        // that verification accepts exactly the low-S signature of the signed message.
        let message = b"unsigned commit bytes";
        let k256_signer = k256::ecdsa::SigningKey::from_slice(&[7u8; 32]).unwrap();
        let k256_sig: k256::ecdsa::Signature = k256_signer.sign(message);
        let k256_key = multikey(
            MULTICODEC_K256,
            &k256_signer.verifying_key().to_sec1_point(true).to_bytes(),
        );
        assert!(k256_key.starts_with("zQ3s"));
        let p256_signer = p256::ecdsa::SigningKey::from_slice(&[9u8; 32]).unwrap();
        let p256_sig: p256::ecdsa::Signature = p256_signer.sign(message);
        let p256_key = multikey(
            MULTICODEC_P256,
            &p256_signer.verifying_key().to_sec1_point(true).to_bytes(),
        );
        assert!(p256_key.starts_with("zDn"));
        let cases = [
            (k256_key, k256_sig.normalize_s().to_bytes().to_vec(), {
                let (r, s) = k256_sig.normalize_s().split_scalars();
                k256::ecdsa::Signature::from_scalars(r, -*s)
                    .unwrap()
                    .to_bytes()
                    .to_vec()
            }),
            (p256_key, p256_sig.normalize_s().to_bytes().to_vec(), {
                let (r, s) = p256_sig.normalize_s().split_scalars();
                p256::ecdsa::Signature::from_scalars(r, -*s)
                    .unwrap()
                    .to_bytes()
                    .to_vec()
            }),
        ];
        for (key_text, low_s, high_s) in cases {
            let key = PublicKey::from_multikey(&format!("did:key:{key_text}")).unwrap();
            key.verify("did:plc:x", message, &low_s).unwrap();
            let err = key.verify("did:plc:x", message, &high_s).unwrap_err();
            assert_eq!(
                err,
                RepoError::BadSignature {
                    did: "did:plc:x".into(),
                    detail: "high-S signature"
                }
            );
            let err = key
                .verify("did:plc:x", b"another message", &low_s)
                .unwrap_err();
            assert_eq!(err.reason(), "bad_signature");
            let err = key.verify("did:plc:x", message, &low_s[..63]).unwrap_err();
            assert_eq!(err.reason(), "bad_signature");
        }
    }

    #[test]
    fn malformed_keys_are_typed_errors() {
        for text in [
            "",
            "z",
            "Q3shrc8v5X6ZiANcZxA6JerfT2T4SskeCGxpmtDfMuHF9KRj",
            "z0OIl",
            "zQ3shrc8v5X6ZiANcZxA6JerfT2T4SskeCGxpmtDfMuHF9KR",
            "z111111111111",
        ] {
            let err = PublicKey::from_multikey(text).unwrap_err();
            assert_eq!(err.reason(), "bad_key", "{text}");
        }
    }
}
