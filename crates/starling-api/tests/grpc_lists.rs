//! The list RPCs through a gRPC client on loopback, on a small scenario written here (lists,
//! list blocks, a starter pack with joins, a feed generator, likes, reposts, quotes, blocks),
//! each answer compared with what the test computes from its own records: every page newest
//! first by `min(createdAt, indexedAt)`, read one entry at a time so that every cursor is
//! used; and the requests Starling must refuse (bad DIDs, URIs, cursors and limits).

// Test code: a panic is the failure report.
#![allow(clippy::unwrap_used, clippy::indexing_slicing)]

mod common;
#[path = "grpc_lists/scenario.rs"]
mod scenario;

use std::sync::Arc;

use scenario::*;
use serde_json::Value;
use starling_api::grpc::proto::service_client::ServiceClient;
use starling_api::grpc::proto::*;
use starling_api::grpc::{DataplaneService, grpc_router, serve_grpc};
use starling_core::jetstream;
use starling_graph::Graph;
use starling_ingest::graph_sync::edge_change;
use starling_store::{Batch, EmbeddedStore, Store};
use tonic::Code;
use tonic::transport::Channel;

async fn fixture(dir: &std::path::Path) -> (ServiceClient<Channel>, Vec<Rec>) {
    serve(dir, scenario()).await
}

/// Serves a store holding `recs` (written in order) over gRPC on loopback.
async fn serve(dir: &std::path::Path, recs: Vec<Rec>) -> (ServiceClient<Channel>, Vec<Rec>) {
    let store = Arc::new(EmbeddedStore::open(dir).unwrap());
    let graph = Arc::new(Graph::new());
    let time_us = now_us();
    let mut batch = store.batch();
    for (idx, rec) in recs.iter().enumerate() {
        let line = event(rec, time_us + idx as i64);
        batch.apply(&jetstream::decode_str(&line).unwrap()).unwrap();
    }
    let changes: Vec<_> = batch
        .commit()
        .unwrap()
        .graph
        .into_iter()
        .map(edge_change)
        .collect();
    graph.apply(&changes);
    store.sync().unwrap();
    let service = DataplaneService::new(common::app_state(store, graph))
        .with_trusted_verifiers([TRUSTED.to_owned()]);
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
    (ServiceClient::new(channel), recs)
}

// Every actor's lists of records, read one entry a page, equal the scenario's records of
// that actor and collection, newest first.
#[tokio::test]
async fn actor_lists_match_the_scenario() {
    let tmp = tempfile::tempdir().unwrap();
    let (client, recs) = fixture(tmp.path()).await;
    let mut n_checked = 0;
    for did in [A, B, C, D] {
        let by = |collection: &'static str| {
            newest_first(&recs, move |r| r.did == did && r.collection == collection)
        };
        let req = |cursor: String| (did.to_owned(), 1, cursor);
        let likes = one_at_a_time(|cursor| {
            let mut client = client.clone();
            let (actor_did, limit, cursor) = req(cursor);
            async move {
                let res = client
                    .get_actor_likes(GetActorLikesRequest {
                        actor_did,
                        limit,
                        cursor,
                    })
                    .await
                    .unwrap()
                    .into_inner();
                let uris = res
                    .likes
                    .iter()
                    .map(|l| format!("{} {}", l.uri, l.subject))
                    .collect();
                (uris, res.cursor)
            }
        })
        .await;
        let want_likes: Vec<String> = by("app.bsky.feed.like")
            .into_iter()
            .map(|uri| {
                let rec = recs.iter().find(|r| r.uri() == uri).unwrap();
                format!("{uri} {}", rec.record["subject"]["uri"].as_str().unwrap())
            })
            .collect();
        assert_eq!(likes, want_likes, "likes of {did}");
        macro_rules! check {
            ($method:ident, $request:ident, $field:ident, $collection:expr) => {{
                let have = one_at_a_time(|cursor| {
                    let mut client = client.clone();
                    let (actor_did, limit, cursor) = req(cursor);
                    async move {
                        let res = client
                            .$method($request {
                                actor_did,
                                limit,
                                cursor,
                            })
                            .await
                            .unwrap()
                            .into_inner();
                        (res.$field, res.cursor)
                    }
                })
                .await;
                let want = by($collection);
                n_checked += want.len();
                assert_eq!(have, want, "{} of {did}", $collection);
            }};
        }
        check!(
            get_actor_reposts,
            GetActorRepostsRequest,
            uris,
            "app.bsky.feed.repost"
        );
        check!(
            get_actor_feeds,
            GetActorFeedsRequest,
            uris,
            "app.bsky.feed.generator"
        );
        check!(
            get_actor_lists,
            GetActorListsRequest,
            list_uris,
            "app.bsky.graph.list"
        );
        check!(
            get_actor_starter_packs,
            GetActorStarterPacksRequest,
            uris,
            "app.bsky.graph.starterpack"
        );
        check!(
            get_blocks,
            GetBlocksRequest,
            block_uris,
            "app.bsky.graph.block"
        );
        n_checked += likes.len();
    }
    assert!(n_checked >= 8, "the scenario has lists to check");
}

