//! The `bsky.Service` gRPC server over a real socket, and the wire layout of its messages.
//!
//! The server tests bind `serve_grpc` on 127.0.0.1:0 and call it with the generated tonic
//! client over h2c (HTTP/2 without TLS, prior knowledge), the way the AppView calls an
//! `http://` dataplane. The wire tests encode messages with prost and read the raw protobuf
//! tags back with a decoder written here, comparing the field numbers and wire types with
//! the AppView 0.0.280 layout as written down in the dataplane contract, so a renumbered or
//! retyped field in `proto/bsky.proto` fails here and not in front of the AppView.

// Test code: a panic is the failure report.
#![allow(clippy::unwrap_used, clippy::indexing_slicing)]

mod common;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;

use prost::Message;
use starling_api::AppState;
use starling_api::grpc::proto::service_client::ServiceClient;
use starling_api::grpc::proto::{
    ActorInfo, GetSitemapIndexRequest, GetSitemapPageRequest, GetTimelineRequest,
    GetTimelineResponse, Record, Relationships, TimelineFeedItem, VerificationMeta,
};
use starling_api::grpc::{DataplaneService, GrpcTls, grpc_router, grpc_tls_router, serve_grpc};
use starling_graph::Graph;
use starling_store::EmbeddedStore;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tonic::Code;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint};

// ----- The server -----

/// A running server: its address, the sender that stops it, and its task.
struct Running {
    addr: SocketAddr,
    stop: oneshot::Sender<()>,
    task: JoinHandle<std::io::Result<()>>,
    _dir: tempfile::TempDir,
}

/// Serves an empty store over h2c.
async fn start() -> Running {
    start_with(None).await
}

/// Serves an empty store, over TLS with `tls`'s certificate if given.
async fn start_with(tls: Option<GrpcTls>) -> Running {
    let (state, dir) = empty_state();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = oneshot::channel::<()>();
    let service = DataplaneService::new(state);
    let router = match &tls {
        Some(tls) => grpc_tls_router(service, tls).unwrap(),
        None => grpc_router(service),
    };
    let task = tokio::spawn(serve_grpc(listener, router, async {
        let _ = stopped.await;
    }));
    Running {
        addr,
        stop,
        task,
        _dir: dir,
    }
}

async fn client(addr: SocketAddr) -> ServiceClient<Channel> {
    let channel = Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    ServiceClient::new(channel)
}

#[tokio::test]
async fn unimplemented_rpcs_name_the_method() {
    // Calls two RPCs over h2c and checks that each answers UNIMPLEMENTED (not a transport
    // error, and not tonic's generic text) with its own method name in the message; then stops
    // the server and checks that it shuts down cleanly.
    let running = start().await;
    let mut client = client(running.addr).await;

    let status = client
        .get_sitemap_page(GetSitemapPageRequest::default())
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::Unimplemented, "{status:?}");
    assert_eq!(
        status.message(),
        "GetSitemapPage is not implemented by starling"
    );

    let status = client
        .get_sitemap_index(GetSitemapIndexRequest::default())
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::Unimplemented, "{status:?}");
    assert!(status.message().contains("GetSitemapIndex"), "{status:?}");

    running.stop.send(()).unwrap();
    running.task.await.unwrap().unwrap();
}

/// A self-signed certificate for `localhost` and its key, PEM-encoded.
// Checks `grpc.health.v1.Health` on the gRPC port, as a Kubernetes gRPC probe calls it: the
// server and `bsky.Service` are NOT_SERVING until the owner of the service says otherwise,
// then SERVING, then NOT_SERVING again; an unknown service name is NOT_FOUND.
#[tokio::test]
async fn health_service_reports_what_it_is_told() {
    use tonic_health::pb::HealthCheckRequest;
    use tonic_health::pb::health_check_response::ServingStatus;
    use tonic_health::pb::health_client::HealthClient;

    let (state, _dir) = empty_state();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let service = DataplaneService::new(state);
    let health = service.health();
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(serve_grpc(listener, grpc_router(service), async {
        let _ = stopped.await;
    }));
    let channel = Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut client = HealthClient::new(channel);
    let check = |service: &str| HealthCheckRequest {
        service: service.to_owned(),
    };
    for serving in [None, Some(true), Some(false)] {
        if let Some(serving) = serving {
            health.set_serving(serving).await;
        }
        let expected = if serving == Some(true) {
            ServingStatus::Serving
        } else {
            ServingStatus::NotServing
        };
        for name in ["", "bsky.Service"] {
            let answer = client.check(check(name)).await.unwrap().into_inner();
            assert_eq!(
                answer.status(),
                expected,
                "service {name:?} after {serving:?}"
            );
        }
    }
    let unknown = client.check(check("no.Such")).await.unwrap_err();
    assert_eq!(unknown.code(), Code::NotFound);
    stop.send(()).unwrap();
    task.await.unwrap().unwrap();
}

