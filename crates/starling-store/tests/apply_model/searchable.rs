//! `for_each_searchable` against the model (see `apply_model.rs`).

use std::collections::BTreeMap;

use serde_json::Value;
use starling_core::syntax::RecordUri;
use starling_store::Store;

use super::Model;

/// `for_each_searchable` (what the search index is rebuilt from) against the model's live
/// records of the searchable collections.
pub(crate) fn check_searchable<S: Store>(store: &S, model: &Model) {
    let expected: BTreeMap<(String, String, String), Value> = model
        .records
        .iter()
        .filter(|((_, collection, _), _)| {
            starling_store::SEARCHABLE_COLLECTIONS.contains(&collection.as_str())
        })
        .filter_map(|(key, slot)| {
            Some((
                key.clone(),
                serde_json::from_str(slot.json.as_ref()?).unwrap(),
            ))
        })
        .collect();
    let mut actual = BTreeMap::new();
    store
        .for_each_searchable(&mut |actor, collection, record| {
            let uri = RecordUri::parse(&record.uri).unwrap();
            assert_eq!(store.did(actor).as_deref(), Some(uri.did));
            assert_eq!(uri.collection, collection);
            let key = (
                uri.did.to_owned(),
                collection.to_owned(),
                uri.rkey.to_owned(),
            );
            let json: Value = serde_json::from_str(&record.json).unwrap();
            assert!(actual.insert(key, json).is_none(), "{}", record.uri);
        })
        .unwrap();
    assert_eq!(actual, expected, "searchable records");
}
