//! The APIs' limits and error shapes under hostile clients: JSON bodies for unknown routes and
//! methods, bad values truncated in error messages (HTTP and gRPC), the global bound on gRPC
//! calls in flight, and the HTTP listener's connection cap and timeouts.

// Test code: a panic is the failure report.
#![allow(clippy::unwrap_used, clippy::indexing_slicing)]

mod common;

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::{Request, StatusCode};
use serde_json::Value;
use starling_api::grpc::proto::service_client::ServiceClient;
use starling_api::grpc::proto::{GetTimelineRequest, GetTimelineResponse};
use starling_api::grpc::{DataplaneService, grpc_router, serve_grpc, serve_grpc_limited};
use starling_api::{ListenerLimits, router};
use starling_graph::Graph;
use starling_store::EmbeddedStore;
use tonic::Code;
use tower::ServiceExt;

/// How long a state may take to be reached before the test fails.
const DEADLINE: Duration = Duration::from_secs(30);

/// A DID-shaped value of 60 KB: what once came back whole in an HTTP 400, and over ~16 KB
/// turned a gRPC INVALID_ARGUMENT into RESOURCE_EXHAUSTED (the status no longer fit its header).
fn huge_did() -> String {
    format!("did:plc:{}", "a".repeat(60_000))
}

fn state(dir: &tempfile::TempDir) -> starling_api::AppState<EmbeddedStore> {
    let store = Arc::new(EmbeddedStore::open(dir.path()).unwrap());
    common::app_state(store, Arc::new(Graph::new()))
}

async fn call(app: &axum::Router, request: Request<Body>) -> (StatusCode, Value) {
    let response = app.clone().oneshot(request).await.unwrap();
    let status = response.status();
    let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .unwrap();
    let body = serde_json::from_slice(&bytes).unwrap_or_else(|err| {
        panic!(
            "HTTP {status}, body is not JSON ({err}): {}",
            String::from_utf8_lossy(&bytes)
        )
    });
    (status, body)
}

// Checks that an unknown path is a 404 and a known path asked with the wrong method a 405, both
// with the JSON error shape of every other error, naming the path; and that a 60 KB bad DID
// comes back truncated in a 400 that still names the parameter.
#[tokio::test]
async fn http_errors_are_json_and_bounded() {
    let dir = tempfile::tempdir().unwrap();
    let app = router(state(&dir));
    let get = |uri: &str| Request::get(uri).body(Body::empty()).unwrap();
    let (status, body) = call(&app, get("/no/such/route")).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    assert!(
        body["error"].as_str().unwrap().contains("/no/such/route"),
        "{body}"
    );
    let post = Request::post("/health").body(Body::empty()).unwrap();
    let (status, body) = call(&app, post).await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED, "{body}");
    assert!(
        body["error"].as_str().unwrap().contains("/health"),
        "{body}"
    );

    let did = huge_did();
    let (status, body) = call(&app, get(&format!("/v1/graph/actor?actor={did}"))).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    let message = body["error"].as_str().unwrap();
    assert!(message.len() < 1024, "{} bytes: {message}", message.len());
    assert!(message.contains("`actor`") && message.contains(&format!("({} bytes)", did.len())));
}

/// Serves gRPC on loopback with at most `in_flight_max` calls in flight; returns the address.
async fn serve(dir: &tempfile::TempDir, in_flight_max: usize) -> String {
    let service = DataplaneService::new(state(dir)).with_in_flight_max(in_flight_max);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(serve_grpc(
        listener,
        grpc_router(service),
        std::future::pending(),
    ));
    format!("http://{addr}")
}

async fn connect(url: &str) -> tonic::transport::Channel {
    tonic::transport::Endpoint::from_shared(url.to_owned())
        .unwrap()
        .connect()
        .await
        .unwrap()
}

fn timeline(actor_did: &str) -> GetTimelineRequest {
    GetTimelineRequest {
        actor_did: actor_did.to_owned(),
        limit: 5,
        ..Default::default()
    }
}

// Checks that a 60 KB bad DID is INVALID_ARGUMENT with a short message, not RESOURCE_EXHAUSTED,
// and that calls beyond the in-flight bound are refused with RESOURCE_EXHAUSTED at once, while
// the bound's slots come back when calls end. How: with a bound of 1, a call whose request body
// never comes holds the one slot (the server waits for its message); other calls are refused
// until it is dropped, then answered.
#[tokio::test]
async fn grpc_errors_are_bounded_and_in_flight_calls_capped() {
    let dir = tempfile::tempdir().unwrap();
    let url = serve(&dir, 1).await;
    let mut client = ServiceClient::new(connect(&url).await);
    let status = client
        .get_timeline(timeline(&huge_did()))
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
    assert!(status.message().len() < 1024, "{}", status.message().len());
    assert!(status.message().contains("not a DID"), "{status:?}");

    // One call held open: its request stream never yields a message.
    let mut held = tonic::client::Grpc::new(connect(&url).await);
    held.ready().await.unwrap();
    let holder = tokio::spawn(async move {
        let path =
            tonic::codegen::http::uri::PathAndQuery::from_static("/bsky.Service/GetTimeline");
        let codec = tonic_prost::ProstCodec::<GetTimelineRequest, GetTimelineResponse>::default();
        let body = futures_util::stream::pending::<GetTimelineRequest>();
        held.client_streaming(tonic::Request::new(body), path, codec)
            .await
    });
    let valid = "did:plc:aaaaaaaaaaaaaaaaaaaaaaaa";
    let started = Instant::now();
    loop {
        match client.get_timeline(timeline(valid)).await {
            Err(status) if status.code() == Code::ResourceExhausted => break,
            Ok(_) => assert!(
                started.elapsed() < DEADLINE,
                "the held call never took the slot"
            ),
            Err(status) => panic!("{status:?}"),
        }
        tokio::task::yield_now().await;
    }
    holder.abort();
    loop {
        match client.get_timeline(timeline(valid)).await {
            Ok(response) => {
                assert!(response.into_inner().items.is_empty());
                break;
            }
            Err(status) if status.code() == Code::ResourceExhausted => {
                assert!(started.elapsed() < DEADLINE, "the slot never came back");
            }
            Err(status) => panic!("{status:?}"),
        }
        tokio::task::yield_now().await;
    }
}

