//! Queries as the AppView passes them: free text with operators, checked for length.
//!
//! A post query's words may carry operators, as the reference dataplane and Bluesky's search
//! read them (`parsePostSearchQuery`): `from:HANDLE` or `from:DID` (also `from:me`, resolved by
//! the caller), a bare `did:…` (the author), `since:DATE` (inclusive), `until:DATE` (exclusive),
//! `lang:CODE`. A date is `YYYY-MM-DD` (midnight UTC) or an RFC 3339 datetime.

use starling_core::syntax;

use crate::{QUERY_BYTES_MAX, SearchError};

/// Checks a query's length.
fn check_length(text: &str) -> Result<(), SearchError> {
    if text.len() > QUERY_BYTES_MAX {
        return Err(SearchError::QueryTooLong {
            len: text.len(),
            max: QUERY_BYTES_MAX,
        });
    }
    Ok(())
}

/// An actor query: the text as typed, lowercased, without a leading `@`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ActorQuery {
    text: String,
}

impl ActorQuery {
    /// Checks and normalises `term`.
    pub fn parse(term: &str) -> Result<ActorQuery, SearchError> {
        check_length(term)?;
        let text = term.trim();
        let text = text.strip_prefix('@').unwrap_or(text);
        Ok(ActorQuery {
            text: text.to_lowercase(),
        })
    }

    /// The normalised text.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// The text as a handle prefix, if it could start one (letters, digits, `.` and `-`).
    pub fn handle_prefix(&self) -> Option<&str> {
        let ok = !self.text.is_empty()
            && self
                .text
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-');
        ok.then_some(self.text.as_str())
    }
}

/// A query of words against a name and a description (starter packs, feed generators).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WordsQuery {
    text: String,
}

impl WordsQuery {
    /// Checks `term`.
    pub fn parse(term: &str) -> Result<WordsQuery, SearchError> {
        check_length(term)?;
        Ok(WordsQuery {
            text: term.trim().to_owned(),
        })
    }

    /// The text.
    pub fn text(&self) -> &str {
        &self.text
    }
}

/// A post query: free text and filters.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PostQuery {
    /// The free text (words without operators).
    pub text: String,
    /// `from:` or a bare DID: a handle or a DID, as given (`me` for the viewer).
    pub author: Option<String>,
    /// `since:` in microseconds, inclusive.
    pub since_us: Option<i64>,
    /// `until:` in microseconds, exclusive.
    pub until_us: Option<i64>,
    /// `lang:`, lowercased.
    pub lang: Option<String>,
}

impl PostQuery {
    /// Parses `term` with its operators.
    pub fn parse(term: &str) -> Result<PostQuery, SearchError> {
        check_length(term)?;
        let mut res = PostQuery::default();
        let mut words = Vec::new();
        for part in term.split_whitespace() {
            match part.split_once(':') {
                Some(("from", author)) if !author.is_empty() => {
                    res.author = Some(author.trim_start_matches('@').to_lowercase());
                }
                Some(("did", _)) if syntax::is_valid_did(part) => {
                    res.author = Some(part.to_owned())
                }
                Some(("since", date)) => res.since_us = Some(parse_date("since", date)?),
                Some(("until", date)) => res.until_us = Some(parse_date("until", date)?),
                Some(("lang", lang)) => {
                    if !syntax::is_valid_language(lang) {
                        return Err(SearchError::BadOperator {
                            operator: "lang",
                            value: lang.to_owned(),
                            expected: "a language tag such as `en` or `pt-BR`",
                        });
                    }
                    res.lang = Some(lang.to_lowercase());
                }
                _ => words.push(part),
            }
        }
        res.text = words.join(" ");
        Ok(res)
    }
}

/// A `since:`/`until:` value in microseconds.
pub fn parse_date(operator: &'static str, value: &str) -> Result<i64, SearchError> {
    let parsed = if value.len() == 10 {
        syntax::parse_datetime_micros(&format!("{value}T00:00:00Z"))
    } else {
        syntax::parse_datetime_micros(value)
    };
    parsed.ok_or_else(|| SearchError::BadOperator {
        operator,
        value: value.chars().take(64).collect(),
        expected: "a date `YYYY-MM-DD` or an RFC 3339 datetime",
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    // Checks the operators of a post query: each is taken out of the text, dates parse both
    // ways, a bad one is an error naming it.
    #[test]
    fn post_operators_are_parsed_out_of_the_text() {
        let q = PostQuery::parse("rust from:@Alice.test  lang:EN since:2026-01-02 ferris").unwrap();
        assert_eq!(q.text, "rust ferris");
        assert_eq!(q.author.as_deref(), Some("alice.test"));
        assert_eq!(q.lang.as_deref(), Some("en"));
        assert_eq!(
            q.since_us,
            syntax::parse_datetime_micros("2026-01-02T00:00:00Z")
        );
        let q = PostQuery::parse("did:plc:abcdefghijklmnopqrstuvwx until:2026-01-02T10:00:00Z")
            .unwrap();
        assert_eq!(
            q.author.as_deref(),
            Some("did:plc:abcdefghijklmnopqrstuvwx")
        );
        assert!(q.until_us.is_some());
        assert!(q.text.is_empty());
        let err = PostQuery::parse("since:yesterday").unwrap_err();
        assert!(err.to_string().contains("since:yesterday"), "{err}");
        let err = PostQuery::parse(&"a".repeat(QUERY_BYTES_MAX + 1)).unwrap_err();
        assert!(matches!(err, SearchError::QueryTooLong { .. }), "{err}");
    }

    // Checks actor queries: `@` and case are dropped; only handle characters make a prefix.
    #[test]
    fn actor_queries_are_normalised() {
        let q = ActorQuery::parse(" @Alice.Te ").unwrap();
        assert_eq!(q.text(), "alice.te");
        assert_eq!(q.handle_prefix(), Some("alice.te"));
        assert_eq!(
            ActorQuery::parse("alice smith").unwrap().handle_prefix(),
            None
        );
        assert_eq!(ActorQuery::parse("").unwrap().handle_prefix(), None);
    }
}
