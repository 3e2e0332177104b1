//! Two query wrappers that keep a search's cost to the segments and statistics it needs.
//!
//! - [`Constant`] scores its documents a constant, as tantivy's `ConstScoreQuery` does, but
//!   weighs its inner query with scoring off. Tantivy's version weighs it with scoring on, so
//!   every term query inside computed BM25 statistics it then threw away: a term dictionary
//!   lookup in every segment, per term, per search.
//! - [`OfKind`] matches the documents of one kind that its inner query matches, and skips a
//!   segment that has no document of that kind before building any of the inner query's
//!   scorers. The index holds every kind in one schema, so most segments hold posts alone; a
//!   SearchActors query built a scorer per clause in each of them, and tantivy builds a new
//!   empty term dictionary for each field a segment lacks (an actor's handle, in a segment of
//!   posts) every time it is asked.

use tantivy::query::{
    BooleanQuery, ConstScorer, EmptyScorer, EnableScoring, Explanation, Occur, Query, Scorer,
    TermQuery, Weight,
};
use tantivy::schema::IndexRecordOption;
use tantivy::{DocId, DocSet, Score, SegmentReader, TantivyError, Term};

/// Matches what its inner query matches, each document scored `score`.
#[derive(Debug)]
pub(crate) struct Constant {
    inner: Box<dyn Query>,
    score: Score,
}

impl Constant {
    pub(crate) fn new(inner: Box<dyn Query>, score: Score) -> Constant {
        Constant { inner, score }
    }
}

impl Clone for Constant {
    fn clone(&self) -> Constant {
        Constant::new(self.inner.box_clone(), self.score)
    }
}

impl Query for Constant {
    fn weight(&self, scoring: EnableScoring<'_>) -> tantivy::Result<Box<dyn Weight>> {
        let unscored = match scoring.searcher() {
            Some(searcher) => EnableScoring::disabled_from_searcher(searcher),
            None => EnableScoring::disabled_from_schema(scoring.schema()),
        };
        Ok(Box::new(ConstantWeight {
            inner: self.inner.weight(unscored)?,
            score: self.score,
        }))
    }

    fn query_terms<'a>(&'a self, visitor: &mut dyn FnMut(&'a Term, bool)) {
        self.inner.query_terms(visitor);
    }
}

struct ConstantWeight {
    inner: Box<dyn Weight>,
    score: Score,
}

impl Weight for ConstantWeight {
    fn scorer(&self, reader: &SegmentReader, boost: Score) -> tantivy::Result<Box<dyn Scorer>> {
        let docs = self.inner.scorer(reader, boost)?;
        Ok(Box::new(ConstScorer::new(docs, self.score * boost)))
    }

    fn explain(&self, reader: &SegmentReader, doc: DocId) -> tantivy::Result<Explanation> {
        let mut docs = self.inner.scorer(reader, 1.0)?;
        if docs.seek(doc) != doc {
            return Err(TantivyError::InvalidArgument(format!(
                "document {doc} does not match"
            )));
        }
        Ok(Explanation::new("constant", self.score))
    }

    fn count(&self, reader: &SegmentReader) -> tantivy::Result<u32> {
        self.inner.count(reader)
    }
}

/// The documents of one kind (a term of the kind field) that `inner` matches, scored as
/// `inner` scores them.
#[derive(Debug)]
pub(crate) struct OfKind {
    kind: Term,
    both: BooleanQuery,
}

impl OfKind {
    pub(crate) fn new(kind: Term, inner: Box<dyn Query>) -> OfKind {
        let kind_docs = TermQuery::new(kind.clone(), IndexRecordOption::Basic);
        let both = BooleanQuery::new(vec![
            (
                Occur::Must,
                Box::new(Constant::new(Box::new(kind_docs), 0.0)),
            ),
            (Occur::Must, inner),
        ]);
        OfKind { kind, both }
    }
}

impl Clone for OfKind {
    fn clone(&self) -> OfKind {
        OfKind {
            kind: self.kind.clone(),
            both: self.both.clone(),
        }
    }
}

impl Query for OfKind {
    fn weight(&self, scoring: EnableScoring<'_>) -> tantivy::Result<Box<dyn Weight>> {
        Ok(Box::new(OfKindWeight {
            kind: self.kind.clone(),
            both: self.both.weight(scoring)?,
        }))
    }

    fn query_terms<'a>(&'a self, visitor: &mut dyn FnMut(&'a Term, bool)) {
        self.both.query_terms(visitor);
    }
}

struct OfKindWeight {
    kind: Term,
    both: Box<dyn Weight>,
}

/// Whether `segment` holds a document of `kind` (a term of the kind field). The kind field is
/// in every document, so its inverted index is one tantivy keeps open.
pub(crate) fn holds_kind(segment: &SegmentReader, kind: &Term) -> tantivy::Result<bool> {
    let index = segment.inverted_index(kind.field())?;
    Ok(index.doc_freq(kind)? > 0)
}

impl Weight for OfKindWeight {
    fn scorer(&self, reader: &SegmentReader, boost: Score) -> tantivy::Result<Box<dyn Scorer>> {
        if !holds_kind(reader, &self.kind)? {
            return Ok(Box::new(EmptyScorer));
        }
        self.both.scorer(reader, boost)
    }

