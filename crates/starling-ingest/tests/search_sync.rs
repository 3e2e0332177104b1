//! The search index kept at ingest against one rebuilt from the store: the sample network
//! (handles, profiles, posts, deletes) is applied in live batches with `SearchUpdater` as the
//! sink; the index must answer every query as an index rebuilt from the store does. Then the
//! index is reopened (it covers the store's cursor: used as it is), a second part of the stream
//! is applied without it (as after a crash before its commit), and reopening must rebuild it.

// Test code: a panic is the failure report.
#![allow(clippy::unwrap_used, clippy::indexing_slicing)]

use std::path::Path;
use std::sync::Arc;

use starling_core::Cursor;
use starling_core::sample::{SampleParams, events};
use starling_ingest::search_sync::{self, SearchSource, SearchUpdater};
use starling_ingest::{Applier, BatchLimits, CommitSink};
use starling_search::{ActorQuery, Page, PostFilter, PostQuery, PostSort, SearchIndex};
use starling_store::{Committed, EmbeddedStore, Progress};

/// Applies `lines` in batches of 50, each committed with its live cursor when `live`, or with
/// none, as a replay of files, an import or a backfill leaves a store.
fn apply(store: &EmbeddedStore, lines: &[String], sink: &mut dyn CommitSink, live: bool) {
    let mut applier = Applier::new(store, sink, BatchLimits::default()).unwrap();
    for chunk in lines.chunks(50) {
        for line in chunk {
            applier.push(line.as_bytes()).unwrap();
        }
        let cursor = applier.newest_cursor().unwrap_or(Cursor(0));
        applier
            .commit(live.then_some(Progress::Live(cursor)))
            .unwrap();
    }
}

/// The store's index is current: the next open uses it and answers `have`. Then `rest` is
/// applied without it, and the open after that must rebuild: returns the rebuilt answers,
/// checked against a rebuild of its own (in `rebuild_dir`).
fn reused_then_rebuilt(
    store: &EmbeddedStore,
    data_dir: &Path,
    n_actors: u32,
    have: &[Vec<String>],
    rest: &[String],
    live: bool,
    rebuild_dir: &Path,
) -> Vec<Vec<String>> {
    let (sync, source) = search_sync::open(store, data_dir).unwrap();
    assert_eq!(source, SearchSource::Current);
    assert_eq!(answers(sync.index(), n_actors), have);
    drop(sync);

    let mut ignore = |_: &Committed| {};
    apply(store, rest, &mut ignore, live);
    let (sync, source) = search_sync::open(store, data_dir).unwrap();
    assert!(
        matches!(source, SearchSource::Rebuilt { n_docs } if n_docs > 0),
        "{source:?}"
    );
    let want = rebuilt_answers(store, rebuild_dir, n_actors);
    assert_eq!(answers(sync.index(), n_actors), want);
    want
}

/// Every answer the test compares: each actor by its handle, and posts by words, all pages.
fn answers(index: &SearchIndex, n_actors: u32) -> Vec<Vec<String>> {
    let mut res = Vec::new();
    for actor in 0..n_actors {
        let query = ActorQuery::parse(&format!("user{actor}.sample")).unwrap();
        let hits = index
            .search_actors(&query, Page::new(0, 20).unwrap())
            .unwrap();
        res.push(hits.hits.into_iter().map(|hit| hit.id).collect());
    }
    for text in ["sample", "post number", "number 7", "sample 12", "user"] {
        let query = PostQuery {
            text: text.to_owned(),
            ..PostQuery::default()
        };
        let mut offset = 0;
        let mut uris = Vec::new();
        loop {
            let hits = index
                .search_posts(
                    &query,
                    &PostFilter::default(),
                    PostSort::Latest,
                    Page::new(offset, 100).unwrap(),
                )
                .unwrap();
            uris.extend(hits.hits.into_iter().map(|hit| hit.id));
            match hits.next_offset {
                Some(next) => offset = next,
                None => break,
            }
        }
        res.push(uris);
    }
    res
}

/// The answers of an index rebuilt from `store` in a directory of its own.
fn rebuilt_answers(store: &EmbeddedStore, dir: &Path, n_actors: u32) -> Vec<Vec<String>> {
    let (index, _) = SearchIndex::open(dir).unwrap();
    search_sync::rebuild(store, &index).unwrap();
    index.commit(None).unwrap();
    answers(&index, n_actors)
}

// Checks the incremental index against a rebuild after live batches, that a current index is
// reused, and that one behind the store is rebuilt.
#[test]
fn the_index_kept_at_ingest_equals_a_rebuild() {
    let n_actors = 60;
    let lines = events(&SampleParams { n_actors, seed: 7 });
    let (first, second) = lines.split_at(lines.len() * 2 / 3);
    let dir = tempfile::tempdir().unwrap();
    let data_dir = dir.path().join("data");
    let store = Arc::new(EmbeddedStore::open(&data_dir).unwrap());
    let (sync, source) = search_sync::open(&*store, &data_dir).unwrap();
    assert_eq!(source, SearchSource::Rebuilt { n_docs: 0 });
    let mut updater = SearchUpdater::new(store.clone(), sync.clone());
    apply(&store, first, &mut updater, true);
    sync.commit_pending().unwrap();
    let have = answers(sync.index(), n_actors);
    assert!(
        have.iter().filter(|a| !a.is_empty()).count() >= n_actors as usize,
        "{have:?}"
    );
    assert_eq!(
        have,
        rebuilt_answers(&store, &dir.path().join("r1"), n_actors)
    );
    drop((updater, sync));

    let want = reused_then_rebuilt(
        &store,
        &data_dir,
        n_actors,
        &have,
        second,
        true,
        &dir.path().join("r2"),
    );
    assert_ne!(want, have, "the second part changes answers");
}

// A store without a live cursor: a clean exit marks its index current, the next open (of the
// store too) uses it as it is, and a write after the mark makes the open after it rebuild.
#[test]
fn a_clean_exit_marks_the_index_of_a_store_without_a_live_cursor() {
    let n_actors = 40;
    let lines = events(&SampleParams { n_actors, seed: 11 });
    let (first, second) = lines.split_at(lines.len() / 2);
    let dir = tempfile::tempdir().unwrap();
    let data_dir = dir.path().join("data");
    let store = Arc::new(EmbeddedStore::open(&data_dir).unwrap());
    let (sync, _) = search_sync::open(&*store, &data_dir).unwrap();
    let mut updater = SearchUpdater::new(store.clone(), sync.clone());
    apply(&store, first, &mut updater, false);
    sync.commit_pending().unwrap();
    store.flush_to_tables().unwrap();
    sync.mark_current(&*store, &data_dir).unwrap();
    let have = answers(sync.index(), n_actors);
    assert!(have.iter().any(|a| !a.is_empty()), "{have:?}");
    drop((updater, sync, store));

    let store = EmbeddedStore::open(&data_dir).unwrap();
    reused_then_rebuilt(
        &store,
        &data_dir,
        n_actors,
        &have,
        second,
        false,
        &dir.path().join("r"),
    );
}
