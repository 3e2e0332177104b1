//! Backfill and relay-firehose throughput, each against its peer in the same run.
//!
//! 1. Backfill: the repositories `appview/repos.mjs` wrote (`DIR/N.car` and `DIR/manifest.json`),
//!    served by four loopback PDSes behind a loopback relay's `listRepos`, keys from the PLC
//!    stand-in, through `starling_ingest::run_backfill` into a fresh embedded store. Prints
//!    records/s and the share of each stage (fetch, parse + verify + convert, apply), then
//!    checks every record against the manifest.
//! 2. Firehose: the 150 real relay frames of `relay-corpus/frames.bin.zst`, renumbered and
//!    repeated `--repeat` times, served by a loopback relay to `run_live` with the relay option
//!    (every signature checked), against `replay_file` of the 152 Jetstream events of the same
//!    window repeated as many times: events/s of each. After the first pass every event is a
//!    replay the store ignores, in both, so both measure decode, checks and the apply rules.
//!
//! Usage: backfill-bench REPOS_DIR SHARED_DATA_DIR [--repeat N]

// A benchmark: a panic is the failure report.
#![allow(clippy::unwrap_used, clippy::indexing_slicing)]

use std::collections::HashMap;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use futures_util::SinkExt;
use serde_json::{Value, json};
use starling_identity::stand_in::PlcStandIn;
use starling_identity::{Resolver, ResolverConfig};
use starling_ingest::{
    BackfillOptions, BackfillProgress, BackfillSource, LiveOptions, RelayOptions, ReplayOptions,
};
use starling_repo::Ipld;
use starling_store::{Committed, EmbeddedStore, Progress, Store};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The allocator `starling` runs with (`crates/starling/src/main.rs`), so that the figures are
/// the binary's: the backfill allocates per record, and the allocator shows in its profile.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

type Answer = (u16, Vec<u8>);
type Handler = Arc<dyn Fn(String) -> Pin<Box<dyn Future<Output = Answer> + Send>> + Send + Sync>;

async fn serve_http(listener: tokio::net::TcpListener, handler: Handler) {
    while let Ok((mut stream, _)) = listener.accept().await {
        let handler = handler.clone();
        tokio::spawn(async move {
            let mut request = Vec::new();
            let mut buf = [0u8; 4096];
            while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                match stream.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => request.extend_from_slice(&buf[..n]),
                }
            }
            let text = String::from_utf8_lossy(&request);
            let path = text.split(' ').nth(1).unwrap_or("/").to_owned();
            let (status, body) = handler(path).await;
            let head = format!(
                "HTTP/1.1 {status} X\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                body.len()
            );
            let _ = stream.write_all(head.as_bytes()).await;
            let _ = stream.write_all(&body).await;
            let _ = stream.shutdown().await;
        });
    }
}

fn query_param<'a>(path: &'a str, name: &str) -> Option<&'a str> {
    path.split_once('?')?
        .1
        .split('&')
        .find_map(|pair| pair.strip_prefix(name)?.strip_prefix('='))
}

async fn bind() -> (tokio::net::TcpListener, String) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    (listener, url)
}

/// Four loopback PDSes, the PLC stand-in and a relay listing the repositories.
async fn start_network(
    manifest: &[Value],
    cars: Arc<Vec<Vec<u8>>>,
    dids: Arc<Vec<String>>,
) -> (String, PlcStandIn) {
    let mut pds_urls = Vec::new();
    for _ in 0..4 {
        let (listener, url) = bind().await;
        pds_urls.push(url);
        let (dids, cars) = (dids.clone(), cars.clone());
        let handler: Handler = Arc::new(move |path: String| {
            let did = query_param(&path, "did").unwrap_or_default();
            let answer = match dids.iter().position(|known| known == did) {
                Some(idx) => (200, cars[idx].clone()),
                None => (404, Vec::new()),
            };
            Box::pin(async move { answer })
        });
        tokio::spawn(serve_http(listener, handler));
    }
    let mut documents = HashMap::new();
    for (idx, repo) in manifest.iter().enumerate() {
        let did = repo["did"].as_str().unwrap();
        let key = repo["key"]
            .as_str()
            .unwrap()
            .strip_prefix("did:key:")
            .unwrap();
        documents.insert(did.to_owned(), json!({
            "id": did,
            "verificationMethod": [{"id": format!("{did}#atproto"), "type": "Multikey", "controller": did, "publicKeyMultibase": key}],
            "service": [{"id": "#atproto_pds", "type": "AtprotoPersonalDataServer", "serviceEndpoint": pds_urls[idx % 4]}],
        }));
    }
    let plc = PlcStandIn::start(documents).await.unwrap();
    let (listener, relay_url) = bind().await;
    let list_dids = dids.clone();
    let handler: Handler = Arc::new(move |path: String| {
        let start: usize = query_param(&path, "cursor")
            .and_then(|cursor| cursor.parse().ok())
            .unwrap_or(0);
        let end = (start + 1000).min(list_dids.len());
        let repos: Vec<Value> = list_dids[start..end]
            .iter()
            .map(|did| json!({"did": did, "active": true}))
            .collect();
        let mut page = json!({ "repos": repos });
        if end < list_dids.len() {
            page["cursor"] = json!(end.to_string());
        }
        let body = page.to_string().into_bytes();
        Box::pin(async move { (200, body) })
    });
    tokio::spawn(serve_http(listener, handler));
    (relay_url, plc)
}

