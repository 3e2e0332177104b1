//! The RPCs that read each user's private state, through a gRPC client on loopback: a scenario
//! of bsync operations is applied to the store as the bsync consumer applies them, and every
//! answer is compared with what the test works out from the scenario's operations; then
//! `UpdateNotificationSeen` (moving forward only), and `INVALID_ARGUMENT` for bad DIDs,
//! limits and cursors.

// Test code: a panic is the failure report.
#![allow(clippy::unwrap_used, clippy::indexing_slicing)]

mod common;

use std::collections::BTreeSet;
use std::sync::Arc;

use starling_api::grpc::proto::service_client::ServiceClient;
use starling_api::grpc::proto::*;
use starling_api::grpc::{DataplaneService, grpc_router, serve_grpc};
use starling_core::jetstream;
use starling_core::syntax::format_tid;
use starling_graph::Graph;
use starling_store::{Batch, BsyncStream, EmbeddedStore, PrivateOp, Store};
use tonic::Code;
use tonic::transport::Channel;

const ALICE: &str = "did:plc:alice";
const BOB: &str = "did:plc:bob";
const CAROL: &str = "did:plc:carol";
const DAN: &str = "did:plc:dan";
const ERIN: &str = "did:plc:erin";
const LIST: &str = "at://did:plc:bob/app.bsky.graph.list/3kaaaaaaaaaa2";
const POST_P: &str = "at://did:plc:bob/app.bsky.feed.post/3kaaaaaaaaab2";
const POST_Q: &str = "at://did:plc:dan/app.bsky.feed.post/3kaaaaaaaaac2";

