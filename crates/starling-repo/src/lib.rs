//! atproto repositories: CAR files, DAG-CBOR, the Merkle Search Tree, signed commits, and the
//! relay's `subscribeRepos` frames, decoded and verified into the Jetstream events Starling
//! already applies.
//!
//! Owns: parsing CAR v1 (`car`, every block hashed against its CID), DAG-CBOR records to the
//! atproto JSON form (`$link`, `$bytes`, blobs; `json`), commits and their secp256k1 / P-256
//! signatures (`commit`, `sign`: also reusable for any signed DAG-CBOR object, such as labels),
//! walking and checking the MST (`mst`), whole repositories (`repo`), firehose frames
//! (`firehose`: a header and a body, for any event stream of the protocol), and writing records
//! as Jetstream events (`events`).
//! Does not: fetch anything, resolve DIDs (the caller passes the key from the DID document),
//! or store anything. Every input is external data: a bad one is a typed [`RepoError`], never
//! a panic.
//! Must not depend on: `tokio`, any other `starling-*` crate but `starling-core`.
//!
//! Start with [`Repository::parse`] and [`firehose::Frame::decode`].

#![cfg_attr(test, allow(clippy::unwrap_used, clippy::indexing_slicing))]

pub mod car;
pub mod commit;
mod error;
pub mod events;
pub mod firehose;
mod json;
pub mod mst;
pub mod repo;
pub mod sign;

pub use error::RepoError;
pub use ipld_core::cid::Cid;
pub use ipld_core::ipld::Ipld;
pub use json::RECORD_DEPTH_MAX;
pub use repo::Repository;
pub use sign::PublicKey;
