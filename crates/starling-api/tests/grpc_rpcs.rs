//! The RPCs Starling answers, through a gRPC client on loopback, against a model the test
//! computes from the sample network's events: records, interaction counts, user counts, known
//! followers, timelines and author feeds, batch alignment with missing items, and
//! `INVALID_ARGUMENT` for malformed requests.

// Test code: a panic is the failure report.
#![allow(clippy::unwrap_used, clippy::indexing_slicing)]

mod common;
#[path = "grpc_rpcs/model.rs"]
mod model;
use model::Model;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use serde_json::Value;
use starling_api::grpc::proto::service_client::ServiceClient;
use starling_api::grpc::proto::*;
use starling_api::grpc::{DataplaneService, grpc_router, serve_grpc};
use starling_core::jetstream;
use starling_core::sample::{self, SampleParams};
use starling_graph::Graph;
use starling_ingest::graph_sync::edge_change;
use starling_store::{Batch, EmbeddedStore, Store};
use tonic::Code;
use tonic::transport::Channel;

const N_ACTORS: u32 = 120;
const MISSING_POST: &str = "at://did:plc:zzzzzzzzzzzzzzzzzzzzzzzz/app.bsky.feed.post/3l3qo2vutsw2b";

/// Serves `store` and `graph` over gRPC on loopback and connects a client.
async fn serve(
    store: Arc<EmbeddedStore>,
    graph: Arc<Graph>,
    identity: Option<starling_identity::Resolver>,
) -> ServiceClient<Channel> {
    let mut service = DataplaneService::new(common::app_state(store, graph));
    if let Some(resolver) = identity {
        service = service.with_identity(resolver);
    }
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(serve_grpc(
        listener,
        grpc_router(service),
        std::future::pending(),
    ));
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    ServiceClient::new(channel)
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
    fixture_of(lines).await
}