/// Bob's list with Carol in it, and a post each by Bob and Dan.
fn events() -> Vec<String> {
    let created = "2024-09-01T00:00:00.000Z";
    let commit = |did: &str, time: u64, collection: &str, rkey: &str, record: String| {
        let rev = format_tid(time << 10);
        format!(
            r#"{{"did":"{did}","time_us":{time},"kind":"commit","commit":{{"rev":"{rev}","operation":"create","collection":"{collection}","rkey":"{rkey}","record":{record},"cid":"bafyreiaaaaaaaa{time}"}}}}"#
        )
    };
    vec![
        commit(
            BOB,
            1001,
            "app.bsky.graph.list",
            "3kaaaaaaaaaa2",
            format!(
                r#"{{"name":"l","purpose":"app.bsky.graph.defs#modlist","createdAt":"{created}"}}"#
            ),
        ),
        commit(
            BOB,
            1002,
            "app.bsky.graph.listitem",
            "3kaaaaaaaaaf2",
            format!(r#"{{"subject":"{CAROL}","list":"{LIST}","createdAt":"{created}"}}"#),
        ),
        commit(
            BOB,
            1003,
            "app.bsky.feed.post",
            "3kaaaaaaaaab2",
            format!(r#"{{"text":"p","createdAt":"{created}"}}"#),
        ),
        commit(
            DAN,
            1004,
            "app.bsky.feed.post",
            "3kaaaaaaaaac2",
            format!(r#"{{"text":"q","createdAt":"{created}"}}"#),
        ),
    ]
}

fn s(text: &str) -> String {
    text.to_owned()
}

/// The scenario's bsync operations, in batches applied at times 1, 2, 3 (ms).
fn batches() -> Vec<Vec<PrivateOp>> {
    vec![
        vec![
            PrivateOp::MuteActor {
                actor: s(ALICE),
                subject: s(DAN),
                only_reposts: false,
                only_quoteposts: false,
            },
            PrivateOp::MuteActor {
                actor: s(ALICE),
                subject: s(BOB),
                only_reposts: false,
                only_quoteposts: false,
            },
            PrivateOp::MuteList {
                actor: s(ALICE),
                list: s(LIST),
            },
            PrivateOp::MuteThread {
                actor: s(ALICE),
                root: s(POST_P),
            },
            PrivateOp::PutBookmark {
                actor: s(ALICE),
                key: s("3kaaaaaaaaba2"),
                subject_uri: s(POST_P),
                subject_cid: s("bafyp"),
            },
            PrivateOp::PutBookmark {
                actor: s(BOB),
                key: s("3kaaaaaaaaba2"),
                subject_uri: s(POST_P),
                subject_cid: s("bafyp"),
            },
            PrivateOp::PutDraft {
                actor: s(ALICE),
                key: s("3kaaaaaaaaca2"),
                json: s(r#"{"t":1}"#),
                update: false,
            },
        ],
        vec![
            PrivateOp::MuteActor {
                actor: s(ALICE),
                subject: s(ERIN),
                only_reposts: true,
                only_quoteposts: false,
            },
            PrivateOp::UnmuteActor {
                actor: s(ALICE),
                subject: s(BOB),
            },
            PrivateOp::PutBookmark {
                actor: s(ALICE),
                key: s("3kaaaaaaaabb2"),
                subject_uri: s(POST_Q),
                subject_cid: s("bafyq"),
            },
            PrivateOp::PutActivitySubscription {
                actor: s(ALICE),
                key: s("3kaaaaaaaada2"),
                subject: s(BOB),
                post: true,
                reply: false,
                update: false,
            },
            PrivateOp::PutActivitySubscription {
                actor: s(ALICE),
                key: s("3kaaaaaaaadb2"),
                subject: s(DAN),
                post: true,
                reply: true,
                update: false,
            },
            PrivateOp::PutDraft {
                actor: s(ALICE),
                key: s("3kaaaaaaaacb2"),
                json: s(r#"{"t":2}"#),
                update: false,
            },
            PrivateOp::PutPreferences {
                actor: s(ALICE),
                json: s(r#"{"like":{"include":"follows","push":false},"verified":{"list":false}}"#),
            },
        ],
        vec![
            PrivateOp::PutDraft {
                actor: s(ALICE),
                key: s("3kaaaaaaaaca2"),
                json: s(r#"{"t":3}"#),
                update: true,
            },
            PrivateOp::DeleteActivitySubscription {
                actor: s(ALICE),
                key: s("3kaaaaaaaadb2"),
            },
        ],
    ]
}

/// The store with the events and the scenario applied, served over gRPC.
async fn fixture() -> (tempfile::TempDir, ServiceClient<Channel>) {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(EmbeddedStore::open(dir.path()).unwrap());
    let mut batch = store.batch();
    for line in events() {
        batch.apply(&jetstream::decode_str(&line).unwrap()).unwrap();
    }
    batch.commit().unwrap();
    store.sync().unwrap();
    for (idx, ops) in batches().iter().enumerate() {
        let cursor = (idx + 1).to_string();
        store
            .apply_private(
                ops,
                1_000 * (idx as i64 + 1),
                Some((BsyncStream::Mutes, &cursor)),
            )
            .unwrap();
    }
    let service = DataplaneService::new(common::app_state(store, Arc::new(Graph::new())));
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
    (dir, ServiceClient::new(channel))
}

/// What the scenario leaves muted by Alice: (subject, only reposts), newest mute first.
fn alice_mutes() -> Vec<(String, bool)> {
    let mut res: Vec<(usize, String, bool)> = Vec::new();
    for (batch_idx, ops) in batches().iter().enumerate() {
        for op in ops {
            match op {
                PrivateOp::MuteActor {
                    actor,
                    subject,
                    only_reposts,
                    ..
                } if actor == ALICE => {
                    res.retain(|(_, s, _)| s != subject);
                    res.push((batch_idx, subject.clone(), *only_reposts));
                }
                PrivateOp::UnmuteActor { actor, subject } if actor == ALICE => {
                    res.retain(|(_, s, _)| s != subject);
                }
                _ => {}
            }
        }
    }
    res.sort_by(|a, b| (b.0, &b.1).cmp(&(a.0, &a.1)));
    res.into_iter().map(|(_, s, r)| (s, r)).collect()
}

/// Every page of Alice's mutes, one mute a page: (DID, only reposts).
async fn all_mutes(client: &mut ServiceClient<Channel>, n_mutes: usize) -> Vec<(String, bool)> {
    let mut pages = Vec::new();
    let mut cursor = String::new();
    loop {
        let page = client
            .get_mutes(GetMutesRequest {
                actor_did: s(ALICE),
                limit: 1,
                cursor: cursor.clone(),
            })
            .await
            .unwrap()
            .into_inner();
        pages.extend(page.mutes.into_iter().map(|m| (m.did, m.only_reposts)));
        if page.cursor.is_empty() {
            break;
        }
        cursor = page.cursor;
        assert!(pages.len() <= n_mutes, "pages go on past the mutes");
    }
    pages
}

// Mutes: relationships (muted, muted only reposts, muted by list), paged GetMutes, the point
// reads, list mutes and thread mutes all follow the scenario.
#[tokio::test]
async fn mutes_follow_the_scenario() {
    let (_dir, mut client) = fixture().await;
    let mutes = alice_mutes();
    assert_eq!(mutes.len(), 2, "the scenario leaves two mutes");
    let pages = all_mutes(&mut client, mutes.len()).await;
    assert_eq!(pages, mutes);

    let targets = vec![s(DAN), s(ERIN), s(CAROL), s(BOB)];
    let rels = client
        .get_relationships(GetRelationshipsRequest {
            actor_did: s(ALICE),
            target_dids: targets.clone(),
        })
        .await
        .unwrap()
        .into_inner()
        .relationships;
    for (target, rel) in targets.iter().zip(&rels) {
        let mute = mutes.iter().find(|(s, _)| s == target);
        assert_eq!(rel.muted, mute.is_some_and(|(_, r)| !r), "{target}");
        assert_eq!(
            rel.muted_only_reposts,
            mute.is_some_and(|(_, r)| *r),
            "{target}"
        );
        let via_list = if target == CAROL { LIST } else { "" };
        assert_eq!(rel.muted_by_list, via_list, "{target}");
        let point = client
            .get_actor_mutes_actor(GetActorMutesActorRequest {
                actor_did: s(ALICE),
                target_did: target.clone(),
            })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(
            (point.muted, point.muted_only_reposts),
            (rel.muted, rel.muted_only_reposts)
        );
        let via = client
            .get_actor_mutes_actor_via_list(GetActorMutesActorViaListRequest {
                actor_did: s(ALICE),
                target_did: target.clone(),
            })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(via.list_uri, via_list);
    }
    let subscribed = client
        .get_mutelist_subscription(GetMutelistSubscriptionRequest {
            actor_did: s(ALICE),
            list_uri: s(LIST),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(subscribed.subscribed);
    let lists = client
        .get_mutelist_subscriptions(GetMutelistSubscriptionsRequest {
            actor_did: s(BOB),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(lists.list_uris.is_empty(), "bob mutes no list");
    let lists = client
        .get_mutelist_subscriptions(GetMutelistSubscriptionsRequest {
            actor_did: s(ALICE),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(lists.list_uris, vec![s(LIST)]);
    let threads = client
        .get_thread_mutes_on_subjects(GetThreadMutesOnSubjectsRequest {
            actor_did: s(ALICE),
            thread_roots: vec![s(POST_Q), s(POST_P), s(POST_Q)],
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(threads.muted, vec![false, true, false]);
}

// Bookmarks (list, by subject aligned with a missing one, counts per post) follow the
// scenario.
#[tokio::test]
async fn bookmarks_follow_the_scenario() {
    let (_dir, mut client) = fixture().await;
    let ops: Vec<PrivateOp> = batches().concat();
    let mut alice_bookmarks: Vec<(String, String)> = ops
        .iter()
        .filter_map(|op| match op {
            PrivateOp::PutBookmark {
                actor,
                key,
                subject_uri,
                ..
            } if actor == ALICE => Some((key.clone(), subject_uri.clone())),
            _ => None,
        })
        .collect();
    alice_bookmarks.sort_by(|a, b| b.cmp(a));
    let got = client
        .get_actor_bookmarks(GetActorBookmarksRequest {
            actor_did: s(ALICE),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let got: Vec<_> = got
        .bookmarks
        .into_iter()
        .map(|b| (b.key, b.subject))
        .collect();
    assert_eq!(got, alice_bookmarks);
    let by_subject = client
        .get_bookmarks_by_actor_and_subjects(GetBookmarksByActorAndSubjectsRequest {
            actor_did: s(ALICE),
            uris: vec![
                s(POST_Q),
                s("at://did:plc:x/app.bsky.feed.post/3kaaaaaaaazz2"),
                s(POST_P),
            ],
        })
        .await
        .unwrap()
        .into_inner()
        .bookmarks;
    let keys: Vec<_> = by_subject
        .iter()
        .map(|b| b.r#ref.as_ref().map(|r| r.key.clone()))
        .collect();
    let want = |uri: &str| {
        alice_bookmarks
            .iter()
            .find(|(_, u)| u == uri)
            .map(|(k, _)| k.clone())
    };
    assert_eq!(keys, vec![want(POST_Q), None, want(POST_P)]);
    assert_eq!(by_subject[0].subject_cid, "bafyq");
    assert!(by_subject[0].indexed_at.is_some() && by_subject[1].indexed_at.is_none());
    let counts = client
        .get_interaction_counts(GetInteractionCountsRequest {
            refs: vec![
                RecordRef {
                    uri: s(POST_P),
                    cid: String::new(),
                },
                RecordRef {
                    uri: s(POST_Q),
                    cid: String::new(),
                },
            ],
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let bookmarkers = |uri: &str| {
        ops.iter()
            .filter_map(|op| match op {
                PrivateOp::PutBookmark {
                    actor, subject_uri, ..
                } if subject_uri == uri => Some(actor.clone()),
                _ => None,
            })
            .collect::<BTreeSet<_>>()
            .len() as i32
    };
    assert_eq!(
        counts.bookmarks,
        vec![bookmarkers(POST_P), bookmarkers(POST_Q)]
    );
}

// Activity subscriptions (Dan's was deleted in the last batch) and drafts (the first was
// updated in the last batch) follow the scenario.
#[tokio::test]
async fn activity_subscriptions_and_drafts_follow_the_scenario() {
    let (_dir, mut client) = fixture().await;
    let dids = client
        .get_activity_subscription_dids(GetActivitySubscriptionDidsRequest {
            actor_did: s(ALICE),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(dids.dids, vec![s(BOB)]);
    let subs = client
        .get_activity_subscriptions_by_actor_and_subjects(
            GetActivitySubscriptionsByActorAndSubjectsRequest {
                actor_did: s(ALICE),
                subject_dids: vec![s(DAN), s(BOB)],
            },
        )
        .await
        .unwrap()
        .into_inner()
        .subscriptions;
    assert_eq!((subs[0].key.as_str(), subs[0].post.is_some()), ("", false));
    assert_eq!(
        (subs[1].key.as_str(), subs[1].subject_did.as_str()),
        ("3kaaaaaaaada2", BOB)
    );
    assert!(subs[1].post.is_some() && subs[1].reply.is_none());

    // Drafts, most recently updated first: the first draft was updated in the last batch.
    let drafts = client
        .get_actor_drafts(GetActorDraftsRequest {
            actor_did: s(ALICE),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .drafts;
    let got: Vec<_> = drafts
        .iter()
        .map(|d| {
            (
                d.key.as_str(),
                String::from_utf8(d.payload.clone()).unwrap(),
            )
        })
        .collect();
    assert_eq!(
        got,
        vec![
            ("3kaaaaaaaaca2", s(r#"{"t":3}"#)),
            ("3kaaaaaaaacb2", s(r#"{"t":2}"#))
        ]
    );
    assert!(drafts[0].created_at.unwrap().nanos < drafts[0].updated_at.unwrap().nanos);
    let counts = client
        .get_counts_for_users(GetCountsForUsersRequest {
            dids: vec![s(ALICE), s(BOB)],
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(counts.drafts, vec![drafts.len() as i32, 0]);
}

// Notification preferences convert as the reference converts them; none is the default.
#[tokio::test]
async fn notification_preferences_follow_the_scenario() {
    let (_dir, mut client) = fixture().await;
    let prefs = client
        .get_notification_preferences(GetNotificationPreferencesRequest {
            dids: vec![s(ALICE), s(BOB)],
        })
        .await
        .unwrap()
        .into_inner()
        .preferences;
    let like = prefs[0].like.as_ref().unwrap();
    assert_eq!(like.include, NotificationInclude::Follows as i32);
    assert!(!like.push.as_ref().unwrap().enabled && like.list.as_ref().unwrap().enabled);
    assert!(
        !prefs[0]
            .verified
            .as_ref()
            .unwrap()
            .list
            .as_ref()
            .unwrap()
            .enabled
    );
    assert_eq!(prefs[1], NotificationPreferences::default());
}

// The seen time: none at first, set by UpdateNotificationSeen, and never moved back.
#[tokio::test]
async fn notification_seen_moves_forward_only() {
    let (_dir, mut client) = fixture().await;
    let seen = |client: &mut ServiceClient<Channel>| {
        let mut client = client.clone();
        async move {
            client
                .get_notification_seen(GetNotificationSeenRequest {
                    actor_did: s(CAROL),
                })
                .await
                .unwrap()
                .into_inner()
                .timestamp
        }
    };
    assert_eq!(seen(&mut client).await, None);
    let later = prost_types::Timestamp {
        seconds: 1_800_000_000,
        nanos: 5_000,
    };
    let earlier = prost_types::Timestamp {
        seconds: 1_700_000_000,
        nanos: 0,
    };
    for timestamp in [later, earlier] {
        client
            .update_notification_seen(UpdateNotificationSeenRequest {
                actor_did: s(CAROL),
                timestamp: Some(timestamp),
            })
            .await
            .unwrap();
    }
    assert_eq!(seen(&mut client).await, Some(later));
}

// Bad DIDs, limits and cursors are INVALID_ARGUMENT naming the field.
#[tokio::test]
async fn bad_requests_are_invalid_arguments() {
    let (_dir, mut client) = fixture().await;
    let check = |status: tonic::Status, field: &str| {
        assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
        assert!(status.message().contains(field), "{status:?}");
    };
    let mutes = |actor: &str, limit: i32, cursor: &str| GetMutesRequest {
        actor_did: s(actor),
        limit,
        cursor: s(cursor),
    };
    check(
        client.get_mutes(mutes("alice", 0, "")).await.unwrap_err(),
        "actor_did",
    );
    check(
        client.get_mutes(mutes(ALICE, 1_000, "")).await.unwrap_err(),
        "limit",
    );
    check(
        client.get_mutes(mutes(ALICE, 0, "zz")).await.unwrap_err(),
        "cursor",
    );
    let status = client
        .get_actor_drafts(GetActorDraftsRequest {
            actor_did: s(ALICE),
            limit: -1,
            ..Default::default()
        })
        .await
        .unwrap_err();
    check(status, "limit");
    let status = client
        .get_thread_mutes_on_subjects(GetThreadMutesOnSubjectsRequest {
            actor_did: s(ALICE),
            thread_roots: vec![s("nope")],
        })
        .await
        .unwrap_err();
    check(status, "thread_roots");
    let status = client
        .update_notification_seen(UpdateNotificationSeenRequest {
            actor_did: s(ALICE),
            timestamp: Some(prost_types::Timestamp {
                seconds: 1,
                nanos: -1,
            }),
        })
        .await
        .unwrap_err();
    check(status, "timestamp");
}
