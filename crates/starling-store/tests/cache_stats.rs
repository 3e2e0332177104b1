//! The embedded store's cache statistics (the operator's `starling_store_cache_*` metrics)
//! against what a sequence of reads and batches must do to them: a first page fills a list's
//! head, a second is served from it, a batch that adds to the list forgets it, and every
//! page answers what the events say.

#![allow(clippy::unwrap_used, clippy::indexing_slicing)]

use starling_core::jetstream;
use starling_store::{Batch, CacheStats, EmbeddedStore, ListOf, Store};

const SUBJECT: &str = "did:plc:subject00000000000000";

/// The `n`th follow's record key: a TID, in order of `n`.
fn rkey(n: usize) -> String {
    const ALPHABET: &[u8] = b"234567abcdefghijklmnopqrstuvwxyz";
    let digits: String = (0..11)
        .rev()
        .map(|place| char::from(ALPHABET[(n >> (5 * place)) & 31]))
        .collect();
    format!("3l{digits}")
}

fn follow(n: usize) -> String {
    let did = format!("did:plc:follower{n:013}");
    let rkey = rkey(n);
    let time_us = 1_700_000_000_000_000u64 + n as u64;
    format!(
        r#"{{"did":"{did}","time_us":{time_us},"kind":"commit","commit":{{"rev":"{rkey}","operation":"create","collection":"app.bsky.graph.follow","rkey":"{rkey}","record":{{"$type":"app.bsky.graph.follow","subject":"{SUBJECT}","createdAt":"2024-01-01T00:00:00.000Z"}},"cid":"bafyreiaaaaaaaa{n}"}}}}"#
    )
}

fn apply(store: &EmbeddedStore, lines: &[String]) {
    let mut batch = store.batch();
    for line in lines {
        batch
            .apply(&jetstream::decode(line.as_bytes()).unwrap())
            .unwrap();
    }
    batch.commit().unwrap();
}

fn heads(store: &EmbeddedStore) -> CacheStats {
    let caches = store.caches();
    let names: Vec<_> = caches.iter().map(|cache| cache.name).collect();
    assert_eq!(names, ["counts", "count_rows", "liveness", "list_heads"]);
    caches.into_iter().find(|c| c.name == "list_heads").unwrap()
}

/// The followers' URIs on the first page, newest first.
fn first_page(store: &EmbeddedStore) -> Vec<String> {
    let subject = store.actor_id(SUBJECT).unwrap();
    let page = store
        .list_page(&ListOf::Followers(subject), None, 50)
        .unwrap();
    page.entries.into_iter().map(|entry| entry.uri).collect()
}

/// The URIs the follows of `lines` make, newest first.
fn expected(lines: &[String]) -> Vec<String> {
    let mut uris: Vec<String> = (0..lines.len())
        .map(|n| {
            format!(
                "at://did:plc:follower{n:013}/app.bsky.graph.follow/{}",
                rkey(n)
            )
        })
        .collect();
    uris.reverse();
    uris
}

#[test]
fn a_head_is_filled_once_read_again_from_memory_and_forgotten_by_a_batch() {
    let tmp = tempfile::tempdir().unwrap();
    let store = EmbeddedStore::open(tmp.path()).unwrap();
    let mut lines: Vec<String> = (0..3).map(follow).collect();
    apply(&store, &lines);
    store.sync().unwrap();
    let before = heads(&store);
    assert_eq!(before.entries, 0);
    assert!(before.capacity > 0);

    assert_eq!(first_page(&store), expected(&lines));
    let filled = heads(&store);
    assert_eq!(filled.entries, 1);
    assert_eq!(filled.engine_reads, before.engine_reads + 1);

    assert_eq!(first_page(&store), expected(&lines));
    assert_eq!(heads(&store), filled, "the second page came from memory");

    lines.push(follow(3));
    apply(&store, &lines[3..]);
    store.sync().unwrap();
    assert_eq!(heads(&store).entries, 0, "the batch forgot the head");
    assert_eq!(first_page(&store), expected(&lines));
    let refilled = heads(&store);
    assert_eq!(refilled.entries, 1);
    assert_eq!(refilled.engine_reads, filled.engine_reads + 1);
}
