//! Writes the data directory that `tests/format_fixture.rs` opens: the sample network's events
//! applied to a new embedded store, flushed to tables. Run it when the store format changes
//! (and bump `STORE_FORMAT`), keeping the older fixtures for the migration test they need:
//!
//! `cargo run -p starling-store --example write-format-fixture -- crates/starling-store/tests/fixtures/format-N`

#![allow(clippy::unwrap_used, clippy::indexing_slicing)]

use starling_core::jetstream;
use starling_core::sample::{SampleParams, events};
use starling_store::{Batch, BsyncStream, EmbeddedStore, PrivateOp, Store};

/// The sample the fixture holds; the test applies the same to a fresh store to compare.
const PARAMS: SampleParams = SampleParams {
    n_actors: 12,
    seed: 1,
};

/// Private state the fixture holds from format 2 on; the test applies the same to compare.
fn private_ops() -> Vec<PrivateOp> {
    let alice = "did:plc:alice".to_owned();
    vec![
        PrivateOp::MuteActor {
            actor: alice.clone(),
            subject: "did:plc:bob".to_owned(),
            only_reposts: true,
            only_quoteposts: false,
        },
        PrivateOp::MuteThread {
            actor: alice.clone(),
            root: "at://did:plc:bob/app.bsky.feed.post/3kaaaaaaaaaa2".to_owned(),
        },
        PrivateOp::NotificationSeen {
            actor: alice.clone(),
            seen_us: 1_700_000_000_000_000,
        },
        PrivateOp::PutBookmark {
            actor: alice.clone(),
            key: "3kaaaaaaaaaa2".to_owned(),
            subject_uri: "at://did:plc:bob/app.bsky.feed.post/3kaaaaaaaaaa2".to_owned(),
            subject_cid: "bafyreib2rxk3rh6kzwq".to_owned(),
        },
        PrivateOp::PutDraft {
            actor: alice,
            key: "3kaaaaaaaaab2".to_owned(),
            json: r#"{"text":"later"}"#.to_owned(),
            update: false,
        },
    ]
}

/// The processing time the private operations are applied at.
const PRIVATE_NOW_US: i64 = 1_700_000_000_000_001;

fn main() {
    let dir = std::env::args()
        .nth(1)
        .expect("usage: write-format-fixture DIR");
    let dir = std::path::Path::new(&dir);
    assert!(!dir.exists(), "{} exists: remove it first", dir.display());
    let store = EmbeddedStore::open(dir).unwrap();
    let mut batch = store.batch();
    for line in events(&PARAMS) {
        let event = jetstream::decode(line.as_bytes()).unwrap();
        batch.apply(&event).unwrap();
    }
    batch.commit().unwrap();
    store
        .apply_private(
            &private_ops(),
            PRIVATE_NOW_US,
            Some((BsyncStream::Mutes, "7")),
        )
        .unwrap();
    store.flush_to_tables().unwrap();
    drop(store);
    // The engine preallocates its journal (64 MiB of zeros past the last entry, which it
    // reads as the end): only the entries belong in the repository.
    let journal = dir.join("fjall/0.jnl");
    let bytes = std::fs::read(&journal).unwrap();
    let len = bytes.iter().rposition(|&b| b != 0).map_or(0, |at| at + 1);
    std::fs::write(&journal, &bytes[..len]).unwrap();
}
