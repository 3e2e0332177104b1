//! The tantivy index: one schema for every kind of document, one writer, a reader reloaded at
//! each commit.

use std::cmp::Reverse;
use std::ops::Bound;
use std::path::Path;
use std::sync::{Mutex, MutexGuard};

use tantivy::collector::TopDocs;
use tantivy::columnar::Column;
use tantivy::directory::MmapDirectory;
use tantivy::fastfield::FastFieldReaders;
use tantivy::query::{AllQuery, BooleanQuery, Occur, Query, RangeQuery, TermQuery};
use tantivy::schema::{
    FAST, Field, INDEXED, IndexRecordOption, STORED, STRING, Schema, TEXT, Value,
};
use tantivy::{
    DocAddress, Index, IndexReader, IndexWriter, ReloadPolicy, Searcher, TantivyDocument, Term,
};

use crate::any_of::AnyOf;
use crate::estimate::{Estimate, term_docs};
use crate::prefix::PrefixQuery;
use crate::query::{ActorQuery, PostQuery, WordsQuery};
use crate::scoped::{Constant, OfKind, holds_kind};
use crate::{
    ActorDoc, OFFSET_MAX, PAGE_LIMIT_MAX, PostDoc, QUERY_WORDS_MAX, RecordDoc, RecordKind,
    SearchError, WRITER_BYTES_MAX, tie_key,
};

/// The commit payload's prefix; the rest is the Jetstream cursor the index covers.
const PAYLOAD_PREFIX: &str = "starling-search 1 cursor=";

/// Score of an actor whose handle is the query.
const SCORE_HANDLE_EXACT: f32 = 8.0;
/// Score of an actor whose handle starts with the query.
const SCORE_HANDLE_PREFIX: f32 = 4.0;
/// Score of a query word that starts a word of a name.
const SCORE_NAME_PREFIX: f32 = 2.0;
/// Score of a query word found in a description.
const SCORE_DESCRIPTION: f32 = 1.0;

/// The fields of the one schema.
#[derive(Clone, Copy)]
struct Fields {
    /// DID or URI: the key of every document (stored, and the delete term).
    id: Field,
    /// `actor`, `post`, `starterpack`, `generator`.
    kind: Field,
    /// Tie-break key ([`tie_key`] of the id).
    tie: Field,
    /// `sort_at` of records.
    sort_at: Field,
    /// An actor's handle, lowercased, untokenized.
    handle: Field,
    /// An actor's display name, a starter pack's or a feed's name.
    name: Field,
    /// Descriptions.
    description: Field,
    /// A post's text.
    text: Field,
    /// A post's author DID.
    author: Field,
    /// A post's languages.
    lang: Field,
}

fn schema() -> (Schema, Fields) {
    let mut builder = Schema::builder();
    let fields = Fields {
        id: builder.add_text_field("id", STRING | STORED),
        kind: builder.add_text_field("kind", STRING),
        tie: builder.add_u64_field("tie", FAST),
        sort_at: builder.add_i64_field("sort_at", INDEXED | FAST),
        handle: builder.add_text_field("handle", STRING),
        name: builder.add_text_field("name", TEXT),
        description: builder.add_text_field("description", TEXT),
        text: builder.add_text_field("text", TEXT),
        author: builder.add_text_field("author", STRING),
        lang: builder.add_text_field("lang", STRING),
    };
    (builder.build(), fields)
}

/// A page asked for: skip `offset` results, return at most `limit`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Page {
    /// Results skipped (the cursor).
    pub offset: usize,
    /// Results wanted.
    pub limit: usize,
}

impl Page {
    /// Checks the bounds: `offset <= OFFSET_MAX`, `1 <= limit <= PAGE_LIMIT_MAX`.
    pub fn new(offset: usize, limit: usize) -> Result<Page, SearchError> {
        if offset > OFFSET_MAX || limit == 0 || limit > PAGE_LIMIT_MAX {
            return Err(SearchError::BadPage { offset, limit });
        }
        Ok(Page { offset, limit })
    }
}

/// How posts are ordered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PostSort {
    /// BM25, then newest.
    Top,
    /// Newest first.
    Latest,
}

/// One result.
#[derive(Clone, Debug, PartialEq)]
pub struct Hit {
    /// DID or URI.
    pub id: String,
    /// The ranking score (for `latest`, the score of the match all the same).
    pub score: f64,
}

/// A page of results.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Hits {
    /// The results, best first.
    pub hits: Vec<Hit>,
    /// The offset of the next page, if there may be one.
    pub next_offset: Option<usize>,
}

