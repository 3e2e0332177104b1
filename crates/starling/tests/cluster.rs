//! Two Starling replicas on a three-node Cassandra cluster (RF=3) behind the stock AppView,
//! with faults: a Cassandra node and the ingesting replica are killed with `kill -9` while the
//! AppView serves requests.
//!
//! Runs when `STARLING_TEST_CASSANDRA_CLUSTER` names the three nodes (`host:port,...`), as the
//! cluster step of `scripts/test.sh` does after `scripts/cassandra.sh start 3`; node I must be
//! the one `scripts/cassandra.sh kill-node I` kills. Without it the test says it is skipped.
//!
//! What it shows: every AppView request made while the faults happen answers 200. The AppView
//! retries `Unavailable` (a refused connection, a replica not ready) on the other replica; the
//! one request that may be in flight on replica A when it dies is different: its HTTP/2 stream
//! closes with CANCEL, which the AppView's dataplane client does not retry and answers 500, so
//! the test's client retries a server error once, as apps do, and at most one request (the
//! requests go one at a time) may need it. The surviving replica takes the writer lease and
//! ingests the rest; nothing is lost (live records per collection equal a recount of the
//! events); profile and post counts, through the AppView, equal the recount; once the node and
//! the replica are back, the restarted replica serves the same counts by itself.

// Test code: a panic is the failure report.
#![allow(clippy::unwrap_used, clippy::indexing_slicing)]

mod util;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ffi::OsString;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use starling_identity::stand_in::PlcStandIn;
use util::{Event, FakeJetstream, Proc};

const NODES_VAR: &str = "STARLING_TEST_CASSANDRA_CLUSTER";
const TIMEOUT: Duration = Duration::from_secs(90);
/// The node that is killed: not the first, which the replicas also list first.
const KILLED_NODE: u32 = 2;
/// Requests made through the AppView while the faults happen, at least.
const REQUESTS_DURING_FAULTS_MIN: usize = 20;
/// The most actors or posts the AppView takes in one getProfiles / getPosts call.
const BATCH: usize = 25;

/// What the events leave live, recounted from the events alone.
#[derive(Default)]
struct Recount {
    /// Live records: URI -> (collection, record).
    live: BTreeMap<String, (String, Value)>,
    actors: BTreeSet<String>,
}

impl Recount {
    fn of(events: &[Event]) -> Recount {
        let mut recount = Recount::default();
        for event in events {
            let value: Value = serde_json::from_str(&event.line).unwrap();
            let did = value["did"].as_str().unwrap().to_owned();
            recount.actors.insert(did.clone());
            if value["kind"] != "commit" {
                continue;
            }
            let commit = &value["commit"];
            let collection = commit["collection"].as_str().unwrap();
            let uri = format!(
                "at://{did}/{collection}/{}",
                commit["rkey"].as_str().unwrap()
            );
            match commit["operation"].as_str().unwrap() {
                "delete" => {
                    recount.live.remove(&uri);
                }
                _ => {
                    let record = commit["record"].clone();
                    recount.live.insert(uri, (collection.to_owned(), record));
                }
            }
        }
        recount
    }