fn self_signed() -> (Vec<u8>, Vec<u8>) {
    let cert = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
    (
        cert.cert.pem().into_bytes(),
        cert.signing_key.serialize_pem().into_bytes(),
    )
}

#[tokio::test]
async fn serves_over_tls_with_the_given_certificate() {
    // A client that trusts only the server's self-signed certificate completes the handshake
    // and gets real answers (a timeline, an UNIMPLEMENTED naming its method); a client that
    // trusts a different certificate and an h2c client both fail to connect or call, and the
    // server still answers afterwards.
    let (cert, key) = self_signed();
    let running = start_with(Some(GrpcTls::new(&cert, &key).unwrap())).await;
    let endpoint = |ca: &[u8]| {
        Endpoint::from_shared(format!("https://localhost:{}", running.addr.port()))
            .unwrap()
            .tls_config(
                ClientTlsConfig::new()
                    .ca_certificate(Certificate::from_pem(ca))
                    .domain_name("localhost"),
            )
            .unwrap()
    };
    let mut client = ServiceClient::new(endpoint(&cert).connect().await.unwrap());
    let timeline = client
        .get_timeline(GetTimelineRequest {
            actor_did: "did:plc:viewer".into(),
            limit: 10,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(timeline.items.is_empty(), "{timeline:?}");
    let status = client
        .get_sitemap_index(GetSitemapIndexRequest::default())
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::Unimplemented, "{status:?}");

    let (stranger, _) = self_signed();
    let untrusted = endpoint(&stranger).connect().await;
    assert!(
        untrusted.is_err(),
        "a certificate the client does not trust was accepted"
    );

    let mut plain = client_lazy(running.addr);
    let status = plain
        .get_timeline(GetTimelineRequest::default())
        .await
        .unwrap_err();
    // The TLS listener closes a connection that does not start with a handshake.
    assert!(
        matches!(status.code(), Code::Unavailable | Code::Unknown),
        "{status:?}"
    );

    client
        .get_timeline(GetTimelineRequest {
            actor_did: "did:plc:viewer".into(),
            limit: 1,
            ..Default::default()
        })
        .await
        .unwrap();
    running.stop.send(()).unwrap();
    running.task.await.unwrap().unwrap();
}

/// An h2c client that connects on its first call.
fn client_lazy(addr: SocketAddr) -> ServiceClient<Channel> {
    let channel = Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect_lazy();
    ServiceClient::new(channel)
}

#[test]
fn tls_refuses_a_bad_certificate_or_key() {
    // Garbage instead of a certificate, a key that does not parse, and a key that does not
    // belong to the certificate are refused before any server starts, with a message that
    // says it is the TLS material.
    let (cert, key) = self_signed();
    let (_, other_key) = self_signed();
    let bad_key = b"-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n";
    let cases: [(&[u8], &[u8]); 3] = [
        (b"not a certificate", &key),
        (&cert, bad_key),
        (&cert, &other_key),
    ];
    for (cert, key) in cases {
        let err = GrpcTls::new(cert, key).map(|_| ()).unwrap_err();
        assert!(err.starts_with("gRPC TLS certificate or key"), "{err}");
    }
    assert!(GrpcTls::new(&cert, &key).is_ok());
}

/// The state of an empty store, and the directory that must outlive it.
fn empty_state() -> (AppState<EmbeddedStore>, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(EmbeddedStore::open(dir.path()).unwrap());
    (common::app_state(store, Arc::new(Graph::new())), dir)
}

#[tokio::test]
async fn unknown_method_is_unimplemented() {
    // A method outside the service (here `bsky.Service/NoSuchMethod`, sent through tonic's raw
    // client) also answers UNIMPLEMENTED, so a newer AppView's new RPC fails as clearly.
    let running = start().await;
    let channel = Endpoint::from_shared(format!("http://{}", running.addr))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready().await.unwrap();
    let path = tonic::codegen::http::uri::PathAndQuery::from_static("/bsky.Service/NoSuchMethod");
    let codec = tonic_prost::ProstCodec::<GetTimelineRequest, GetTimelineResponse>::default();
    let status = grpc
        .unary(
            tonic::Request::new(GetTimelineRequest::default()),
            path,
            codec,
        )
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::Unimplemented, "{status:?}");
    running.stop.send(()).unwrap();
    running.task.await.unwrap().unwrap();
}

