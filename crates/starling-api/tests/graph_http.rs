//! The `/v1/graph/*` queries, called through `router` with `tower::ServiceExt::oneshot` (no
//! socket), against a naive model of the sample network that the test computes itself from the
//! events' JSON.
//!
//! The store is built by applying the sample events through `Store::batch` in batches of seeded
//! random sizes, and the graph is fed with each commit's `GraphChange`s, as ingest does.

// Test code: a panic is the failure report.
#![allow(clippy::unwrap_used, clippy::indexing_slicing)]

mod common;

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use serde_json::{Value, json};
use starling_api::router;
use starling_core::jetstream;
use starling_core::sample::{self, SampleParams, SplitMix64};
use starling_graph::{Graph, GraphBuilder};
use starling_ingest::graph_sync::edge_change;
use starling_store::{Batch, EmbeddedStore, GraphChange, Store};
use tower::ServiceExt;

/// Actors in the sample network.
const N_ACTORS: u32 = 300;

/// Valid DIDs that the sample never names.
const UNKNOWN_DIDS: [&str; 2] = [
    "did:plc:zzzzzzzzzzzzzzzzzzzzzzzz",
    "did:web:unknown.example.com",
];

/// The seed of a randomized test: `STARLING_TEST_SEED` if set, otherwise new each run. Printed,
/// so a failure can be reproduced.
fn seed(test: &str) -> u64 {
    let seed = match std::env::var("STARLING_TEST_SEED") {
        Ok(text) => text
            .parse()
            .unwrap_or_else(|_| panic!("STARLING_TEST_SEED={text} is not a u64")),
        Err(_) => {
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos();
            (nanos as u64) ^ u64::from(std::process::id()).rotate_left(32)
        }
    };
    eprintln!("{test}: seed {seed} (rerun with STARLING_TEST_SEED={seed})");
    seed
}

// ----- The naive model -----

/// Follow and block records replayed from the events' JSON, knowing nothing of the store.
#[derive(Default)]
struct Records {
    /// Live follow records: (author DID, rkey) -> subject DID.
    follows: HashMap<(String, String), String>,
    /// Live block records, the same way.
    blocks: HashMap<(String, String), String>,
    /// Follow records deleted, as (author, subject).
    unfollowed: Vec<(String, String)>,
}

impl Records {
    fn apply(&mut self, line: &str) {
        let event: Value = serde_json::from_str(line).unwrap();
        if event["kind"] != "commit" {
            return;
        }
        let commit = &event["commit"];
        let collection = commit["collection"].as_str().unwrap();
        let records = match collection {
            "app.bsky.graph.follow" => &mut self.follows,
            "app.bsky.graph.block" => &mut self.blocks,
            _ => return,
        };
        let did = event["did"].as_str().unwrap().to_owned();
        let key = (did.clone(), commit["rkey"].as_str().unwrap().to_owned());
        match commit["operation"].as_str().unwrap() {
            "create" | "update" => {
                let subject = commit["record"]["subject"].as_str().unwrap().to_owned();
                records.insert(key, subject);
            }
            "delete" => {
                let subject = records.remove(&key);
                if collection == "app.bsky.graph.follow"
                    && let Some(subject) = subject
                {
                    self.unfollowed.push((did, subject));
                }
            }
            other => panic!("unexpected operation {other} in {line}"),
        }
    }
}

/// A relation: the pairs with at least one live record, in both directions.
#[derive(Default)]
struct Relation {
    outgoing: HashMap<String, BTreeSet<String>>,
    incoming: HashMap<String, BTreeSet<String>>,
}

impl Relation {
    fn of(records: &HashMap<(String, String), String>) -> Relation {
        let mut res = Relation::default();
        for ((actor, _), subject) in records {
            res.outgoing
                .entry(actor.clone())
                .or_default()
                .insert(subject.clone());
            res.incoming
                .entry(subject.clone())
                .or_default()
                .insert(actor.clone());
        }
        res
    }

    fn has(&self, a: &str, b: &str) -> bool {
        self.outgoing.get(a).is_some_and(|set| set.contains(b))
    }

    fn outgoing(&self, a: &str) -> BTreeSet<String> {
        self.outgoing.get(a).cloned().unwrap_or_default()
    }