    fn of_collection<'a>(&'a self, nsid: &'a str) -> impl Iterator<Item = (&'a str, &'a Value)> {
        self.live
            .iter()
            .filter(move |(_, (collection, _))| collection == nsid)
            .map(|(uri, (_, record))| (uri.as_str(), record))
    }

    /// Live records per collection, as `/v1/stats` reports them.
    fn records(&self) -> BTreeMap<String, u64> {
        let mut counts = BTreeMap::new();
        for (collection, _) in self.live.values() {
            *counts.entry(collection.clone()).or_default() += 1;
        }
        counts
    }

    /// `followersCount`, `followsCount` and `postsCount` of every actor: follows count
    /// distinct (actor, subject) pairs with a live record.
    fn profiles(&self) -> BTreeMap<String, Value> {
        let pairs: BTreeSet<(String, String)> = self
            .of_collection("app.bsky.graph.follow")
            .map(|(uri, record)| {
                let subject = record["subject"].as_str().unwrap().to_owned();
                (author(uri).to_owned(), subject)
            })
            .collect();
        let mut counts: BTreeMap<String, [u64; 3]> = self
            .actors
            .iter()
            .map(|did| (did.clone(), [0; 3]))
            .collect();
        for (actor, subject) in &pairs {
            counts.entry(subject.clone()).or_default()[0] += 1;
            counts.entry(actor.clone()).or_default()[1] += 1;
        }
        for (uri, _) in self.of_collection("app.bsky.feed.post") {
            counts.entry(author(uri).to_owned()).or_default()[2] += 1;
        }
        counts
            .into_iter()
            .map(|(did, [followers, follows, posts])| {
                let view = json!({
                    "followersCount": followers, "followsCount": follows, "postsCount": posts,
                });
                (did, view)
            })
            .collect()
    }

    /// `likeCount`, `repostCount`, `replyCount` and `quoteCount` of every live post.
    fn posts(&self) -> BTreeMap<String, Value> {
        let mut counts: BTreeMap<&str, [u64; 4]> = self
            .of_collection("app.bsky.feed.post")
            .map(|(uri, _)| (uri, [0; 4]))
            .collect();
        let mut bump = |uri: Option<&str>, which: usize| {
            if let Some(counts) = uri.and_then(|uri| counts.get_mut(uri)) {
                counts[which] += 1;
            }
        };
        for (_, record) in self.of_collection("app.bsky.feed.like") {
            bump(record["subject"]["uri"].as_str(), 0);
        }
        for (_, record) in self.of_collection("app.bsky.feed.repost") {
            bump(record["subject"]["uri"].as_str(), 1);
        }
        for (_, record) in self.of_collection("app.bsky.feed.post") {
            bump(record["reply"]["parent"]["uri"].as_str(), 2);
            let embed = &record["embed"];
            let quoted = match embed["$type"].as_str() {
                Some("app.bsky.embed.record") => embed["record"]["uri"].as_str(),
                Some("app.bsky.embed.recordWithMedia") => embed["record"]["record"]["uri"].as_str(),
                _ => None,
            };
            bump(quoted, 3);
        }
        counts
            .into_iter()
            .map(|(uri, [likes, reposts, replies, quotes])| {
                let view = json!({
                    "likeCount": likes, "repostCount": reposts,
                    "replyCount": replies, "quoteCount": quotes,
                });
                (uri.to_owned(), view)
            })
            .collect()
    }
}

fn author(uri: &str) -> &str {
    let rest = uri.strip_prefix("at://").unwrap();
    &rest[..rest.find('/').unwrap()]
}

/// One XRPC GET through the AppView: its status and body.
fn xrpc(appview: &str, nsid: &str, params: &[(&str, &str)]) -> (u16, String) {
    let query: Vec<String> = params
        .iter()
        .map(|(key, value)| format!("{key}={}", value.replace(':', "%3A").replace('/', "%2F")))
        .collect();
    let path = format!("/xrpc/{nsid}?{}", query.join("&"));
    util::http_get_with(appview, &path, &[]).unwrap_or_else(|err| (0, format!("GET {path}: {err}")))
}

