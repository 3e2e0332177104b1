//! The union of a few document sets, stepped through directly: at each step, the smallest
//! document any of them is at. Both of the search's own queries use it: the postings of a
//! prefix's few terms (`prefix.rs`) and the clauses of an any-of (`any_of.rs`).

use tantivy::{DocId, DocSet, TERMINATED};

/// The documents of `parts`, in increasing order, without repeats; a seek seeks each part.
pub(crate) struct Union<D> {
    parts: Vec<D>,
    doc: DocId,
}

impl<D: DocSet> Union<D> {
    pub(crate) fn new(parts: Vec<D>) -> Union<D> {
        let mut union = Union {
            parts,
            doc: TERMINATED,
        };
        union.doc = union.first();
        union
    }

    /// The parts at the current document (and others), for a score of those that match it.
    pub(crate) fn parts_mut(&mut self) -> &mut [D] {
        &mut self.parts
    }

    /// The smallest document any part is at.
    fn first(&self) -> DocId {
        self.parts
            .iter()
            .map(DocSet::doc)
            .min()
            .unwrap_or(TERMINATED)
    }
}

impl<D: DocSet> DocSet for Union<D> {
    fn advance(&mut self) -> DocId {
        let at = self.doc;
        if at == TERMINATED {
            return at;
        }
        for part in &mut self.parts {
            if part.doc() == at {
                part.advance();
            }
        }
        self.doc = self.first();
        self.doc
    }

    fn seek(&mut self, target: DocId) -> DocId {
        for part in &mut self.parts {
            if part.doc() < target {
                part.seek(target);
            }
        }
        self.doc = self.first();
        self.doc
    }

    fn doc(&self) -> DocId {
        self.doc
    }

    /// The parts' sizes added up: at most the union's, exactly when they share no document.
    fn size_hint(&self) -> u32 {
        self.parts
            .iter()
            .fold(0, |sum, part| sum.saturating_add(part.size_hint()))
    }
}
