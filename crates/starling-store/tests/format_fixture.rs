//! A data directory written by this format (`fixtures/format-N`, N = [`STORE_FORMAT`], made by
//! `examples/write-format-fixture.rs` from the sample network) opens, and reads the same as a
//! fresh store the same events are applied to now. A change of layout that forgets to bump the
//! format fails here; a bump without a new fixture fails too.

#![allow(clippy::unwrap_used, clippy::indexing_slicing)]

use std::collections::BTreeSet;
use std::path::Path;

use starling_core::jetstream::{self, Body};
use starling_core::sample::{SampleParams, events};
use starling_core::syntax::RecordUri;
use starling_store::{Batch, EmbeddedStore, GraphChange, STORE_FORMAT, Store};

/// The sample the fixture holds: the example's parameters.
const PARAMS: SampleParams = SampleParams {
    n_actors: 12,
    seed: 1,
};

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

fn edges<S: Store>(store: &S) -> BTreeSet<GraphChange> {
    let mut res = BTreeSet::new();
    store
        .for_each_edge(&mut |change| _ = res.insert(change))
        .unwrap();
    res
}

#[test]
fn the_current_format_fixture_reads_like_a_fresh_store() {
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(format!("format-{STORE_FORMAT}"));
    assert!(fixture.is_dir(), "no fixture for format {STORE_FORMAT}");
    let tmp = tempfile::tempdir().unwrap();
    copy_dir(&fixture, &tmp.path().join("old"));
    let old = EmbeddedStore::open(&tmp.path().join("old")).unwrap();
    let fresh = EmbeddedStore::open(&tmp.path().join("fresh")).unwrap();
    let lines = events(&PARAMS);
    let mut batch = fresh.batch();
    for line in &lines {
        batch
            .apply(&jetstream::decode(line.as_bytes()).unwrap())
            .unwrap();
    }
    batch.commit().unwrap();
    fresh.sync().unwrap();

    assert_eq!(old.stats().unwrap(), fresh.stats().unwrap());
    assert!(fresh.stats().unwrap().posts > 0, "the sample has posts");
    assert_eq!(edges(&old), edges(&fresh));
    let mut dids = BTreeSet::new();
    for line in &lines {
        let event = jetstream::decode(line.as_bytes()).unwrap();
        dids.insert(event.did.to_string());
        let Body::Commit(commit) = &event.body else {
            continue;
        };
        let (did, collection, rkey) = (&*event.did, &*commit.collection, &*commit.rkey);
        let record = fresh.record(did, collection, rkey).unwrap();
        assert_eq!(old.record(did, collection, rkey).unwrap(), record);
        let uri = format!("at://{did}/{collection}/{rkey}");
        let uri = RecordUri::parse(&uri).unwrap();
        assert_eq!(
            old.record_counts(&uri).unwrap(),
            fresh.record_counts(&uri).unwrap()
        );
    }
    for did in &dids {
        let info = fresh.actor(did).unwrap().unwrap();
        assert_eq!(old.actor(did).unwrap(), Some(info.clone()));
        assert_eq!(
            old.actor_counts(info.id).unwrap(),
            fresh.actor_counts(info.id).unwrap()
        );
        let feed = |store: &EmbeddedStore| {
            let mut items = Vec::new();
            store
                .author_feed(info.id, None, &mut |item| {
                    items.push(item);
                    true
                })
                .unwrap();
            items
        };
        assert_eq!(feed(&old), feed(&fresh));
    }
}
