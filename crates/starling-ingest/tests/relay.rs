//! The relay firehose against a loopback relay serving the real frames of
//! `relay-corpus/frames.bin.zst`, with every commit's key served by the PLC stand-in from the
//! real documents of `did_docs.json.zst`: the store it builds equals the store built from the
//! Jetstream events of the same window (`expected_v1.jsonl`, replayed): every record, every
//! count, every graph edge. A commit whose signature has one flipped byte is refused and
//! counted, and only its records are missing.

// Test code: a panic is the failure report; the handshake callback's error type is the library's.
#![allow(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    clippy::result_large_err
)]

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::SinkExt;
use starling_identity::stand_in::PlcStandIn;
use starling_identity::{Resolver, ResolverConfig};
use starling_ingest::{LiveOptions, RelayOptions, ReplayOptions};
use starling_repo::firehose::Frame;
use starling_repo::{Cid, Ipld};
use starling_store::{Committed, EmbeddedStore, GraphChange, Progress, Stats, Store};
use tokio_tungstenite::tungstenite::Message;

fn data_dir() -> Option<PathBuf> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/data/jetstream");
    if path.is_dir() {
        return Some(path);
    }
    assert!(
        std::env::var("CI").is_err(),
        "test data {} is missing under CI",
        path.display()
    );
    eprintln!("skipping: test data {} is missing", path.display());
    None
}

fn frames(path: &std::path::Path) -> Vec<Vec<u8>> {
    let bytes = zstd::decode_all(&std::fs::read(path).unwrap()[..]).unwrap();
    let mut res = Vec::new();
    let mut rest = &bytes[..];
    while !rest.is_empty() {
        let (len, tail) = rest.split_at(4);
        let len = u32::from_le_bytes(len.try_into().unwrap()) as usize;
        let (frame, tail) = tail.split_at(len);
        res.push(frame.to_vec());
        rest = tail;
    }
    res
}

/// A loopback relay: serves `frames` after the client's `cursor` (all without one), then holds
/// the connection open.
async fn start_relay(frames: Vec<Vec<u8>>) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let frames = Arc::new(frames);
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let frames = frames.clone();
            tokio::spawn(async move {
                let mut cursor = None;
                let callback =
                    |request: &tokio_tungstenite::tungstenite::handshake::server::Request,
                     response| {
                        assert_eq!(
                            request.uri().path(),
                            "/xrpc/com.atproto.sync.subscribeRepos"
                        );
                        cursor = request
                            .uri()
                            .query()
                            .and_then(|query| query.strip_prefix("cursor="))
                            .map(|seq| seq.parse::<u64>().unwrap());
                        Ok(response)
                    };
                let mut socket = tokio_tungstenite::accept_hdr_async(stream, callback)
                    .await
                    .unwrap();
                for frame in frames.iter() {
                    let seq = Frame::decode(frame)
                        .ok()
                        .and_then(|frame| frame.seq())
                        .unwrap_or(u64::MAX);
                    if cursor.is_none_or(|cursor| seq > cursor)
                        && socket
                            .send(Message::Binary(frame.clone().into()))
                            .await
                            .is_err()
                    {
                        return;
                    }
                }
                // Hold the connection open, answering pings, until the client leaves.
                while let Some(Ok(_)) = futures_util::StreamExt::next(&mut socket).await {}
            });
        }
    });
    format!("ws://{addr}")
}

fn no_graph() -> Box<dyn starling_ingest::CommitSink + Send> {
    Box::new(|_: &Committed| {})
}

