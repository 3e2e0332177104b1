//! Any of a few queries, as a tantivy query: a document matches when one clause does, and
//! scores the sum of the matching clauses' scores, as a `BooleanQuery` of `Should` clauses
//! scores it. (Tantivy adds them in an order that changes as clauses run out, so a sum of
//! scores not exact in `f32` may differ from its in the last bit; the search's clause scores
//! are small whole numbers, whose sums are exact in any order.)
//!
//! Why not that boolean query: in every segment, its union of two clauses or more is a
//! `BufferedUnionScorer`, which allocates a window of 4,096 documents' scores (16 KiB) and
//! copies it into place when it is built. A SearchActors query holds such a union for each of
//! its words and one around them, in each segment; building them was about a sixth of the
//! request. For a handful of clauses, finding the smallest current document among them at each
//! step costs less.

use tantivy::query::{EmptyScorer, EnableScoring, Explanation, Query, Scorer, Weight};
use tantivy::{DocId, DocSet, Score, SegmentReader, TERMINATED, TantivyError, Term};

use crate::union::Union;

/// Matches what any of its clauses matches.
#[derive(Debug)]
pub(crate) struct AnyOf {
    clauses: Vec<Box<dyn Query>>,
}

impl Clone for AnyOf {
    fn clone(&self) -> AnyOf {
        AnyOf::new(
            self.clauses
                .iter()
                .map(|clause| clause.box_clone())
                .collect(),
        )
    }
}

impl AnyOf {
    pub(crate) fn new(clauses: Vec<Box<dyn Query>>) -> AnyOf {
        AnyOf { clauses }
    }
}

impl Query for AnyOf {
    fn weight(&self, scoring: EnableScoring<'_>) -> tantivy::Result<Box<dyn Weight>> {
        let weights = self
            .clauses
            .iter()
            .map(|clause| clause.weight(scoring))
            .collect::<tantivy::Result<_>>()?;
        Ok(Box::new(AnyOfWeight { weights }))
    }

    fn query_terms<'a>(&'a self, visitor: &mut dyn FnMut(&'a Term, bool)) {
        for clause in &self.clauses {
            clause.query_terms(visitor);
        }
    }
}

struct AnyOfWeight {
    weights: Vec<Box<dyn Weight>>,
}

impl Weight for AnyOfWeight {
    fn scorer(&self, reader: &SegmentReader, boost: Score) -> tantivy::Result<Box<dyn Scorer>> {
        let mut scorers = Vec::with_capacity(self.weights.len());
        for weight in &self.weights {
            let scorer = weight.scorer(reader, boost)?;
            if scorer.doc() != TERMINATED {
                scorers.push(scorer);
            }
        }
        if scorers.len() > 1 {
            return Ok(Box::new(Union::new(scorers)));
        }
        Ok(scorers.pop().unwrap_or_else(|| Box::new(EmptyScorer)))
    }

    fn explain(&self, reader: &SegmentReader, doc: DocId) -> tantivy::Result<Explanation> {
        let matched: Vec<Explanation> = (self.weights.iter())
            .filter_map(|weight| weight.explain(reader, doc).ok())
            .collect();
        if matched.is_empty() {
            return Err(TantivyError::InvalidArgument(format!(
                "document {doc} matches no clause"
            )));
        }
        let score = matched.iter().fold(0.0, |sum, each| sum + each.value());
        let mut explanation = Explanation::new("sum of the matching clauses", score);
        for each in matched {
            explanation.add_detail(each);
        }
        Ok(explanation)
    }
}

/// A union of scorers scores the sum of the scores of those at its current document.
impl Scorer for Union<Box<dyn Scorer>> {
    fn score(&mut self) -> Score {
        let at = self.doc();
        let mut score = 0.0;
        for scorer in self.parts_mut() {
            if scorer.doc() == at {
                score += scorer.score();
            }
        }
        score
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing)]

    use tantivy::query::{BooleanQuery, ConstScoreQuery, Occur, TermQuery};
    use tantivy::schema::{IndexRecordOption, Schema, TEXT};
    use tantivy::{DocAddress, Index, IndexWriter, doc};

    use super::*;
    use crate::testing::{draws, top};

    /// Fails naming the first hit where `found` and `want` differ.
    fn same(found: &[(u32, DocAddress)], want: &[(u32, DocAddress)], case: &str) {
        let first = found.iter().zip(want).position(|(a, b)| a != b);
        if let Some(at) = first {
            let (a, b) = (found[at], want[at]);
            panic!(
                "{case}: hit {at}: {} {:?} against {} {:?}",
                f32::from_bits(a.0),
                a.1,
                f32::from_bits(b.0),
                b.1
            );
        }
        assert_eq!(found.len(), want.len(), "{case}: hits");
    }

    /// Random clauses (terms at constant scores, as the search's are, some of them absent
    /// from a segment or from all) joined by `AnyOf` and by tantivy's `BooleanQuery` of
    /// `Should` clauses, alone and inside an intersection, over several segments: both find
    /// the same documents with the same scores, in the same order.
    #[test]
    fn any_of_ranks_as_a_boolean_union() {
        let mut schema = Schema::builder();
        let body = schema.add_text_field("body", TEXT);
        let tag = schema.add_text_field("tag", TEXT);
        let index = Index::create_in_ram(schema.build());
        let mut writer: IndexWriter = index.writer_with_num_threads(1, 15_000_000).unwrap();
        let mut draw = draws(9);
        for segment in 0..3 {
            for _ in 0..2_000 {
                let words: Vec<String> =
                    (0..1 + draw(6)).map(|_| format!("w{}", draw(40))).collect();
                let tag_word = format!("t{}", draw(5));
                writer
                    .add_document(doc!(body => words.join(" "), tag => tag_word))
                    .unwrap();
            }
            writer.commit().unwrap();
            assert_eq!(index.searchable_segment_ids().unwrap().len(), segment + 1);
        }
        let searcher = index.reader().unwrap().searcher();
        let term = |field, text: String| -> Box<dyn Query> {
            let term = tantivy::Term::from_field_text(field, &text);
            Box::new(TermQuery::new(term, IndexRecordOption::WithFreqs))
        };
        let top = |query: &dyn Query| top(&searcher, query, 20_000);
        for case in 0..200 {
            let n_clauses = 1 + draw(4) as usize;
            let clauses: Vec<Box<dyn Query>> = (0..n_clauses)
                .map(|_| {
                    // Some words no document has, so some segments have empty clauses.
                    let word = term(body, format!("w{}", draw(45)));
                    let score = [1.0, 2.0, 4.0, 8.0][draw(4) as usize];
                    Box::new(ConstScoreQuery::new(word, score)) as Box<dyn Query>
                })
                .collect();
            let should = clauses
                .iter()
                .map(|c| (Occur::Should, c.box_clone()))
                .collect();
            let boolean: Box<dyn Query> = Box::new(BooleanQuery::new(should));
            let any_of: Box<dyn Query> = Box::new(AnyOf::new(clauses));
            let within = |query: Box<dyn Query>| -> Box<dyn Query> {
                Box::new(BooleanQuery::new(vec![
                    (Occur::Must, term(tag, format!("t{}", case % 5))),
                    (Occur::Must, query),
                ]))
            };
            let want = top(&*boolean);
            same(&top(&*any_of), &want, &format!("case {case}: {any_of:?}"));
            same(
                &top(&*within(any_of)),
                &top(&*within(boolean)),
                &format!("case {case} within"),
            );
            if case == 0 {
                assert!(!want.is_empty(), "the first case matches nothing");
            }
        }
    }
}
