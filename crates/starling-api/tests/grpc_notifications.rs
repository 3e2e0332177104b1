//! GetNotifications and GetUnreadNotificationCount through a gRPC client on loopback, against a
//! recount from the sample network's events: every recipient's notifications read in pages
//! of seven (with the cursors the server gives, and from an ISO datetime cursor as the AppView
//! sends), with and without the priority filter, and the unread count; one recipient has
//! more of them than the server reads before moving to a blocking thread.

// Test code: a panic is the failure report.
#![allow(clippy::unwrap_used, clippy::indexing_slicing)]

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use serde_json::Value;
use starling_api::grpc::proto::service_client::ServiceClient;
use starling_api::grpc::proto::*;
use starling_api::grpc::{DataplaneService, grpc_router, serve_grpc};
use starling_core::jetstream;
use starling_core::sample::{self, SampleParams};
use starling_core::syntax::parse_datetime_micros;
use starling_graph::Graph;
use starling_ingest::graph_sync::edge_change;
use starling_store::{Batch, EmbeddedStore, Store};
use tonic::transport::Channel;

type Key = (String, String, String);

/// A notification as served: (timestamp µs, record URI, reason, reason subject, priority).
type Served = (i64, String, String, String, bool);

fn split(uri: &str) -> Option<Key> {
    let mut parts = uri.strip_prefix("at://")?.splitn(3, '/');
    Some((
        parts.next()?.to_owned(),
        parts.next()?.to_owned(),
        parts.next()?.to_owned(),
    ))
}

