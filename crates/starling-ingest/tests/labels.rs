//! A labeler's `subscribeLabels` stream into the store, end to end on loopback: a stand-in
//! labeler serves real-format frames (DAG-CBOR header and body, labels signed with a test
//! secp256k1 key over their canonical DAG-CBOR), the PLC stand-in serves the labeler's DID
//! document with that key as `#atproto_label`, and the consumer applies them.
//!
//! Checks: good labels are stored, a negation removes its label, a label signed by another
//! key and a frame that is not CBOR are dropped and counted, and the cursor is the last frame's
//! `seq`. Then the consumer restarts against a labeler that ignores the cursor and sends every
//! frame again plus a new one: it asked for the stored cursor, skips the frames it had (each
//! counted as replayed), and applies only the new one, so nothing is applied twice.

// Test code: a panic is the failure report.
#![allow(clippy::unwrap_used, clippy::indexing_slicing)]
// The handshake callback's error type is tungstenite's (an HTTP response), not ours.
#![allow(clippy::result_large_err)]

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::SinkExt;
use k256::ecdsa::{Signature, SigningKey, signature::Signer};
use starling_core::labels::{Value, encode, encode_frame};
use starling_identity::signature::{MULTICODEC_K256, base58_encode};
use starling_identity::stand_in::PlcStandIn;
use starling_identity::{Resolver, ResolverConfig};
use starling_ingest::labels::{LabelerStats, run_labeler};
use starling_store::{EmbeddedStore, Store};
use tokio::net::TcpListener;
use tokio_tungstenite::tungstenite::Message;

const LABELER: &str = "did:plc:abcdefghijklmnopqrstuvwx";
const POST: &str = "at://did:plc:bbbbbbbbbbbbbbbbbbbbbbbb/app.bsky.feed.post/3kaaaaaaaaab2";
const ACTOR: &str = "did:plc:bbbbbbbbbbbbbbbbbbbbbbbb";
const DEADLINE: Duration = Duration::from_secs(30);

fn text(s: &str) -> Value {
    Value::Text(s.to_owned())
}

fn map(entries: Vec<(&str, Value)>) -> Value {
    Value::Map(
        entries
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v))
            .collect(),
    )
}

/// A label signed with `key`: the signature covers the canonical DAG-CBOR without `sig`.
fn label(key: &SigningKey, uri: &str, val: &str, neg: bool) -> Value {
    let mut entries = vec![
        ("ver", Value::Int(1)),
        ("src", text(LABELER)),
        ("uri", text(uri)),
        ("val", text(val)),
        ("cts", text("2026-08-01T00:00:00.000Z")),
    ];
    if neg {
        entries.push(("neg", Value::Bool(true)));
    }
    let mut unsigned = Vec::new();
    encode(&map(entries.clone()), &mut unsigned);
    let signature: Signature = key.sign(&unsigned);
    let signature = signature.normalize_s();
    entries.push(("sig", Value::Bytes(signature.to_bytes().to_vec())));
    map(entries)
}

fn frame(seq: i64, labels: Vec<Value>) -> Vec<u8> {
    encode_frame(
        &map(vec![("op", Value::Int(1)), ("t", text("#labels"))]),
        &map(vec![
            ("seq", Value::Int(seq)),
            ("labels", Value::Array(labels)),
        ]),
    )
}

/// A loopback labeler: serves the frames of `frames` at the time of each connection (all of
/// them, whatever the cursor), records the query of each request, then keeps it open.
async fn labeler(frames: Arc<Mutex<Vec<Vec<u8>>>>, queries: Arc<Mutex<Vec<String>>>) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        loop {
            let (stream, _) = listener.accept().await.unwrap();
            let queries = queries.clone();
            let frames = frames.lock().unwrap().clone();
            tokio::spawn(async move {
                let record =
                    |request: &tokio_tungstenite::tungstenite::handshake::server::Request,
                     response| {
                        queries
                            .lock()
                            .unwrap()
                            .push(request.uri().query().unwrap_or_default().to_owned());
                        Ok(response)
                    };
                let mut socket = tokio_tungstenite::accept_hdr_async(stream, record)
                    .await
                    .unwrap();
                for bytes in frames {
                    socket.send(Message::Binary(bytes.into())).await.unwrap();
                }
                std::future::pending::<()>().await;
            });
        }
    });
    url
}

