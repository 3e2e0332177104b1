//! The moderation RPCs and the HTTP takedown endpoints, through a gRPC client and the router on
//! loopback, over a store holding two actors' posts and profiles: takedowns of an actor, a
//! record and a blob show in `Get*Takedown`, `GetActors` and the record RPCs with their
//! references (`TAKEDOWN` when none is given) and go when lifted; a second takedown changes
//! only the reference; `UpdateActorUpstreamStatus` holds until the actor's next `#account`
//! event; `GetLabels` answers the stored labels by subject and issuer, unexpired, once per
//! subject asked; the HTTP endpoints need the admin token and write what the RPCs then read.

// Test code: a panic is the failure report.
#![allow(clippy::unwrap_used, clippy::indexing_slicing)]

mod common;

use std::sync::Arc;

use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use starling_api::grpc::proto::service_client::ServiceClient;
use starling_api::grpc::proto::*;
use starling_api::grpc::{DataplaneService, grpc_router, serve_grpc};
use starling_core::jetstream;
use starling_core::syntax::format_tid;
use starling_graph::Graph;
use starling_store::{Batch, EmbeddedStore, Label, PrivateOp, Store};
use tonic::Code;
use tonic::transport::Channel;
use tower::ServiceExt;

const BOB: &str = "did:plc:bob";
const DAN: &str = "did:plc:dan";
const POST_P: &str = "at://did:plc:bob/app.bsky.feed.post/3kaaaaaaaaab2";
const POST_Q: &str = "at://did:plc:dan/app.bsky.feed.post/3kaaaaaaaaac2";
const CID: &str = "bafkreibme22gw2h7y2h7tg2fhqotaqjucnbc24deqo72b6mkl2egezxhvy";
const LABELER: &str = "did:plc:labeler";
const OTHER_LABELER: &str = "did:plc:other";
const ADMIN_TOKEN: &str = "s3cret-admin";

fn commit(did: &str, time: u64, collection: &str, rkey: &str, record: &str) -> String {
    let rev = format_tid(time << 10);
    format!(
        r#"{{"did":"{did}","time_us":{time},"kind":"commit","commit":{{"rev":"{rev}","operation":"create","collection":"{collection}","rkey":"{rkey}","record":{record},"cid":"bafyreiaaaaaaaa{time}"}}}}"#
    )
}

fn account(did: &str, time: u64, seq: u64, active: bool, status: &str) -> String {
    format!(
        r#"{{"did":"{did}","time_us":{time},"kind":"account","account":{{"active":{active},"did":"{did}","seq":{seq},"status":"{status}","time":"2024-09-01T00:00:00.000Z"}}}}"#
    )
}

fn apply(store: &EmbeddedStore, lines: &[String]) {
    let mut batch = store.batch();
    for line in lines {
        batch.apply(&jetstream::decode_str(line).unwrap()).unwrap();
    }
    batch.commit().unwrap();
    store.sync().unwrap();
}

struct Fixture {
    _dir: tempfile::TempDir,
    store: Arc<EmbeddedStore>,
    client: ServiceClient<Channel>,
    router: axum::Router,
}

async fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(EmbeddedStore::open(dir.path()).unwrap());
    let created = r#""createdAt":"2024-09-01T00:00:00.000Z""#;
    apply(
        &store,
        &[
            commit(
                BOB,
                1001,
                "app.bsky.actor.profile",
                "self",
                &format!(r#"{{"displayName":"b",{created}}}"#),
            ),
            commit(
                BOB,
                1002,
                "app.bsky.feed.post",
                "3kaaaaaaaaab2",
                &format!(r#"{{"text":"p",{created}}}"#),
            ),
            commit(
                DAN,
                1003,
                "app.bsky.feed.post",
                "3kaaaaaaaaac2",
                &format!(r#"{{"text":"q",{created}}}"#),
            ),
            account(DAN, 1004, 5, false, "suspended"),
        ],
    );
    let state = common::app_state(store.clone(), Arc::new(Graph::new()));
    let router = starling_api::router_guarded(
        state.clone(),
        starling_api::guard::GuardConfig {
            admin_token: Some(ADMIN_TOKEN.into()),
            ..Default::default()
        },
    );
    let service = DataplaneService::new(state);
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
    Fixture {
        _dir: dir,
        store,
        client: ServiceClient::new(channel),
        router,
    }
}

/// (taken down, reference) of the actor, the record and the blob, through the three RPCs.
async fn takedowns(client: &mut ServiceClient<Channel>) -> [(bool, String); 3] {
    let actor = client
        .get_actor_takedown(GetActorTakedownRequest { did: BOB.into() })
        .await
        .unwrap()
        .into_inner();
    let record = client
        .get_record_takedown(GetRecordTakedownRequest {
            record_uri: POST_Q.into(),
        })
        .await
        .unwrap()
        .into_inner();
    let blob = client
        .get_blob_takedown(GetBlobTakedownRequest {
            did: BOB.into(),
            cid: CID.into(),
        })
        .await
        .unwrap()
        .into_inner();
    [
        (actor.taken_down, actor.takedown_ref),
        (record.taken_down, record.takedown_ref),
        (blob.taken_down, blob.takedown_ref),
    ]
}

/// (taken down, reference) of Bob in GetActors and of each post in GetPostRecords.
async fn flags(client: &mut ServiceClient<Channel>) -> [(bool, String); 3] {
    let actors = client
        .get_actors(GetActorsRequest {
            dids: vec![BOB.into()],
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .actors;
    let records = client
        .get_post_records(GetPostRecordsRequest {
            uris: vec![POST_P.into(), POST_Q.into()],
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .records;
    assert!(
        records.iter().all(|r| !r.cid.is_empty()),
        "both posts stored"
    );
    [
        (actors[0].taken_down, actors[0].takedown_ref.clone()),
        (records[0].taken_down, records[0].takedown_ref.clone()),
        (records[1].taken_down, records[1].takedown_ref.clone()),
    ]
}

fn no() -> (bool, String) {
    (false, String::new())
}

fn yes(reference: &str) -> (bool, String) {
    (true, reference.to_owned())
}

// Takedowns through the admin RPCs, as the AppView's `updateSubjectStatus` calls them.
#[tokio::test]
async fn takedowns_show_in_every_answer_until_lifted() {
    let mut f = fixture().await;
    assert_eq!(takedowns(&mut f.client).await, [no(), no(), no()]);
    assert_eq!(flags(&mut f.client).await, [no(), no(), no()]);
    let c = &mut f.client;
    c.takedown_actor(TakedownActorRequest {
        did: BOB.into(),
        r#ref: "BSKY-1".into(),
        seen: None,
    })
    .await
    .unwrap();
    c.takedown_record(TakedownRecordRequest {
        record_uri: POST_Q.into(),
        r#ref: String::new(),
        seen: None,
    })
    .await
    .unwrap();
    c.takedown_blob(TakedownBlobRequest {
        did: BOB.into(),
        cid: CID.into(),
        r#ref: "blob-1".into(),
        seen: None,
    })
    .await
    .unwrap();
    let want = [yes("BSKY-1"), yes("TAKEDOWN"), yes("blob-1")];
    assert_eq!(takedowns(c).await, want);
    // Bob is taken down but his post is not: the AppView hides it through the author.
    assert_eq!(flags(c).await, [yes("BSKY-1"), no(), yes("TAKEDOWN")]);
    // Again with another reference: only the reference changes.
    c.takedown_actor(TakedownActorRequest {
        did: BOB.into(),
        r#ref: "BSKY-2".into(),
        seen: None,
    })
    .await
    .unwrap();
    assert_eq!(takedowns(c).await[0], yes("BSKY-2"));
    // Lifted, twice (the second changes nothing).
    for _ in 0..2 {
        c.untakedown_actor(UntakedownActorRequest {
            did: BOB.into(),
            seen: None,
        })
        .await
        .unwrap();
        c.untakedown_record(UntakedownRecordRequest {
            record_uri: POST_Q.into(),
            seen: None,
        })
        .await
        .unwrap();
        c.untakedown_blob(UntakedownBlobRequest {
            did: BOB.into(),
            cid: CID.into(),
            seen: None,
        })
        .await
        .unwrap();
        assert_eq!(takedowns(c).await, [no(), no(), no()]);
        assert_eq!(flags(c).await, [no(), no(), no()]);
    }
    // Malformed subjects are INVALID_ARGUMENT naming them.
    let err = c
        .takedown_actor(TakedownActorRequest {
            did: "bob".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(err.message().contains("`bob`"), "{}", err.message());
    let err = c
        .get_blob_takedown(GetBlobTakedownRequest {
            did: BOB.into(),
            cid: "not-a-cid".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    let err = c
        .get_record_takedown(GetRecordTakedownRequest {
            record_uri: BOB.into(),
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
}

async fn upstream(client: &mut ServiceClient<Channel>, did: &str) -> String {
    client
        .get_actors(GetActorsRequest {
            dids: vec![did.into()],
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .actors[0]
        .upstream_status
        .clone()
}

// The upstream status: from `#account` events, set by the operator until the next one.
#[tokio::test]
async fn upstream_status_holds_until_the_next_account_event() {
    let mut f = fixture().await;
    assert_eq!(upstream(&mut f.client, DAN).await, "suspended");
    assert_eq!(upstream(&mut f.client, BOB).await, "");
    for (did, status) in [(DAN, "takendown"), (BOB, "deactivated")] {
        f.client
            .update_actor_upstream_status(UpdateActorUpstreamStatusRequest {
                actor_did: did.into(),
                active: false,
                upstream_status: status.into(),
            })
            .await
            .unwrap();
        assert_eq!(upstream(&mut f.client, did).await, status);
    }
    // An actor never indexed is left alone, as the reference does.
    f.client
        .update_actor_upstream_status(UpdateActorUpstreamStatusRequest {
            actor_did: "did:plc:nobody".into(),
            active: false,
            upstream_status: "takendown".into(),
        })
        .await
        .unwrap();
    assert!(f.store.upstream_status("did:plc:nobody").unwrap().is_none());
    // Dan's next account event wins; a replay of an older one does not.
    apply(&f.store, &[account(DAN, 1005, 6, true, "active")]);
    assert_eq!(upstream(&mut f.client, DAN).await, "");
    apply(&f.store, &[account(DAN, 1006, 5, false, "suspended")]);
    assert_eq!(upstream(&mut f.client, DAN).await, "");
    assert_eq!(upstream(&mut f.client, BOB).await, "deactivated");
}

fn label(src: &str, uri: &str, val: &str, exp_us: Option<i64>) -> Label {
    Label {
        src: src.into(),
        uri: uri.into(),
        cid: String::new(),
        val: val.into(),
        neg: false,
        cts: "2024-09-01T00:00:00.000Z".into(),
        exp: exp_us.map(|_| "2000-01-01T00:00:00.000Z".into()),
        exp_us,
    }
}

// GetLabels: by subject and issuer, expired ones left out, a subject asked twice answered
// twice (as the reference), nothing when either list is empty.
#[tokio::test]
async fn labels_are_served_by_subject_and_issuer() {
    let mut f = fixture().await;
    let labels = [
        label(LABELER, POST_P, "porn", None),
        label(LABELER, BOB, "!hide", None),
        label(OTHER_LABELER, POST_P, "spam", None),
        label(LABELER, POST_P, "old", Some(946_684_800_000_000)),
    ];
    let ops: Vec<PrivateOp> = labels.iter().cloned().map(PrivateOp::Label).collect();
    f.store.apply_private(&ops, 1, None).unwrap();
    let mut get = async |subjects: &[&str], issuers: &[&str]| -> Vec<serde_json::Value> {
        f.client
            .get_labels(GetLabelsRequest {
                subjects: subjects.iter().map(|s| s.to_string()).collect(),
                issuers: issuers.iter().map(|s| s.to_string()).collect(),
            })
            .await
            .unwrap()
            .into_inner()
            .labels
            .iter()
            .map(|bytes| serde_json::from_slice(bytes).unwrap())
            .collect()
    };
    let vals = |labels: Vec<serde_json::Value>| -> Vec<String> {
        labels
            .iter()
            .map(|l| format!("{} {} {}", l["uri"], l["src"], l["val"]).replace('"', ""))
            .collect()
    };
    assert_eq!(
        vals(get(&[POST_P, BOB, POST_P], &[LABELER]).await),
        [
            format!("{POST_P} {LABELER} porn"),
            format!("{BOB} {LABELER} !hide"),
            format!("{POST_P} {LABELER} porn"),
        ]
    );
    let mut both = vals(get(&[POST_P], &[LABELER, OTHER_LABELER]).await);
    both.sort();
    assert_eq!(
        both,
        [
            format!("{POST_P} {LABELER} porn"),
            format!("{POST_P} {OTHER_LABELER} spam"),
        ]
    );
    let one = get(&[BOB], &[LABELER]).await;
    assert_eq!(
        one[0],
        serde_json::json!({"src": LABELER, "uri": BOB, "val": "!hide", "cts": "2024-09-01T00:00:00.000Z"})
    );
    assert!(get(&[POST_P], &[]).await.is_empty());
    assert!(get(&[], &[LABELER]).await.is_empty());
    // A negation removes the label.
    let mut negation = labels[0].clone();
    negation.neg = true;
    f.store
        .apply_private(&[PrivateOp::Label(negation)], 2, None)
        .unwrap();
    assert!(get(&[POST_P], &[LABELER]).await.is_empty());
}

async fn http(
    router: &axum::Router,
    method: &str,
    path: &str,
    token: Option<&str>,
) -> (StatusCode, String) {
    let mut request = Request::builder().method(method).uri(path);
    if let Some(token) = token {
        request = request.header(header::AUTHORIZATION, format!("Bearer {token}"));
    }
    let response = router
        .clone()
        .oneshot(request.body(Body::empty()).unwrap())
        .await
        .unwrap();
    let status = response.status();
    let body = axum::body::to_bytes(response.into_body(), 1 << 20)
        .await
        .unwrap();
    (status, String::from_utf8(body.to_vec()).unwrap())
}

// The HTTP ops API: takedowns need the admin token (loopback too), reading one does not, and
// what it writes is what the RPCs read.
#[tokio::test]
async fn http_takedowns_need_the_admin_token() {
    let mut f = fixture().await;
    let take = format!("/v1/admin/takedown?kind=record&subject={POST_P}&ref=ops-1");
    for token in [None, Some("wrong")] {
        let (status, _) = http(&f.router, "POST", &take, token).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED);
    }
    let (status, _) = http(&f.router, "POST", "/v1/admin/backup?name=b", None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert_eq!(flags(&mut f.client).await[1], no());
    let (status, body) = http(&f.router, "POST", &take, Some(ADMIN_TOKEN)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body, r#"{"taken_down":true,"takedown_ref":"ops-1"}"#);
    assert_eq!(flags(&mut f.client).await[1], yes("ops-1"));
    let read = format!("/v1/admin/takedown?kind=record&subject={POST_P}");
    let (status, body) = http(&f.router, "GET", &read, None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body, r#"{"taken_down":true,"takedown_ref":"ops-1"}"#);
    let blob = format!("/v1/admin/takedown?kind=blob&subject={BOB}&cid={CID}");
    let (status, body) = http(&f.router, "POST", &blob, Some(ADMIN_TOKEN)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(takedowns(&mut f.client).await[2], yes("TAKEDOWN"));
    let lift = format!("/v1/admin/untakedown?kind=record&subject={POST_P}");
    let (status, body) = http(&f.router, "POST", &lift, Some(ADMIN_TOKEN)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body, r#"{"taken_down":false,"takedown_ref":null}"#);
    assert_eq!(flags(&mut f.client).await[1], no());
    let bad = "/v1/admin/takedown?kind=actor&subject=bob";
    let (status, body) = http(&f.router, "POST", bad, Some(ADMIN_TOKEN)).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(body.contains("`bob` is not a DID"), "{body}");
}