    fn incoming(&self, a: &str) -> BTreeSet<String> {
        self.incoming.get(a).cloned().unwrap_or_default()
    }
}

/// The store, the router over it, and the model.
struct Fixture {
    _dir: tempfile::TempDir,
    store: Arc<EmbeddedStore>,
    app: Router,
    records: Records,
    follows: Relation,
    blocks: Relation,
    dids: Vec<String>,
}

impl Fixture {
    fn new(seed: u64) -> Fixture {
        let lines = sample::events(&SampleParams {
            n_actors: N_ACTORS,
            seed,
        });
        let mut records = Records::default();
        for line in &lines {
            records.apply(line);
        }
        let dir = tempfile::tempdir().unwrap();
        let store = EmbeddedStore::open(dir.path()).unwrap();
        let graph = Graph::new();
        let mut rng = SplitMix64::new(seed ^ 0x6261_7463_6865_7321);
        let mut rest = &lines[..];
        while !rest.is_empty() {
            let n = (1 + rng.below(400) as usize).min(rest.len());
            let (chunk, tail) = rest.split_at(n);
            let mut batch = store.batch();
            for line in chunk {
                batch.apply(&jetstream::decode_str(line).unwrap()).unwrap();
            }
            let changes: Vec<_> = batch
                .commit()
                .unwrap()
                .graph
                .into_iter()
                .map(edge_change)
                .collect();
            graph.apply(&changes);
            rest = tail;
        }
        // The graph fed commit by commit must equal one rebuilt from the store's edges.
        let mut builder = GraphBuilder::new();
        store
            .for_each_edge(&mut |change| match change {
                GraphChange::Follow(a, b) => builder.follow(a, b),
                GraphChange::Block(a, b) => builder.block(a, b),
                other => panic!("for_each_edge visited {other:?}"),
            })
            .unwrap();
        assert!(
            builder.build() == graph,
            "the graph fed with commits differs from the one rebuilt from the store"
        );
        let store = Arc::new(store);
        let graph = Arc::new(graph);
        let app = router(common::app_state(store.clone(), graph));
        let follows = Relation::of(&records.follows);
        let blocks = Relation::of(&records.blocks);
        Fixture {
            _dir: dir,
            store,
            app,
            records,
            follows,
            blocks,
            dids: (0..N_ACTORS).map(sample::did).collect(),
        }
    }

    /// DIDs in ascending order of their interned ids: the order the API lists them in.
    fn by_id(&self, dids: impl IntoIterator<Item = String>) -> Vec<String> {
        let mut dids: Vec<(u32, String)> = dids
            .into_iter()
            .map(|did| (self.store.actor_id(&did).unwrap().0, did))
            .collect();
        dids.sort();
        dids.into_iter().map(|(_, did)| did).collect()
    }

    /// `{"count", "dids"}` for a list the model computed, showing the first `limit`.
    fn list(&self, dids: BTreeSet<String>, limit: Option<usize>) -> Value {
        let count = dids.len();
        let mut dids = self.by_id(dids);
        dids.truncate(limit.unwrap_or(usize::MAX));
        json!({ "count": count, "dids": dids })
    }

    fn known_followers(&self, viewer: &str, target: &str, limit: Option<usize>) -> Value {
        let known = self
            .follows
            .outgoing(viewer)
            .intersection(&self.follows.incoming(target))
            .cloned()
            .collect();
        self.list(known, limit)
    }

    fn mutuals(&self, actor: &str, limit: Option<usize>) -> Value {
        let mutuals = self
            .follows
            .outgoing(actor)
            .intersection(&self.follows.incoming(actor))
            .cloned()
            .collect();
        self.list(mutuals, limit)
    }

    fn blocks(&self, viewer: &str, others: &[String]) -> Value {
        Value::Array(
            others
                .iter()
                .map(|other| {
                    json!({
                        "did": other,
                        "blocking": self.blocks.has(viewer, other),
                        "blocked_by": self.blocks.has(other, viewer),
                    })
                })
                .collect(),
        )
    }
}

// ----- Requests -----

