//! Terms starting with a prefix, as a tantivy query: the term dictionary (an FST) is walked
//! with a five-line automaton. A `RegexQuery` of `prefix.*` finds the same terms, but builds a
//! DFA for every query, which took about a fifth of a typeahead request's time.

use std::sync::Arc;

use tantivy::query::{AutomatonWeight, EnableScoring, Query, Weight};
use tantivy::schema::Field;
use tantivy_fst::Automaton;

/// Matches the terms of `field` that start with `prefix` (every term, for an empty prefix),
/// each scored 1 (callers wrap it in a `ConstScoreQuery`).
#[derive(Clone, Debug)]
pub(crate) struct PrefixQuery {
    field: Field,
    prefix: Arc<Prefix>,
}

impl PrefixQuery {
    pub(crate) fn new(field: Field, prefix: &str) -> PrefixQuery {
        PrefixQuery {
            field,
            prefix: Arc::new(Prefix(prefix.as_bytes().to_vec())),
        }
    }
}

impl Query for PrefixQuery {
    fn weight(&self, _scoring: EnableScoring<'_>) -> tantivy::Result<Box<dyn Weight>> {
        Ok(Box::new(AutomatonWeight::<Prefix>::new(
            self.field,
            self.prefix.clone(),
        )))
    }
}

/// The automaton: its state is how many bytes of the prefix matched so far, `None` once a
/// byte differs.
#[derive(Debug)]
struct Prefix(Vec<u8>);

impl Automaton for Prefix {
    type State = Option<usize>;

    fn start(&self) -> Option<usize> {
        Some(0)
    }

    fn is_match(&self, state: &Option<usize>) -> bool {
        *state == Some(self.0.len())
    }

    fn can_match(&self, state: &Option<usize>) -> bool {
        state.is_some()
    }

    fn will_always_match(&self, state: &Option<usize>) -> bool {
        self.is_match(state)
    }

    fn accept(&self, state: &Option<usize>, byte: u8) -> Option<usize> {
        match *state {
            Some(n) if n == self.0.len() => Some(n),
            Some(n) if self.0.get(n) == Some(&byte) => Some(n + 1),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn matches(prefix: &str, term: &str) -> bool {
        let automaton = Prefix(prefix.as_bytes().to_vec());
        let mut state = automaton.start();
        for &byte in term.as_bytes() {
            state = automaton.accept(&state, byte);
        }
        automaton.is_match(&state)
    }

    // Against `str::starts_with`, on prefixes and terms of several lengths, bytes beyond ASCII
    // included.
    #[test]
    fn the_automaton_accepts_exactly_the_terms_with_the_prefix() {
        let words = [
            "", "a", "al", "alice", "alicé", "bob", "é", "éa", "ali.ce", "alicea",
        ];
        for prefix in words {
            for term in words {
                assert_eq!(
                    matches(prefix, term),
                    term.starts_with(prefix),
                    "{prefix:?} {term:?}"
                );
            }
        }
    }
}
