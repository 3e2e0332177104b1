//! Upper bounds on how many documents a query can match, read from the term dictionaries
//! alone and at a bounded cost: enough to tell a narrow search, cheap to run anywhere, from a
//! broad one that belongs on a thread that may block.

use tantivy::schema::Field;
use tantivy::{SegmentReader, Term};

/// Terms an estimate reads at most, in all; past it, the query counts as broad.
pub(crate) const TERMS_READ_MAX: u64 = 1_024;

/// An estimate under way: the terms it may still read.
pub(crate) struct Estimate {
    terms_left: u64,
}

impl Estimate {
    pub(crate) fn new() -> Estimate {
        Estimate {
            terms_left: TERMS_READ_MAX,
        }
    }

    /// The documents of `segment` with a term of `field` starting with `prefix` (a document
    /// with two such terms counts twice), counted until they pass `cap`; `None` when the
    /// terms read ran out first.
    pub(crate) fn prefix_docs(
        &mut self,
        segment: &SegmentReader,
        field: Field,
        prefix: &str,
        cap: u64,
    ) -> tantivy::Result<Option<u64>> {
        let index = segment.inverted_index(field)?;
        let mut terms = index.terms().range().ge(prefix.as_bytes()).into_stream()?;
        let mut docs = 0;
        while docs <= cap && terms.advance() {
            if !terms.key().starts_with(prefix.as_bytes()) {
                break;
            }
            let Some(left) = self.terms_left.checked_sub(1) else {
                return Ok(None);
            };
            self.terms_left = left;
            docs += u64::from(terms.value().doc_freq);
        }
        Ok(Some(docs))
    }
}

/// The documents of `segment` with the term `text` in `field`.
pub(crate) fn term_docs(segment: &SegmentReader, field: Field, text: &str) -> tantivy::Result<u64> {
    let index = segment.inverted_index(field)?;
    Ok(u64::from(
        index.doc_freq(&Term::from_field_text(field, text))?,
    ))
}
