//! DID document resolution for the gRPC identity RPCs (`GetIdentityByDid`, and the check behind
//! `GetDidsByHandles`).
//!
//! Owns: fetching DID documents (`did:plc` from a PLC directory, `did:web` from
//! `https://host/.well-known/did.json`), validating them as `@atproto/identity` does, packing
//! their keys and services into the JSON the AppView reads (`document.rs`), and the cache in front of that: TTL, shorter negative TTL, a cap on entries,
//! `Resolver::invalidate` for Jetstream identity events, one fetch per DID at a time, and a
//! bound on concurrent fetches (`resolver.rs`). Also `stand_in::PlcStandIn`, a loopback PLC
//! directory for tests and demos.
//! Does not: resolve handles to DIDs (DNS TXT or `/.well-known/atproto-did`; the dataplane
//! maps handles from its store and confirms them with `Resolver::verify_handle`), verify
//! signatures, follow redirects, or store anything on disk.
//! Must not depend on: `starling-store`, `starling-api`, `starling-ingest`, tonic or axum.
//!
//! Limits (all in `ResolverConfig`): `timeout` 3 s per fetch and per wait for a fetch slot,
//! `document_bytes_max` 64 KiB, `entries_max` 100,000 DIDs, `fetches_concurrent_max` 32.
//! did:web hosts must be DNS names resolving to public addresses, so a JWT issuer cannot
//! make Starling request its own network.
//!
//! Start with `Resolver::resolve` and the module doc of `document`.

#![cfg_attr(test, allow(clippy::unwrap_used, clippy::indexing_slicing))]

mod cache;
mod document;
mod error;
mod fetch;
mod locate;
mod resolver;
pub mod signature;
pub mod stand_in;

pub use error::{ConfigError, IdentityError, LoadError};
pub use resolver::{
    Clock, DOCUMENT_BYTES_MAX_DEFAULT, ENTRIES_MAX_DEFAULT, FETCHES_CONCURRENT_MAX_DEFAULT,
    Identity, ManualClock, NEGATIVE_TTL_DEFAULT, PLC_URL_DEFAULT, Resolver, ResolverConfig,
    ResolverStats, TIMEOUT_DEFAULT, TTL_DEFAULT, TTL_MAX,
};
