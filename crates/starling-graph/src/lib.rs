//! The follow and block graph, held in memory as sets of dense `u32` actor ids.
//!
//! Owns: forward and reverse adjacency, set intersection (social proof).
//! Does not: do I/O, spawn tasks, or know how edges are stored.
//! Must not depend on: `tokio`, `starling-store`, `starling-api`.
