//! Writes the data directory that `tests/format_fixture.rs` opens: the sample network's events
//! applied to a new embedded store, flushed to tables. Run it when the store format changes
//! (and bump `STORE_FORMAT`), keeping the older fixtures for the migration test they need:
//!
//! `cargo run -p starling-store --example write-format-fixture -- crates/starling-store/tests/fixtures/format-N`

#![allow(clippy::unwrap_used, clippy::indexing_slicing)]

use starling_core::jetstream;
use starling_core::sample::events;
use starling_store::{Batch, BsyncStream, EmbeddedStore, Store};

#[path = "../tests/fixture_contents/mod.rs"]
mod fixture_contents;

use fixture_contents::{PARAMS, PRIVATE_NOW_US, private_ops};

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