/// The search index: written by one caller (ingest), read by many (the API).
pub struct SearchIndex {
    index: Index,
    reader: IndexReader,
    writer: Mutex<Writer>,
    fields: Fields,
}

struct Writer {
    writer: IndexWriter<TantivyDocument>,
    /// Documents added or deleted since the last commit.
    pending: usize,
}

/// A post filter the caller resolved: the author's DID rather than a handle.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PostFilter {
    /// Only posts by this DID.
    pub author: Option<String>,
    /// Only posts whose `sort_at` is at or after this.
    pub since_us: Option<i64>,
    /// Only posts whose `sort_at` is before this.
    pub until_us: Option<i64>,
    /// Only posts tagged with this language.
    pub lang: Option<String>,
}

impl SearchIndex {
    /// Opens the index in `dir`, creating it (empty) when absent; also returns the cursor its
    /// last commit covered (`None` for a new or never committed index: rebuild it).
    pub fn open(dir: &Path) -> Result<(SearchIndex, Option<u64>), SearchError> {
        std::fs::create_dir_all(dir)
            .map_err(|err| SearchError::Engine(format!("creating {}: {err}", dir.display())))?;
        let directory = MmapDirectory::open(dir)
            .map_err(|err| SearchError::Engine(format!("opening {}: {err}", dir.display())))?;
        let (schema, fields) = schema();
        let index = Index::open_or_create(directory, schema)?;
        let covered = index
            .load_metas()?
            .payload
            .and_then(|payload| payload.strip_prefix(PAYLOAD_PREFIX)?.parse().ok());
        let writer = index.writer_with_num_threads(1, WRITER_BYTES_MAX)?;
        let reader = index
            .reader_builder()
            .reload_policy(ReloadPolicy::Manual)
            .try_into()?;
        let res = SearchIndex {
            index,
            reader,
            writer: Mutex::new(Writer { writer, pending: 0 }),
            fields,
        };
        Ok((res, covered))
    }

    fn writer(&self) -> MutexGuard<'_, Writer> {
        self.writer
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Removes every document (before a rebuild); takes effect at the next commit.
    pub fn clear(&self) -> Result<(), SearchError> {
        let mut writer = self.writer();
        writer.writer.delete_all_documents()?;
        writer.pending += 1;
        Ok(())
    }

    /// Removes the document of `id` (a DID or a URI), if any.
    pub fn delete(&self, id: &str) {
        let mut writer = self.writer();
        writer
            .writer
            .delete_term(Term::from_field_text(self.fields.id, id));
        writer.pending += 1;
    }

    fn replace(&self, id: &str, doc: TantivyDocument) -> Result<(), SearchError> {
        let mut writer = self.writer();
        writer
            .writer
            .delete_term(Term::from_field_text(self.fields.id, id));
        writer.writer.add_document(doc)?;
        writer.pending += 1;
        Ok(())
    }

    fn base_doc(&self, id: &str, kind: &str) -> TantivyDocument {
        let f = self.fields;
        let mut doc = TantivyDocument::default();
        doc.add_text(f.id, id);
        doc.add_text(f.kind, kind);
        doc.add_u64(f.tie, tie_key(id));
        doc
    }

    /// Adds or replaces an actor; one with nothing to find it by is removed.
    pub fn put_actor(&self, actor: &ActorDoc) -> Result<(), SearchError> {
        if !actor.is_searchable() {
            self.delete(&actor.did);
            return Ok(());
        }
        let f = self.fields;
        let mut doc = self.base_doc(&actor.did, "actor");
        if let Some(handle) = &actor.handle {
            doc.add_text(f.handle, handle);
        }
        doc.add_text(f.name, &actor.display_name);
        doc.add_text(f.description, &actor.description);
        self.replace(&actor.did, doc)
    }

    /// Adds or replaces a post.
    pub fn put_post(&self, post: &PostDoc) -> Result<(), SearchError> {
        let f = self.fields;
        let mut doc = self.base_doc(&post.uri, "post");
        doc.add_text(f.text, &post.text);
        doc.add_text(f.author, &post.author);
        for lang in &post.langs {
            doc.add_text(f.lang, lang);
        }
        doc.add_i64(f.sort_at, post.sort_at_us);
        self.replace(&post.uri, doc)
    }

    /// Adds or replaces a starter pack or a feed generator.
    pub fn put_record(&self, record: &RecordDoc) -> Result<(), SearchError> {
        let f = self.fields;
        let mut doc = self.base_doc(&record.uri, record.kind.as_str());
        doc.add_text(f.name, &record.name);
        doc.add_text(f.description, &record.description);
        doc.add_i64(f.sort_at, record.sort_at_us);
        self.replace(&record.uri, doc)
    }

