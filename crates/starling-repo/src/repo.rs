//! A whole repository from a CAR export (`com.atproto.sync.getRepo`): parsed, its commit
//! decoded, its MST walked and checked, its records converted on demand.

use ipld_core::cid::Cid;
use ipld_core::ipld::Ipld;

use crate::car::Car;
use crate::commit::Commit;
use crate::mst::{self, Leaf};
use crate::sign::PublicKey;
use crate::{RepoError, json};

/// A repository whose blocks match their CIDs and whose MST is well formed. Its signature is
/// checked separately ([`Repository::verify`]), because the key comes from the DID document.
#[derive(Debug)]
pub struct Repository<'a> {
    car: Car<'a>,
    commit: Commit,
    leaves: Vec<Leaf>,
}

impl<'a> Repository<'a> {
    /// Parses a CAR export: the single root is the commit, its `data` the MST root, and every
    /// MST node must be present. Records are checked when converted ([`Repository::record_json`]).
    pub fn parse(bytes: &'a [u8]) -> Result<Repository<'a>, RepoError> {
        let car = Car::parse(bytes)?;
        let [root] = car.roots() else {
            return Err(RepoError::BadCar {
                offset: 0,
                detail: format!("{} roots, expected one commit", car.roots().len()),
            });
        };
        let commit = Commit::decode(*root, car.block(root)?)?;
        let leaves = mst::walk(&car, &commit.data)?;
        Ok(Repository {
            car,
            commit,
            leaves,
        })
    }

    /// Checks that the commit is `did`'s and signed by `key`.
    pub fn verify(&self, did: &str, key: &PublicKey) -> Result<(), RepoError> {
        if self.commit.did != did {
            return Err(RepoError::WrongDid {
                did: did.to_owned(),
                commit_did: self.commit.did.clone(),
            });
        }
        self.commit.verify(key)
    }

    /// The signed commit.
    pub fn commit(&self) -> &Commit {
        &self.commit
    }

    /// Every record's key and CID, in key order.
    pub fn leaves(&self) -> &[Leaf] {
        &self.leaves
    }

    /// The JSON form of the record at `leaf` (see the `json` module), appended to `out`.
    pub fn record_json(&self, leaf: &Leaf, out: &mut String) -> Result<(), RepoError> {
        record_json(&self.car, &leaf.key, &leaf.cid, out)
    }
}

/// The JSON form of the record block `cid` of `car`, named `path` in errors, appended to `out`.
pub fn record_json(
    car: &Car<'_>,
    path: &str,
    cid: &Cid,
    out: &mut String,
) -> Result<(), RepoError> {
    let bytes = car.block(cid)?;
    record_json_from_block(path, cid, bytes, out)
}

/// The JSON form of a record block already checked against its CID, appended to `out`.
pub fn record_json_from_block(
    path: &str,
    cid: &Cid,
    bytes: &[u8],
    out: &mut String,
) -> Result<(), RepoError> {
    if cid.codec() != crate::car::CODEC_DAG_CBOR {
        return Err(RepoError::BadRecord {
            path: path.to_owned(),
            detail: "the record block is not dag-cbor".to_owned(),
        });
    }
    let ipld: Ipld = serde_ipld_dagcbor::from_slice(bytes).map_err(|err| RepoError::BadRecord {
        path: path.to_owned(),
        detail: err.to_string(),
    })?;
    json::write_record(&ipld, out).map_err(|err| RepoError::BadRecord {
        path: path.to_owned(),
        detail: err.to_string(),
    })
}