async fn get(app: &Router, uri: &str) -> (StatusCode, Value) {
    let request = Request::get(uri).body(Body::empty()).unwrap();
    let response = app.clone().oneshot(request).await.unwrap();
    let status = response.status();
    let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .unwrap();
    let body = serde_json::from_slice(&bytes).unwrap_or_else(|err| {
        panic!(
            "{uri}: HTTP {status}, body is not JSON ({err}): {}",
            String::from_utf8_lossy(&bytes)
        )
    });
    (status, body)
}

/// GET `uri`; the answer must be 200 with `expected` as its body.
async fn check(app: &Router, uri: &str, expected: &Value) {
    let (status, body) = get(app, uri).await;
    assert_eq!(status, StatusCode::OK, "{uri}: {body}");
    assert_eq!(&body, expected, "{uri}");
}

/// GET `uri`; the answer must be 400 with `{"error": "..."}` naming `names` (when given).
async fn check_bad(app: &Router, uri: &str, names: Option<&str>) {
    let (status, body) = get(app, uri).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{uri}: {body}");
    let object = body.as_object().unwrap();
    assert_eq!(object.len(), 1, "{uri}: {body}");
    let error = object["error"].as_str().unwrap();
    assert!(!error.is_empty(), "{uri}: empty error");
    if let Some(names) = names {
        assert!(
            error.contains(names),
            "{uri}: the error `{error}` does not name `{names}`"
        );
    }
}

// ----- Tests -----

// Checks follows, known-followers (with and without limit), mutuals, actor counts and blocks
// against the naive model, for a few hundred seeded random pairs of sample DIDs plus every pair
// whose follow record was deleted (some of them still followed through a duplicate record), and
// mutuals, counts and blocks (against every sample DID) for every actor. How: the expected JSON
// is built from the model's sets; lists are in ascending interned-id order, as documented.
#[tokio::test]
async fn graph_queries_match_a_naive_model() {
    let seed = seed("graph_queries_match_a_naive_model");
    let fx = Fixture::new(seed);
    let app = &fx.app;
    let mut rng = SplitMix64::new(seed);
    // The sample must exercise what this test claims to check.
    let n_dup_pairs = {
        let mut per_pair: HashMap<(&str, &str), usize> = HashMap::new();
        for ((actor, _), subject) in &fx.records.follows {
            *per_pair.entry((actor, subject)).or_default() += 1;
        }
        per_pair.values().filter(|&&n| n > 1).count()
    };
    assert!(n_dup_pairs > 0, "no pair with duplicate follow records");
    assert!(!fx.records.unfollowed.is_empty(), "no follow was deleted");
    assert!(!fx.records.blocks.is_empty(), "no blocks");

    let mut pairs: Vec<(String, String)> = (0..400)
        .map(|_| {
            let a = rng.below(u64::from(N_ACTORS)) as u32;
            // Half the targets skewed toward the popular low indexes, as follows are.
            let b = if rng.below(2) == 0 {
                rng.skewed_below(u64::from(N_ACTORS))
            } else {
                rng.below(u64::from(N_ACTORS))
            } as u32;
            (sample::did(a), sample::did(b))
        })
        .collect();
    pairs.extend(fx.records.unfollowed.iter().cloned());
    pairs.push((fx.dids[0].clone(), fx.dids[0].clone()));
    let (mut n_follows, mut n_known, mut n_limited, mut n_still_followed) = (0, 0, 0, 0);
    for (a, b) in &pairs {
        let follows = fx.follows.has(a, b);
        n_follows += usize::from(follows);
        let uri = format!("/v1/graph/follows?actor={a}&subject={b}");
        check(app, &uri, &json!({ "follows": follows })).await;

        let expected = fx.known_followers(a, b, None);
        let count = expected["count"].as_u64().unwrap();
        n_known += usize::from(count > 0);
        let uri = format!("/v1/graph/known-followers?viewer={a}&target={b}");
        check(app, &uri, &expected).await;
        let limit = 1 + rng.below(count + 2) as usize;
        n_limited += usize::from((limit as u64) < count);
        let uri = format!("/v1/graph/known-followers?viewer={a}&target={b}&limit={limit}");
        check(app, &uri, &fx.known_followers(a, b, Some(limit))).await;
    }
    for (a, b) in &fx.records.unfollowed {
        n_still_followed += usize::from(fx.follows.has(a, b));
    }
    eprintln!(
        "{} pairs: {n_follows} follow, {n_known} with known followers, {n_limited} cut by the \
         limit; {} unfollows, {n_still_followed} of those pairs still followed",
        pairs.len(),
        fx.records.unfollowed.len()
    );
    assert!(n_follows > 0 && n_follows < pairs.len(), "{n_follows}");
    assert!(n_known > 0, "no pair had known followers");
    assert!(n_limited > 0, "no limit cut a list");

    let (mut n_mutuals, mut n_blocks) = (0, 0);
    for actor in &fx.dids {
        let uri = format!("/v1/graph/actor?actor={actor}");
        let expected = json!({
            "followers": fx.follows.incoming(actor).len(),
            "following": fx.follows.outgoing(actor).len(),
        });
        check(app, &uri, &expected).await;

        let expected = fx.mutuals(actor, None);
        let count = expected["count"].as_u64().unwrap();
        n_mutuals += usize::from(count > 0);
        check(app, &format!("/v1/graph/mutuals?actor={actor}"), &expected).await;
        let limit = 1 + rng.below(count + 2) as usize;
        let uri = format!("/v1/graph/mutuals?actor={actor}&limit={limit}");
        check(app, &uri, &fx.mutuals(actor, Some(limit))).await;

        // Every sample DID and an unknown one, in a seeded order.
        let mut others = fx.dids.clone();
        others.push(UNKNOWN_DIDS[0].to_owned());
        for idx in (1..others.len()).rev() {
            others.swap(idx, rng.below(idx as u64 + 1) as usize);
        }
        let expected = fx.blocks(actor, &others);
        n_blocks += expected
            .as_array()
            .unwrap()
            .iter()
            .filter(|entry| entry["blocking"] == true || entry["blocked_by"] == true)
            .count();
        let uri = format!(
            "/v1/graph/blocks?viewer={actor}&others={}",
            others.join(",")
        );
        check(app, &uri, &expected).await;
    }
    assert!(n_mutuals > 0, "no actor has mutuals");
    assert!(n_blocks > 0, "no block seen");
}

