//! Signed repository commits (atproto repository spec, version 3; version 2 differs only in
//! an unused `prev` and is read the same way).

use ipld_core::cid::Cid;
use ipld_core::ipld::Ipld;

use crate::RepoError;
use crate::sign::{PublicKey, unsigned_bytes};

/// A decoded commit: what it says, and the bytes its signature covers.
#[derive(Clone, Debug)]
pub struct Commit {
    /// The commit block's CID.
    pub cid: Cid,
    /// The repository's DID.
    pub did: String,
    /// The repository format version (2 or 3).
    pub version: u8,
    /// The MST root.
    pub data: Cid,
    /// The revision, a TID.
    pub rev: String,
    /// The revision's integer value (`starling_core::syntax::parse_tid`).
    pub rev_value: u64,
    /// The previous commit, if the signer named it.
    pub prev: Option<Cid>,
    unsigned: Vec<u8>,
    signature: Vec<u8>,
}

impl Commit {
    /// Decodes the commit block `bytes` (already checked against `cid`).
    pub fn decode(cid: Cid, bytes: &[u8]) -> Result<Commit, RepoError> {
        let cid_text = cid.to_string();
        let bad = |detail: String| RepoError::BadBlock {
            cid: cid_text.clone(),
            what: "commit",
            detail,
        };
        let ipld: Ipld =
            serde_ipld_dagcbor::from_slice(bytes).map_err(|err| bad(err.to_string()))?;
        let field = |name: &'static str| ipld.get(name).ok().flatten();
        let Some(Ipld::String(did)) = field("did") else {
            return Err(bad("no `did` string".to_owned()));
        };
        if !starling_core::syntax::is_valid_did(did) {
            return Err(bad(format!(
                "`{}` is not a DID",
                crate::error::truncated(did)
            )));
        }
        let version = match field("version") {
            Some(Ipld::Integer(2)) => 2,
            Some(Ipld::Integer(3)) => 3,
            _ => return Err(bad("`version` is not 2 or 3".to_owned())),
        };
        let Some(Ipld::Link(data)) = field("data") else {
            return Err(bad("no `data` link".to_owned()));
        };
        let Some(Ipld::String(rev)) = field("rev") else {
            return Err(bad("no `rev` string".to_owned()));
        };
        let rev_value = starling_core::syntax::parse_tid(rev).ok_or_else(|| {
            bad(format!(
                "rev `{}` is not a TID",
                crate::error::truncated(rev)
            ))
        })?;
        let prev = match field("prev") {
            None | Some(Ipld::Null) => None,
            Some(Ipld::Link(prev)) => Some(*prev),
            Some(_) => return Err(bad("`prev` is neither null nor a link".to_owned())),
        };
        let (unsigned, signature) = unsigned_bytes(&ipld, "commit", &cid_text)?;
        Ok(Commit {
            cid,
            did: did.clone(),
            version,
            data: *data,
            rev: rev.clone(),
            rev_value,
            prev,
            unsigned,
            signature,
        })
    }

    /// Checks the signature against `key`, the DID's `#atproto` signing key.
    pub fn verify(&self, key: &PublicKey) -> Result<(), RepoError> {
        key.verify(&self.did, &self.unsigned, &self.signature)
    }
}
