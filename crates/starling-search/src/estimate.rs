//! Upper bounds on how many documents a query can match, read from the term dictionaries
//! alone and at a bounded cost: enough to tell a narrow search, cheap to run anywhere, from a
//! broad one that belongs on a thread that may block. The terms of a prefix that a bound read
//! in full are kept, so that the search reads them instead of walking the dictionary again
//! (that walk was about 13% of the server's CPU under SearchActors, the bound's own about 6%).

use std::io;

use tantivy::index::SegmentId;
use tantivy::postings::TermInfo;
use tantivy::schema::Field;
use tantivy::termdict::TermStreamer;
use tantivy::{InvertedIndexReader, SegmentReader, Term};

/// Terms an estimate reads at most, in all; past it, the query counts as broad.
pub(crate) const TERMS_READ_MAX: u64 = 1_024;

/// An estimate under way: the terms it may still read, and the prefixes it read in full.
pub(crate) struct Estimate {
    terms_left: u64,
    walked: Vec<Walk>,
}

/// Every term of `field` starting with `prefix` in one segment.
struct Walk {
    field: Field,
    prefix: String,
    segment: SegmentId,
    terms: Vec<TermInfo>,
}

/// The terms of one field starting with one prefix, in each segment where an estimate read
/// them all.
#[derive(Clone, Debug, Default)]
pub(crate) struct Walked {
    segments: Vec<(SegmentId, Vec<TermInfo>)>,
}

impl Walked {
    /// The terms of `segment`, if they were read in full.
    pub(crate) fn get(&self, segment: SegmentId) -> Option<&[TermInfo]> {
        self.segments
            .iter()
            .find(|(id, _)| *id == segment)
            .map(|(_, terms)| terms.as_slice())
    }
}

impl Estimate {
    pub(crate) fn new() -> Estimate {
        Estimate {
            terms_left: TERMS_READ_MAX,
            walked: Vec::new(),
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
        let mut stream = prefix_terms(&index, prefix)?;
        let mut terms = Vec::new();
        let mut docs = 0;
        while stream.advance() {
            if docs > cap {
                return Ok(Some(docs));
            }
            let Some(left) = self.terms_left.checked_sub(1) else {
                return Ok(None);
            };
            self.terms_left = left;
            docs += u64::from(stream.value().doc_freq);
            terms.push(stream.value().clone());
        }
        self.walked.push(Walk {
            field,
            prefix: prefix.to_owned(),
            segment: segment.segment_id(),
            terms,
        });
        Ok(Some(docs))
    }

    /// The terms of `field` starting with `prefix`, where this estimate read them all.
    pub(crate) fn walked(&self, field: Field, prefix: &str) -> Walked {
        let segments = self
            .walked
            .iter()
            .filter(|walk| walk.field == field && walk.prefix == prefix)
            .map(|walk| (walk.segment, walk.terms.clone()))
            .collect();
        Walked { segments }
    }
}

/// The terms of `index` starting with `prefix`, in order: a range from the prefix to the
/// first string past every string that starts with it. Seeking to the range is cheaper than
/// an automaton, which walks the dictionary from its root and tries each byte on the way.
pub(crate) fn prefix_terms<'a>(
    index: &'a InvertedIndexReader,
    prefix: &str,
) -> io::Result<TermStreamer<'a>> {
    let range = index.terms().range().ge(prefix.as_bytes());
    match prefix_end(prefix.as_bytes()) {
        Some(end) => range.lt(end).into_stream(),
        None => range.into_stream(),
    }
}

/// The least string greater than every string that starts with `prefix`; `None` when there
/// is none (an empty prefix, or one of `0xFF` bytes only).
fn prefix_end(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < u8::MAX {
            end.push(last + 1);
            return Some(end);
        }
    }
    None
}

/// The documents of `segment` with the term `text` in `field`.
pub(crate) fn term_docs(segment: &SegmentReader, field: Field, text: &str) -> tantivy::Result<u64> {
    let index = segment.inverted_index(field)?;
    Ok(u64::from(
        index.doc_freq(&Term::from_field_text(field, text))?,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    // Against `starts_with`: the end is past every string with the prefix and before every
    // string after them, bytes at the top of the range included.
    #[test]
    fn the_end_of_a_prefix_bounds_exactly_the_strings_that_start_with_it() {
        let strings: [&[u8]; 10] = [
            b"",
            b"a",
            b"ab",
            b"abc",
            b"ab\xff",
            b"ab\xff\xff",
            b"ac",
            b"b",
            b"\xff",
            b"\xff\xff",
        ];
        for prefix in strings {
            let end = prefix_end(prefix);
            for s in strings {
                let within = s >= prefix && end.as_deref().is_none_or(|end| s < end);
                assert_eq!(within, s.starts_with(prefix), "{prefix:?} {s:?} {end:?}");
            }
        }
    }
}