// ----- The wire layout -----

/// Protobuf wire types.
const VARINT: u8 = 0;
const I64: u8 = 1;
const LEN: u8 = 2;

/// Reads one varint from `bytes` at `*at`, advancing `*at`.
fn read_varint(bytes: &[u8], at: &mut usize) -> u64 {
    let mut res = 0u64;
    for shift in (0..64).step_by(7) {
        let byte = bytes[*at];
        *at += 1;
        res |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return res;
        }
    }
    panic!("varint longer than 10 bytes");
}

/// The top-level fields of an encoded message, in order: (field number, wire type, payload of
/// a LEN field). Only the wire types our messages use are handled.
fn fields(bytes: &[u8]) -> Vec<(u32, u8, Vec<u8>)> {
    let mut res = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        let key = read_varint(bytes, &mut at);
        let number = u32::try_from(key >> 3).unwrap();
        let wire_type = u8::try_from(key & 7).unwrap();
        let payload = match wire_type {
            VARINT => {
                read_varint(bytes, &mut at);
                Vec::new()
            }
            I64 => {
                at += 8;
                Vec::new()
            }
            LEN => {
                let len = usize::try_from(read_varint(bytes, &mut at)).unwrap();
                at += len;
                bytes[at - len..at].to_vec()
            }
            other => panic!("wire type {other} of field {number} is not used by bsky.proto"),
        };
        res.push((number, wire_type, payload));
    }
    res
}

/// The (field number, wire type) pairs of an encoded message.
fn layout(bytes: &[u8]) -> Vec<(u32, u8)> {
    fields(bytes)
        .into_iter()
        .map(|(number, wire_type, _)| (number, wire_type))
        .collect()
}

#[test]
fn get_timeline_request_bytes() {
    // Encodes a GetTimelineRequest with every field set and compares the exact bytes with a
    // hand-assembled message: actor_did=1 (string), limit=2 (int32), cursor=3 (string),
    // exclude_replies=4, exclude_reposts=5, exclude_quotes=6 (bool). Then decodes those bytes
    // and gets the same message back.
    let request = GetTimelineRequest {
        actor_did: "did:plc:abc".into(),
        limit: 50,
        cursor: "c1".into(),
        exclude_replies: true,
        exclude_reposts: true,
        exclude_quotes: true,
    };
    let mut expected = vec![(1 << 3) | LEN, 11];
    expected.extend_from_slice(b"did:plc:abc");
    expected.extend_from_slice(&[(2 << 3) | VARINT, 50]);
    expected.extend_from_slice(&[(3 << 3) | LEN, 2, b'c', b'1']);
    expected.extend_from_slice(&[(4 << 3) | VARINT, 1, (5 << 3) | VARINT, 1]);
    expected.extend_from_slice(&[(6 << 3) | VARINT, 1]);

    let bytes = request.encode_to_vec();
    assert_eq!(bytes, expected);
    assert_eq!(GetTimelineRequest::decode(&expected[..]).unwrap(), request);
}

