//! The RPCs Starling answers, through a gRPC client on loopback, against a model the test
//! computes from the sample network's events: records, interaction counts, user counts, known
//! followers, timelines and author feeds, batch alignment with missing items, and
//! `INVALID_ARGUMENT` for malformed requests.

// Test code: a panic is the failure report.
#![allow(clippy::unwrap_used, clippy::indexing_slicing)]

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use serde_json::Value;
use starling_api::AppState;
use starling_api::grpc::proto::service_client::ServiceClient;
use starling_api::grpc::proto::*;
use starling_api::grpc::{DataplaneService, grpc_router, serve_grpc};
use starling_core::jetstream;
use starling_core::sample::{self, SampleParams};
use starling_core::syntax::parse_datetime_micros;
use starling_graph::Graph;
use starling_ingest::graph_sync::edge_change;
use starling_ingest::timeline_sync::StoreFeeds;
use starling_store::{Batch, EmbeddedStore, Store};
use starling_timeline::{TimelineConfig, Timelines};
use tonic::Code;
use tonic::transport::Channel;

const N_ACTORS: u32 = 120;
const MISSING_POST: &str = "at://did:plc:zzzzzzzzzzzzzzzzzzzzzzzz/app.bsky.feed.post/3l3qo2vutsw2b";

/// Live records of the sample stream: (did, collection, rkey) -> (JSON, sort_at).
#[derive(Default)]
struct Model {
    records: BTreeMap<(String, String, String), (Value, i64)>,
}

impl Model {
    fn of(lines: &[String]) -> Model {
        let mut model = Model::default();
        for line in lines {
            let event: Value = serde_json::from_str(line).unwrap();
            if event["kind"] != "commit" {
                continue;
            }
            let commit = &event["commit"];
            let key = (
                event["did"].as_str().unwrap().to_owned(),
                commit["collection"].as_str().unwrap().to_owned(),
                commit["rkey"].as_str().unwrap().to_owned(),
            );
            if commit["operation"] == "delete" {
                model.records.remove(&key);
            } else {
                let time_us = event["time_us"].as_i64().unwrap();
                let sort_at = commit["record"]["createdAt"]
                    .as_str()
                    .and_then(parse_datetime_micros)
                    .map_or(time_us, |created| created.min(time_us));
                model
                    .records
                    .insert(key, (commit["record"].clone(), sort_at));
            }
        }
        model
    }

    fn live(&self, collection: &str) -> impl Iterator<Item = (&str, &str, &Value, i64)> {
        self.records
            .iter()
            .filter(move |((_, c, _), _)| c == collection)
            .map(|((did, _, rkey), (record, sort_at))| {
                (did.as_str(), rkey.as_str(), record, *sort_at)
            })
    }

    fn following(&self, did: &str) -> BTreeSet<String> {
        self.live("app.bsky.graph.follow")
            .filter(|(author, _, _, _)| *author == did)
            .map(|(_, _, record, _)| record["subject"].as_str().unwrap().to_owned())
            .filter(|subject| subject != did)
            .collect()
    }

    fn followers(&self, did: &str) -> BTreeSet<String> {
        self.live("app.bsky.graph.follow")
            .filter(|(author, _, record, _)| record["subject"] == did && *author != did)
            .map(|(author, _, _, _)| author.to_owned())
            .collect()
    }

    /// Likes, reposts, replies and quotes of `uri`.
    fn counts(&self, uri: &str) -> [i32; 4] {
        let count = |collection: &str, target: &dyn Fn(&Value) -> &Value| {
            self.live(collection)
                .filter(|(_, _, record, _)| target(record) == uri)
                .count() as i32
        };
        let quoted = |record: &Value| -> String {
            let embed = &record["embed"];
            match embed["$type"].as_str() {
                Some("app.bsky.embed.record") => embed["record"]["uri"].as_str(),
                Some("app.bsky.embed.recordWithMedia") => embed["record"]["record"]["uri"].as_str(),
                _ => None,
            }
            .unwrap_or_default()
            .to_owned()
        };
        [
            count("app.bsky.feed.like", &|r| &r["subject"]["uri"]),
            count("app.bsky.feed.repost", &|r| &r["subject"]["uri"]),
            count("app.bsky.feed.post", &|r| &r["reply"]["parent"]["uri"]),
            self.live("app.bsky.feed.post")
                .filter(|(_, _, record, _)| quoted(record) == uri)
                .count() as i32,
        ]
    }

    /// Posts and reposts (of posts) of `authors`, newest first: (sort_at, rkey, post, repost).
    fn feed(&self, authors: &BTreeSet<String>) -> Vec<(String, String)> {
        let mut items = Vec::new();
        for (did, rkey, _, sort_at) in self.live("app.bsky.feed.post") {
            if authors.contains(did) {
                let uri = format!("at://{did}/app.bsky.feed.post/{rkey}");
                items.push((sort_at, rkey.to_owned(), uri, String::new()));
            }
        }
        for (did, rkey, record, sort_at) in self.live("app.bsky.feed.repost") {
            let subject = record["subject"]["uri"].as_str().unwrap();
            if authors.contains(did) && subject.contains("/app.bsky.feed.post/") {
                let repost = format!("at://{did}/app.bsky.feed.repost/{rkey}");
                items.push((sort_at, rkey.to_owned(), subject.to_owned(), repost));
            }
        }
        items.sort_by(|a, b| (b.0, &b.1).cmp(&(a.0, &a.1)));
        items
            .into_iter()
            .map(|(_, _, uri, repost)| (uri, repost))
            .collect()
    }
}

