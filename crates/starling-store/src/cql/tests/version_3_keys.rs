//! The upgrade of a keyspace at schema version 3, whose notification keys do not keep their
//! reason subject nor an actor's record entries their target: read as they are, and removed
//! with their records.

use starling_core::sample::{SampleParams, delete_every_second, events};

use super::super::schema::meta_row;
use super::*;
use crate::keys::{self, tag};
use crate::{ACTOR_LISTED_COLLECTIONS, EmbeddedStore, ListEntry, Notification};

/// A notification as served, without its cursor (its bytes differ between key forms).
type Shown = (String, crate::NotificationReason, Option<String>, i64);

/// Every record of each DID of `dids` in the collections listed by actor, newest first,
/// without the targets entries keep from version 4 on (`apply_model` checks those).
fn actor_records<S: Store>(store: &S, dids: &BTreeSet<String>) -> Vec<Vec<ListEntry>> {
    let mut res = Vec::new();
    for did in dids {
        for collection in ACTOR_LISTED_COLLECTIONS {
            let list = ListOf::ActorRecords { did, collection };
            let page = store.list_page(&list, None, 1000).unwrap();
            assert_eq!(page.cursor, None, "one page holds them");
            let entries = page.entries.into_iter();
            res.push(entries.map(|e| ListEntry { target: None, ..e }).collect());
        }
    }
    res
}

/// Every notification and the unread count of each DID of `dids`.
fn notifications<S: Store>(store: &S, dids: &BTreeSet<String>) -> Vec<(Vec<Shown>, u32)> {
    let shown = |n: Notification| (n.uri, n.reason, n.reason_subject, n.sort_at_us);
    let mut res = Vec::new();
    for did in dids {
        let Some(recipient) = store.actor_id(did) else {
            res.push((Vec::new(), 0));
            continue;
        };
        let mut all = Vec::new();
        store
            .notifications(recipient, None, usize::MAX, &mut |n| {
                all.push(shown(n));
                true
            })
            .unwrap();
        let unread = store
            .unread_notifications(recipient, None, u32::MAX)
            .unwrap();
        res.push((all, unread));
    }
    res
}

/// Rewrites every notification key and actor's record entry of `ks` in the form schema version
/// 3 wrote (without a subject or target) and sets the version back to 3; returns how many keys
/// it rewrote.
fn back_to_version_3(options: &CassandraOptions) -> usize {
    let ks = &options.keyspace;
    let cql = RawCql::connect(options);
    let entries: Vec<(Vec<u8>, i64, Vec<u8>)> =
        cql.rows(format!("SELECT p, b, k FROM {ks}.index_entries"));
    let mut n_rewritten = 0;
    for (p, b, k) in entries {
        let mut key = p.clone();
        key.extend_from_slice(&k);
        let older = if p.first() == Some(&tag::ACTOR_RECORDS) {
            // tag, actor, collection, sort_at, author: then the record key.
            keys::without_tail_after_rkey(&key, 1 + 4 + 4 + 8 + 4)
        } else {
            crate::notify::without_subject(&key)
        };
        let Some(older) = older else {
            continue;
        };
        let (p, k, older_k) = (hex(&p), hex(&k), hex(&older[p.len()..]));
        cql.run(format!(
            "DELETE FROM {ks}.index_entries WHERE p = 0x{p} AND b = {b} AND k = 0x{k}"
        ));
        cql.run(format!(
            "INSERT INTO {ks}.index_entries (p, b, k) VALUES (0x{p}, {b}, 0x{older_k})"
        ));
        n_rewritten += 1;
    }
    set_schema_version(&cql, ks, 3);
    n_rewritten
}

fn apply_embedded(store: &EmbeddedStore, lines: &[String]) {
    let mut batch = store.batch();
    for line in lines {
        batch.apply(&jetstream::decode_str(line).unwrap()).unwrap();
    }
    batch.commit().unwrap();
    store.sync().unwrap();
}

// Checks the upgrade from schema version 3 against an embedded store given the same events: a
// keyspace whose notification keys and actor's record entries are all in version 3's form
// (rewritten so) opens at the current version and serves the same notifications and lists;
// deleting half the records in both then leaves the same notifications, unread counts and
// lists, so the older keys went with their records.
#[test]
fn a_version_3_keyspace_reads_and_removes_its_older_keys() {
    let Some(options) = test_keyspace("version_3_keys") else {
        return;
    };
    let lines = events(&SampleParams {
        n_actors: 12,
        seed: 1,
    });
    let dir = tempfile::tempdir().unwrap();
    let fresh = EmbeddedStore::open(dir.path()).unwrap();
    let store = CassandraStore::open(&options).unwrap();
    apply(&store, &lines).unwrap();
    apply_embedded(&fresh, &lines);
    let dids: BTreeSet<String> = lines
        .iter()
        .map(|line| jetstream::decode_str(line).unwrap().did.to_string())
        .collect();
    drop(store);
    assert!(back_to_version_3(&options) > 0, "the sample notifies");
    let store = CassandraStore::open(&options).unwrap();
    let version = store.block(meta_row(&store.session, &store.st, "schema", "version"));
    assert_eq!(
        version.unwrap(),
        Some(SCHEMA_VERSION.to_be_bytes().to_vec())
    );
    let want = notifications(&fresh, &dids);
    assert!(want.iter().any(|(shown, _)| !shown.is_empty()));
    assert_eq!(notifications(&store, &dids), want);
    let want_records = actor_records(&fresh, &dids);
    assert_eq!(actor_records(&store, &dids), want_records);

    let deletes = delete_every_second(&lines, |did, collection, rkey| {
        fresh.record(did, collection, rkey).unwrap().is_some()
    });
    apply(&store, &deletes).unwrap();
    apply_embedded(&fresh, &deletes);
    let after = notifications(&fresh, &dids);
    assert_ne!(after, want, "the deletes removed notifications");
    assert_eq!(notifications(&store, &dids), after);
    let records_after = actor_records(&fresh, &dids);
    assert_ne!(
        records_after, want_records,
        "the deletes removed list entries"
    );
    assert_eq!(actor_records(&store, &dids), records_after);
    store.drop_keyspace(&options.keyspace).unwrap();
}
