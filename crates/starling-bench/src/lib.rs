//! Starling's benchmarks, and the generator of the long Jetstream streams they run on.
//!
//! Owns: the stream generator ([`stream`]), which re-keys the 162 real Jetstream events of
//! `../shared/data/jetstream/` ([`templates`]) into a valid stream of any length; the binaries
//! `gen-stream` (writes such a stream, zstd-compressed) and `decode-bench` (decode-only speed on
//! one core); the criterion bench `benches/decode.rs`; and `run-replay-bench.sh`, which times
//! `starling replay` end to end. For the graph: [`follows`] and `gen-follows` write a synthetic
//! follow graph as GraphD's CSV with the worst case's query inputs, `graph-memory` splits a
//! loaded data directory's memory between store and graph, and `run-graph-bench.sh` times
//! `starling import-follows`, the restart of `starling serve` and its graph HTTP API under `wrk`.
//! For the side-by-side comparison (`compare/`): [`requests`] encodes the request sets and
//! [`content`] draws the content-checked ones with their expected answers.
//! Does not: run in production, or measure anything under `cargo test` (the tests here only
//! check that generated streams are valid and shaped like the real ones).
//! Must not depend on: `starling-api` or the `starling` binary (the replay benchmark drives the
//! binary as a child process, as an operator would).

#![cfg_attr(test, allow(clippy::unwrap_used, clippy::indexing_slicing))]

pub mod cli;
pub mod content;
pub mod follows;
pub mod grpc_client;
pub mod requests;
pub mod stream;
pub mod templates;
pub mod wire;