// A's block-list subscriptions are the lists it blocks, newest first.
#[tokio::test]
async fn block_list_subscriptions_match_the_scenario() {
    let tmp = tempfile::tempdir().unwrap();
    let (mut client, recs) = fixture(tmp.path()).await;
    let subscriptions = client
        .get_blocklist_subscriptions(GetBlocklistSubscriptionsRequest {
            actor_did: A.to_owned(),
            limit: 10,
            cursor: String::new(),
        })
        .await
        .unwrap()
        .into_inner();
    let modlist = newest_first(&recs, |r| {
        r.record["purpose"] == "app.bsky.graph.defs#modlist"
    });
    assert_eq!(subscriptions.list_uris, modlist);
}

// The reposts and quotes of a post, read one a page, equal the scenario's.
#[tokio::test]
async fn reposts_and_quotes_match_the_scenario() {
    let tmp = tempfile::tempdir().unwrap();
    let (client, recs) = fixture(tmp.path()).await;
    let post = newest_first(&recs, |r| {
        r.did == C && r.collection == "app.bsky.feed.post"
    })
    .pop()
    .unwrap();
    let subject = || {
        Some(RecordRef {
            uri: post.clone(),
            cid: String::new(),
        })
    };
    let reposts = one_at_a_time(|cursor| {
        let mut client = client.clone();
        let subject = subject();
        async move {
            let res = client
                .get_reposts_by_subject(GetRepostsBySubjectRequest {
                    subject,
                    limit: 1,
                    cursor,
                })
                .await
                .unwrap()
                .into_inner();
            (res.uris, res.cursor)
        }
    })
    .await;
    let want = newest_first(&recs, |r| {
        r.collection == "app.bsky.feed.repost" && r.record["subject"]["uri"] == post.as_str()
    });
    assert_eq!(reposts.len(), 2);
    assert_eq!(reposts, want);
    let quoting = one_at_a_time(|cursor| {
        let mut client = client.clone();
        let subject = subject();
        async move {
            let res = client
                .get_quotes_by_subject_sorted(GetQuotesBySubjectSortedRequest {
                    subject,
                    limit: 1,
                    cursor,
                })
                .await
                .unwrap()
                .into_inner();
            (res.uris, res.cursor)
        }
    })
    .await;
    assert_eq!(quoting.len(), 2);
    assert_eq!(quoting, newest_first(&recs, |r| quotes(r, &post)));
}