/// Whether the server closed `stream`: a read gives end of file or a reset within `wait`;
/// `false` if it is still open when `wait` ends. What the server sends first (an HTTP/2
/// server's settings) is read and ignored.
fn closed_within(stream: &mut TcpStream, wait: Duration) -> bool {
    stream.set_read_timeout(Some(wait)).unwrap();
    let mut buf = [0u8; 64];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(err) if matches!(err.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                return false;
            }
            Err(_) => return true,
        }
    }
}

fn health(addr: &str) -> String {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream.set_read_timeout(Some(DEADLINE)).unwrap();
    write!(
        stream,
        "GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    response
}

// Checks the HTTP listener's limits on a real socket: with a cap of 4 connections, 10 idle
// connections leave the 4 newest open and the 6 oldest closed, `/health` still answers (it
// makes the oldest idle connection close), and a connection that sends nothing is closed after
// the header timeout. Without the cap every idle connection holds a file descriptor until the
// process runs out and nothing, `/health` included, can connect.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_connections_beyond_the_cap_are_closed_while_health_answers() {
    let dir = tempfile::tempdir().unwrap();
    let app = router(state(&dir));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let limits = ListenerLimits {
        connections_max: 4,
        header_timeout: Duration::from_secs(2),
        idle_timeout: Duration::from_secs(60),
    };
    tokio::spawn(starling_api::serve(
        listener,
        app,
        limits,
        std::future::pending(),
    ));
    tokio::task::spawn_blocking(move || {
        let mut idle: Vec<TcpStream> = (0..10)
            .map(|_| TcpStream::connect(&addr).unwrap())
            .collect();
        // The newest one is accepted last: once it is, every older eviction has been asked.
        let (oldest, newest) = idle.split_at_mut(6);
        for stream in oldest.iter_mut() {
            assert!(
                closed_within(stream, DEADLINE),
                "an idle connection beyond the cap stayed open"
            );
        }
        let response = health(&addr);
        assert!(response.starts_with("HTTP/1.1 200"), "{response}");
        // The header timeout closes the rest, which never sent a byte.
        let started = Instant::now();
        for stream in newest.iter_mut() {
            assert!(
                closed_within(stream, DEADLINE),
                "a silent connection stayed open"
            );
        }
        assert!(started.elapsed() < DEADLINE);
        let response = health(&addr);
        assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    })
    .await
    .unwrap();
}

// Checks the gRPC listener's cap on a real socket: with a cap of 2 connections, a third is
// closed at once (long before the 20 s header timeout could close it) while the two silent ones
// stay open, and once they are gone a real client gets in and is answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_connections_beyond_the_cap_are_closed() {
    let dir = tempfile::tempdir().unwrap();
    let service = DataplaneService::new(state(&dir));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let limits = ListenerLimits {
        connections_max: 2,
        header_timeout: Duration::from_secs(20),
        idle_timeout: Duration::from_secs(60),
    };
    let router = grpc_router(service);
    tokio::spawn(serve_grpc_limited(
        listener,
        router,
        limits,
        std::future::pending(),
    ));
    let url = format!("http://{addr}");
    tokio::task::spawn_blocking(move || {
        let mut silent: Vec<TcpStream> =
            (0..2).map(|_| TcpStream::connect(&addr).unwrap()).collect();
        let mut third = TcpStream::connect(&addr).unwrap();
        let closed = closed_within(&mut third, Duration::from_secs(10));
        assert!(closed, "a connection beyond the cap stayed open");
        for stream in &mut silent {
            let closed = closed_within(stream, Duration::from_millis(100));
            assert!(!closed, "a connection within the cap was closed");
        }
    })
    .await
    .unwrap();
    // The slots are free again once the silent connections are gone.
    let started = Instant::now();
    let response = loop {
        if let Ok(channel) = tonic::transport::Endpoint::from_shared(url.clone())
            .unwrap()
            .connect()
            .await
        {
            let mut client = ServiceClient::new(channel);
            if let Ok(response) = client
                .get_timeline(timeline("did:plc:aaaaaaaaaaaaaaaaaaaaaaaa"))
                .await
            {
                break response;
            }
        }
        assert!(started.elapsed() < DEADLINE, "no slot came back");
        tokio::task::yield_now().await;
    };
    assert!(response.into_inner().items.is_empty());
}