/// Ingests `frames` from a loopback relay into a new store at `dir` until the relay cursor
/// reaches the last frame's sequence.
async fn ingest_relay(
    frames: Vec<Vec<u8>>,
    plc: &PlcStandIn,
    dir: &std::path::Path,
) -> Arc<EmbeddedStore> {
    let last_seq = frames
        .iter()
        .filter_map(|frame| Frame::decode(frame).ok()?.seq())
        .max()
        .unwrap();
    let url = start_relay(frames).await;
    let store = Arc::new(EmbeddedStore::open(dir).unwrap());
    let resolver = Resolver::new(ResolverConfig {
        plc_url: plc.url(),
        ..ResolverConfig::default()
    })
    .unwrap();
    let options = LiveOptions {
        relay: Some(RelayOptions::new(url.clone(), resolver)),
        ..LiveOptions::default()
    };
    let (shutdown_tx, shutdown_rx) = tokio::sync::watch::channel(false);
    let status = Arc::new(starling_ingest::live::LiveStatus::default());
    let task = tokio::spawn(starling_ingest::run_live(
        store.clone(),
        options,
        no_graph(),
        status,
        shutdown_rx,
    ));
    let source = starling_ingest::relay::relay_source(&url);
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let progress = store.progress(Some(&source)).unwrap();
        if matches!(progress, Some(Progress::File { offset, .. }) if offset == last_seq) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "relay ingest stuck at {progress:?}, want seq {last_seq}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    shutdown_tx.send(true).unwrap();
    task.await.unwrap().unwrap();
    store
}

fn without_drops_and_cursor(mut stats: Stats) -> Stats {
    stats.dropped.clear();
    stats.cursor = None;
    stats
}

fn edges(store: &EmbeddedStore) -> BTreeSet<String> {
    let mut res = BTreeSet::new();
    store
        .for_each_edge(&mut |change: GraphChange| {
            res.insert(format!("{change:?}"));
        })
        .unwrap();
    res
}

/// The final (did, collection, rkey) of every commit event of `expected_v1.jsonl`.
fn record_keys(jsonl: &str) -> BTreeSet<(String, String, String)> {
    jsonl
        .lines()
        .map(|line| serde_json::from_str::<serde_json::Value>(line).unwrap())
        .filter(|event| event["kind"] == "commit")
        .map(|event| {
            let text = |value: &serde_json::Value| value.as_str().unwrap().to_owned();
            (
                text(&event["did"]),
                text(&event["commit"]["collection"]),
                text(&event["commit"]["rkey"]),
            )
        })
        .collect()
}

fn record_state(
    store: &EmbeddedStore,
    (did, collection, rkey): &(String, String, String),
) -> Option<(String, serde_json::Value)> {
    store
        .record(did, collection, rkey)
        .unwrap()
        .map(|record| (record.cid, serde_json::from_str(&record.json).unwrap()))
}