// Checks that valid DIDs the store has never seen are empty answers with status 200, as viewer,
// target, actor, subject and others, alone or beside known DIDs. How: fixed expected JSON.
#[tokio::test]
async fn unknown_dids_are_empty_answers() {
    let seed = seed("unknown_dids_are_empty_answers");
    let fx = Fixture::new(seed);
    let app = &fx.app;
    // The most-followed sample account, so that answers about it would not be empty by chance.
    let known = fx
        .dids
        .iter()
        .max_by_key(|did| fx.follows.incoming(did).len())
        .unwrap();
    assert!(!fx.follows.incoming(known).is_empty());
    let empty_list = json!({ "count": 0, "dids": [] });
    for unknown in UNKNOWN_DIDS {
        for (a, b) in [
            (unknown, known.as_str()),
            (known, unknown),
            (unknown, unknown),
        ] {
            let uri = format!("/v1/graph/follows?actor={a}&subject={b}");
            check(app, &uri, &json!({ "follows": false })).await;
            for limit in ["", "&limit=5"] {
                let uri = format!("/v1/graph/known-followers?viewer={a}&target={b}{limit}");
                check(app, &uri, &empty_list).await;
            }
            let uri = format!("/v1/graph/blocks?viewer={a}&others={b}");
            let expected = json!([{ "did": b, "blocking": false, "blocked_by": false }]);
            check(app, &uri, &expected).await;
        }
        let uri = format!("/v1/graph/actor?actor={unknown}");
        check(app, &uri, &json!({ "followers": 0, "following": 0 })).await;
        let uri = format!("/v1/graph/mutuals?actor={unknown}");
        check(app, &uri, &empty_list).await;
    }
    // An empty `others` is an empty answer, not an error.
    let uri = format!("/v1/graph/blocks?viewer={known}&others=");
    check(app, &uri, &json!([])).await;
}

