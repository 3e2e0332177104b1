//! Helpers for the unit tests: seeded random draws, and a query's hits in a comparable form.

use tantivy::collector::TopDocs;
use tantivy::query::Query;
use tantivy::{DocAddress, Searcher};

/// Draws below `n` from a xorshift generator seeded with `seed` (odd, or the draws are all 0).
pub(crate) fn draws(seed: u64) -> impl FnMut(u64) -> u64 {
    let mut state = seed;
    move |n: u64| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state % n
    }
}

/// The first `limit` hits of `query`, best first, each with its score's bits, so that two
/// queries' hits compare exactly.
#[allow(clippy::unwrap_used)]
pub(crate) fn top(searcher: &Searcher, query: &dyn Query, limit: usize) -> Vec<(u32, DocAddress)> {
    let found = searcher.search(query, &TopDocs::with_limit(limit)).unwrap();
    found
        .into_iter()
        .map(|(score, doc)| (score.to_bits(), doc))
        .collect()
}