    /// Documents added or removed since the last commit.
    pub fn pending(&self) -> usize {
        self.writer().pending
    }

    /// Makes every change so far durable and visible, recording that the index covers the
    /// store up to `cursor`.
    pub fn commit(&self, cursor: Option<u64>) -> Result<(), SearchError> {
        let mut writer = self.writer();
        let mut prepared = writer.writer.prepare_commit()?;
        if let Some(cursor) = cursor {
            prepared.set_payload(&format!("{PAYLOAD_PREFIX}{cursor}"));
        }
        prepared.commit()?;
        writer.pending = 0;
        drop(writer);
        self.reader.reload()?;
        Ok(())
    }

    /// Documents visible to searches, of every kind.
    pub fn n_docs(&self) -> u64 {
        self.reader.searcher().num_docs()
    }

    /// The words of `text` as the index splits them (the `name` field's analyzer).
    fn words(&self, text: &str) -> Result<Vec<String>, SearchError> {
        let mut analyzer = self.index.tokenizer_for_field(self.fields.name)?;
        let mut stream = analyzer.token_stream(text);
        let mut words = Vec::new();
        while stream.advance() {
            words.push(stream.token().text.clone());
        }
        if words.len() > QUERY_WORDS_MAX {
            return Err(SearchError::TooManyWords {
                n_words: words.len(),
                max: QUERY_WORDS_MAX,
            });
        }
        words.dedup();
        Ok(words)
    }

    fn term(&self, field: Field, text: &str) -> Box<dyn Query> {
        Box::new(TermQuery::new(
            Term::from_field_text(field, text),
            IndexRecordOption::WithFreqs,
        ))
    }

    /// The terms of `field` starting with `prefix`, those of the segments `estimate` read in
    /// full taken from there.
    fn prefix(&self, field: Field, prefix: &str, estimate: &Estimate) -> Box<dyn Query> {
        Box::new(PrefixQuery::new(
            field,
            prefix,
            estimate.walked(field, prefix),
        ))
    }

    /// The documents of `kind` that `inner` matches.
    fn of_kind(&self, kind: &str, inner: Box<dyn Query>) -> OfKind {
        OfKind::new(Term::from_field_text(self.fields.kind, kind), inner)
    }

    /// Every word must start a word of the name or be in the description: `+2` and `+1`.
    fn words_clause(&self, words: &[String], estimate: &Estimate) -> Box<dyn Query> {
        let f = self.fields;
        let mut must = Vec::new();
        for word in words {
            let name: Box<dyn Query> = Box::new(Constant::new(
                self.prefix(f.name, word, estimate),
                SCORE_NAME_PREFIX,
            ));
            let description: Box<dyn Query> = Box::new(Constant::new(
                self.term(f.description, word),
                SCORE_DESCRIPTION,
            ));
            let either = AnyOf::new(vec![name, description]);
            must.push((Occur::Must, Box::new(either) as Box<dyn Query>));
        }
        Box::new(BooleanQuery::new(must))
    }

    /// Actors matching `query`, ranked as the crate documents.
    pub fn search_actors(&self, query: &ActorQuery, page: Page) -> Result<Hits, SearchError> {
        self.prepare_actors(query, 0)?.run(page)
    }

    /// `query` made ready to run, with the bound of [`ActorSearch::is_narrow`] against
    /// `narrow_max` matches; the bound and the search split the query into words, take a
    /// searcher and walk the prefixes of the dictionaries once between them.
    pub fn prepare_actors(
        &self,
        query: &ActorQuery,
        narrow_max: u64,
    ) -> Result<ActorSearch, SearchError> {
        let words = self.words(query.text())?;
        let searcher = self.reader.searcher();
        let mut estimate = Estimate::new();
        let narrow = self.actors_at_most(&searcher, query, &words, narrow_max, &mut estimate)?;
        let f = self.fields;
        let mut any: Vec<Box<dyn Query>> = Vec::new();
        if let Some(prefix) = query.handle_prefix() {
            any.push(Box::new(Constant::new(
                self.term(f.handle, prefix),
                SCORE_HANDLE_EXACT,
            )));
            any.push(Box::new(Constant::new(
                self.prefix(f.handle, prefix, &estimate),
                SCORE_HANDLE_PREFIX,
            )));
        }
        if !words.is_empty() {
            any.push(self.words_clause(&words, &estimate));
        }
        let query = (!any.is_empty()).then(|| self.of_kind("actor", Box::new(AnyOf::new(any))));
        Ok(ActorSearch {
            searcher,
            query,
            id: f.id,
            narrow,
        })
    }