async fn fixture_of(lines: Vec<String>) -> Fixture {
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
    // Index reads see a batch once its write (pipelined behind the commit) is done.
    store.sync().unwrap();
    let client = serve(store, graph, None).await;
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

    // The last viewer is unknown: it follows nobody, so every answer is empty.
    let mut viewers: Vec<String> = [0, 1, 7, 40].map(sample::did).to_vec();
    viewers.push("did:plc:zzzzzzzzzzzzzzzzzzzzzzzz".to_owned());
    for viewer in viewers {
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

        // An author feed leaves out reposts of posts that are not live.
        let live_posts: BTreeSet<String> = post_uris(&f.model).into_iter().collect();
        let own: Vec<(String, String)> = f
            .model
            .feed(&BTreeSet::from([did.clone()]))
            .into_iter()
            .filter(|(post, repost)| repost.is_empty() || live_posts.contains(post))
            .collect();
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
    // A bad URI after a good one is refused, named by its place.
    let refs = [
        format!("at://{viewer}/app.bsky.feed.post/3k"),
        "at://x".into(),
    ]
    .map(|uri| RecordRef {
        uri,
        cid: String::new(),
    });
    let request = GetInteractionCountsRequest {
        refs: refs.to_vec(),
        ..Default::default()
    };
    let status = f.client.get_interaction_counts(request).await.unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
    assert!(status.message().contains("refs[1]"), "{status:?}");
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

// GetLatestRev gives each actor's newest commit revision, as the test reads it from the stream
// (the sample has no account deletions, so every commit applies); an actor with no commits and
// an unknown DID get an empty rev; a malformed DID is INVALID_ARGUMENT.
#[tokio::test]
async fn latest_rev_is_the_newest_commit_of_each_actor() {
    let seed = 19;
    let mut f = fixture(seed).await;
    let mut newest: BTreeMap<String, String> = BTreeMap::new();
    for line in sample::events(&SampleParams {
        n_actors: N_ACTORS,
        seed,
    }) {
        let event: Value = serde_json::from_str(&line).unwrap();
        if event["kind"] == "commit" {
            let rev = event["commit"]["rev"].as_str().unwrap().to_owned();
            let entry = newest
                .entry(event["did"].as_str().unwrap().to_owned())
                .or_default();
            // TIDs sort like their values.
            if rev > *entry {
                *entry = rev;
            }
        }
    }
    let mut dids: Vec<String> = (0..N_ACTORS).map(sample::did).collect();
    dids.push("did:plc:zzzzzzzzzzzzzzzzzzzzzzzz".to_owned());
    for did in dids {
        let rev = f
            .client
            .get_latest_rev(GetLatestRevRequest {
                actor_did: did.clone(),
            })
            .await
            .unwrap()
            .into_inner()
            .rev;
        assert_eq!(rev, newest.get(&did).cloned().unwrap_or_default(), "{did}");
    }
    assert!(
        newest.len() > N_ACTORS as usize / 2,
        "too few actors commit"
    );
    let status = f
        .client
        .get_latest_rev(GetLatestRevRequest {
            actor_did: "nobody".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
}

/// Live follow or block records as (author, rkey URI, subject).
fn edges(model: &Model, collection: &str) -> Vec<(String, String, String)> {
    model
        .live(collection)
        .map(|(did, rkey, record, _)| {
            (
                did.to_owned(),
                format!("at://{did}/{collection}/{rkey}"),
                record["subject"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

/// Every page of `did`'s followers (or follows), three at a time: each follow's URI, its
/// author's DID and its subject's, each listed once.
async fn follow_pages(
    f: &mut Fixture,
    did: &str,
    followers: bool,
) -> BTreeSet<(String, String, String)> {
    let mut have = BTreeSet::new();
    let mut cursor = String::new();
    loop {
        let (items, next) = if followers {
            let request = GetFollowersRequest {
                actor_did: did.to_owned(),
                limit: 3,
                cursor: cursor.clone(),
                ..Default::default()
            };
            let res = f.client.get_followers(request).await.unwrap().into_inner();
            (res.followers, res.cursor)
        } else {
            let request = GetFollowsRequest {
                actor_did: did.to_owned(),
                limit: 3,
                cursor: cursor.clone(),
                ..Default::default()
            };
            let res = f.client.get_follows(request).await.unwrap().into_inner();
            (res.follows, res.cursor)
        };
        assert!(items.len() <= 3);
        assert!(!next.starts_with("did:") && !next.contains("::"));
        for item in items {
            let uri = item.uri.clone();
            let fresh = have.insert((item.uri, item.actor_did, item.subject_did));
            assert!(fresh, "{uri} listed twice");
        }
        if next.is_empty() {
            return have;
        }
        cursor = next;
    }
}

// Relationships, block existence, followers and follows lists (every page), follow records,
// actors and handles, against the model.
#[tokio::test]
async fn graph_rpcs_match_the_model() {
    let mut f = fixture(15).await;
    let follows = edges(&f.model, "app.bsky.graph.follow");
    let blocks = edges(&f.model, "app.bsky.graph.block");
    let uri_of = |list: &[(String, String, String)], a: &str, b: &str| -> BTreeSet<String> {
        list.iter()
            .filter(|(x, _, y)| x == a && y == b)
            .map(|(_, uri, _)| uri.clone())
            .collect()
    };
    let dids: Vec<String> = (0..N_ACTORS).map(sample::did).collect();
    for viewer in [0, 3, 50] {
        let viewer = sample::did(viewer);
        let request = GetRelationshipsRequest {
            actor_did: viewer.clone(),
            target_dids: dids.clone(),
        };
        let res = f
            .client
            .get_relationships(request)
            .await
            .unwrap()
            .into_inner();
        assert_eq!(res.relationships.len(), dids.len());
        for (idx, target) in dids.iter().enumerate() {
            let rel = &res.relationships[idx];
            let check = |have: &str, want: BTreeSet<String>, what: &str| {
                if want.is_empty() {
                    assert!(have.is_empty(), "{what} {viewer} {target}: {have}");
                } else {
                    assert!(want.contains(have), "{what} {viewer} {target}: {have}");
                }
            };
            check(
                &rel.following,
                uri_of(&follows, &viewer, target),
                "following",
            );
            check(
                &rel.followed_by,
                uri_of(&follows, target, &viewer),
                "followed_by",
            );
            check(&rel.blocking, uri_of(&blocks, &viewer, target), "blocking");
            check(
                &rel.blocked_by,
                uri_of(&blocks, target, &viewer),
                "blocked_by",
            );
        }
        let request = GetBlockExistenceRequest {
            pairs: dids
                .iter()
                .map(|target| RelationshipPair {
                    a: viewer.clone(),
                    b: target.clone(),
                })
                .collect(),
        };
        let res = f
            .client
            .get_block_existence(request)
            .await
            .unwrap()
            .into_inner();
        assert_eq!(res.blocks.len(), dids.len());
        for (idx, target) in dids.iter().enumerate() {
            let want = !uri_of(&blocks, &viewer, target).is_empty()
                || !uri_of(&blocks, target, &viewer).is_empty();
            assert_eq!(res.exists[idx], want, "block between {viewer} and {target}");
        }
    }
    assert!(!blocks.is_empty(), "the sample has no blocks");

    for actor in [0, 1, 9, 77] {
        let did = sample::did(actor);
        for followers in [true, false] {
            let have = follow_pages(&mut f, &did, followers).await;
            let want: BTreeSet<(String, String, String)> = follows
                .iter()
                .filter(|(author, _, subject)| {
                    if followers {
                        subject == &did
                    } else {
                        author == &did
                    }
                })
                .map(|(author, uri, subject)| (uri.clone(), author.clone(), subject.clone()))
                .collect();
            assert_eq!(have, want, "followers={followers} of {did}");
        }
    }

    // Follow records by URI, with a like URI (wrong collection) that must come back missing.
    let mut uris: Vec<String> = follows
        .iter()
        .take(20)
        .map(|(_, uri, _)| uri.clone())
        .collect();
    let like = f.model.live("app.bsky.feed.like").next().unwrap();
    uris.push(format!("at://{}/app.bsky.feed.like/{}", like.0, like.1));
    let res = f
        .client
        .get_follow_records(GetFollowRecordsRequest { uris: uris.clone() })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(res.records.len(), uris.len());
    for (record, (_, _, subject)) in res.records.iter().zip(&follows[..uris.len() - 1]) {
        let json: Value = serde_json::from_slice(&record.record).unwrap();
        assert_eq!(json["subject"], subject.as_str());
    }
    assert_eq!(res.records.last().unwrap().record, b"null");

    // Actors: handles from identity events, profiles, and an unknown DID.
    let mut actor_dids = dids[..10].to_vec();
    actor_dids.push("did:plc:zzzzzzzzzzzzzzzzzzzzzzzz".to_owned());
    let res = f
        .client
        .get_actors(GetActorsRequest {
            dids: actor_dids.clone(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(res.actors.len(), actor_dids.len());
    for (idx, did) in actor_dids.iter().enumerate() {
        let actor = &res.actors[idx];
        let profile = f.model.records.get(&(
            did.clone(),
            "app.bsky.actor.profile".to_owned(),
            "self".to_owned(),
        ));
        match profile {
            Some((json, _)) => {
                assert!(actor.exists, "{did}");
                let stored: Value =
                    serde_json::from_slice(&actor.profile.as_ref().unwrap().record).unwrap();
                assert_eq!(&stored, json, "{did}");
                assert!(!actor.handle.is_empty(), "{did} has no handle");
                // The handle maps back to the DID.
                let back = f
                    .client
                    .get_dids_by_handles(GetDidsByHandlesRequest {
                        handles: vec![actor.handle.clone(), "nobody.invalid".into()],
                        ..Default::default()
                    })
                    .await
                    .unwrap()
                    .into_inner();
                assert_eq!(back.dids, vec![did.clone(), String::new()]);
            }
            None => assert!(!actor.exists || actor.profile.is_none(), "{did}"),
        }
    }
    assert!(!res.actors.last().unwrap().exists);
}

// Likes of posts (every page), the viewer's like and repost URIs, and threads.
#[tokio::test]
async fn likes_and_threads_match_the_model() {
    let mut f = fixture(16).await;
    let posts = post_uris(&f.model);
    let likes: Vec<(String, String, String)> = f
        .model
        .live("app.bsky.feed.like")
        .map(|(did, rkey, record, _)| {
            (
                did.to_owned(),
                format!("at://{did}/app.bsky.feed.like/{rkey}"),
                record["subject"]["uri"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert!(!likes.is_empty());
    for post in posts.iter().take(60) {
        let mut have = BTreeSet::new();
        let mut cursor = String::new();
        loop {
            let request = GetLikesBySubjectSortedRequest {
                subject: Some(RecordRef {
                    uri: post.clone(),
                    cid: String::new(),
                }),
                limit: 2,
                cursor: cursor.clone(),
            };
            let res = f
                .client
                .get_likes_by_subject_sorted(request)
                .await
                .unwrap()
                .into_inner();
            have.extend(res.uris);
            if res.cursor.is_empty() {
                break;
            }
            assert!(!res.cursor.starts_with("did:"));
            cursor = res.cursor;
        }
        let want: BTreeSet<String> = likes
            .iter()
            .filter(|(_, _, subject)| subject == post)
            .map(|(_, uri, _)| uri.clone())
            .collect();
        assert_eq!(have, want, "likes of {post}");
    }
    for viewer in [0, 2, 11] {
        let viewer = sample::did(viewer);
        let refs: Vec<RecordRef> = posts
            .iter()
            .map(|uri| RecordRef {
                uri: uri.clone(),
                cid: String::new(),
            })
            .collect();
        let request = GetLikesByActorAndSubjectsRequest {
            actor_did: viewer.clone(),
            refs,
        };
        let res = f
            .client
            .get_likes_by_actor_and_subjects(request)
            .await
            .unwrap()
            .into_inner();
        assert_eq!(res.uris.len(), posts.len());
        for (idx, post) in posts.iter().enumerate() {
            let want: BTreeSet<&String> = likes
                .iter()
                .filter(|(author, _, subject)| author == &viewer && subject == post)
                .map(|(_, uri, _)| uri)
                .collect();
            if want.is_empty() {
                assert!(res.uris[idx].is_empty(), "{viewer} on {post}");
            } else {
                assert!(want.contains(&res.uris[idx]), "{viewer} on {post}");
            }
        }
    }
    // Threads: a reply's ancestors come first, root first, then its replies by level.
    let replies: Vec<(String, String)> = f
        .model
        .live("app.bsky.feed.post")
        .filter_map(|(did, rkey, record, _)| {
            let parent = record["reply"]["parent"]["uri"].as_str()?;
            Some((
                format!("at://{did}/app.bsky.feed.post/{rkey}"),
                parent.to_owned(),
            ))
        })
        .collect();
    assert!(!replies.is_empty(), "the sample has no replies");
    let parent_of: BTreeMap<&str, &str> = replies
        .iter()
        .map(|(uri, parent)| (uri.as_str(), parent.as_str()))
        .collect();
    let live: BTreeSet<String> = posts.iter().cloned().collect();
    for (anchor, _) in replies.iter().take(30) {
        let request = GetThreadRequest {
            post_uri: anchor.clone(),
            above: 100,
            below: 100,
        };
        let res = f.client.get_thread(request).await.unwrap().into_inner();
        // Expected ancestors: follow parents while they are live posts.
        let mut want_above = Vec::new();
        let mut at = parent_of.get(anchor.as_str()).copied();
        while let Some(parent) = at {
            if !live.contains(parent) {
                break;
            }
            want_above.push(parent.to_owned());
            at = parent_of.get(parent).copied();
        }
        want_above.reverse();
        let anchor_at = res.uris.iter().position(|uri| uri == anchor).unwrap();
        assert_eq!(
            res.uris[..anchor_at],
            want_above[..],
            "ancestors of {anchor}"
        );
        // Expected descendants: every live post whose parent chain reaches the anchor.
        let want_below: BTreeSet<&String> = replies
            .iter()
            .filter(|(uri, _)| {
                let mut at = parent_of.get(uri.as_str()).copied();
                while let Some(parent) = at {
                    if parent == anchor {
                        return true;
                    }
                    at = parent_of.get(parent).copied();
                }
                false
            })
            .map(|(uri, _)| uri)
            .collect();
        let have_below: BTreeSet<&String> = res.uris[anchor_at + 1..].iter().collect();
        assert_eq!(have_below, want_below, "descendants of {anchor}");
    }
}

// GetIdentityByDid through a loopback PLC directory: keys and services packed from the DID
// document, the handle from alsoKnownAs, NOT_FOUND for a DID it does not know.
#[tokio::test]
async fn identity_comes_from_the_plc_directory() {
    let did = sample::did(3);
    let document = serde_json::json!({
        "id": did,
        "alsoKnownAs": ["at://user3.sample.starling.test"],
        "verificationMethod": [{
            "id": format!("{did}#atproto"),
            "type": "Multikey",
            "controller": did,
            "publicKeyMultibase": "zQ3shXjHeiBuRCKmM36cuYnm7YEMzhGnCmCyW92sRJ9pribSF"
        }],
        "service": [{
            "id": "#atproto_pds",
            "type": "AtprotoPersonalDataServer",
            "serviceEndpoint": "https://pds.example.com"
        }]
    });
    let plc = starling_identity::stand_in::PlcStandIn::start(
        [(did.clone(), document)].into_iter().collect(),
    )
    .await
    .unwrap();
    let resolver = starling_identity::Resolver::new(starling_identity::ResolverConfig {
        plc_url: plc.url(),
        ..Default::default()
    })
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(EmbeddedStore::open(dir.path()).unwrap());
    let mut client = serve(store, Arc::new(Graph::new()), Some(resolver)).await;
    let res = client
        .get_identity_by_did(GetIdentityByDidRequest { did: did.clone() })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(res.did, did);
    assert_eq!(res.handle, "user3.sample.starling.test");
    let keys: Value = serde_json::from_slice(&res.keys).unwrap();
    assert_eq!(
        keys,
        serde_json::json!({"atproto": {"Type": "Multikey", "PublicKeyMultibase": "zQ3shXjHeiBuRCKmM36cuYnm7YEMzhGnCmCyW92sRJ9pribSF"}})
    );
    let services: Value = serde_json::from_slice(&res.services).unwrap();
    assert_eq!(
        services,
        serde_json::json!({"atproto_pds": {"Type": "AtprotoPersonalDataServer", "URL": "https://pds.example.com"}})
    );
    let status = client
        .get_identity_by_did(GetIdentityByDidRequest {
            did: sample::did(4),
        })
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::NotFound, "{status:?}");
}

// Lists: item counts and memberships count the owner's items only, and a list block is found
// by the blocking actor; against the handful of records written here.
#[tokio::test]
async fn lists_count_the_owners_items() {
    let (owner, member, other) = (sample::did(1), sample::did(2), sample::did(3));
    let list = format!("at://{owner}/app.bsky.graph.list/3l3qo2vutsw2b");
    let record = |did: &str, collection: &str, rkey: &str, body: String, time_us: u64| {
        format!(
            r#"{{"did":"{did}","time_us":{time_us},"kind":"commit","commit":{{"rev":"3l3qo2vutsw2b","operation":"create","collection":"{collection}","rkey":"{rkey}","record":{body},"cid":"bafyreiaaaaaaaa"}}}}"#
        )
    };
    let item = |subject: &str| {
        format!(
            r#"{{"$type":"app.bsky.graph.listitem","subject":"{subject}","list":"{list}","createdAt":"2024-09-01T00:00:00.000Z"}}"#
        )
    };
    let lines = vec![
        record(&owner, "app.bsky.graph.list", "3l3qo2vutsw2b", r#"{"$type":"app.bsky.graph.list","name":"l","purpose":"app.bsky.graph.defs#modlist","createdAt":"2024-09-01T00:00:00.000Z"}"#.into(), 1),
        record(&owner, "app.bsky.graph.listitem", "3l3qo2vuowo2b", item(&member), 2),
        record(&owner, "app.bsky.graph.listitem", "3l3qo2vuowo2c", item(&owner), 3),
        // Not the owner's: does not put `other` in the list.
        record(&other, "app.bsky.graph.listitem", "3l3qo2vuowo2d", item(&other), 4),
        record(&member, "app.bsky.graph.listblock", "3l3qo2vuowo2e", format!(r#"{{"$type":"app.bsky.graph.listblock","subject":"{list}","createdAt":"2024-09-01T00:00:00.000Z"}}"#), 5),
    ];
    let mut f = fixture_of(lines).await;
    let missing = format!("at://{owner}/app.bsky.graph.list/3l3qo2vutsw2c");
    let refs = [list.clone(), missing.clone()]
        .map(|uri| RecordRef {
            uri,
            cid: String::new(),
        })
        .to_vec();
    let counts = f
        .client
        .get_list_counts(GetListCountsRequest { refs })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(counts.list_items, vec![2, 0]);
    for (did, want) in [
        (
            &member,
            format!("at://{owner}/app.bsky.graph.listitem/3l3qo2vuowo2b"),
        ),
        (
            &owner,
            format!("at://{owner}/app.bsky.graph.listitem/3l3qo2vuowo2c"),
        ),
        (&other, String::new()),
    ] {
        let request = GetListMembershipRequest {
            actor_did: did.clone(),
            list_uris: vec![list.clone(), missing.clone()],
        };
        let res = f
            .client
            .get_list_membership(request)
            .await
            .unwrap()
            .into_inner();
        assert_eq!(res.listitem_uris, vec![want, String::new()], "{did}");
    }
    for (did, want) in [
        (
            &member,
            format!("at://{member}/app.bsky.graph.listblock/3l3qo2vuowo2e"),
        ),
        (&other, String::new()),
    ] {
        let request = GetBlocklistSubscriptionRequest {
            actor_did: did.clone(),
            list_uri: list.clone(),
        };
        let res = f
            .client
            .get_blocklist_subscription(request)
            .await
            .unwrap()
            .into_inner();
        assert_eq!(res.listblock_uri, want, "{did}");
    }
}