fn document(key: &SigningKey) -> serde_json::Value {
    let point = key.verifying_key().to_sec1_point(true);
    let multikey = format!(
        "z{}",
        base58_encode(&[&MULTICODEC_K256[..], point.as_bytes()].concat())
    );
    serde_json::json!({
        "@context": ["https://www.w3.org/ns/did/v1"],
        "id": LABELER,
        "alsoKnownAs": ["at://labeler.test"],
        "verificationMethod": [{
            "id": format!("{LABELER}#atproto_label"),
            "type": "Multikey",
            "controller": LABELER,
            "publicKeyMultibase": multikey,
        }],
        "service": [],
    })
}

/// (subject, value) of every label stored on the test's subjects.
fn stored(store: &EmbeddedStore) -> BTreeSet<(String, String)> {
    let mut res = BTreeSet::new();
    for subject in [POST, ACTOR] {
        for label in store.labels(subject).unwrap() {
            let json: serde_json::Value = serde_json::from_str(&label.json).unwrap();
            res.insert((subject.to_owned(), json["val"].as_str().unwrap().to_owned()));
        }
    }
    res
}

async fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let start = tokio::time::Instant::now();
    while !done() {
        assert!(start.elapsed() < DEADLINE, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn labels_are_checked_applied_and_resumed_without_duplicates() {
    let key = SigningKey::from_slice(&[7; 32]).unwrap();
    let other_key = SigningKey::from_slice(&[9; 32]).unwrap();
    let plc = PlcStandIn::start(HashMap::from([(LABELER.to_owned(), document(&key))]))
        .await
        .unwrap();
    let resolver = Resolver::new(ResolverConfig {
        plc_url: plc.url(),
        ..ResolverConfig::default()
    })
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(EmbeddedStore::open(dir.path()).unwrap());
    let frames = vec![
        frame(1, vec![label(&key, POST, "porn", false)]),
        frame(
            2,
            vec![
                label(&other_key, POST, "forged", false),
                label(&key, ACTOR, "!hide", false),
                label(&key, POST, "spam", false),
            ],
        ),
        b"\xa2not cbor at all".to_vec(),
        frame(4, vec![label(&key, POST, "porn", true)]),
    ];
    let frames = Arc::new(Mutex::new(frames));
    let queries = Arc::new(Mutex::new(Vec::new()));
    let url = labeler(frames.clone(), queries.clone()).await;

    let stats = Arc::new(LabelerStats::default());
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let task = tokio::spawn(run_labeler(
        store.clone(),
        url.clone(),
        resolver.clone(),
        stats.clone(),
        stopped,
    ));
    wait_for("three frames and the malformed one", || {
        stats.frames.load(Ordering::Relaxed) == 3 && stats.malformed.load(Ordering::Relaxed) == 1
    })
    .await;
    stop.send(true).unwrap();
    task.await.unwrap().unwrap();
    let want: BTreeSet<_> = [(POST, "spam"), (ACTOR, "!hide")]
        .map(|(s, v)| (s.to_owned(), v.to_owned()))
        .into();
    assert_eq!(stored(&store), want);
    assert_eq!(stats.bad_signature.load(Ordering::Relaxed), 1);
    assert_eq!(stats.applied.load(Ordering::Relaxed), 3);
    assert_eq!(stats.negated.load(Ordering::Relaxed), 1);
    assert_eq!(store.labeler_cursor(&url).unwrap(), Some(4));
    assert_eq!(queries.lock().unwrap().as_slice(), [""]);

    // Restart; the labeler now sends everything again and one frame more.
    frames
        .lock()
        .unwrap()
        .push(frame(5, vec![label(&key, POST, "graphic-media", false)]));
    let stats = Arc::new(LabelerStats::default());
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let task = tokio::spawn(run_labeler(
        store.clone(),
        url.clone(),
        resolver,
        stats.clone(),
        stopped,
    ));
    wait_for("the new frame", || {
        stats.frames.load(Ordering::Relaxed) == 1
    })
    .await;
    wait_for("the replays", || {
        stats.replayed.load(Ordering::Relaxed) == 3
    })
    .await;
    stop.send(true).unwrap();
    task.await.unwrap().unwrap();
    assert_eq!(queries.lock().unwrap().as_slice(), ["", "cursor=4"]);
    assert_eq!(stats.applied.load(Ordering::Relaxed), 1);
    assert_eq!(stats.bad_signature.load(Ordering::Relaxed), 0);
    let mut want = want;
    want.insert((POST.to_owned(), "graphic-media".to_owned()));
    assert_eq!(stored(&store), want);
    assert_eq!(store.labeler_cursor(&url).unwrap(), Some(5));
}