/// The counts the AppView shows for `keys` (DIDs or post URIs), by getProfiles or getPosts.
fn counts_through(
    appview: &str,
    posts: bool,
    keys: &[&String],
) -> Result<BTreeMap<String, Value>, String> {
    let (nsid, param, list, key, fields): (_, _, _, _, &[&str]) = if posts {
        let fields = &["likeCount", "repostCount", "replyCount", "quoteCount"];
        ("app.bsky.feed.getPosts", "uris", "posts", "uri", fields)
    } else {
        let fields = &["followersCount", "followsCount", "postsCount"];
        (
            "app.bsky.actor.getProfiles",
            "actors",
            "profiles",
            "did",
            fields,
        )
    };
    let mut seen = BTreeMap::new();
    for chunk in keys.chunks(BATCH) {
        let params: Vec<(&str, &str)> = chunk.iter().map(|k| (param, k.as_str())).collect();
        let (status, body) = xrpc(appview, nsid, &params);
        if status != 200 {
            return Err(format!("{nsid}: HTTP {status}: {body}"));
        }
        let page: Value = serde_json::from_str(&body).map_err(|err| format!("{err}: {body}"))?;
        for view in page[list].as_array().into_iter().flatten() {
            let counts: serde_json::Map<String, Value> = fields
                .iter()
                .map(|field| ((*field).to_owned(), view[*field].clone()))
                .collect();
            seen.insert(
                view[key].as_str().unwrap().to_owned(),
                Value::Object(counts),
            );
        }
    }
    Ok(seen)
}

/// Checks every actor's and every live post's counts through `appview` against the recount.
fn check_counts(appview: &str, recount: &Recount, what: &str) {
    for (posts, want) in [(false, recount.profiles()), (true, recount.posts())] {
        let keys: Vec<&String> = want.keys().collect();
        let got =
            counts_through(appview, posts, &keys).unwrap_or_else(|err| panic!("{what}: {err}"));
        let wrong: Vec<_> = want
            .iter()
            .filter(|(key, counts)| got.get(*key) != Some(*counts))
            .map(|(key, counts)| format!("{key}: want {counts}, got {:?}", got.get(key)))
            .collect();
        assert!(
            wrong.is_empty(),
            "{what}: {} of {} {} differ from the recount:\n{}",
            wrong.len(),
            want.len(),
            if posts { "posts" } else { "profiles" },
            wrong.join("\n")
        );
    }
}

fn cassandra(args: &[&str]) {
    let script = util::repo_root().join("scripts/cassandra.sh");
    let mut command = Command::new(script);
    command.args(args);
    util::run_ok(command);
}

/// One AppView answer seen by the request thread.
struct Answer {
    status: u16,
    took: Duration,
    what: String,
    /// The first answer, when it was a server error and the request was made again.
    retried: Option<String>,
}

struct Replica {
    proc: Proc,
    http: String,
    grpc: String,
}

fn start_replica(
    name: &str,
    dir: &Path,
    nodes: &str,
    keyspace: &str,
    plc: &str,
    jetstream: &str,
) -> Replica {
    let args: Vec<OsString> = [
        "serve",
        "--store",
        "cassandra",
        "--cassandra-nodes",
        nodes,
        "--cassandra-keyspace",
        keyspace,
        "--cassandra-replication-factor",
        "3",
        "--http-addr",
        "127.0.0.1:0",
        "--grpc-addr",
        "127.0.0.1:0",
        "--plc-url",
        plc,
        "--jetstream",
        jetstream,
    ]
    .iter()
    .map(OsString::from)
    .chain([
        OsString::from("--data-dir"),
        dir.join(name).into_os_string(),
    ])
    .collect();
    let proc = Proc::spawn(util::starling(args), name);
    let http = proc.wait_for_stdout("starling: http listening on ", TIMEOUT);
    let grpc = proc.wait_for_stdout("starling: grpc listening on ", TIMEOUT);
    Replica { proc, http, grpc }
}

/// Waits until the store, as `replica` reports it, holds every event up to `time_us`.
fn wait_for_cursor(replica: &mut Replica, time_us: u64, what: &str) {
    util::poll_until(TIMEOUT, what, || {
        replica.proc.assert_healthy();
        let stats = util::http_json(&replica.http, "/v1/stats")?;
        match stats["cursor"].as_u64() {
            Some(cursor) if cursor >= time_us => Ok(()),
            cursor => Err(format!("store cursor {cursor:?} < {time_us}")),
        }
    });
}

/// Waits until `replica` answers `/health` with 200 (ready to serve).
fn wait_ready(replica: &mut Replica, what: &str) {
    util::poll_until(TIMEOUT, what, || {
        replica.proc.assert_healthy();
        match util::http_get(&replica.http, "/health") {
            Ok((200, _)) => Ok(()),
            other => Err(format!("{other:?}")),
        }
    });
}