// Checks the error paths: malformed DIDs in every parameter (the error names the parameter),
// limits 0, 100001, negative and not a number, missing parameters, and more than 1000 `others`,
// all HTTP 400 with `{"error": ...}`; and that the limits' edges (1, 100000, exactly 1000
// others) are accepted. How: fixed requests, each with its expected status.
#[tokio::test]
async fn bad_requests_are_400_with_a_json_error() {
    let seed = seed("bad_requests_are_400_with_a_json_error");
    let fx = Fixture::new(seed);
    let app = &fx.app;
    let (a, b) = (&fx.dids[1], &fx.dids[0]);
    // `did:plc:abc%20def` decodes to a DID with a space in it.
    let malformed = [
        "not-a-did",
        "did:plc:",
        "did:PLC:abc",
        "did:plc:abc%20def",
        "",
    ];
    for bad in malformed {
        check_bad(
            app,
            &format!("/v1/graph/follows?actor={bad}&subject={b}"),
            Some("actor"),
        )
        .await;
        check_bad(
            app,
            &format!("/v1/graph/follows?actor={a}&subject={bad}"),
            Some("subject"),
        )
        .await;
        check_bad(
            app,
            &format!("/v1/graph/known-followers?viewer={bad}&target={b}"),
            Some("viewer"),
        )
        .await;
        check_bad(
            app,
            &format!("/v1/graph/known-followers?viewer={a}&target={bad}&limit=3"),
            Some("target"),
        )
        .await;
        check_bad(app, &format!("/v1/graph/actor?actor={bad}"), Some("actor")).await;
        check_bad(
            app,
            &format!("/v1/graph/mutuals?actor={bad}"),
            Some("actor"),
        )
        .await;
        check_bad(
            app,
            &format!("/v1/graph/blocks?viewer={bad}&others={b}"),
            Some("viewer"),
        )
        .await;
        if !bad.is_empty() {
            // An empty entry of `others` is skipped, not an error.
            check_bad(
                app,
                &format!("/v1/graph/blocks?viewer={a}&others={b},{bad}"),
                Some("others"),
            )
            .await;
        }
    }
    for limit in ["0", "100001", "18446744073709551616", "-1", "ten", ""] {
        // The out-of-range numbers name `limit`; what serde says about text depends on serde.
        let names = ["0", "100001"].contains(&limit).then_some("limit");
        let uri = format!("/v1/graph/known-followers?viewer={a}&target={b}&limit={limit}");
        check_bad(app, &uri, names).await;
        check_bad(
            app,
            &format!("/v1/graph/mutuals?actor={a}&limit={limit}"),
            names,
        )
        .await;
    }
    for limit in [1, 100_000] {
        let uri = format!("/v1/graph/known-followers?viewer={a}&target={b}&limit={limit}");
        check(app, &uri, &fx.known_followers(a, b, Some(limit))).await;
        let uri = format!("/v1/graph/mutuals?actor={a}&limit={limit}");
        check(app, &uri, &fx.mutuals(a, Some(limit))).await;
    }
    // Missing parameters.
    for (uri, names) in [
        (format!("/v1/graph/follows?actor={a}"), Some("subject")),
        (format!("/v1/graph/follows?subject={b}"), Some("actor")),
        ("/v1/graph/follows".to_owned(), None),
        (
            format!("/v1/graph/known-followers?viewer={a}"),
            Some("target"),
        ),
        (
            format!("/v1/graph/known-followers?target={b}"),
            Some("viewer"),
        ),
        ("/v1/graph/actor".to_owned(), Some("actor")),
        ("/v1/graph/mutuals?limit=3".to_owned(), Some("actor")),
        (format!("/v1/graph/blocks?viewer={a}"), Some("others")),
        (format!("/v1/graph/blocks?others={b}"), Some("viewer")),
    ] {
        check_bad(app, &uri, names).await;
    }
    // At most 1000 `others`: sample DIDs repeated, which is allowed, as each is answered in
    // order.
    let others = |n: usize| -> Vec<String> {
        (0..n)
            .map(|idx| fx.dids[idx % fx.dids.len()].clone())
            .collect()
    };
    let uri = format!(
        "/v1/graph/blocks?viewer={a}&others={}",
        others(1000).join(",")
    );
    check(app, &uri, &fx.blocks(a, &others(1000))).await;
    let uri = format!(
        "/v1/graph/blocks?viewer={a}&others={}",
        others(1001).join(",")
    );
    check_bad(app, &uri, Some("others")).await;
}
