//! The operator's moderation state (takedowns, upstream statuses, labels and labeler cursors)
//! against a naive model kept in `BTreeMap`s, on both backends: random operations in random
//! batches, every read compared with the model after the last batch, after the last batch is
//! applied a second time (replays change nothing), and after the store is reopened.
//!
//! The model is written from the rules in `private/moderation.rs`'s documentation: a takedown
//! keeps its reference (`TAKEDOWN` when empty) until an untakedown; a label is keyed by
//! (source, subject, CID, value), replaced by a later one and removed by a negation; a cursor
//! is the last one written.

use std::collections::BTreeMap;

use proptest::prelude::*;
use starling_store::{EmbeddedStore, Label, PrivateOp, Store, TakedownSubject};

use super::FreshKeyspace;

const DIDS: [&str; 3] = ["did:plc:alice", "did:plc:bob", "did:web:carol.example"];
const URIS: [&str; 3] = [
    "at://did:plc:bob/app.bsky.feed.post/3kaaaaaaaaaa2",
    "at://did:plc:bob/app.bsky.feed.post/3kaaaaaaaaaa22",
    "did:plc:alice",
];
const CIDS: [&str; 2] = [
    "bafkreibme22gw2h7y2h7tg2fhqotaqjucnbc24deqo72b6mkl2egezxhvy",
    "",
];
const LABELERS: [&str; 2] = ["did:plc:labeler", "did:plc:other"];
const VALUES: [&str; 3] = ["porn", "!hide", "quo\"ted"];
const REFS: [&str; 3] = ["", "BSKY-MOD-1", "ozone:7"];

fn pick(items: &'static [&'static str]) -> impl Strategy<Value = String> {
    proptest::sample::select(items).prop_map(str::to_owned)
}

fn subject() -> impl Strategy<Value = TakedownSubject> {
    prop_oneof![
        pick(&DIDS).prop_map(|did| TakedownSubject::Actor { did }),
        pick(&URIS[..2]).prop_map(|uri| TakedownSubject::Record { uri }),
        (pick(&DIDS), pick(&CIDS[..1])).prop_map(|(did, cid)| TakedownSubject::Blob { did, cid }),
    ]
}

fn label() -> impl Strategy<Value = Label> {
    (
        pick(&LABELERS),
        pick(&URIS),
        pick(&CIDS),
        pick(&VALUES),
        any::<bool>(),
        proptest::option::of(0..3i64),
    )
        .prop_map(|(src, uri, cid, val, neg, exp)| Label {
            src,
            uri,
            cid,
            val,
            neg,
            cts: "2026-08-01T00:00:00.000Z".to_owned(),
            exp: exp.map(|n| format!("2026-08-0{}T00:00:00.000Z", n + 1)),
            exp_us: exp.map(|n| 1_785_542_400_000_000 + n * 86_400_000_000),
        })
}

fn op() -> impl Strategy<Value = PrivateOp> {
    prop_oneof![
        (subject(), pick(&REFS))
            .prop_map(|(subject, reference)| PrivateOp::Takedown { subject, reference }),
        subject().prop_map(|subject| PrivateOp::Untakedown { subject }),
        (pick(&DIDS), pick(&["", "takendown", "suspended"]), 0..4u64).prop_map(
            |(actor, status, account_seq)| PrivateOp::SetUpstreamStatus {
                actor,
                status,
                account_seq
            }
        ),
        label().prop_map(PrivateOp::Label),
        label().prop_map(PrivateOp::Label),
        (pick(&LABELERS), 0..1_000i64)
            .prop_map(|(labeler, seq)| PrivateOp::LabelerCursor { labeler, seq }),
    ]
}

#[derive(Default)]
struct Model {
    takedowns: BTreeMap<TakedownSubject, String>,
    upstream: BTreeMap<String, (String, u64)>,
    /// (subject, source, CID, value) -> the label.
    labels: BTreeMap<(String, String, String, String), Label>,
    cursors: BTreeMap<String, i64>,
}