// A curated list's members (read one a page), count and feed (in two pages) equal the
// scenario's.
#[tokio::test]
async fn list_pages_match_the_scenario() {
    let tmp = tempfile::tempdir().unwrap();
    let (client, recs) = fixture(tmp.path()).await;
    let curlist = newest_first(&recs, |r| {
        r.record["purpose"] == "app.bsky.graph.defs#curatelist"
    })
    .pop()
    .unwrap();
    let members = one_at_a_time(|cursor| {
        let mut client = client.clone();
        let list_uri = curlist.clone();
        async move {
            let res = client
                .get_list_members(GetListMembersRequest {
                    list_uri,
                    limit: 1,
                    cursor,
                    viewer_did: A.to_owned(),
                })
                .await
                .unwrap()
                .into_inner();
            let uris = res
                .listitems
                .iter()
                .map(|i| format!("{} {}", i.uri, i.did))
                .collect();
            (uris, res.cursor)
        }
    })
    .await;
    let items: Vec<&Rec> = recs
        .iter()
        .filter(|r| {
            r.did == B
                && r.collection == "app.bsky.graph.listitem"
                && r.record["list"] == curlist.as_str()
        })
        .collect();
    let mut want: Vec<(i64, String)> = items
        .iter()
        .map(|r| {
            (
                r.at_us,
                format!("{} {}", r.uri(), r.record["subject"].as_str().unwrap()),
            )
        })
        .collect();
    want.sort_by_key(|w| std::cmp::Reverse(w.0));
    assert_eq!(members, want.into_iter().map(|w| w.1).collect::<Vec<_>>());
    let mut client = client.clone();
    let count = client
        .get_list_count(GetListCountRequest {
            list_uri: curlist.clone(),
        })
        .await
        .unwrap()
        .into_inner()
        .count;
    assert_eq!(count, items.len() as i32);
    let member_dids: Vec<&str> = items
        .iter()
        .map(|r| r.record["subject"].as_str().unwrap())
        .collect();
    let feed = client
        .get_list_feed(GetListFeedRequest {
            list_uri: curlist.clone(),
            limit: 3,
            ..GetListFeedRequest::default()
        })
        .await
        .unwrap()
        .into_inner();
    let want_feed = newest_first(&recs, |r| {
        r.collection == "app.bsky.feed.post" && member_dids.contains(&r.did)
    });
    let have: Vec<String> = feed.items.iter().map(|i| i.uri.clone()).collect();
    assert_eq!(have, want_feed[..3].to_vec());
    let rest = client
        .get_list_feed(GetListFeedRequest {
            list_uri: curlist,
            limit: 100,
            cursor: feed.cursor,
            ..GetListFeedRequest::default()
        })
        .await
        .unwrap()
        .into_inner();
    let have: Vec<String> = rest.items.iter().map(|i| i.uri.clone()).collect();
    assert_eq!(have, want_feed[3..].to_vec());
}

// A starter pack's joins of all time and of the last week equal the scenario's (which has a
// join older than a week).
#[tokio::test]
async fn starter_pack_counts_match_the_scenario() {
    let tmp = tempfile::tempdir().unwrap();
    let (mut client, recs) = fixture(tmp.path()).await;
    let pack = newest_first(&recs, |r| r.collection == "app.bsky.graph.starterpack");
    let counts = client
        .get_starter_pack_counts(GetStarterPackCountsRequest {
            refs: pack
                .iter()
                .map(|uri| RecordRef {
                    uri: uri.clone(),
                    cid: String::new(),
                })
                .collect(),
        })
        .await
        .unwrap()
        .into_inner();
    let week_ago = now_us() - 7 * 86_400_000_000;
    let joins = |since: i64| {
        recs.iter()
            .filter(|r| {
                r.record["joinedViaStarterPack"]["uri"] == pack[0].as_str() && r.at_us > since
            })
            .count() as i32
    };
    assert_eq!(counts.joined_all_time, vec![joins(i64::MIN)]);
    assert_eq!(counts.joined_week, vec![joins(week_ago)]);
    assert_ne!(
        joins(i64::MIN),
        joins(week_ago),
        "the scenario has an old join"
    );
}

// A blocks B's moderation list, which holds C: A blocks C by the list and C is blocked by A
// through it, in GetRelationships, GetBlockExistence and GetBidirectionalBlockViaList; D,
// not on it, is not.
#[tokio::test]
async fn list_blocks_show_wherever_blocks_do() {
    let tmp = tempfile::tempdir().unwrap();
    let (mut client, recs) = fixture(tmp.path()).await;
    let modlist = newest_first(&recs, |r| {
        r.record["purpose"] == "app.bsky.graph.defs#modlist"
    })
    .pop()
    .unwrap();
    let on_list = |did: &str| {
        recs.iter().any(|r| {
            r.did == B && r.record["list"] == modlist.as_str() && r.record["subject"] == did
        })
    };
    for target in [C, D, B] {
        let want = if on_list(target) {
            modlist.clone()
        } else {
            String::new()
        };
        let rel = client
            .get_relationships(GetRelationshipsRequest {
                actor_did: A.to_owned(),
                target_dids: vec![target.to_owned()],
            })
            .await
            .unwrap()
            .into_inner()
            .relationships
            .remove(0);
        assert_eq!(rel.blocking_by_list, want, "A blocking {target}");
        assert_eq!(rel.blocked_by_list, "");
        let back = client
            .get_relationships(GetRelationshipsRequest {
                actor_did: target.to_owned(),
                target_dids: vec![A.to_owned()],
            })
            .await
            .unwrap()
            .into_inner()
            .relationships
            .remove(0);
        assert_eq!(back.blocked_by_list, want, "{target} blocked by A");
        let existence = client
            .get_block_existence(GetBlockExistenceRequest {
                pairs: vec![RelationshipPair {
                    a: target.to_owned(),
                    b: A.to_owned(),
                }],
            })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(existence.blocks[0].blocked_by_list, want);
        let blocked_directly = recs.iter().any(|r| {
            r.did == A && r.collection == "app.bsky.graph.block" && r.record["subject"] == target
        });
        assert_eq!(existence.exists[0], !want.is_empty() || blocked_directly);
        let via = client
            .get_bidirectional_block_via_list(GetBidirectionalBlockViaListRequest {
                actor_did: target.to_owned(),
                target_did: A.to_owned(),
            })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(via.list_uri, want);
    }
}