#[test]
fn get_timeline_response_layout() {
    // GetTimelineResponse {1 repeated TimelineFeedItem items, 2 cursor}, and inside an item
    // {1 uri, 2 cid, 3 repost, 4 repost_cid, 5 is_reply, 6 is_repost, 7 is_quote_post}.
    let item = TimelineFeedItem {
        uri: "at://did:plc:a/app.bsky.feed.post/1".into(),
        cid: "bafy1".into(),
        repost: "at://did:plc:b/app.bsky.feed.repost/2".into(),
        repost_cid: "bafy2".into(),
        is_reply: true,
        is_repost: true,
        is_quote_post: true,
    };
    let response = GetTimelineResponse {
        items: vec![item.clone(), item],
        cursor: "next".into(),
    };
    let bytes = response.encode_to_vec();
    assert_eq!(layout(&bytes), [(1, LEN), (1, LEN), (2, LEN)]);
    let item_bytes = &fields(&bytes)[0].2;
    assert_eq!(
        layout(item_bytes),
        [
            (1, LEN),
            (2, LEN),
            (3, LEN),
            (4, LEN),
            (5, VARINT),
            (6, VARINT),
            (7, VARINT)
        ]
    );
}

#[test]
fn actor_info_layout() {
    // ActorInfo is read strictly by index by the AppView, and has the most fields. Every field
    // set: 1 exists, 2 handle, 3 Record profile, 4 taken_down, 5 takedown_ref,
    // 6 Timestamp tombstoned_at, 7 labeler, 8 allow_incoming_chats_from, 9 upstream_status,
    // 10 Timestamp created_at, 11 priority_notifications, 12 double pagerank,
    // 13 trusted_verifier, 14 map verified_by, 15 tags, 16 profile_tags, 17 Record status_record,
    // 18 allow_activity_subscriptions_from, 19 AgeAssuranceStatus, 21 Record germ_record,
    // 22 allow_group_chat_invites_from.
    let timestamp = prost_types::Timestamp {
        seconds: 1_700_000_000,
        nanos: 1,
    };
    let record = Record {
        record: b"{}".to_vec(),
        cid: "bafy".into(),
        ..Default::default()
    };
    let actor = ActorInfo {
        exists: true,
        handle: "alice.test".into(),
        profile: Some(record.clone()),
        taken_down: true,
        takedown_ref: "ref".into(),
        tombstoned_at: Some(timestamp),
        labeler: true,
        allow_incoming_chats_from: "all".into(),
        upstream_status: "active".into(),
        created_at: Some(timestamp),
        priority_notifications: true,
        pagerank: 0.5,
        trusted_verifier: true,
        verified_by: HashMap::from([(
            "did:plc:issuer".to_owned(),
            VerificationMeta {
                rkey: "3k".into(),
                ..Default::default()
            },
        )]),
        tags: vec!["t".into()],
        profile_tags: vec!["p".into()],
        status_record: Some(record.clone()),
        allow_activity_subscriptions_from: "followers".into(),
        age_assurance_status: Some(Default::default()),
        germ_record: Some(record),
        allow_group_chat_invites_from: "none".into(),
    };
    let mut expected: Vec<(u32, u8)> = vec![
        (1, VARINT),
        (2, LEN),
        (3, LEN),
        (4, VARINT),
        (5, LEN),
        (6, LEN),
        (7, VARINT),
        (8, LEN),
        (9, LEN),
        (10, LEN),
        (11, VARINT),
        (12, I64),
        (13, VARINT),
        (14, LEN),
        (15, LEN),
        (16, LEN),
        (17, LEN),
        (18, LEN),
        (19, LEN),
        (21, LEN),
        (22, LEN),
    ];
    expected.sort_unstable();
    let mut actual = layout(&actor.encode_to_vec());
    actual.sort_unstable();
    assert_eq!(actual, expected);
}

#[test]
fn relationships_layout() {
    // Relationships {1 bool muted, 2 muted_by_list, 3 blocked_by, 4 blocking,
    // 5 blocked_by_list, 6 blocking_by_list, 7 following, 8 followed_by,
    // 9 bool muted_only_reposts, 10 bool muted_only_quoteposts}.
    let relationships = Relationships {
        muted: true,
        muted_by_list: "l".into(),
        blocked_by: "b".into(),
        blocking: "b".into(),
        blocked_by_list: "l".into(),
        blocking_by_list: "l".into(),
        following: "f".into(),
        followed_by: "f".into(),
        muted_only_reposts: true,
        muted_only_quoteposts: true,
    };
    let mut expected = vec![(1, VARINT), (9, VARINT), (10, VARINT)];
    expected.extend((2..=8).map(|number| (number, LEN)));
    expected.sort_unstable();
    let mut actual = layout(&relationships.encode_to_vec());
    actual.sort_unstable();
    assert_eq!(actual, expected);
}
