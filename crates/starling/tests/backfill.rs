//! `starling backfill` against a loopback relay and four loopback PDSes serving repositories
//! made and signed by the reference implementation (`appview/repos.mjs`: `@atproto/repo` and
//! `@atproto/crypto`, secp256k1 and P-256 keys), their DID documents served by the PLC
//! stand-in. One PDS is slow (held until the test lets it go), one answers 429 with
//! `Retry-After` to each repository's first request, and one serves one corrupt CAR.
//!
//! Checks: the backfill is killed with `kill -9` after its first durable batch and run again;
//! then every good repository's records are stored with the CIDs the generator counted, the
//! corrupt one's not at all (counted as a failure by reason), and the records that live
//! Jetstream events had already deleted or updated at a later revision keep the live state.
//! A third run skips every completed repository.
//!
//! `serve --backfill` does the same beside live Jetstream ingest; `serve --relay` fetches a
//! repository again when a `#sync` frame says its history was reset.

// Test code: a panic is the failure report.
#![allow(clippy::unwrap_used, clippy::indexing_slicing)]

mod util;

use std::future::Future;
use std::path::Path;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use starling_store::{EmbeddedStore, Store};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use util::Proc;

const N_REPOS: usize = 12;
const RECORDS_PER_REPO: usize = 40;
/// The repository whose CAR the corrupting PDS damages.
const CORRUPT_REPO: usize = 3;
/// A revision later than any the generator writes (it writes the current time's TIDs).
const LIVE_REV: &str = "7zzzzzzzzzzzz";
/// The live events' `time_us` (November 2025).
const LIVE_TIME_US: u64 = 1_764_000_000_000_000;
/// A repository on the slow PDS (repository `N` lives on PDS `N % 4`; PDS 1 is held).
const HELD_REPO: usize = 5;
const TIMEOUT: Duration = Duration::from_secs(120);