async fn plc(data: &std::path::Path) -> PlcStandIn {
    let documents =
        starling_identity::stand_in::load_documents(&data.join("did_docs.json.zst")).unwrap();
    assert_eq!(documents.len(), 148);
    PlcStandIn::start(documents).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relay_frames_build_the_same_state_as_the_jetstream_events() {
    let Some(data) = data_dir() else { return };
    let dir = tempfile::tempdir().unwrap();
    let plc = plc(&data).await;
    let frames = frames(&data.join("relay-corpus/frames.bin.zst"));
    assert_eq!(frames.len(), 150);
    let relay_store = ingest_relay(frames, &plc, &dir.path().join("relay")).await;

    let jetstream_store = EmbeddedStore::open(&dir.path().join("jetstream")).unwrap();
    let expected = data.join("expected_v1.jsonl");
    let options = ReplayOptions {
        limits: Default::default(),
        from_start: true,
    };
    starling_ingest::replay_file(
        &jetstream_store,
        &expected,
        &options,
        &mut |_: &Committed| {},
        Default::default(),
    )
    .unwrap();

    let relay_stats = relay_store.stats().unwrap();
    assert!(relay_stats.dropped.is_empty(), "{:?}", relay_stats.dropped);
    let jetstream_stats = jetstream_store.stats().unwrap();
    assert!(jetstream_stats.likes > 100, "{jetstream_stats:?}");
    assert_eq!(
        without_drops_and_cursor(relay_stats),
        without_drops_and_cursor(jetstream_stats)
    );
    let keys = record_keys(&std::fs::read_to_string(&expected).unwrap());
    assert!(keys.len() > 140);
    for key in &keys {
        assert_eq!(
            record_state(&relay_store, key),
            record_state(&jetstream_store, key),
            "{key:?}"
        );
    }
    let relay_edges = edges(&relay_store);
    assert!(!relay_edges.is_empty());
    assert_eq!(relay_edges, edges(&jetstream_store));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flipped_signature_byte_is_refused_and_counted() {
    let Some(data) = data_dir() else { return };
    let dir = tempfile::tempdir().unwrap();
    let plc = plc(&data).await;
    let mut frames = frames(&data.join("relay-corpus/frames.bin.zst"));
    let (damaged_idx, damaged) = frames
        .iter()
        .enumerate()
        .find_map(|(idx, frame)| match Frame::decode(frame) {
            Ok(Frame::Commit(commit)) if commit.ops.len() == 1 => Some((idx, commit)),
            _ => None,
        })
        .unwrap();
    frames[damaged_idx] = flip_signature_byte(&frames[damaged_idx], 17);
    let store = ingest_relay(frames, &plc, &dir.path().join("relay")).await;
    let stats = store.stats().unwrap();
    assert_eq!(
        stats.dropped.get("bad_signature"),
        Some(&1),
        "{:?}",
        stats.dropped
    );
    assert_eq!(stats.dropped.len(), 1, "{:?}", stats.dropped);
    let (collection, rkey) = damaged.ops[0].path.split_once('/').unwrap();
    assert!(
        store
            .record(&damaged.repo, collection, rkey)
            .unwrap()
            .is_none()
    );
}

/// `frame` with one byte of its commit's signature flipped, re-encoded with the commit's new
/// CID in the CAR slice and the frame, so that only the signature is wrong.
fn flip_signature_byte(frame: &[u8], byte_idx: usize) -> Vec<u8> {
    let (_, mut body) = starling_repo::firehose::split(frame).unwrap();
    let Ipld::Map(map) = &mut body else { panic!() };
    let Some(Ipld::Bytes(car_bytes)) = map.get("blocks") else {
        panic!()
    };
    let Some(Ipld::Link(commit_cid)) = map.get("commit") else {
        panic!()
    };
    let car = starling_repo::car::Car::parse(car_bytes).unwrap();
    let mut commit = starling_repo::car::decode(car.block(commit_cid).unwrap()).unwrap();
    let Ipld::Map(commit_map) = &mut commit else {
        panic!()
    };
    let Some(Ipld::Bytes(sig)) = commit_map.get_mut("sig") else {
        panic!()
    };
    sig[byte_idx] ^= 0x01;
    let commit_bytes = starling_repo::car::encode(&commit);
    let new_cid = starling_repo::car::cid_of_cbor(&commit_bytes);
    let mut blocks: Vec<(Cid, Vec<u8>)> = vec![(new_cid, commit_bytes)];
    for (cid, bytes) in car.blocks() {
        if cid != commit_cid {
            blocks.push((*cid, bytes.to_vec()));
        }
    }
    let blocks: Vec<(Cid, &[u8])> = blocks
        .iter()
        .map(|(cid, bytes)| (*cid, &bytes[..]))
        .collect();
    map.insert(
        "blocks".to_owned(),
        Ipld::Bytes(starling_repo::car::write(&[new_cid], &blocks)),
    );
    map.insert("commit".to_owned(), Ipld::Link(new_cid));
    let header = Ipld::Map(
        [
            ("op".to_owned(), Ipld::Integer(1)),
            ("t".to_owned(), Ipld::String("#commit".to_owned())),
        ]
        .into_iter()
        .collect(),
    );
    let mut res = starling_repo::car::encode(&header);
    res.extend(starling_repo::car::encode(&body));
    res
}