    fn explain(&self, reader: &SegmentReader, doc: DocId) -> tantivy::Result<Explanation> {
        self.both.explain(reader, doc)
    }

    fn count(&self, reader: &SegmentReader) -> tantivy::Result<u32> {
        if !holds_kind(reader, &self.kind)? {
            return Ok(0);
        }
        self.both.count(reader)
    }

    fn for_each(
        &self,
        reader: &SegmentReader,
        callback: &mut dyn FnMut(DocId, Score),
    ) -> tantivy::Result<()> {
        if !holds_kind(reader, &self.kind)? {
            return Ok(());
        }
        self.both.for_each(reader, callback)
    }

    fn for_each_no_score(
        &self,
        reader: &SegmentReader,
        callback: &mut dyn FnMut(&[DocId]),
    ) -> tantivy::Result<()> {
        if !holds_kind(reader, &self.kind)? {
            return Ok(());
        }
        self.both.for_each_no_score(reader, callback)
    }

    fn for_each_pruning(
        &self,
        threshold: Score,
        reader: &SegmentReader,
        callback: &mut dyn FnMut(DocId, Score) -> Score,
    ) -> tantivy::Result<()> {
        if !holds_kind(reader, &self.kind)? {
            return Ok(());
        }
        self.both.for_each_pruning(threshold, reader, callback)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing)]

    use tantivy::collector::Count;
    use tantivy::query::ConstScoreQuery;
    use tantivy::schema::{STRING, Schema, TEXT};
    use tantivy::{Index, IndexWriter, doc};

    use super::*;
    use crate::testing::{draws, top};

    /// Random queries over segments of which only some hold the kind searched for: wrapped in
    /// [`OfKind`] and [`Constant`], and written as before with tantivy's `BooleanQuery` and
    /// `ConstScoreQuery`, they find the same documents with the same scores in the same order,
    /// and count as many.
    #[test]
    fn of_kind_and_constant_rank_as_tantivy_queries() {
        let mut schema = Schema::builder();
        let kind = schema.add_text_field("kind", STRING);
        let body = schema.add_text_field("body", TEXT);
        let index = Index::create_in_ram(schema.build());
        let mut writer: IndexWriter = index.writer_with_num_threads(1, 15_000_000).unwrap();
        let mut draw = draws(11);
        // Segment 1 holds no actor, segment 3 only actors.
        let actors_per_mille = [300, 0, 500, 1000];
        for (segment, per_mille) in actors_per_mille.into_iter().enumerate() {
            for _ in 0..1_500 {
                let words: Vec<String> =
                    (0..1 + draw(5)).map(|_| format!("w{}", draw(30))).collect();
                let of = if draw(1000) < per_mille {
                    "actor"
                } else {
                    "post"
                };
                writer
                    .add_document(doc!(kind => of, body => words.join(" ")))
                    .unwrap();
            }
            writer.commit().unwrap();
            assert_eq!(index.searchable_segment_ids().unwrap().len(), segment + 1);
        }
        let searcher = index.reader().unwrap().searcher();
        let word = |text: String| -> Box<dyn Query> {
            let term = Term::from_field_text(body, &text);
            Box::new(TermQuery::new(term, IndexRecordOption::WithFreqs))
        };
        let top = |query: &dyn Query| top(&searcher, query, 10_000);
        let mut matched = 0;
        for case in 0..150 {
            let of = ["actor", "post", "none"][case % 3];
            let kind_term = Term::from_field_text(kind, of);
            let (mut ours, mut theirs) = (Vec::new(), Vec::new());
            for _ in 0..1 + draw(3) {
                let text = format!("w{}", draw(35));
                let score = [1.0, 2.0, 4.0][draw(3) as usize];
                // Every other clause keeps BM25, as a post search's words do.
                if draw(2) == 0 {
                    ours.push((Occur::Must, word(text.clone())));
                    theirs.push((Occur::Must, word(text)));
                } else {
                    let constant: Box<dyn Query> =
                        Box::new(Constant::new(word(text.clone()), score));
                    ours.push((Occur::Must, constant));
                    theirs.push((
                        Occur::Must,
                        Box::new(ConstScoreQuery::new(word(text), score)),
                    ));
                }
            }
            let ours = OfKind::new(kind_term.clone(), Box::new(BooleanQuery::new(ours)));
            let kind_docs = TermQuery::new(kind_term, IndexRecordOption::WithFreqs);
            theirs.push((
                Occur::Must,
                Box::new(ConstScoreQuery::new(Box::new(kind_docs), 0.0)),
            ));
            let theirs = BooleanQuery::new(theirs);
            let want = top(&theirs);
            assert_eq!(top(&ours), want, "case {case}: {ours:?}");
            let count = searcher.search(&ours, &Count).unwrap();
            assert_eq!(count, want.len(), "case {case}: count");
            if of == "none" {
                assert!(
                    want.is_empty(),
                    "case {case}: a kind no document has matched"
                );
            }
            matched += usize::from(!want.is_empty());
        }
        assert!(matched > 50, "only {matched} of 150 cases matched anything");
    }
}