struct Fixture {
    _dir: tempfile::TempDir,
    model: Model,
    client: ServiceClient<Channel>,
}

async fn fixture(seed: u64) -> Fixture {
    let lines = sample::events(&SampleParams {
        n_actors: N_ACTORS,
        seed,
    });
    let model = Model::of(&lines);
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(EmbeddedStore::open(dir.path()).unwrap());
    let graph = Arc::new(Graph::new());
    for chunk in lines.chunks(500) {
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
    }
    let timelines = Timelines::new(
        TimelineConfig::default(),
        graph.clone(),
        Arc::new(StoreFeeds(store.clone())),
    );
    timelines.refresh().unwrap();
    let state = AppState {
        store,
        graph,
        timelines: Arc::new(timelines),
        metrics: Arc::new(String::new),
        ready: Arc::new(AtomicBool::new(true)),
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(serve_grpc(
        listener,
        grpc_router(DataplaneService::new(state)),
        std::future::pending(),
    ));
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let client = ServiceClient::new(channel);
    Fixture {
        _dir: dir,
        model,
        client,
    }
}

fn post_uris(model: &Model) -> Vec<String> {
    model
        .live("app.bsky.feed.post")
        .map(|(did, rkey, _, _)| format!("at://{did}/app.bsky.feed.post/{rkey}"))
        .collect()
}

// Records and counts for every live post, with a missing post at both ends and in the middle:
// the responses are aligned by index and a missing record is `null` with an empty cid.
#[tokio::test]
async fn post_records_and_counts_are_aligned_with_missing_items() {
    let mut f = fixture(11).await;
    let mut uris = post_uris(&f.model);
    assert!(uris.len() > 50, "the sample has too few posts");
    uris.insert(0, MISSING_POST.to_owned());
    uris.insert(uris.len() / 2, MISSING_POST.to_owned());
    uris.push(MISSING_POST.to_owned());

    let request = GetPostRecordsRequest {
        uris: uris.clone(),
        ..Default::default()
    };
    let records = f
        .client
        .get_post_records(request)
        .await
        .unwrap()
        .into_inner();
    assert_eq!(records.records.len(), uris.len());
    assert_eq!(records.meta.len(), uris.len());
    for (idx, uri) in uris.iter().enumerate() {
        let record = &records.records[idx];
        let parts: Vec<&str> = uri.trim_start_matches("at://").split('/').collect();
        let key = (
            parts[0].to_owned(),
            parts[1].to_owned(),
            parts[2].to_owned(),
        );
        match f.model.records.get(&key) {
            None => {
                assert_eq!(record.record, b"null", "{uri}");
                assert!(record.cid.is_empty(), "{uri}");
            }
            Some((json, sort_at)) => {
                let stored: Value = serde_json::from_slice(&record.record).unwrap();
                assert_eq!(&stored, json, "{uri}");
                assert!(!record.cid.is_empty(), "{uri}");
                let sorted = record.sorted_at.unwrap();
                assert_eq!(
                    sorted.seconds * 1_000_000 + i64::from(sorted.nanos) / 1_000,
                    *sort_at
                );
                assert_eq!(
                    records.meta[idx].is_reply,
                    json.get("reply").is_some(),
                    "{uri}"
                );
            }
        }
    }

    let request = GetInteractionCountsRequest {
        refs: uris
            .iter()
            .map(|uri| RecordRef {
                uri: uri.clone(),
                cid: String::new(),
            })
            .collect(),
        ..Default::default()
    };
    let counts = f
        .client
        .get_interaction_counts(request)
        .await
        .unwrap()
        .into_inner();
    let total: i32 = counts.likes.iter().chain(&counts.replies).sum();
    assert!(total > 10, "the sample has almost no likes or replies");
    for (idx, uri) in uris.iter().enumerate() {
        let have = [
            counts.likes[idx],
            counts.reposts[idx],
            counts.replies[idx],
            counts.quotes[idx],
        ];
        assert_eq!(
            have,
            f.model.counts(uri),
            "likes, reposts, replies, quotes of {uri}"
        );
        assert_eq!(counts.bookmarks[idx], 0);
    }
}

// Follower, follow and post counts, and known followers, for every actor against the model.
#[tokio::test]
async fn user_counts_and_known_followers_match_the_model() {
    let mut f = fixture(12).await;
    let mut dids: Vec<String> = (0..N_ACTORS).map(sample::did).collect();
    dids.insert(3, "did:plc:zzzzzzzzzzzzzzzzzzzzzzzz".to_owned());
    let request = GetCountsForUsersRequest { dids: dids.clone() };
    let counts = f
        .client
        .get_counts_for_users(request)
        .await
        .unwrap()
        .into_inner();
    for (idx, did) in dids.iter().enumerate() {
        let posts = f
            .model
            .live("app.bsky.feed.post")
            .filter(|(author, _, _, _)| author == did)
            .count() as i32;
        assert_eq!(counts.posts[idx], posts, "posts of {did}");
        assert_eq!(
            counts.followers[idx],
            f.model.followers(did).len() as i32,
            "followers of {did}"
        );
        assert_eq!(
            counts.following[idx],
            f.model.following(did).len() as i32,
            "follows of {did}"
        );
    }

    for viewer in [0, 1, 7, 40] {
        let viewer = sample::did(viewer);
        let following = f.model.following(&viewer);
        let request = GetFollowsFollowingRequest {
            actor_did: viewer.clone(),
            target_dids: dids.clone(),
        };
        let res = f
            .client
            .get_follows_following(request)
            .await
            .unwrap()
            .into_inner();
        assert_eq!(res.results.len(), dids.len());
        for (idx, target) in dids.iter().enumerate() {
            let want: BTreeSet<String> = f
                .model
                .followers(target)
                .intersection(&following)
                .cloned()
                .collect();
            let have: BTreeSet<String> = res.results[idx].dids.iter().cloned().collect();
            assert_eq!(have, want, "known followers of {target} for {viewer}");
            assert_eq!(res.results[idx].dids.len(), want.len(), "no duplicates");
        }
    }
}

// Every page of some readers' timelines and author feeds against the fan-in model.
#[tokio::test]
async fn timelines_and_author_feeds_match_the_model() {
    let mut f = fixture(13).await;
    let mut seen = 0;
    for reader in [0, 2, 5, 33, 90] {
        let did = sample::did(reader);
        let mut authors = f.model.following(&did);
        authors.insert(did.clone());
        let want = f.model.feed(&authors);
        let mut have = Vec::new();
        let mut cursor = String::new();
        loop {
            let request = GetTimelineRequest {
                actor_did: did.clone(),
                limit: 7,
                cursor: cursor.clone(),
                ..Default::default()
            };
            let page = f.client.get_timeline(request).await.unwrap().into_inner();
            assert!(page.items.len() <= 7);
            assert!(!page.cursor.contains("::"));
            have.extend(page.items.into_iter().map(|item| (item.uri, item.repost)));
            if page.cursor.is_empty() {
                break;
            }
            cursor = page.cursor;
        }
        assert_eq!(have, want, "timeline of {did}");
        seen += have.len();

        let own = f.model.feed(&BTreeSet::from([did.clone()]));
        let request = GetAuthorFeedRequest {
            actor_did: did.clone(),
            limit: 100,
            ..Default::default()
        };
        let page = f
            .client
            .get_author_feed(request)
            .await
            .unwrap()
            .into_inner();
        let have: Vec<(String, String)> = page
            .items
            .into_iter()
            .map(|item| (item.uri, item.repost))
            .collect();
        assert_eq!(
            have,
            own.into_iter().take(100).collect::<Vec<_>>(),
            "author feed of {did}"
        );
    }
    assert!(
        seen > 20,
        "the sampled timelines are nearly empty ({seen} items)"
    );
}

// Malformed DIDs, URIs, limits, cursors and oversized batches are INVALID_ARGUMENT naming
// the problem; the server keeps answering afterwards.
#[tokio::test]
async fn bad_requests_are_invalid_argument() {
    let mut f = fixture(14).await;
    let viewer = sample::did(0);
    let timeline = |actor_did: &str, limit: i32, cursor: &str| GetTimelineRequest {
        actor_did: actor_did.to_owned(),
        limit,
        cursor: cursor.to_owned(),
        ..Default::default()
    };
    let cases = [
        (timeline("not-a-did", 10, ""), "not a DID"),
        (timeline(&viewer, 1000, ""), "`limit` is 1000"),
        (timeline(&viewer, -1, ""), "`limit` is -1"),
        (timeline(&viewer, 10, "1::2"), "not a cursor"),
    ];
    for (request, expected) in cases {
        let status = f.client.get_timeline(request).await.unwrap_err();
        assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
        assert!(status.message().contains(expected), "{status:?}");
    }
    let request = GetPostRecordsRequest {
        uris: vec!["at://did:plc:x/app.bsky.feed.post".into()],
        ..Default::default()
    };
    let status = f.client.get_post_records(request).await.unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
    assert!(status.message().contains("uris[0]"), "{status:?}");
    let request = GetCountsForUsersRequest {
        dids: vec![viewer.clone(); 10_001],
    };
    let status = f.client.get_counts_for_users(request).await.unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
    assert!(status.message().contains("10001"), "{status:?}");
    // Still serving.
    let page = f
        .client
        .get_timeline(timeline(&viewer, 5, ""))
        .await
        .unwrap();
    assert!(page.into_inner().items.len() <= 5);
}