/// Every record of the manifest is stored with its CID; returns how many were checked.
fn check_records(store: &EmbeddedStore, manifest: &[Value]) -> u64 {
    let mut n_checked = 0;
    for repo in manifest {
        let did = repo["did"].as_str().unwrap();
        for record in repo["records"].as_array().unwrap() {
            let (collection, rkey) = record[0].as_str().unwrap().split_once('/').unwrap();
            let stored = store.record(did, collection, rkey).unwrap().unwrap();
            assert_eq!(stored.cid, record[1].as_str().unwrap());
            n_checked += 1;
        }
    }
    n_checked
}

async fn backfill(repos_dir: &Path) {
    let manifest: Vec<Value> =
        serde_json::from_slice(&std::fs::read(repos_dir.join("manifest.json")).unwrap()).unwrap();
    let cars: Arc<Vec<Vec<u8>>> = Arc::new(
        (0..manifest.len())
            .map(|idx| std::fs::read(repos_dir.join(format!("{idx}.car"))).unwrap())
            .collect(),
    );
    let dids: Arc<Vec<String>> = Arc::new(
        manifest
            .iter()
            .map(|repo| repo["did"].as_str().unwrap().to_owned())
            .collect(),
    );
    let (relay_url, plc) = start_network(&manifest, cars, dids).await;

    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(EmbeddedStore::open(dir.path()).unwrap());
    let resolver = Resolver::new(ResolverConfig {
        plc_url: plc.url(),
        ..ResolverConfig::default()
    })
    .unwrap();
    let options = BackfillOptions::new(BackfillSource::Relay(relay_url), resolver);
    let progress = Arc::new(BackfillProgress::default());
    let (_stop, shutdown) = tokio::sync::watch::channel(false);
    let started = Instant::now();
    starling_ingest::run_backfill(
        store.clone(),
        options,
        Box::new(|_: &Committed| {}),
        progress.clone(),
        shutdown,
    )
    .await
    .unwrap();
    let secs = started.elapsed().as_secs_f64();
    let records = progress.records.load(Ordering::Relaxed);
    let stage = |ns: &std::sync::atomic::AtomicU64| ns.load(Ordering::Relaxed) as f64 / 1e9;
    let (fetch, verify, apply) = (
        stage(&progress.fetch_ns),
        stage(&progress.verify_ns),
        stage(&progress.apply_ns),
    );
    println!(
        "backfill: {} repositories, {records} records, {} CAR bytes in {secs:.2} s: {:.0} records/s",
        progress.repos_done.load(Ordering::Relaxed),
        progress.bytes.load(Ordering::Relaxed),
        records as f64 / secs
    );
    println!(
        "backfill stages (seconds summed over concurrent tasks; apply is one thread): fetch {fetch:.2}, parse+verify+convert {verify:.2}, apply {apply:.2}"
    );
    println!(
        "backfill stage cost per record: fetch {:.2} us, parse+verify+convert {:.2} us, apply {:.2} us",
        fetch * 1e6 / records as f64,
        verify * 1e6 / records as f64,
        apply * 1e6 / records as f64
    );
    assert_eq!(
        progress.repos_failed.load(Ordering::Relaxed),
        0,
        "{:?}",
        progress.failures()
    );
    let n_checked = check_records(&store, &manifest);
    assert_eq!(n_checked, records);
    println!(
        "backfill: checked every stored record's CID against the generator's manifest ({n_checked})"
    );
}

fn frames(path: &Path) -> Vec<Vec<u8>> {
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

/// `frame` with its sequence replaced (the sequence is the relay's, not signed).
fn renumbered(frame: &[u8], seq: u64) -> Vec<u8> {
    let (header, mut body) = starling_repo::firehose::split(frame).unwrap();
    let Ipld::Map(map) = &mut body else {
        panic!("frame body is not a map")
    };
    map.insert("seq".to_owned(), Ipld::Integer(i128::from(seq)));
    let mut header_map = std::collections::BTreeMap::new();
    header_map.insert("op".to_owned(), Ipld::Integer(i128::from(header.op)));
    header_map.insert("t".to_owned(), Ipld::String(header.kind.unwrap()));
    let mut res = starling_repo::car::encode(&Ipld::Map(header_map));
    res.extend(starling_repo::car::encode(&body));
    res
}

/// A loopback relay sending `all` to each connection; its URL.
async fn serve_frames(all: Arc<Vec<Vec<u8>>>) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("ws://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let all = all.clone();
            tokio::spawn(async move {
                let mut socket = tokio_tungstenite::accept_async(stream).await.unwrap();
                for frame in all.iter() {
                    if socket
                        .send(tokio_tungstenite::tungstenite::Message::Binary(
                            frame.clone().into(),
                        ))
                        .await
                        .is_err()
                    {
                        return;
                    }
                }
                while let Some(Ok(_)) = futures_util::StreamExt::next(&mut socket).await {}
            });
        }
    });
    url
}