type Answer = (u16, Vec<(&'static str, String)>, Vec<u8>);
type Handler = Arc<dyn Fn(String) -> Pin<Box<dyn Future<Output = Answer> + Send>> + Send + Sync>;

/// Serves HTTP/1.1 GETs on `listener`, one request per connection.
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
            let (status, headers, body) = handler(path).await;
            let mut head = format!(
                "HTTP/1.1 {status} X\r\ncontent-length: {}\r\nconnection: close\r\n",
                body.len()
            );
            for (name, value) in headers {
                head.push_str(&format!("{name}: {value}\r\n"));
            }
            head.push_str("\r\n");
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

/// The loopback network: PLC stand-in, relay, four PDSes.
struct Network {
    plc_url: String,
    relay_url: String,
    /// While true, the slow PDS answers nothing.
    hold: tokio::sync::watch::Sender<bool>,
    /// Every PDS answer: (PDS index, status).
    answers: Arc<Mutex<Vec<(usize, u16)>>>,
    _plc: starling_identity::stand_in::PlcStandIn,
    runtime: tokio::runtime::Runtime,
}

fn start_network(manifest: &[Value], cars: Vec<Vec<u8>>) -> Network {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let (hold, _) = tokio::sync::watch::channel(true);
    let answers = Arc::new(Mutex::new(Vec::new()));
    let dids: Vec<String> = manifest
        .iter()
        .map(|repo| repo["did"].as_str().unwrap().to_owned())
        .collect();
    let mut pds_urls = Vec::new();
    for pds_idx in 0..4 {
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .unwrap();
        pds_urls.push(format!("http://{}", listener.local_addr().unwrap()));
        let pds = Pds {
            idx: pds_idx,
            dids: dids.clone(),
            cars: cars.clone(),
            answers: answers.clone(),
            hold: hold.subscribe(),
            asked: Arc::default(),
        };
        let handler: Handler = Arc::new(move |path: String| Box::pin(pds.clone().answer(path)));
        runtime.spawn(serve_http(listener, handler));
    }
    let plc = runtime
        .block_on(starling_identity::stand_in::PlcStandIn::start(
            did_documents(manifest, &pds_urls),
        ))
        .unwrap();
    let listener = runtime
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let relay_url = format!("http://{}", listener.local_addr().unwrap());
    let handler: Handler = Arc::new(move |path: String| {
        let page = list_page(&dids, &path);
        Box::pin(async move { page })
    });
    runtime.spawn(serve_http(listener, handler));
    Network {
        plc_url: plc.url(),
        relay_url,
        hold,
        answers,
        _plc: plc,
        runtime,
    }
}

/// One loopback PDS: repository `N` lives on PDS `N % 4`; PDS 1 is held while the test holds
/// it, PDS 2 answers each repository's first request with 429, PDS 3 damages one CAR.
#[derive(Clone)]
struct Pds {
    idx: usize,
    dids: Vec<String>,
    cars: Vec<Vec<u8>>,
    answers: Arc<Mutex<Vec<(usize, u16)>>>,
    hold: tokio::sync::watch::Receiver<bool>,
    asked: Arc<Mutex<std::collections::HashSet<String>>>,
}

impl Pds {
    async fn answer(mut self, path: String) -> Answer {
        let did = query_param(&path, "did").unwrap_or_default().to_owned();
        let Some(repo_idx) = self
            .dids
            .iter()
            .position(|known| *known == did)
            .filter(|idx| idx % 4 == self.idx)
        else {
            return (404, Vec::new(), b"{\"error\":\"RepoNotFound\"}".to_vec());
        };
        let answer: Answer = match self.idx {
            1 => {
                let _ = self.hold.wait_for(|held| !*held).await;
                (200, Vec::new(), self.cars[repo_idx].clone())
            }
            2 if self.asked.lock().unwrap().insert(did) => {
                (429, vec![("retry-after", "1".to_owned())], Vec::new())
            }
            3 if repo_idx == CORRUPT_REPO => {
                let mut car = self.cars[repo_idx].clone();
                let last = car.len() - 10;
                car[last] ^= 0x20;
                (200, Vec::new(), car)
            }
            _ => (200, Vec::new(), self.cars[repo_idx].clone()),
        };
        self.answers.lock().unwrap().push((self.idx, answer.0));
        answer
    }
}

/// A DID document per repository: its generator's key, and its PDS.
fn did_documents(
    manifest: &[Value],
    pds_urls: &[String],
) -> std::collections::HashMap<String, Value> {
    let mut documents = std::collections::HashMap::new();
    for (idx, repo) in manifest.iter().enumerate() {
        let did = repo["did"].as_str().unwrap();
        let key = repo["key"]
            .as_str()
            .unwrap()
            .strip_prefix("did:key:")
            .unwrap();
        documents.insert(
            did.to_owned(),
            json!({
                "id": did,
                "alsoKnownAs": [format!("at://repo{idx}.test")],
                "verificationMethod": [{"id": format!("{did}#atproto"), "type": "Multikey", "controller": did, "publicKeyMultibase": key}],
                "service": [{"id": "#atproto_pds", "type": "AtprotoPersonalDataServer", "serviceEndpoint": pds_urls[idx % 4]}],
            }),
        );
    }
    documents
}

/// A `listRepos` page: at most 5 repositories, whatever the client asks, so that the client
/// must follow cursors.
fn list_page(dids: &[String], path: &str) -> Answer {
    assert!(
        path.starts_with("/xrpc/com.atproto.sync.listRepos"),
        "{path}"
    );
    let limit = query_param(path, "limit")
        .and_then(|limit| limit.parse().ok())
        .unwrap_or(5usize)
        .min(5);
    let start: usize = query_param(path, "cursor")
        .and_then(|cursor| cursor.parse().ok())
        .unwrap_or(0);
    let end = (start + limit).min(dids.len());
    let repos: Vec<Value> = dids[start..end]
        .iter()
        .map(|did| json!({"did": did, "head": "x", "rev": "x", "active": true}))
        .collect();
    let mut page = json!({ "repos": repos });
    if end < dids.len() {
        page["cursor"] = json!(end.to_string());
    }
    (200, Vec::new(), page.to_string().into_bytes())
}

fn backfill_cmd(network: &Network, data_dir: &Path) -> std::process::Command {
    let mut cmd = util::starling([
        "backfill",
        "--relay",
        &network.relay_url,
        "--plc-url",
        &network.plc_url,
        "--repos-concurrent-max",
        "4",
        "--repos-per-host-max",
        "2",
        "--repo-timeout-secs",
        "60",
    ]);
    cmd.arg("--data-dir").arg(data_dir);
    cmd
}

/// Runs the generator: the manifest and each repository's CAR.
fn generate(dir: &Path) -> (Vec<Value>, Vec<Vec<u8>>) {
    let node = util::setup_appview();
    let gen_dir = dir.join("repos");
    let script = util::repo_root().join("appview/repos.mjs");
    let out = std::process::Command::new(&node)
        .arg(&script)
        .arg(&gen_dir)
        .arg(N_REPOS.to_string())
        .arg(RECORDS_PER_REPO.to_string())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "generator failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let manifest: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(manifest.len(), N_REPOS);
    let cars = (0..N_REPOS)
        .map(|idx| std::fs::read(gen_dir.join(format!("{idx}.car"))).unwrap())
        .collect();
    (manifest, cars)
}

/// Live events for repository `repo_idx`: its first post deleted and its profile replaced, at
/// a revision after the one its export carries. Returns them and the live profile's CID (the
/// next repository's profile CID: any valid CID other than the exported one).
fn live_events(manifest: &[Value], repo_idx: usize) -> (Vec<util::Event>, String) {
    let live_did = manifest[repo_idx]["did"].as_str().unwrap();
    let live_profile_cid = manifest[repo_idx + 1]["records"][0][1].as_str().unwrap();
    let live = [
        json!({"did": live_did, "time_us": LIVE_TIME_US, "kind": "commit", "commit": {"rev": LIVE_REV, "operation": "delete", "collection": "app.bsky.feed.post", "rkey": "post1"}}),
        json!({"did": live_did, "time_us": LIVE_TIME_US + 1, "kind": "commit", "commit": {"rev": LIVE_REV, "operation": "update", "collection": "app.bsky.actor.profile", "rkey": "self", "cid": live_profile_cid, "record": {"$type": "app.bsky.actor.profile", "displayName": "live"}}}),
    ];
    let events = util::events_of(live.iter().map(Value::to_string));
    (events, live_profile_cid.to_owned())
}

/// [`live_events`] for repository 0, replayed into `data_dir` before the backfill. Returns the
/// live profile's CID.
fn apply_live_events(manifest: &[Value], dir: &Path, data_dir: &Path) -> String {
    let (events, live_profile_cid) = live_events(manifest, 0);
    let live_file = dir.join("live.jsonl");
    util::write_events(&live_file, &events);
    util::replay(&live_file, data_dir);
    live_profile_cid
}

/// Every record the generator wrote is stored with its CID, but the corrupt repository's and
/// the two that the live events changed in repository `live_repo`; nothing else is stored.
fn check_store(manifest: &[Value], data_dir: &Path, live_repo: usize, live_profile_cid: &str) {
    let store = EmbeddedStore::open(data_dir).unwrap();
    let mut n_expected = 0u64;
    for (idx, repo) in manifest.iter().enumerate() {
        let did = repo["did"].as_str().unwrap();
        for record in repo["records"].as_array().unwrap() {
            let (path, cid) = (record[0].as_str().unwrap(), record[1].as_str().unwrap());
            let (collection, rkey) = path.split_once('/').unwrap();
            let stored = store.record(did, collection, rkey).unwrap();
            let expected = match (idx, path) {
                (CORRUPT_REPO, _) => None,
                (idx, "app.bsky.feed.post/post1") if idx == live_repo => None,
                (idx, "app.bsky.actor.profile/self") if idx == live_repo => Some(live_profile_cid),
                _ => Some(cid),
            };
            assert_eq!(
                stored.as_ref().map(|record| record.cid.as_str()),
                expected,
                "{did} {path}"
            );
            n_expected += u64::from(expected.is_some());
        }
    }
    let stats = store.stats().unwrap();
    assert_eq!(stats.records.values().sum::<u64>(), n_expected, "{stats:?}");
    assert!(n_expected > (N_REPOS as u64 - 2) * RECORDS_PER_REPO as u64);
}

#[test]
fn backfill_from_loopback_pdses_survives_kill_9_and_keeps_live_changes() {
    let dir = util::test_dir();
    let (manifest, cars) = generate(dir.path());
    let network = start_network(&manifest, cars);
    let data_dir = dir.path().join("data");
    let live_profile_cid = apply_live_events(&manifest, dir.path(), &data_dir);

    // First run: killed after its first durable batch, while the slow PDS still holds.
    let mut first = Proc::spawn(backfill_cmd(&network, &data_dir), "backfill");
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let line = first.next_stderr_line(left).unwrap_or_else(|| {
            panic!(
                "no committed batch before the deadline\n{}",
                first.output_so_far()
            )
        });
        if line.contains("backfill: batch committed") {
            break;
        }
    }
    first.kill9();
    network.hold.send_replace(false);

    // Second run: to the end.
    let summary = util::run_ok(backfill_cmd(&network, &data_dir));
    assert!(summary.contains("1 failed"), "{summary}");
    assert!(summary.contains("\"hash_mismatch\": 1"), "{summary}");
    let answers = network.answers.lock().unwrap().clone();
    assert!(
        answers
            .iter()
            .any(|&(pds, status)| pds == 2 && status == 429),
        "{answers:?}"
    );
    assert!(
        answers
            .iter()
            .any(|&(pds, status)| pds == 2 && status == 200),
        "{answers:?}"
    );
    assert!(
        answers
            .iter()
            .any(|&(pds, status)| pds == 1 && status == 200),
        "{answers:?}"
    );

    // Third run: every complete repository is skipped; the corrupt one is tried again.
    let again = util::run_ok(backfill_cmd(&network, &data_dir));
    assert!(
        again.contains("0 repositories applied, 11 skipped, 1 failed"),
        "{again}"
    );
    check_store(&manifest, &data_dir, 0, &live_profile_cid);

    // The same repositories from their CAR files, with the same checks: all twelve are intact
    // on disk, and every record is stored.
    let car_data_dir = dir.path().join("car-data");
    let mut cmd = util::starling(["backfill", "--plc-url", &network.plc_url]);
    cmd.arg("--car").arg(dir.path().join("repos"));
    cmd.arg("--data-dir").arg(&car_data_dir);
    let from_cars = util::run_ok(cmd);
    assert!(
        from_cars.contains("12 repositories applied, 0 skipped, 0 failed"),
        "{from_cars}"
    );
    let n_records: usize = manifest
        .iter()
        .map(|repo| repo["records"].as_array().unwrap().len())
        .sum();
    let stats = EmbeddedStore::open(&car_data_dir).unwrap().stats().unwrap();
    assert_eq!(
        stats.records.values().sum::<u64>(),
        n_records as u64,
        "{stats:?}"
    );
}

// `serve --backfill` beside live ingest: the slow PDS holds its repositories back while live
// Jetstream events change one of them (a delete and a profile update at a later revision);
// the live events are stored while the backfill still runs, and once the PDS lets go the
// backfill ends with the same store as `starling backfill` (every good repository's records,
// the corrupt one's none) with the live changes kept. Every follow the good repositories hold
// is in the served in-memory graph, which the backfill's batches reach through the same sink
// as live ingest's.
#[test]
fn serve_backfills_beside_live_ingest_and_live_changes_win() {
    let dir = util::test_dir();
    let (manifest, cars) = generate(dir.path());
    let network = start_network(&manifest, cars);
    let (events, live_profile_cid) = live_events(&manifest, HELD_REPO);
    let jetstream = util::FakeJetstream::start(events, None, None);
    let data_dir = dir.path().join("data");
    let mut cmd = util::starling(["serve", "--http-addr", "127.0.0.1:0"]);
    cmd.args(["--jetstream", &jetstream.url()]);
    cmd.args([
        "--backfill",
        &network.relay_url,
        "--plc-url",
        &network.plc_url,
    ]);
    cmd.arg("--data-dir").arg(&data_dir);
    let mut serve = Proc::spawn(cmd, "serve");
    let http = serve.wait_for_stdout("starling: http listening on ", TIMEOUT);

    util::poll_until(TIMEOUT, "the live events to be stored", || {
        serve.assert_healthy();
        let stats = util::http_json(&http, "/v1/stats")?;
        match stats["cursor"].as_u64() {
            Some(cursor) if cursor > LIVE_TIME_US => Ok(()),
            cursor => Err(format!("store cursor {cursor:?}")),
        }
    });
    let finished = |serve: &Proc| {
        serve
            .stderr_lines()
            .iter()
            .any(|line| line.contains("backfill finished"))
    };
    assert!(
        !finished(&serve),
        "the backfill waits on the held PDS while live events are stored"
    );
    network.hold.send_replace(false);
    util::poll_until(TIMEOUT, "the backfill to finish", || {
        serve.assert_healthy();
        if finished(&serve) {
            Ok(())
        } else {
            Err("not yet".to_owned())
        }
    });

    let mut n_follows = 0;
    for (idx, repo) in manifest
        .iter()
        .enumerate()
        .filter(|(idx, _)| *idx != CORRUPT_REPO)
    {
        let did = repo["did"].as_str().unwrap();
        for record in repo["records"].as_array().unwrap() {
            let Some(j) = record[0]
                .as_str()
                .unwrap()
                .strip_prefix("app.bsky.graph.follow/follow")
            else {
                continue;
            };
            // The generator's rule (`appview/repos.mjs`): follow J of repository I names
            // repository (I + J) mod N.
            let subject_idx = (idx + j.parse::<usize>().unwrap()) % N_REPOS;
            if subject_idx == idx {
                continue; // The graph holds no self-follows.
            }
            let subject = &manifest[subject_idx]["did"];
            let path = format!(
                "/v1/graph/follows?actor={did}&subject={}",
                subject.as_str().unwrap()
            );
            let answer = util::http_json(&http, &path).unwrap();
            assert_eq!(answer["follows"], json!(true), "{path}");
            n_follows += 1;
        }
    }
    assert!(
        n_follows > N_REPOS,
        "the repositories hold follows: {n_follows}"
    );
    serve.terminate();
    serve.wait_exit(TIMEOUT);
    check_store(&manifest, &data_dir, HELD_REPO, &live_profile_cid);
}

/// A loopback relay whose every connection gets `frames` (binary), then stays open.
fn start_firehose(runtime: &tokio::runtime::Runtime, frames: Vec<Vec<u8>>) -> String {
    let listener = runtime
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let addr = listener.local_addr().unwrap();
    runtime.spawn(async move {
        use futures_util::{SinkExt, StreamExt};
        while let Ok((stream, _)) = listener.accept().await {
            let frames = frames.clone();
            tokio::spawn(async move {
                let mut socket = tokio_tungstenite::accept_async(stream).await.unwrap();
                for frame in frames {
                    let message = tokio_tungstenite::tungstenite::Message::Binary(frame.into());
                    if socket.send(message).await.is_err() {
                        return;
                    }
                }
                while let Some(Ok(_)) = socket.next().await {}
            });
        }
    });
    format!("ws://{addr}")
}

/// A `#sync` frame (relay sequence 1) for `did` at revision `rev`.
fn sync_frame(did: &str, rev: &str) -> Vec<u8> {
    use starling_repo::Ipld;
    let map = |pairs: Vec<(&str, Ipld)>| {
        Ipld::Map(pairs.into_iter().map(|(k, v)| (k.to_owned(), v)).collect())
    };
    let header = map(vec![
        ("op", Ipld::Integer(1)),
        ("t", Ipld::String("#sync".into())),
    ]);
    let body = map(vec![
        ("seq", Ipld::Integer(1)),
        ("did", Ipld::String(did.to_owned())),
        ("rev", Ipld::String(rev.to_owned())),
        ("blocks", Ipld::Bytes(Vec::new())),
        ("time", Ipld::String("2026-01-01T00:00:00.000Z".into())),
    ]);
    [
        starling_repo::car::encode(&header),
        starling_repo::car::encode(&body),
    ]
    .concat()
}

/// Events stored before the resync: in repository 0, a post its export does not hold at an
/// older revision (to be deleted), its profile at an older revision (to be replaced), and a
/// post at a later revision (kept); in repository 4, a post its export does not hold (kept:
/// repository 4 is not resynced).
fn stale_events(manifest: &[Value]) -> Vec<util::Event> {
    let (did0, did4) = (
        manifest[0]["did"].as_str().unwrap(),
        manifest[4]["did"].as_str().unwrap(),
    );
    let old_cid = manifest[1]["records"][0][1].as_str().unwrap();
    let post = |did: &str, rkey: &str, rev: &str, time_us: u64| json!({"did": did, "time_us": time_us, "kind": "commit", "commit": {"rev": rev, "operation": "create", "collection": "app.bsky.feed.post", "rkey": rkey, "cid": old_cid, "record": {"$type": "app.bsky.feed.post", "text": "stale", "createdAt": "2025-01-01T00:00:00.000Z"}}});
    let lines = [
        post(did0, "stale", OLD_REV, LIVE_TIME_US),
        json!({"did": did0, "time_us": LIVE_TIME_US + 1, "kind": "commit", "commit": {"rev": OLD_REV, "operation": "create", "collection": "app.bsky.actor.profile", "rkey": "self", "cid": old_cid, "record": {"$type": "app.bsky.actor.profile", "displayName": "old"}}}),
        post(did0, "newer", LIVE_REV, LIVE_TIME_US + 2),
        post(did4, "stale", OLD_REV, LIVE_TIME_US + 3),
    ];
    util::events_of(lines.iter().map(Value::to_string))
}

/// A revision older than any the generator writes.
const OLD_REV: &str = "2222222222222";

// `serve --relay` on a loopback relay whose only frame is a `#sync` for repository 0, over a
// store that holds stale records of repositories 0 and 4: repository 0 is fetched again from
// its PDS, so the store then holds exactly what its export holds (every record with the
// generator's CID, the post it no longer holds deleted) plus the record written at a later
// revision; repository 4's stale post stays.
#[test]
fn serve_relay_resyncs_a_repository_after_a_sync_frame() {
    let dir = util::test_dir();
    let (manifest, cars) = generate(dir.path());
    let network = start_network(&manifest, cars);
    let data_dir = dir.path().join("data");
    let stale_file = dir.path().join("stale.jsonl");
    util::write_events(&stale_file, &stale_events(&manifest));
    util::replay(&stale_file, &data_dir);
    let did0 = manifest[0]["did"].as_str().unwrap();
    let frame = sync_frame(did0, manifest[0]["rev"].as_str().unwrap());
    let relay = start_firehose(&network.runtime, vec![frame]);
    let mut cmd = util::starling(["serve", "--http-addr", "127.0.0.1:0"]);
    cmd.args(["--relay", &relay, "--plc-url", &network.plc_url]);
    cmd.arg("--data-dir").arg(&data_dir);
    let mut serve = Proc::spawn(cmd, "serve");
    let http = serve.wait_for_stdout("starling: http listening on ", TIMEOUT);
    util::poll_until(TIMEOUT, "the resync to be applied", || {
        serve.assert_healthy();
        let (_, metrics) = util::http_get(&http, "/metrics").map_err(|err| err.to_string())?;
        let applied = serve
            .stderr_lines()
            .iter()
            .any(|line| line.contains("backfill: batch committed"));
        match metrics.contains(r#"starling_ingest_relay_resyncs_total{outcome="requested"} 1"#)
            && applied
        {
            true => Ok(()),
            false => Err("not yet".to_owned()),
        }
    });
    serve.terminate();
    serve.wait_exit(TIMEOUT);

    let store = EmbeddedStore::open(&data_dir).unwrap();
    let cid_of = |did: &str, collection: &str, rkey: &str| {
        store
            .record(did, collection, rkey)
            .unwrap()
            .map(|record| record.cid)
    };
    let mut want: Vec<(String, String)> = manifest[0]["records"]
        .as_array()
        .unwrap()
        .iter()
        .map(|record| {
            (
                record[0].as_str().unwrap().to_owned(),
                record[1].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    let old_cid = manifest[1]["records"][0][1].as_str().unwrap().to_owned();
    want.push(("app.bsky.feed.post/newer".to_owned(), old_cid.clone()));
    for (path, cid) in &want {
        let (collection, rkey) = path.split_once('/').unwrap();
        assert_eq!(cid_of(did0, collection, rkey).as_ref(), Some(cid), "{path}");
    }
    assert_eq!(
        cid_of(did0, "app.bsky.feed.post", "stale"),
        None,
        "deleted by the resync"
    );
    let did4 = manifest[4]["did"].as_str().unwrap();
    assert_eq!(
        cid_of(did4, "app.bsky.feed.post", "stale"),
        Some(old_cid),
        "not resynced"
    );
    let mut stored = store.live_record_keys(did0).unwrap();
    stored.sort();
    let mut want_keys: Vec<(String, String)> = want
        .iter()
        .map(|(path, _)| {
            let (collection, rkey) = path.split_once('/').unwrap();
            (collection.to_owned(), rkey.to_owned())
        })
        .collect();
    want_keys.sort();
    assert_eq!(
        stored, want_keys,
        "repository 0 holds exactly its export and the newer post"
    );
}
