//! The one error type of repository decoding and verification.

/// Why a CAR file, a block, a commit, the MST, a record or a firehose frame was refused. Every
/// variant names the bad thing; [`RepoError::reason`] is a bounded label for counting.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RepoError {
    /// The input is over a size limit.
    #[error("{what} is {len} bytes, over the {max}-byte limit")]
    TooLarge {
        /// What was too large (a CAR file, a block, a record).
        what: &'static str,
        /// Its size.
        len: u64,
        /// The limit.
        max: u64,
    },
    /// The CAR file ends inside a section, or a length does not parse.
    #[error("CAR file truncated or malformed at byte {offset}: {detail}")]
    BadCar {
        /// Where in the file.
        offset: u64,
        /// What was wrong.
        detail: String,
    },
    /// A CID is not CIDv1 with sha2-256 over dag-cbor or raw bytes.
    #[error("unsupported CID `{cid}`: {detail}")]
    BadCid {
        /// The CID (or its bytes, when it does not parse).
        cid: String,
        /// What was wrong.
        detail: &'static str,
    },
    /// A block's bytes do not hash to its CID.
    #[error("block `{cid}` does not hash to its CID")]
    HashMismatch {
        /// The block's claimed CID.
        cid: String,
    },
    /// A block the commit, the MST or an operation needs is not in the CAR file.
    #[error("block `{cid}` is missing from the CAR file")]
    MissingBlock {
        /// The missing CID.
        cid: String,
    },
    /// A block is not valid DAG-CBOR, or not the shape expected of it.
    #[error("block `{cid}` is not a valid {what}: {detail}")]
    BadBlock {
        /// The block's CID.
        cid: String,
        /// What the block should have been (commit, MST node, record, frame).
        what: &'static str,
        /// What was wrong.
        detail: String,
    },
    /// The commit's DID is not the repository's.
    #[error("commit is for `{commit_did}`, expected `{did}`")]
    WrongDid {
        /// The DID expected.
        did: String,
        /// The DID the commit names.
        commit_did: String,
    },
    /// A public key (multibase, `did:key`) does not parse or names another curve.
    #[error("signing key `{key}` is not usable: {detail}")]
    BadKey {
        /// The key as given (truncated).
        key: String,
        /// What was wrong.
        detail: &'static str,
    },
    /// The signature does not verify against the key.
    #[error("commit signature of `{did}` does not verify: {detail}")]
    BadSignature {
        /// The repository.
        did: String,
        /// What was wrong (malformed, high-S, no match).
        detail: &'static str,
    },
    /// The MST breaks a structural rule.
    #[error("MST node `{cid}` is invalid: {detail}")]
    BadMst {
        /// The node.
        cid: String,
        /// The broken rule.
        detail: String,
    },
    /// A record does not convert to the JSON data model.
    #[error("record `{path}` is not valid atproto data: {detail}")]
    BadRecord {
        /// `collection/rkey`.
        path: String,
        /// What was wrong.
        detail: String,
    },
}

impl RepoError {
    /// Every label [`RepoError::reason`] returns, in a fixed order.
    pub const REASONS: [&'static str; 10] = [
        "too_large",
        "bad_car",
        "bad_cid",
        "hash_mismatch",
        "missing_block",
        "bad_block",
        "bad_key",
        "bad_signature",
        "bad_mst",
        "bad_record",
    ];

    /// A bounded label for counting, one of [`RepoError::REASONS`].
    pub fn reason(&self) -> &'static str {
        match self {
            RepoError::TooLarge { .. } => "too_large",
            RepoError::BadCar { .. } => "bad_car",
            RepoError::BadCid { .. } => "bad_cid",
            RepoError::HashMismatch { .. } => "hash_mismatch",
            RepoError::MissingBlock { .. } => "missing_block",
            RepoError::BadBlock { .. } | RepoError::WrongDid { .. } => "bad_block",
            RepoError::BadKey { .. } => "bad_key",
            RepoError::BadSignature { .. } => "bad_signature",
            RepoError::BadMst { .. } => "bad_mst",
            RepoError::BadRecord { .. } => "bad_record",
        }
    }
}

/// Cuts `text` to at most 120 bytes on a character boundary, for error messages.
pub(crate) fn truncated(text: &str) -> String {
    let mut end = text.len().min(120);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text.get(..end).unwrap_or_default().to_owned()
}
