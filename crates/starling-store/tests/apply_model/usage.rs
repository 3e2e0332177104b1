//! `Store::usage` against the model: every stored record (live or a tombstone) counted under
//! its collection, and two index kinds recounted from the live records.

use std::collections::BTreeMap;

use starling_store::Store;

use super::Model;

/// Checks the usage's record counts by collection, its follow edges and author feed entries.
pub(super) fn check_usage<S: Store>(store: &S, model: &Model) {
    let usage = store.usage().unwrap();
    let mut want: BTreeMap<String, u64> = BTreeMap::new();
    for (_, collection, _) in model.records.keys() {
        *want.entry(format!("record {collection}")).or_default() += 1;
    }
    let have: BTreeMap<String, u64> = (usage.kinds.iter())
        .filter(|(kind, _)| kind.starts_with("record "))
        .map(|(kind, usage)| (kind.clone(), usage.entries))
        .collect();
    assert_eq!(have, want, "usage: records by collection");
    let entries = |kind: &str| usage.kinds.get(kind).map_or(0, |usage| usage.entries);
    let follows = model.live_counts().get("app.bsky.graph.follow").copied();
    assert_eq!(
        entries("index E: follow edges"),
        follows.unwrap_or(0),
        "usage: follow edges"
    );
    let feed_items: usize = model.author_feeds().values().map(Vec::len).sum();
    assert_eq!(
        entries("index A: author feeds"),
        feed_items as u64,
        "usage: author feed entries"
    );
    for (kind, usage) in &usage.kinds {
        assert!(
            usage.bytes >= usage.entries,
            "usage: {kind} has fewer bytes than entries"
        );
    }
}
