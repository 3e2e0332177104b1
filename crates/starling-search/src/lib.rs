//! Built-in full-text search over actors, posts, starter packs and feed generators.
//!
//! Owns: the search index (tantivy, in a directory of its own inside the data directory), the
//! documents made from records (`docs.rs`), the query language the AppView passes through
//! (`query.rs`: words, `from:`, `since:`, `until:`, `lang:`), the ranking, and the bounds on a
//! query's length and cost.
//! Does not: read the store, follow ingest, or speak gRPC. What to index and when to commit is
//! the caller's (`starling-ingest`'s `search_sync`), and so is rebuilding the index from the
//! store when it is absent or behind.
//! Must not depend on: `starling-store`, `starling-api`, `starling-ingest`, `tokio`.
//!
//! Ranking (the one documented in ARCHITECTURE.md, "starling-search"):
//! - actors: `8` when the handle is the query, `+4` when the handle starts with it, and for
//!   each query word `+2` when a display-name word starts with it and `+1` when the description
//!   has it; an actor matches when its handle starts with the query or every word matches its
//!   name or description. Highest score first, ties by [`tie_key`] of the DID.
//! - posts: every word must be in the text; `top` is BM25 (tantivy's defaults), then newest,
//!   then [`tie_key`] of the URI; `latest` is newest `sort_at` first, then [`tie_key`].
//! - starter packs and feed generators: as actors' words (name prefix `+2`, description `+1`,
//!   every word must match), then newest, then [`tie_key`].

mod any_of;
mod docs;
mod estimate;
mod index;
mod prefix;
pub mod query;
mod scoped;
#[cfg(test)]
mod testing;
mod union;

pub use docs::{ActorDoc, PostDoc, RecordDoc, RecordKind};
pub use index::{ActorSearch, Hit, Hits, Page, PostFilter, PostSort, SearchIndex};
pub use query::{ActorQuery, PostQuery, WordsQuery};

/// The longest query accepted, in bytes; a longer one is [`SearchError::QueryTooLong`].
pub const QUERY_BYTES_MAX: usize = 512;
/// The most words a query may have; more is [`SearchError::TooManyWords`].
pub const QUERY_WORDS_MAX: usize = 16;
/// How deep paging may go: results past this offset are not served (the cursor ends there).
pub const OFFSET_MAX: usize = 10_000;
/// The most results one page may ask for.
pub const PAGE_LIMIT_MAX: usize = 100;
/// Index writer memory before it flushes a segment, in bytes.
pub const WRITER_BYTES_MAX: usize = 64 * 1024 * 1024;

/// Why a query or an index operation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SearchError {
    /// The query is longer than [`QUERY_BYTES_MAX`].
    #[error("the query is {len} bytes, over the {max}-byte limit")]
    QueryTooLong {
        /// Its length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// The query has more than [`QUERY_WORDS_MAX`] words.
    #[error("the query has {n_words} words, over the limit of {max}")]
    TooManyWords {
        /// How many it has.
        n_words: usize,
        /// The limit.
        max: usize,
    },
    /// An operator (`since:`, `until:`, `lang:`) with a value that does not parse.
    #[error("`{operator}:{value}` is not valid: {expected}")]
    BadOperator {
        /// The operator.
        operator: &'static str,
        /// The value given.
        value: String,
        /// What was expected.
        expected: &'static str,
    },
    /// A page past [`OFFSET_MAX`] or a limit over [`PAGE_LIMIT_MAX`].
    #[error(
        "page at offset {offset} with limit {limit} is out of bounds (offset <= {OFFSET_MAX}, limit 1..={PAGE_LIMIT_MAX})"
    )]
    BadPage {
        /// The offset asked for.
        offset: usize,
        /// The limit asked for.
        limit: usize,
    },
    /// The engine failed (I/O, a damaged index).
    #[error("search index: {0}")]
    Engine(String),
}

impl From<tantivy::TantivyError> for SearchError {
    fn from(err: tantivy::TantivyError) -> SearchError {
        SearchError::Engine(err.to_string())
    }
}

/// A stable 64-bit key of a document id (DID or URI), FNV-1a: ties in every ranking are broken
/// by it, smallest first, so equal scores come back in the same order on every replica and run.
pub fn tie_key(id: &str) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in id.as_bytes() {
        hash ^= u64::from(*byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    hash
}