impl Model {
    fn apply(&mut self, op: &PrivateOp) {
        match op {
            PrivateOp::Takedown { subject, reference } => {
                let reference = if reference.is_empty() {
                    "TAKEDOWN"
                } else {
                    reference
                };
                self.takedowns.insert(subject.clone(), reference.to_owned());
            }
            PrivateOp::Untakedown { subject } => {
                self.takedowns.remove(subject);
            }
            PrivateOp::SetUpstreamStatus {
                actor,
                status,
                account_seq,
            } => {
                self.upstream
                    .insert(actor.clone(), (status.clone(), *account_seq));
            }
            PrivateOp::Label(label) => {
                let key = (
                    label.uri.clone(),
                    label.src.clone(),
                    label.cid.clone(),
                    label.val.clone(),
                );
                if label.neg {
                    self.labels.remove(&key);
                } else {
                    self.labels.insert(key, label.clone());
                }
            }
            PrivateOp::LabelerCursor { labeler, seq } => {
                self.cursors.insert(labeler.clone(), *seq);
            }
            other => panic!("not a moderation operation: {other:?}"),
        }
    }
}

fn check<S: Store>(store: &S, model: &Model) {
    for did in DIDS {
        for subject in [
            TakedownSubject::Actor { did: did.into() },
            TakedownSubject::Blob {
                did: did.into(),
                cid: CIDS[0].into(),
            },
        ] {
            assert_eq!(
                store.takedown(&subject).unwrap(),
                model.takedowns.get(&subject).cloned(),
                "{subject:?}"
            );
        }
        let have = store
            .upstream_status(did)
            .unwrap()
            .map(|s| (s.status, s.account_seq));
        assert_eq!(have, model.upstream.get(did).cloned(), "{did}");
    }
    for uri in URIS {
        let subject = TakedownSubject::Record { uri: uri.into() };
        assert_eq!(
            store.takedown(&subject).unwrap(),
            model.takedowns.get(&subject).cloned(),
            "{subject:?}"
        );
        let mut have: Vec<(String, String)> = store
            .labels(uri)
            .unwrap()
            .into_iter()
            .map(|l| (l.src, l.json))
            .collect();
        have.sort();
        let mut want: Vec<(String, String)> = model
            .labels
            .values()
            .filter(|l| l.uri == uri)
            .map(|l| (l.src.clone(), l.json()))
            .collect();
        want.sort();
        assert_eq!(have, want, "labels on {uri}");
        for (json, label) in store.labels(uri).unwrap().iter().map(|l| (&l.json, l)) {
            let parsed: serde_json::Value = serde_json::from_str(json).unwrap();
            assert_eq!(parsed["uri"], uri);
            assert_eq!(parsed["src"], label.src.as_str());
            assert!(parsed.get("neg").is_none(), "a stored negation: {json}");
        }
    }
    for labeler in LABELERS {
        assert_eq!(
            store.labeler_cursor(labeler).unwrap(),
            model.cursors.get(labeler).copied()
        );
    }
}

fn moderation_case<S: Store>(store: &S, ops: &[PrivateOp], batch_sizes: &[usize]) -> Model {
    let mut model = Model::default();
    let mut at = 0;
    let mut batch_idx = 0;
    let mut last = &ops[..0];
    while at < ops.len() {
        let size = batch_sizes[batch_idx % batch_sizes.len()];
        let batch = &ops[at..ops.len().min(at + size)];
        for op in batch {
            model.apply(op);
        }
        store.apply_private(batch, 1_000, None).unwrap();
        at += batch.len();
        batch_idx += 1;
        last = batch;
    }
    check(store, &model);
    // The last batch again, as after a crash before its cursor was stored: nothing changes.
    assert!(!last.is_empty());
    store.apply_private(last, 2_000, None).unwrap();
    check(store, &model);
    model
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    // Random moderation operations in random batches: the store equals the model, after a
    // replay of the last batch, and again after reopening it.
    #[test]
    fn moderation_state_matches_the_model(
        ops in proptest::collection::vec(op(), 1..60),
        batch_sizes in proptest::collection::vec(1..8usize, 1..5),
    ) {
        let tmp = tempfile::tempdir().unwrap();
        let model = {
            let store = EmbeddedStore::open(tmp.path()).unwrap();
            moderation_case(&store, &ops, &batch_sizes)
        };
        check(&EmbeddedStore::open(tmp.path()).unwrap(), &model);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 3, ..ProptestConfig::default() })]

    // The same on Cassandra, each case in a fresh keyspace.
    #[test]
    fn cassandra_moderation_state_matches_the_model(
        ops in proptest::collection::vec(op(), 1..60),
        batch_sizes in proptest::collection::vec(1..8usize, 1..5),
    ) {
        let Some(keyspace) = FreshKeyspace::new("moderation state") else {
            return Ok(());
        };
        let model = moderation_case(&keyspace.open(), &ops, &batch_sizes);
        check(&keyspace.open(), &model);
        keyspace.drop_keyspace();
    }
}