/// The recount: live records, and who each notified when it was written, by the reference's
/// rules (the sample has no mentions and no `via`).
#[derive(Default)]
struct Recount {
    records: BTreeMap<Key, (Value, i64)>,
    /// Per record: (recipient, reason, ancestor level).
    notified: BTreeMap<Key, Vec<(String, &'static str, usize)>>,
}

impl Recount {
    fn apply(&mut self, event: &Value) {
        if event["kind"] != "commit" {
            return;
        }
        let commit = &event["commit"];
        let did = event["did"].as_str().unwrap().to_owned();
        let key = (
            did.clone(),
            commit["collection"].as_str().unwrap().to_owned(),
            commit["rkey"].as_str().unwrap().to_owned(),
        );
        if commit["operation"] == "delete" {
            self.records.remove(&key);
            self.notified.remove(&key);
            return;
        }
        let record = commit["record"].clone();
        let time_us = event["time_us"].as_i64().unwrap();
        let sort_at = record["createdAt"]
            .as_str()
            .and_then(parse_datetime_micros)
            .map_or(time_us, |created| created.min(time_us));
        let mut notified: Vec<(String, &'static str, usize)> = Vec::new();
        let mut notify = |recipient: &str, reason, level| {
            if recipient != did && notified.iter().all(|n| n.0 != recipient) {
                notified.push((recipient.to_owned(), reason, level));
            }
        };
        match key.1.as_str() {
            "app.bsky.feed.like" | "app.bsky.feed.repost" => {
                let subject = split(record["subject"]["uri"].as_str().unwrap()).unwrap();
                let reason = if key.1.ends_with("like") {
                    "like"
                } else {
                    "repost"
                };
                notify(&subject.0, reason, 0);
            }
            "app.bsky.graph.follow" => notify(record["subject"].as_str().unwrap(), "follow", 0),
            "app.bsky.feed.post" => {
                if let Some(quoted) = record["embed"]["record"]["uri"].as_str().and_then(split)
                    && quoted.1 == "app.bsky.feed.post"
                {
                    notify(&quoted.0, "quote", 0);
                }
                let mut next = record["reply"]["parent"]["uri"].as_str().and_then(split);
                for level in 1..=4 {
                    let Some(ancestor) = next.take().filter(|k| *k != key) else {
                        break;
                    };
                    let Some((json, _)) = self.records.get(&ancestor) else {
                        break;
                    };
                    notify(&ancestor.0, "reply", level);
                    next = json["reply"]["parent"]["uri"].as_str().and_then(split);
                }
            }
            _ => {}
        }
        self.records.insert(key.clone(), (record, sort_at));
        self.notified.insert(key, notified);
    }

    fn live(&self, uri: &str) -> Option<&Value> {
        self.records.get(&split(uri)?).map(|(json, _)| json)
    }

    /// The reason subject of a notification, walked from the record now; `None` when gone.
    fn subject(&self, record: &Value, reason: &str, level: usize) -> Option<String> {
        let mut uri = match reason {
            "like" | "repost" => record["subject"]["uri"].as_str()?,
            "quote" => record["embed"]["record"]["uri"].as_str()?,
            "reply" => record["reply"]["parent"]["uri"].as_str()?,
            _ => return Some(String::new()),
        };
        for _ in 1..level {
            uri = self.live(uri)?["reply"]["parent"]["uri"].as_str()?;
        }
        self.live(uri)?;
        Some(uri.to_owned())
    }

    /// Every recipient's served notifications, newest first, and the count of all of them.
    fn expected(&self) -> BTreeMap<String, (Vec<Served>, usize)> {
        let mut res: BTreeMap<String, (Vec<Served>, usize)> = BTreeMap::new();
        for (key, notified) in &self.notified {
            let (record, sort_at) = &self.records[key];
            let uri = format!("at://{}/{}/{}", key.0, key.1, key.2);
            for (recipient, reason, level) in notified {
                let entry = res.entry(recipient.clone()).or_default();
                entry.1 += 1;
                if let Some(subject) = self.subject(record, reason, *level) {
                    // Priority: the recipient follows the author.
                    let priority = self.follows(recipient, &key.0);
                    let served = (*sort_at, uri.clone(), reason.to_string(), subject, priority);
                    entry.0.push(served);
                }
            }
        }
        for (served, _) in res.values_mut() {
            served.sort_by(|a, b| b.cmp(a));
        }
        res
    }

    fn follows(&self, actor: &str, subject: &str) -> bool {
        self.records
            .iter()
            .any(|((did, collection, _), (json, _))| {
                did == actor && collection == "app.bsky.graph.follow" && json["subject"] == subject
            })
    }
}

/// Serves the sample network's store over gRPC on loopback; the recount of the same events.
/// Likers of the crowd's post, and every how manyth of them its author follows.
const CROWD: u32 = 450;
const CROWD_FOLLOWED_EVERY: u32 = 150;

/// A post of an account outside the sample liked by `CROWD` others, of whom its author
/// follows a few: more unread notifications and more non-priority ones to skip than the
/// server reads before handing a count or a priority page to a blocking thread.
fn crowd_lines() -> Vec<String> {
    const CID: &str = "bafyreie5737gdxlw5i64vzichcalba3z2v5n6icifvx5xytvske7mr3hpm";
    let author = sample::did(10_000);
    let mut time_us = 1_900_000_000_000_000;
    let mut commit = |did: &str, collection: &str, record: String| {
        time_us += 1_000;
        let (rkey, at) = (sample::tid(time_us, 7), sample::datetime(time_us));
        let record = record.replace("AT", &at);
        let line = sample::create_line(did, time_us, &rkey, collection, &rkey, &record, CID);
        (line, rkey)
    };
    let post = r#"{"$type":"app.bsky.feed.post","text":"hello crowd","createdAt":"AT"}"#;
    let (post, post_rkey) = commit(&author, "app.bsky.feed.post", post.to_owned());
    let post_uri = format!("at://{author}/app.bsky.feed.post/{post_rkey}");
    let mut lines = vec![post];
    for idx in 1..=CROWD {
        let liker = sample::did(10_000 + idx);
        let like = format!(
            r#"{{"$type":"app.bsky.feed.like","subject":{{"uri":"{post_uri}","cid":"{CID}"}},"createdAt":"AT"}}"#
        );
        lines.push(commit(&liker, "app.bsky.feed.like", like).0);
        if idx % CROWD_FOLLOWED_EVERY == 0 {
            let follow = format!(
                r#"{{"$type":"app.bsky.graph.follow","subject":"{liker}","createdAt":"AT"}}"#
            );
            lines.push(commit(&author, "app.bsky.graph.follow", follow).0);
        }
    }
    lines
}

async fn fixture(dir: &std::path::Path) -> (ServiceClient<Channel>, Recount) {
    let mut lines = sample::events(&SampleParams {
        n_actors: 120,
        seed: 5,
    });
    lines.extend(crowd_lines());
    let mut recount = Recount::default();
    for line in &lines {
        recount.apply(&serde_json::from_str(line).unwrap());
    }
    let store = Arc::new(EmbeddedStore::open(dir).unwrap());
    let graph = Arc::new(Graph::new());
    for chunk in lines.chunks(300) {
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
    store.sync().unwrap();
    let service = DataplaneService::new(common::app_state(store, graph));
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
    (ServiceClient::new(channel), recount)
}

/// Reads a recipient's notifications in pages of seven from `first_cursor`.
async fn all_pages(
    client: &mut ServiceClient<Channel>,
    did: &str,
    priority: bool,
    first_cursor: &str,
) -> Vec<Served> {
    let mut res = Vec::new();
    let mut cursor = first_cursor.to_owned();
    for _ in 0..1_000 {
        let page = client
            .get_notifications(GetNotificationsRequest {
                actor_did: did.to_owned(),
                limit: 7,
                cursor: cursor.clone(),
                priority,
            })
            .await
            .unwrap()
            .into_inner();
        assert!(page.notifications.len() <= 7);
        for n in &page.notifications {
            assert_eq!(n.recipient_did, did);
            let time = n.timestamp.unwrap();
            let micros = time.seconds * 1_000_000 + i64::from(time.nanos) / 1_000;
            res.push((
                micros,
                n.uri.clone(),
                n.reason.clone(),
                n.reason_subject.clone(),
                n.priority,
            ));
        }
        if page.cursor.is_empty() {
            return res;
        }
        assert!(!page.cursor.contains("::"));
        cursor = page.cursor;
    }
    panic!("{did}: more than 1,000 pages");
}

// Every recipient's notifications, whole, by priority, and from an ISO datetime cursor, and
// the unread counts, against the recount; the priority flag against the recount's follows.
#[tokio::test]
async fn notifications_and_unread_counts_match_a_recount() {
    let dir = tempfile::tempdir().unwrap();
    let (mut client, recount) = fixture(dir.path()).await;
    let expected = recount.expected();
    let reasons: BTreeSet<&str> = expected
        .values()
        .flat_map(|(served, _)| served.iter().map(|n| n.2.as_str()))
        .collect();
    assert_eq!(
        reasons,
        BTreeSet::from(["follow", "like", "quote", "reply", "repost"])
    );
    assert!(
        expected.values().any(|(served, _)| served.len() > 14),
        "some read three pages"
    );
    let crowd = &expected[&sample::did(10_000)].0;
    assert_eq!(crowd.len(), CROWD as usize, "the crowd's likes");
    assert_eq!(
        crowd.iter().filter(|n| n.4).count(),
        (CROWD / CROWD_FOLLOWED_EVERY) as usize,
        "the likes of followed accounts are priority"
    );
    assert!(
        expected
            .values()
            .any(|(served, _)| served.iter().any(|n| n.4)),
        "some are priority"
    );
    let recipients: BTreeSet<String> = recount.records.keys().map(|k| k.0.clone()).collect();
    for did in recipients
        .iter()
        .chain(["did:plc:zzzzzzzzzzzzzzzzzzzzzzzz".to_owned()].iter())
    {
        let (want, n_all) = expected.get(did).cloned().unwrap_or_default();
        let have = all_pages(&mut client, did, false, "").await;
        assert_eq!(have, want, "{did}: notifications");
        let from_future = all_pages(&mut client, did, false, "2100-01-01T00:00:00.000Z").await;
        assert_eq!(from_future, want, "{did}: from an ISO datetime cursor");
        let priority: Vec<Served> = want.iter().filter(|n| n.4).cloned().collect();
        let have_priority = all_pages(&mut client, did, true, "").await;
        assert_eq!(have_priority, priority, "{did}: priority notifications");
        let unread = client
            .get_unread_notification_count(GetUnreadNotificationCountRequest {
                actor_did: did.clone(),
            })
            .await
            .unwrap()
            .into_inner()
            .count;
        assert_eq!(unread as usize, n_all, "{did}: unread (never seen)");
    }
    let bad = client
        .get_notifications(GetNotificationsRequest {
            actor_did: "nope".to_owned(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(bad.code(), tonic::Code::InvalidArgument);
}