    /// Whether `query` (split into `words`) can match at most `max` actors, by its terms'
    /// document counts (deleted documents included). It reads at most
    /// [`TERMS_READ_MAX`](crate::estimate::TERMS_READ_MAX) terms of the dictionaries, so a
    /// caller can afford it before choosing where to run the search; a query it cannot bound
    /// within them counts as broad.
    fn actors_at_most(
        &self,
        searcher: &Searcher,
        query: &ActorQuery,
        words: &[String],
        max: u64,
        estimate: &mut Estimate,
    ) -> Result<bool, SearchError> {
        let f = self.fields;
        let actor = Term::from_field_text(f.kind, "actor");
        let mut total = 0u64;
        for segment in searcher.segment_readers() {
            if !holds_kind(segment, &actor)? {
                continue;
            }
            let cap = max - total;
            if let Some(prefix) = query.handle_prefix() {
                match estimate.prefix_docs(segment, f.handle, prefix, cap)? {
                    Some(docs) => total += docs,
                    None => return Ok(false),
                }
            }
            // Every word must match, so the rarest word bounds the words' matches.
            let mut rarest: Option<u64> = None;
            for word in words {
                let cap = rarest.unwrap_or(cap).min(cap);
                let Some(names) = estimate.prefix_docs(segment, f.name, word, cap)? else {
                    return Ok(false);
                };
                let docs = names + term_docs(segment, f.description, word)?;
                rarest = Some(rarest.map_or(docs, |fewest| fewest.min(docs)));
            }
            total += rarest.unwrap_or(0);
            if total > max {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Starter packs or feed generators matching every word of `query`.
    pub fn search_records(
        &self,
        kind: RecordKind,
        query: &WordsQuery,
        page: Page,
    ) -> Result<Hits, SearchError> {
        let words = self.words(query.text())?;
        if words.is_empty() {
            return Ok(Hits::default());
        }
        let query = self.of_kind(kind.as_str(), self.words_clause(&words, &Estimate::new()));
        self.run(&query, page, true)
    }

    /// Every document of `kind`, newest first, at most `max` of them (suggested feeds).
    pub fn all_records(&self, kind: RecordKind, max: usize) -> Result<Vec<String>, SearchError> {
        let query = self.of_kind(
            kind.as_str(),
            Box::new(Constant::new(Box::new(AllQuery), 0.0)),
        );
        let limit = max.clamp(1, OFFSET_MAX);
        let hits = self.run(&query, Page { offset: 0, limit }, true)?;
        Ok(hits.hits.into_iter().map(|hit| hit.id).collect())
    }

    /// Posts matching `query`'s words and `filter`.
    pub fn search_posts(
        &self,
        query: &PostQuery,
        filter: &PostFilter,
        sort: PostSort,
        page: Page,
    ) -> Result<Hits, SearchError> {
        let f = self.fields;
        let words = self.words(&query.text)?;
        let filtered = filter.author.is_some()
            || filter.since_us.is_some()
            || filter.until_us.is_some()
            || filter.lang.is_some();
        if words.is_empty() && !filtered {
            return Ok(Hits::default());
        }
        let mut must = Vec::new();
        for word in &words {
            must.push((Occur::Must, self.term(f.text, word)));
        }
        let zero = |query: Box<dyn Query>| -> (Occur, Box<dyn Query>) {
            (Occur::Must, Box::new(Constant::new(query, 0.0)))
        };
        if let Some(author) = &filter.author {
            must.push(zero(self.term(f.author, author)));
        }
        if let Some(lang) = &filter.lang {
            must.push(zero(self.term(f.lang, lang)));
        }
        if filter.since_us.is_some() || filter.until_us.is_some() {
            let lower = filter.since_us.map_or(Bound::Unbounded, |v| {
                Bound::Included(Term::from_field_i64(f.sort_at, v))
            });
            let upper = filter.until_us.map_or(Bound::Unbounded, |v| {
                Bound::Excluded(Term::from_field_i64(f.sort_at, v))
            });
            must.push(zero(Box::new(RangeQuery::new(lower, upper))));
        }
        let query = self.of_kind("post", Box::new(BooleanQuery::new(must)));
        match sort {
            PostSort::Top => self.run(&query, page, true),
            PostSort::Latest => self.run_latest(&query, page),
        }
    }

    /// Runs `query`: score first, then newest when `by_time`, then the tie key.
    fn run(&self, query: &dyn Query, page: Page, by_time: bool) -> Result<Hits, SearchError> {
        top(
            &self.reader.searcher(),
            self.fields.id,
            query,
            page,
            by_time,
        )
    }

    /// Runs `query` newest first, then by the tie key.
    fn run_latest(&self, query: &dyn Query, page: Page) -> Result<Hits, SearchError> {
        let searcher = self.reader.searcher();
        let collector = TopDocs::with_limit(page.limit)
            .and_offset(page.offset)
            .tweak_score(move |segment: &tantivy::SegmentReader| {
                let mut keys = SortKeys::new(segment);
                move |doc: tantivy::DocId, score: tantivy::Score| {
                    (keys.time(doc), Reverse(keys.tie(doc)), score)
                }
            });
        let found = searcher.search(query, &collector)?;
        let scored = found
            .into_iter()
            .map(|((_, _, score), address)| (f64::from(score), address));
        hits(&searcher, self.fields.id, scored, page)
    }
}

/// An actor search made ready by [`SearchIndex::prepare_actors`]: it runs on the index as it
/// was then, whatever commits came since.
pub struct ActorSearch {
    searcher: Searcher,
    /// `None` when the query has nothing to search by.
    query: Option<OfKind>,
    id: Field,
    narrow: bool,
}

impl ActorSearch {
    /// Whether the search can match at most the number of actors it was prepared with, by
    /// the index's bound: never when it matches more, and possibly not when it matches fewer
    /// (deleted documents count, and a bound that would read too many terms gives up).
    pub fn is_narrow(&self) -> bool {
        self.narrow
    }

    /// A page of the matching actors, ranked as the crate documents.
    pub fn run(&self, page: Page) -> Result<Hits, SearchError> {
        match &self.query {
            Some(query) => top(&self.searcher, self.id, query, page, false),
            None => Ok(Hits::default()),
        }
    }
}

/// Runs `query` on `searcher`: score first, then newest when `by_time`, then the tie key.
fn top(
    searcher: &Searcher,
    id: Field,
    query: &dyn Query,
    page: Page,
    by_time: bool,
) -> Result<Hits, SearchError> {
    let collector = TopDocs::with_limit(page.limit)
        .and_offset(page.offset)
        .tweak_score(move |segment: &tantivy::SegmentReader| {
            let mut keys = SortKeys::new(segment);
            move |doc: tantivy::DocId, score: tantivy::Score| {
                let time = if by_time { keys.time(doc) } else { 0 };
                (score, time, Reverse(keys.tie(doc)))
            }
        });
    let found = searcher.search(query, &collector)?;
    let scored = found
        .into_iter()
        .map(|((score, _, _), address)| (f64::from(score), address));
    hits(searcher, id, scored, page)
}

/// The page of `scored` documents, each named by its `id` field.
fn hits(
    searcher: &Searcher,
    id: Field,
    scored: impl Iterator<Item = (f64, DocAddress)>,
    page: Page,
) -> Result<Hits, SearchError> {
    let mut hits = Vec::new();
    for (score, address) in scored {
        let doc: TantivyDocument = searcher.doc(address)?;
        let id = doc
            .get_first(id)
            .and_then(|value| value.as_str())
            .ok_or_else(|| SearchError::Engine(format!("document {address:?} has no id")))?;
        hits.push(Hit {
            id: id.to_owned(),
            score,
        });
    }
    let end = page.offset + hits.len();
    let next_offset = (hits.len() == page.limit && end < OFFSET_MAX).then_some(end);
    Ok(Hits { hits, next_offset })
}

/// A segment's sort keys, each column opened when a match first asks for it: most segments
/// match nothing, and opening a column looks it up in the segment's column directory, which
/// took about 8% of the server's CPU under SearchActors when done for every segment.
struct SortKeys {
    fast: FastFieldReaders,
    ties: Option<Option<Column<u64>>>,
    times: Option<Option<Column<i64>>>,
}

impl SortKeys {
    fn new(segment: &tantivy::SegmentReader) -> SortKeys {
        SortKeys {
            fast: segment.fast_fields().clone(),
            ties: None,
            times: None,
        }
    }

    /// The document's [`tie_key`] (the highest when it has none).
    fn tie(&mut self, doc: tantivy::DocId) -> u64 {
        let fast = &self.fast;
        let ties = self.ties.get_or_insert_with(|| fast.u64("tie").ok());
        ties.as_ref().and_then(|t| t.first(doc)).unwrap_or(u64::MAX)
    }

    /// The document's `sort_at` (the lowest when it has none).
    fn time(&mut self, doc: tantivy::DocId) -> i64 {
        let fast = &self.fast;
        let times = self.times.get_or_insert_with(|| fast.i64("sort_at").ok());
        times
            .as_ref()
            .and_then(|t| t.first(doc))
            .unwrap_or(i64::MIN)
    }
}