// Bad DIDs, URIs, cursors and limits are INVALID_ARGUMENT naming the field.
#[tokio::test]
async fn bad_requests_are_invalid_arguments() {
    let tmp = tempfile::tempdir().unwrap();
    let (mut client, _) = fixture(tmp.path()).await;
    let likes = |actor_did: &str, limit: i32, cursor: &str| GetActorLikesRequest {
        actor_did: actor_did.to_owned(),
        limit,
        cursor: cursor.to_owned(),
    };
    for (req, field) in [
        (likes("nope", 1, ""), "actor_did"),
        (likes(A, 101, ""), "limit"),
        (likes(A, -1, ""), "limit"),
        (likes(A, 1, "zz"), "cursor"),
    ] {
        let err = client.get_actor_likes(req).await.unwrap_err();
        assert_eq!(err.code(), Code::InvalidArgument);
        assert!(err.message().contains(field), "{}", err.message());
    }
    let err = client
        .get_list_members(GetListMembersRequest {
            list_uri: "at://nope".to_owned(),
            ..GetListMembersRequest::default()
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    let err = client
        .get_reposts_by_subject(GetRepostsBySubjectRequest::default())
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    let err = client
        .get_list_feed(GetListFeedRequest {
            list_uri: format!("at://{B}/app.bsky.graph.list/x"),
            cursor: "not a cursor".to_owned(),
            ..GetListFeedRequest::default()
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
}

// Every post's gate flags in GetPostRecords equal the test's reading of the gate rules, and
// the scenario has posts on both sides of each rule.
#[tokio::test]
async fn gate_flags_match_the_rules() {
    let tmp = tempfile::tempdir().unwrap();
    let (mut client, recs) = serve(tmp.path(), gate_scenario()).await;
    let posts: Vec<&Rec> = recs
        .iter()
        .filter(|r| r.collection == "app.bsky.feed.post")
        .collect();
    let res = client
        .get_post_records(GetPostRecordsRequest {
            uris: posts.iter().map(|p| p.uri()).collect(),
            ..GetPostRecordsRequest::default()
        })
        .await
        .unwrap()
        .into_inner();
    let mut seen = std::collections::BTreeSet::new();
    for (post, meta) in posts.iter().zip(&res.meta) {
        let want = gate_flags(&recs, post);
        let have = (
            meta.has_thread_gate,
            meta.has_post_gate,
            meta.violates_thread_gate,
            meta.violates_embedding_rules,
        );
        assert_eq!(have, want, "{}", post.uri());
        seen.insert(want);
    }
    // A reply that breaks the gate notifies nobody, nor does a quote that breaks one; the
    // others notify the root's or the quoted post's author.
    for recipient in [A, B, C] {
        let mut want: Vec<(String, String)> = posts
            .iter()
            .filter(|post| post.did != recipient)
            .filter_map(|post| {
                let (_, _, violates_thread, violates_embed) = gate_flags(&recs, post);
                let about = |path: &Value| {
                    path.as_str()
                        .is_some_and(|uri| uri.starts_with(&format!("at://{recipient}/")))
                };
                if about(&post.record["reply"]["root"]["uri"]) && !violates_thread {
                    Some((post.uri(), "reply".to_owned()))
                } else if about(&post.record["embed"]["record"]["uri"]) && !violates_embed {
                    Some((post.uri(), "quote".to_owned()))
                } else {
                    None
                }
            })
            .collect();
        let mut have: Vec<(String, String)> = client
            .get_notifications(GetNotificationsRequest {
                actor_did: recipient.to_owned(),
                limit: 100,
                ..GetNotificationsRequest::default()
            })
            .await
            .unwrap()
            .into_inner()
            .notifications
            .into_iter()
            .filter(|n| n.reason == "reply" || n.reason == "quote")
            .map(|n| (n.uri, n.reason))
            .collect();
        want.sort();
        have.sort();
        assert_eq!(have, want, "notifications of {recipient}");
    }
    for flags in [
        (true, false, false, false),
        (false, true, false, false),
        (false, false, true, false),
        (false, false, false, true),
        (false, false, false, false),
    ] {
        assert!(seen.contains(&flags), "no post with flags {flags:?}");
    }
}

// GetActors fills verified_by (trusted verifiers only), trusted_verifier, labeler,
// allow_incoming_chats_from and the status record from the scenario's records.
#[tokio::test]
async fn actor_fields_match_the_scenario() {
    let tmp = tempfile::tempdir().unwrap();
    let (mut client, recs) = fixture(tmp.path()).await;
    let dids = [A, B, C, D];
    let actors = client
        .get_actors(GetActorsRequest {
            dids: dids.iter().map(|d| d.to_string()).collect(),
            ..GetActorsRequest::default()
        })
        .await
        .unwrap()
        .into_inner()
        .actors;
    let self_record = |did: &str, collection: &str| {
        recs.iter()
            .find(|r| r.did == did && r.collection == collection && r.rkey == "self")
    };
    let mut n_verified = 0;
    for (did, info) in dids.iter().zip(&actors) {
        assert_eq!(info.trusted_verifier, *did == TRUSTED, "{did}");
        assert_eq!(
            info.labeler,
            self_record(did, "app.bsky.labeler.service").is_some()
        );
        let chat = self_record(did, "chat.bsky.actor.declaration")
            .map(|r| r.record["allowIncoming"].as_str().unwrap().to_owned());
        assert_eq!(info.allow_incoming_chats_from, chat.unwrap_or_default());
        let status = self_record(did, "app.bsky.actor.status");
        assert_eq!(info.status_record.is_some(), status.is_some(), "{did}");
        if let (Some(have), Some(want)) = (&info.status_record, status) {
            let have: Value = serde_json::from_slice(&have.record).unwrap();
            assert_eq!(have, want.record);
        }
        let mut want: Vec<(String, String, String, String)> = recs
            .iter()
            .filter(|r| r.collection == "app.bsky.graph.verification")
            .filter(|r| r.record["subject"] == *did && r.did == TRUSTED)
            .map(|r| {
                let text = |f: &str| r.record[f].as_str().unwrap().to_owned();
                (
                    r.did.to_owned(),
                    r.rkey.clone(),
                    text("handle"),
                    text("displayName"),
                )
            })
            .collect();
        let mut have: Vec<(String, String, String, String)> = info
            .verified_by
            .iter()
            .map(|(verifier, meta)| {
                (
                    verifier.clone(),
                    meta.rkey.clone(),
                    meta.handle.clone(),
                    meta.display_name.clone(),
                )
            })
            .collect();
        want.sort();
        have.sort();
        n_verified += want.len();
        assert_eq!(have, want, "verified_by of {did}");
    }
    assert_eq!(
        n_verified, 1,
        "the scenario verifies one account by a trusted verifier"
    );
}

// A verification notifies its subject and a starter-pack join the pack's author, as the
// reference's do.
#[tokio::test]
async fn verifications_and_joins_notify() {
    let tmp = tempfile::tempdir().unwrap();
    let (mut client, recs) = fixture(tmp.path()).await;
    for recipient in [A, B, C, D] {
        let mut want: Vec<(String, String, String)> = recs
            .iter()
            .filter(|r| r.did != recipient)
            .filter_map(|r| match r.collection {
                "app.bsky.graph.verification" if r.record["subject"] == recipient => {
                    Some((r.uri(), "verified".to_owned(), String::new()))
                }
                "app.bsky.actor.profile" => {
                    let pack = r.record["joinedViaStarterPack"]["uri"].as_str()?;
                    pack.starts_with(&format!("at://{recipient}/"))
                        .then(|| (r.uri(), "starterpack-joined".to_owned(), pack.to_owned()))
                }
                _ => None,
            })
            .collect();
        let mut have: Vec<(String, String, String)> = client
            .get_notifications(GetNotificationsRequest {
                actor_did: recipient.to_owned(),
                limit: 100,
                ..GetNotificationsRequest::default()
            })
            .await
            .unwrap()
            .into_inner()
            .notifications
            .into_iter()
            .filter(|n| n.reason == "verified" || n.reason == "starterpack-joined")
            .map(|n| (n.uri, n.reason, n.reason_subject))
            .collect();
        want.sort();
        have.sort();
        assert!(
            recipient != B || want.len() == 2,
            "B's pack was joined twice"
        );
        assert_eq!(have, want, "notifications of {recipient}");
    }
}
