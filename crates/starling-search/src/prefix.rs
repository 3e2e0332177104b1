//! Terms starting with a prefix, as a tantivy query. The terms are a range of the term
//! dictionary (`estimate::prefix_terms`), or the ones an estimate already read in full
//! ([`Walked`]). A `RegexQuery` of `prefix.*` finds the same terms, but builds a DFA for every
//! query, which took about a fifth of a typeahead request's time; an automaton walks the
//! dictionary from its root, trying each byte on the way.
//!
//! Tantivy's automaton weight gathers the matching documents in a bitset as large as the
//! segment, posts included: for a prefix that a few handles start with, clearing and scanning
//! that bitset was most of a SearchActors request. [`PrefixWeight`] reads the postings of a few
//! matching terms as they are asked for, gathers few matches in a sorted list, and leaves only
//! many terms with many matches to a bitset.

use std::sync::Arc;

use tantivy::postings::TermInfo;
use tantivy::query::{
    BitSetDocSet, ConstScorer, EnableScoring, Explanation, Query, Scorer, Weight,
};
use tantivy::schema::{Field, IndexRecordOption};
use tantivy::{DocId, DocSet, InvertedIndexReader, Score, SegmentReader, TERMINATED, TantivyError};
use tantivy_common::BitSet;

use crate::estimate::{Walked, prefix_terms};
use crate::union::Union;

/// Matches the terms of `field` that start with `prefix` (every term, for an empty prefix),
/// each scored 1 (callers wrap it in a `Constant`).
#[derive(Clone, Debug)]
pub(crate) struct PrefixQuery {
    field: Field,
    prefix: String,
    walked: Arc<Walked>,
}

impl PrefixQuery {
    /// The query, reading the terms of the segments in `walked` from there.
    pub(crate) fn new(field: Field, prefix: &str, walked: Walked) -> PrefixQuery {
        PrefixQuery {
            field,
            prefix: prefix.to_owned(),
            walked: Arc::new(walked),
        }
    }
}

impl Query for PrefixQuery {
    fn weight(&self, _scoring: EnableScoring<'_>) -> tantivy::Result<Box<dyn Weight>> {
        Ok(Box::new(PrefixWeight(self.clone())))
    }
}

/// Documents of a segment per match, at least, for the matches to go in a sorted list: a
/// list costs 4 bytes and a sort step per match, a bitset one bit per document of the
/// segment, cleared and scanned; so a list when there is at most one match per bitset word.
const SEGMENT_DOCS_PER_LISTED_MATCH: u32 = 64;

/// Matching terms, at most, whose postings are read as the query asks for documents: a word
/// every name has (`gen` in `Gen User 7`) is one term of 100,000 documents, and a query that
/// needs it only where a rarer word matches then reads a few blocks of it, not all of them.
const LAZY_TERMS_MAX: usize = 4;

/// The documents of the terms with the prefix: read as asked for when the terms are few, in a
/// sorted list when the documents are few against the segment, else in a bitset.
struct PrefixWeight(PrefixQuery);

impl Weight for PrefixWeight {
    fn scorer(&self, reader: &SegmentReader, boost: Score) -> tantivy::Result<Box<dyn Scorer>> {
        let PrefixQuery {
            field,
            prefix,
            walked,
        } = &self.0;
        let inverted_index = reader.inverted_index(*field)?;
        let read_now: Vec<TermInfo>;
        let term_infos = match walked.get(reader.segment_id()) {
            Some(terms) => terms,
            None => {
                let mut terms = prefix_terms(&inverted_index, prefix)?;
                let mut infos = Vec::new();
                while terms.advance() {
                    infos.push(terms.value().clone());
                }
                read_now = infos;
                &read_now
            }
        };
        if term_infos.len() <= LAZY_TERMS_MAX {
            let postings = term_infos
                .iter()
                .map(|info| {
                    inverted_index.read_postings_from_terminfo(info, IndexRecordOption::Basic)
                })
                .collect::<Result<Vec<_>, _>>()?;
            return Ok(Box::new(ConstScorer::new(Union::new(postings), boost)));
        }
        let n_docs: u64 = term_infos.iter().map(|info| u64::from(info.doc_freq)).sum();
        if n_docs > u64::from(reader.max_doc() / SEGMENT_DOCS_PER_LISTED_MATCH) {
            let mut docs = BitSet::with_max_value(reader.max_doc());
            for_each_doc(&inverted_index, term_infos, |doc| docs.insert(doc))?;
            return Ok(Box::new(ConstScorer::new(BitSetDocSet::from(docs), boost)));
        }
        let mut docs = Vec::with_capacity(usize::try_from(n_docs).unwrap_or_default());
        for_each_doc(&inverted_index, term_infos, |doc| docs.push(doc))?;
        docs.sort_unstable();
        docs.dedup();
        Ok(Box::new(ConstScorer::new(
            SortedDocs { docs, at: 0 },
            boost,
        )))
    }

    fn explain(&self, reader: &SegmentReader, doc: DocId) -> tantivy::Result<Explanation> {
        if self.scorer(reader, 1.0)?.seek(doc) != doc {
            return Err(TantivyError::InvalidArgument(format!(
                "document {doc} does not match the prefix {:?}",
                self.0.prefix
            )));
        }
        Ok(Explanation::new("prefix", 1.0))
    }
}