fn start_appview(node: &Path, replicas: &[&Replica], name: &str) -> (Proc, String) {
    let urls: Vec<String> = replicas
        .iter()
        .map(|r| format!("http://{}", r.grpc))
        .collect();
    let mut command = Command::new(node);
    command
        .arg(util::repo_root().join("appview/start.mjs"))
        .args(["--dataplane", &urls.join(","), "--trace-rpcs"]);
    let appview = Proc::spawn(command, name);
    let url = appview.wait_for_stdout("appview: listening on ", TIMEOUT);
    (appview, url.trim_start_matches("http://").to_owned())
}

#[test]
fn replicas_on_a_cluster_survive_a_node_and_a_replica_killed() {
    let Ok(nodes) = std::env::var(NODES_VAR) else {
        eprintln!(
            "skipping: {NODES_VAR} is not set (scripts/test.sh's cluster step sets it after starting three Cassandra nodes)"
        );
        return;
    };
    let seed = util::seed("replicas_on_a_cluster_survive_a_node_and_a_replica_killed");
    let node = util::setup_appview();
    let dir = util::test_dir();
    let file = dir.path().join("events.jsonl");
    let mut generate = util::starling([
        "gen",
        "--actors",
        "80",
        "--follows",
        "500",
        "--posts",
        "150",
    ]);
    generate
        .args(["--seed", &seed.to_string()])
        .arg("--out")
        .arg(&file);
    util::run_ok(generate);
    let events = util::events_of(util::read_lines_of(&file));
    let recount = Recount::of(&events);
    let half = events.len() / 2;
    let (half_time_us, last_time_us) = (events[half - 1].time_us, events.last().unwrap().time_us);

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let plc = runtime.block_on(PlcStandIn::start(HashMap::new())).unwrap();
    // The first connection (replica A's) gets half the events; whoever connects next, all.
    let jetstream = FakeJetstream::start(events, None, Some(half));
    let keyspace = format!("starling_cluster_{seed:x}");
    let start = |name: &str| {
        start_replica(
            name,
            dir.path(),
            &nodes,
            &keyspace,
            &plc.url(),
            &jetstream.url(),
        )
    };

    // A starts first, so it takes the writer lease; B starts once A has ingested half.
    let mut a = start("replica-a");
    wait_for_cursor(&mut a, half_time_us, "replica A to ingest half the events");
    let mut b = start("replica-b");
    wait_ready(&mut b, "replica B to be ready");
    let (mut appview, appview_addr) = start_appview(&node, &[&a, &b], "appview");

    // Requests flow through the AppView from another thread until told to stop.
    let stop = Arc::new(AtomicBool::new(false));
    let (done_tx, done_rx) = std::sync::mpsc::channel::<Answer>();
    let requester = {
        let stop = stop.clone();
        let addr = appview_addr.clone();
        let actors: Vec<String> = recount.actors.iter().take(BATCH).cloned().collect();
        let posts: Vec<String> = recount.posts().into_keys().take(BATCH).collect();
        thread::spawn(move || {
            let mut n = 0usize;
            while !stop.load(Ordering::Relaxed) {
                let (nsid, param, keys): (_, _, &[String]) = match n % 3 {
                    0 => ("app.bsky.actor.getProfiles", "actors", &actors),
                    1 => ("app.bsky.feed.getPosts", "uris", &posts),
                    _ => ("app.bsky.feed.getAuthorFeed", "actor", &actors[..1]),
                };
                let params: Vec<(&str, &str)> = keys.iter().map(|k| (param, k.as_str())).collect();
                let sent = Instant::now();
                let (mut status, mut body) = xrpc(&addr, nsid, &params);
                // A client retries a server error once, as apps do (see the module comment).
                let mut retried = None;
                if status >= 500 {
                    retried = Some(format!("HTTP {status}: {body}"));
                    (status, body) = xrpc(&addr, nsid, &params);
                }
                let answer = Answer {
                    status,
                    took: sent.elapsed(),
                    what: format!("{nsid}: {body}"),
                    retried,
                };
                done_tx.send(answer).unwrap();
                n += 1;
            }
        })
    };
    let mut answers: Vec<Answer> = Vec::new();
    let collect = |answers: &mut Vec<Answer>, at_least: usize| {
        while answers.len() < at_least {
            answers.push(done_rx.recv_timeout(TIMEOUT).expect("an AppView answer"));
        }
        answers.extend(done_rx.try_iter());
    };
    collect(&mut answers, 5);

    // The faults, while requests flow.
    let before_faults = answers.len();
    cassandra(&["kill-node", &KILLED_NODE.to_string()]);
    a.proc.kill9();
    eprintln!(
        "cluster test: node {KILLED_NODE} and replica A killed after {before_faults} requests"
    );
    wait_for_cursor(
        &mut b,
        last_time_us,
        "replica B to take the lease and ingest the rest",
    );
    collect(&mut answers, before_faults + REQUESTS_DURING_FAULTS_MIN);
    let during_faults = answers.len() - before_faults;

    check_counts(&appview_addr, &recount, "with node 2 and replica A down");
    let stats = util::http_json(&b.http, "/v1/stats").unwrap();
    let records: BTreeMap<String, u64> = serde_json::from_value(stats["records"].clone()).unwrap();
    let want: BTreeMap<String, u64> = recount.records();
    assert_eq!(
        records, want,
        "live records per collection, replica B against the recount"
    );

    // Both come back; A serves the same counts by itself.
    cassandra(&["start-node", &KILLED_NODE.to_string()]);
    let mut a = start("replica-a");
    wait_ready(&mut a, "replica A to be ready again");
    let (mut appview_a, appview_a_addr) = start_appview(&node, &[&a], "appview-a");
    // Ready means its graph and timelines are loaded from the cluster: its follower counts,
    // through an AppView that has only it, show whether it caught up.
    check_counts(&appview_a_addr, &recount, "replica A alone, restarted");

    stop.store(true, Ordering::Relaxed);
    requester.join().unwrap();
    answers.extend(done_rx.try_iter());
    let failed: Vec<String> = answers
        .iter()
        .filter(|a| a.status != 200)
        .map(|a| format!("HTTP {} after {:?}: {}", a.status, a.took, a.what))
        .collect();
    let retried: Vec<&str> = answers
        .iter()
        .filter_map(|a| a.retried.as_deref())
        .collect();
    let slowest = answers.iter().map(|a| a.took).max().unwrap_or_default();
    eprintln!(
        "cluster test: {} AppView requests, {during_faults} of them after the faults began; \
         {} failed, {} retried once ({retried:?}); slowest {slowest:?}",
        answers.len(),
        failed.len(),
        retried.len(),
    );
    if !failed.is_empty() || retried.len() > 1 {
        let errors = |proc: &Proc| -> String {
            let out = proc.output_so_far();
            let lines: Vec<&str> = out
                .lines()
                .filter(|l| {
                    let traced_ok = l.contains(r#""code":"ok""#);
                    (l.starts_with(r#"{"rpc""#) && !traced_ok) || l.contains("WARN")
                })
                .collect();
            lines[lines.len().saturating_sub(20)..].join("\n")
        };
        eprintln!(
            "appview:\n{}\nreplica B:\n{}",
            errors(&appview),
            errors(&b.proc)
        );
    }
    assert!(
        failed.is_empty(),
        "AppView requests failed:\n{}",
        failed.join("\n")
    );
    // One request at a time: only the one in flight on replica A when it died may need it.
    assert!(
        retried.len() <= 1,
        "{} requests needed a retry: {retried:#?}",
        retried.len()
    );
    for proc in [&mut appview, &mut appview_a, &mut a.proc, &mut b.proc] {
        proc.terminate();
        proc.wait_exit(TIMEOUT);
    }
}