/// The Jetstream events of the window, `repeat` times, replayed into a new store: the events,
/// the seconds, and the store's counts.
fn replay_jetstream(data: &Path, dir: &Path, repeat: usize) -> (u64, f64, starling_store::Stats) {
    let lines: Vec<String> = std::fs::read_to_string(data.join("jetstream/expected_v1.jsonl"))
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect();
    let jsonl = dir.join("jetstream.jsonl");
    let mut text = String::new();
    for _ in 0..repeat {
        for line in &lines {
            text.push_str(line);
            text.push('\n');
        }
    }
    std::fs::write(&jsonl, text).unwrap();
    let jetstream_store = EmbeddedStore::open(&dir.join("jetstream")).unwrap();
    let started = Instant::now();
    let report = starling_ingest::replay_file(
        &jetstream_store,
        &jsonl,
        &ReplayOptions {
            limits: Default::default(),
            from_start: true,
        },
        &mut |_: &Committed| {},
        Default::default(),
    )
    .unwrap();
    let jetstream_secs = started.elapsed().as_secs_f64();
    let jetstream_stats = jetstream_store.stats().unwrap();
    (report.events, jetstream_secs, jetstream_stats)
}

async fn firehose(data: &Path, repeat: usize) {
    let originals = frames(&data.join("jetstream/relay-corpus/frames.bin.zst"));
    let mut all = Vec::with_capacity(originals.len() * repeat);
    for round in 0..repeat {
        for (idx, frame) in originals.iter().enumerate() {
            all.push(renumbered(
                frame,
                (round * originals.len() + idx + 1) as u64,
            ));
        }
    }
    let n_frames = all.len() as u64;
    let all = Arc::new(all);
    let url = serve_frames(all).await;
    let documents =
        starling_identity::stand_in::load_documents(&data.join("jetstream/did_docs.json.zst"))
            .unwrap();
    let plc = PlcStandIn::start(documents).await.unwrap();
    let resolver = Resolver::new(ResolverConfig {
        plc_url: plc.url(),
        ..ResolverConfig::default()
    })
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(EmbeddedStore::open(&dir.path().join("relay")).unwrap());
    let options = LiveOptions {
        relay: Some(RelayOptions::new(url.clone(), resolver)),
        ..LiveOptions::default()
    };
    let (stop, shutdown) = tokio::sync::watch::channel(false);
    let status = Arc::new(starling_ingest::live::LiveStatus::default());
    let started = Instant::now();
    let task = tokio::spawn(starling_ingest::run_live(
        store.clone(),
        options,
        Box::new(|_: &Committed| {}),
        status.clone(),
        shutdown,
    ));
    let source = starling_ingest::relay::relay_source(&url);
    loop {
        if matches!(store.progress(Some(&source)).unwrap(), Some(Progress::File { offset, .. }) if offset == n_frames)
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let relay_secs = started.elapsed().as_secs_f64();
    stop.send(true).unwrap();
    task.await.unwrap().unwrap();
    let relay_events = status.events_committed.load(Ordering::Relaxed);
    let stats = store.stats().unwrap();
    assert!(stats.dropped.is_empty(), "{:?}", stats.dropped);

    let (events, jetstream_secs, jetstream_stats) = replay_jetstream(data, dir.path(), repeat);
    assert_eq!(
        jetstream_stats.records, stats.records,
        "the two stores differ"
    );
    println!(
        "firehose (relay, signatures checked, websocket): {n_frames} frames, {relay_events} events in {relay_secs:.2} s: {:.0} events/s, {:.0} frames/s",
        relay_events as f64 / relay_secs,
        n_frames as f64 / relay_secs
    );
    println!(
        "jetstream (replay of the same window, file): {} events in {jetstream_secs:.2} s: {:.0} events/s",
        events,
        events as f64 / jetstream_secs
    );
    println!(
        "both stores hold the same records per collection: {:?}",
        jetstream_stats.records
    );
}

fn main() {
    let mut args = std::env::args().skip(1);
    let repos_dir = PathBuf::from(
        args.next()
            .expect("usage: backfill-bench REPOS_DIR SHARED_DATA_DIR [--repeat N]"),
    );
    let data = PathBuf::from(
        args.next()
            .expect("usage: backfill-bench REPOS_DIR SHARED_DATA_DIR [--repeat N]"),
    );
    let repeat = match (args.next().as_deref(), args.next()) {
        (Some("--repeat"), Some(n)) => n.parse().unwrap(),
        _ => 200,
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(backfill(&repos_dir));
    runtime.block_on(firehose(&data, repeat));
}
