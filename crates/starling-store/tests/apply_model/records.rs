//! Every record, and each actor's live record keys, against the model (see `apply_model.rs`).

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;
use starling_store::Store;

use super::Model;

/// Each record the model knows reads as the model says (or is absent), and
/// `live_record_keys` lists exactly the model's live records of each actor.
pub(crate) fn check_records<S: Store>(store: &S, model: &Model) {
    let mut live: BTreeMap<&str, BTreeSet<(String, String)>> = BTreeMap::new();
    for ((did, collection, rkey), slot) in &model.records {
        let stored = store.record(did, collection, rkey).unwrap();
        match (&slot.json, stored) {
            (None, None) => {}
            (Some(json), Some(stored)) => {
                let expected: Value = serde_json::from_str(json).unwrap();
                let actual: Value = serde_json::from_str(&stored.json).unwrap();
                assert_eq!(actual, expected, "record at://{did}/{collection}/{rkey}");
            }
            (expected, actual) => {
                panic!("at://{did}/{collection}/{rkey}: model {expected:?}, store {actual:?}")
            }
        }
        // Twice: the first answer may come from the engine, the second from memory. By DID,
        // and by the actor's id where the store has interned it.
        let actor = store.actor_id(did);
        for _ in 0..2 {
            let is_live = store.record_is_live(did, collection, rkey).unwrap();
            let by_id = actor.map(|actor| store.actor_record_is_live(actor, collection, rkey));
            for live in [Some(is_live), by_id.map(Result::unwrap)]
                .into_iter()
                .flatten()
            {
                assert_eq!(
                    live,
                    slot.json.is_some(),
                    "liveness of at://{did}/{collection}/{rkey}"
                );
            }
        }
        let keys = live.entry(did).or_default();
        if slot.json.is_some() {
            keys.insert((collection.clone(), rkey.clone()));
        }
    }
    for (did, expected) in live {
        let actual: BTreeSet<(String, String)> =
            store.live_record_keys(did).unwrap().into_iter().collect();
        assert_eq!(actual, expected, "live record keys of {did}");
    }
}