/// Calls `visit` with every document of the terms of `term_infos`, a block at a time.
fn for_each_doc(
    inverted_index: &InvertedIndexReader,
    term_infos: &[TermInfo],
    mut visit: impl FnMut(DocId),
) -> tantivy::Result<()> {
    for info in term_infos {
        let mut postings =
            inverted_index.read_block_postings_from_terminfo(info, IndexRecordOption::Basic)?;
        while !postings.docs().is_empty() {
            postings.docs().iter().for_each(|&doc| visit(doc));
            postings.advance();
        }
    }
    Ok(())
}

/// Documents in increasing order, without repeats.
struct SortedDocs {
    docs: Vec<DocId>,
    at: usize,
}

impl DocSet for SortedDocs {
    fn advance(&mut self) -> DocId {
        self.at = (self.at + 1).min(self.docs.len());
        self.doc()
    }

    fn doc(&self) -> DocId {
        self.docs.get(self.at).copied().unwrap_or(TERMINATED)
    }

    fn size_hint(&self) -> u32 {
        u32::try_from(self.docs.len()).unwrap_or(u32::MAX)
    }
}

#[cfg(test)]
mod weight_tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing)]

    use tantivy::Term;
    use tantivy::collector::DocSetCollector;
    use tantivy::query::{BooleanQuery, Occur, TermQuery};
    use tantivy::schema::{STORED, STRING, Schema, Value};
    use tantivy::{Index, IndexWriter, TantivyDocument, doc};

    use super::*;
    use crate::estimate::Estimate;

    // One segment of 1,000 documents, one term each (`t0` to `t996`, the first three twice,
    // and every tenth `u`, `u1` or `u12`): a prefix of four characters matches one term (read
    // as asked for), `u` three, `t12` eleven (a sorted list), `t1` ~111 (the bitset). Each finds
    // exactly the documents whose term starts with it, alone and within each of two marks (an
    // intersection: the smaller side leads, the other seeks; `rare` is on 80 documents).
    #[test]
    fn few_and_many_matches_find_the_same_documents_as_a_scan() {
        let mut schema = Schema::builder();
        let term = schema.add_text_field("term", STRING | STORED);
        let mark = schema.add_text_field("mark", STRING);
        let index = Index::create_in_ram(schema.build());
        let mut writer: IndexWriter = index.writer_with_num_threads(1, 15_000_000).unwrap();
        let terms: Vec<String> = (0..1_000)
            .map(|idx| match idx % 10 {
                0 => ["u", "u1", "u12"][idx / 10 % 3].to_owned(),
                _ => format!("t{}", idx % 997),
            })
            .collect();
        for (idx, text) in terms.iter().enumerate() {
            writer
                .add_document(doc!(term => text.as_str(), mark => mark_of(idx)))
                .unwrap();
        }
        writer.commit().unwrap();
        let searcher = index.reader().unwrap().searcher();
        assert_eq!(searcher.segment_readers().len(), 1);
        let marked = |name: &str| -> Box<dyn Query> {
            let term = Term::from_field_text(mark, name);
            Box::new(TermQuery::new(term, IndexRecordOption::Basic))
        };
        let cases = ["t12", "t1", "t99", "t996", "t5", "x", "t", "u", "u1", "u12"]
            .into_iter()
            .flat_map(|prefix| {
                [
                    (prefix, None),
                    (prefix, Some("rare")),
                    (prefix, Some("common")),
                ]
            });
        for ((prefix, only), walk) in cases.flat_map(|case| [(case, false), (case, true)]) {
            // The terms as the query reads them, or as an estimate read them before.
            let mut estimate = Estimate::new();
            if walk {
                let segment = &searcher.segment_readers()[0];
                let docs = estimate
                    .prefix_docs(segment, term, prefix, u64::MAX)
                    .unwrap();
                assert!(docs.is_some(), "{prefix:?} read in full");
            }
            let walked = estimate.walked(term, prefix);
            let segment_id = searcher.segment_readers()[0].segment_id();
            assert_eq!(walked.get(segment_id).is_some(), walk);
            let query: Box<dyn Query> = Box::new(PrefixQuery::new(term, prefix, walked));
            let query: Box<dyn Query> = match only {
                None => query,
                Some(name) => Box::new(BooleanQuery::new(vec![
                    (Occur::Must, marked(name)),
                    (Occur::Must, query),
                ])),
            };
            let found = searcher.search(&*query, &DocSetCollector).unwrap();
            let mut found: Vec<String> = found
                .into_iter()
                .map(|address| {
                    let doc: TantivyDocument = searcher.doc(address).unwrap();
                    doc.get_first(term)
                        .and_then(|v| v.as_str())
                        .unwrap()
                        .to_owned()
                })
                .collect();
            found.sort();
            let mut want: Vec<String> = terms
                .iter()
                .enumerate()
                .filter(|(idx, t)| t.starts_with(prefix) && only.is_none_or(|m| m == mark_of(*idx)))
                .map(|(_, t)| t.clone())
                .collect();
            want.sort();
            assert_eq!(found, want, "{prefix:?} within {only:?}, walked {walk}");
        }
    }

    fn mark_of(idx: usize) -> &'static str {
        if matches!(idx % 25, 0 | 3) {
            "rare"
        } else {
            "common"
        }
    }
}
