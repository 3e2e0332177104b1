//! The follow and block graph through the binary: `starling serve` answering `/v1/graph/*` over
//! HTTP after every kind of start (rebuild from the store, snapshot, snapshot plus the graph
//! log, missing or corrupt snapshot), and `starling import-follows` on a real directed graph.
//! Every answer is compared with a naive model that the test computes from its own input.

// Test code: a panic is the failure report.
#![allow(clippy::unwrap_used, clippy::indexing_slicing)]

mod util;

use std::collections::{BTreeSet, HashMap, HashSet};
use std::ffi::OsStr;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use util::{Proc, Rng};

/// How long `serve` may take to start or to stop, and `import-follows` to finish.
const TIMEOUT: Duration = Duration::from_secs(120);

/// A valid DID that no input names.
const UNKNOWN_DID: &str = "did:plc:zzzzzzzzzzzzzzzzzzzzzzzz";

// ----- Naive models -----

/// What a model must answer; the HTTP answers are checked against it.
trait Model {
    fn follows(&self, actor: &str, subject: &str) -> bool;
    fn following(&self, actor: &str) -> BTreeSet<String>;
    fn followers(&self, actor: &str) -> BTreeSet<String>;
    fn blocks(&self, actor: &str, subject: &str) -> bool;
}

/// The follow and block records of a Jetstream stream, replayed from its JSON: a relation holds
/// while at least one of its records is live.
#[derive(Clone, Default)]
struct Records {
    /// Live follow records: (author DID, rkey) -> subject DID.
    follows: HashMap<(String, String), String>,
    /// Live block records, the same way.
    blocks: HashMap<(String, String), String>,
}

impl Records {
    fn of(lines: &[String]) -> Records {
        let mut res = Records::default();
        for line in lines {
            res.apply(line);
        }
        res
    }

    fn apply(&mut self, line: &str) {
        let event: Value = serde_json::from_str(line).unwrap();
        if event["kind"] != "commit" {
            return;
        }
        let commit = &event["commit"];
        let records = match commit["collection"].as_str().unwrap() {
            "app.bsky.graph.follow" => &mut self.follows,
            "app.bsky.graph.block" => &mut self.blocks,
            _ => return,
        };
        let key = (
            event["did"].as_str().unwrap().to_owned(),
            commit["rkey"].as_str().unwrap().to_owned(),
        );
        match commit["operation"].as_str().unwrap() {
            "create" | "update" => {
                let subject = commit["record"]["subject"].as_str().unwrap().to_owned();
                records.insert(key, subject);
            }
            "delete" => {
                records.remove(&key);
            }
            other => panic!("unexpected operation {other} in {line}"),
        }
    }

    fn relations(&self) -> StreamModel {
        let mut res = StreamModel::default();
        for ((actor, _), subject) in &self.follows {
            res.following
                .entry(actor.clone())
                .or_default()
                .insert(subject.clone());
            res.followers
                .entry(subject.clone())
                .or_default()
                .insert(actor.clone());
        }
        for ((actor, _), subject) in &self.blocks {
            res.blocks.insert((actor.clone(), subject.clone()));
        }
        res
    }
}

/// The relations of a stream, by DID.
#[derive(Default)]
struct StreamModel {
    following: HashMap<String, BTreeSet<String>>,
    followers: HashMap<String, BTreeSet<String>>,
    blocks: HashSet<(String, String)>,
}

impl Model for StreamModel {
    fn follows(&self, actor: &str, subject: &str) -> bool {
        self.following
            .get(actor)
            .is_some_and(|set| set.contains(subject))
    }

    fn following(&self, actor: &str) -> BTreeSet<String> {
        self.following.get(actor).cloned().unwrap_or_default()
    }

    fn followers(&self, actor: &str) -> BTreeSet<String> {
        self.followers.get(actor).cloned().unwrap_or_default()
    }

    fn blocks(&self, actor: &str, subject: &str) -> bool {
        self.blocks
            .contains(&(actor.to_owned(), subject.to_owned()))
    }
}

/// A directed graph of numbered nodes, self-loops left out, and the DID of each node.
struct NodeModel {
    following: HashMap<u32, HashSet<u32>>,
    followers: HashMap<u32, HashSet<u32>>,
    /// The DID of each node.
    dids: Vec<String>,
    node_of: HashMap<String, u32>,
}

impl NodeModel {
    fn dids(&self, nodes: impl IntoIterator<Item = u32>) -> BTreeSet<String> {
        nodes
            .into_iter()
            .map(|node| self.dids[node as usize].clone())
            .collect()
    }

    fn node(&self, did: &str) -> Option<u32> {
        self.node_of.get(did).copied()
    }
}

impl Model for NodeModel {
    fn follows(&self, actor: &str, subject: &str) -> bool {
        match (self.node(actor), self.node(subject)) {
            (Some(a), Some(b)) => self.following.get(&a).is_some_and(|set| set.contains(&b)),
            _ => false,
        }
    }

    fn following(&self, actor: &str) -> BTreeSet<String> {
        let set = self.node(actor).and_then(|a| self.following.get(&a));
        self.dids(set.into_iter().flatten().copied())
    }

    fn followers(&self, actor: &str) -> BTreeSet<String> {
        let set = self.node(actor).and_then(|a| self.followers.get(&a));
        self.dids(set.into_iter().flatten().copied())
    }

    fn blocks(&self, _: &str, _: &str) -> bool {
        false
    }
}

// ----- Queries and their checks -----

/// One HTTP query and how to check its answer against a model.
#[derive(Clone, Debug)]
enum Probe {
    Follows(String, String),
    KnownFollowers(String, String, Option<usize>),
    Actor(String),
    Mutuals(String, Option<usize>),
    Blocks(String, Vec<String>),
}

fn limit_param(limit: Option<usize>) -> String {
    limit.map_or(String::new(), |limit| format!("&limit={limit}"))
}

/// Checks a `{"count", "dids"}` answer: the count is the model's, and the DIDs are all of the
/// model's set (no limit) or `min(limit, count)` distinct members of it. The API lists them by
/// interned id, which the model does not know, so order is not checked.
fn check_list(
    answer: &Value,
    expected: &BTreeSet<String>,
    limit: Option<usize>,
) -> Result<(), String> {
    let count = answer["count"].as_u64().ok_or("no count")? as usize;
    let dids: Vec<&str> = answer["dids"]
        .as_array()
        .ok_or("no dids")?
        .iter()
        .map(|did| did.as_str().unwrap_or("(not a string)"))
        .collect();
    let distinct: BTreeSet<&str> = dids.iter().copied().collect();
    let shown = expected.len().min(limit.unwrap_or(usize::MAX));
    if count != expected.len() {
        return Err(format!("count {count}, expected {}", expected.len()));
    }
    if dids.len() != shown || distinct.len() != shown {
        return Err(format!(
            "{} DIDs ({} distinct), expected {shown}",
            dids.len(),
            distinct.len()
        ));
    }
    if let Some(stray) = distinct.iter().find(|did| !expected.contains(**did)) {
        return Err(format!("{stray} is not in the expected set"));
    }
    Ok(())
}

impl Probe {
    fn path(&self) -> String {
        match self {
            Probe::Follows(a, b) => format!("/v1/graph/follows?actor={a}&subject={b}"),
            Probe::KnownFollowers(a, b, limit) => format!(
                "/v1/graph/known-followers?viewer={a}&target={b}{}",
                limit_param(*limit)
            ),
            Probe::Actor(a) => format!("/v1/graph/actor?actor={a}"),
            Probe::Mutuals(a, limit) => {
                format!("/v1/graph/mutuals?actor={a}{}", limit_param(*limit))
            }
            Probe::Blocks(a, others) => {
                format!("/v1/graph/blocks?viewer={a}&others={}", others.join(","))
            }
        }
    }

    fn check(&self, answer: &Value, model: &dyn Model) -> Result<(), String> {
        let expect = |expected: Value| {
            if *answer == expected {
                Ok(())
            } else {
                Err(format!("expected {expected}"))
            }
        };
        match self {
            Probe::Follows(a, b) => expect(json!({ "follows": model.follows(a, b) })),
            Probe::KnownFollowers(a, b, limit) => {
                let known = model
                    .following(a)
                    .intersection(&model.followers(b))
                    .cloned()
                    .collect();
                check_list(answer, &known, *limit)
            }
            Probe::Actor(a) => expect(json!({
                "followers": model.followers(a).len(),
                "following": model.following(a).len(),
            })),
            Probe::Mutuals(a, limit) => {
                let mutuals = model
                    .following(a)
                    .intersection(&model.followers(a))
                    .cloned()
                    .collect();
                check_list(answer, &mutuals, *limit)
            }
            Probe::Blocks(a, others) => expect(Value::Array(
                others
                    .iter()
                    .map(|b| {
                        json!({
                            "did": b,
                            "blocking": model.blocks(a, b),
                            "blocked_by": model.blocks(b, a),
                        })
                    })
                    .collect(),
            )),
        }
    }
}

/// Runs every probe against the server and fails, listing the first few, if any answer differs
/// from the model.
#[track_caller]
fn check_probes(server: &mut Serve, probes: &[Probe], model: &dyn Model, when: &str) {
    assert!(!probes.is_empty());
    let started = Instant::now();
    let mut failures = Vec::new();
    for probe in probes {
        let path = probe.path();
        let res = util::http_json(&server.addr, &path).and_then(|answer| {
            probe
                .check(&answer, model)
                .map_err(|err| format!("{err}; got {answer}"))
        });
        if let Err(err) = res {
            failures.push(format!("GET {}: {err}", shorten(&path)));
        }
    }
    server.proc.assert_healthy();
    assert!(
        failures.is_empty(),
        "{when}: {} of {} answers differ from the model (graph loaded: {}):\n{}",
        failures.len(),
        probes.len(),
        server.loaded,
        failures
            .iter()
            .take(8)
            .map(|failure| shorten(failure))
            .collect::<Vec<_>>()
            .join("\n")
    );
    eprintln!(
        "{when}: {} answers agree with the model ({:.1} s)",
        probes.len(),
        started.elapsed().as_secs_f64()
    );
}

fn shorten(text: &str) -> String {
    if text.len() <= 400 {
        return text.to_owned();
    }
    let mut end = 400;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &text[..end])
}

// ----- The binary -----

/// A running `starling serve`, and the log line saying how it loaded the graph.
struct Serve {
    proc: Proc,
    addr: String,
    /// The `graph loaded` log line.
    loaded: String,
    /// The stderr lines before it.
    before: Vec<String>,
}

impl Serve {
    fn start(data_dir: &Path) -> Serve {
        let mut proc = Proc::spawn(
            util::starling([
                OsStr::new("serve"),
                OsStr::new("--data-dir"),
                data_dir.as_os_str(),
                OsStr::new("--http-addr"),
                OsStr::new("127.0.0.1:0"),
            ]),
            "serve",
        );
        let addr = proc.wait_for_stdout("starling: http listening on ", TIMEOUT);
        // `graph loaded` is logged before the listening line; wait for its reader to pass it on.
        let mut before = Vec::new();
        let loaded = loop {
            match proc.next_stderr_line(TIMEOUT) {
                Some(line) if line.contains("graph loaded") => break line,
                Some(line) => before.push(line),
                None => panic!("no `graph loaded` log line\n{}", proc.output_so_far()),
            }
        };
        proc.assert_healthy();
        Serve {
            proc,
            addr,
            loaded,
            before,
        }
    }

    /// Whether the graph came from the snapshot (as opposed to a rebuild from the store).
    fn loaded_snapshot(&self) -> bool {
        assert!(
            self.loaded.contains("source=Snapshot") || self.loaded.contains("source=Rebuilt"),
            "unexpected log line: {}",
            self.loaded
        );
        self.loaded.contains("source=Snapshot")
    }

    /// `n_logged` of a graph loaded from the snapshot.
    fn n_logged(&self) -> u64 {
        let rest = &self.loaded[self.loaded.find("n_logged: ").unwrap() + "n_logged: ".len()..];
        rest[..rest.find(|c: char| !c.is_ascii_digit()).unwrap()]
            .parse()
            .unwrap()
    }

    /// SIGTERM, then the process must exit cleanly.
    fn stop(mut self) {
        self.proc.terminate();
        let status = self.proc.wait_exit(TIMEOUT);
        assert!(
            status.success(),
            "serve exited with {status}\n{}",
            self.proc.output_so_far()
        );
    }
}

fn write_lines(path: &Path, lines: &[String]) {
    let mut text = lines.join("\n");
    text.push('\n');
    std::fs::write(path, text).unwrap();
}

// ----- Restarts of a sample network -----

/// Actors in the sample networks of the restart tests.
const SAMPLE_ACTORS: u32 = 1000;

/// Queries over the sample network: random pairs and actors, plus every pair whose follow
/// changes between `before` and `after`, and blocks of every actor involved in one.
fn sample_probes(rng: &mut Rng, before: &StreamModel, after: &StreamModel) -> Vec<Probe> {
    let n = u64::from(SAMPLE_ACTORS);
    let did = starling_core::sample::did;
    // Targets skewed toward the popular low indexes, as the sample's follows are.
    let popular = |rng: &mut Rng| {
        let x = (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
        ((x * x * x) * n as f64) as u32
    };
    let mut probes = Vec::new();
    for _ in 0..300 {
        let a = did(rng.range(0, n) as u32);
        let b = did(if rng.range(0, 2) == 0 {
            popular(rng)
        } else {
            rng.range(0, n) as u32
        });
        probes.push(Probe::Follows(a.clone(), b.clone()));
        if probes.len() % 3 == 0 {
            probes.push(Probe::KnownFollowers(a.clone(), b.clone(), None));
            let limit = rng.range(1, 6) as usize;
            probes.push(Probe::KnownFollowers(a, b, Some(limit)));
        }
    }
    for _ in 0..150 {
        let a = did(rng.range(0, n) as u32);
        probes.push(Probe::Actor(a.clone()));
        let limit = (rng.range(0, 2) == 0).then(|| rng.range(1, 4) as usize);
        probes.push(Probe::Mutuals(a, limit));
    }
    // Every follow that exists in one model and not the other, both ways.
    let mut changed = Vec::new();
    for (a, b) in [(before, after), (after, before)] {
        for (actor, subjects) in &a.following {
            for subject in subjects {
                if !b.follows(actor, subject) {
                    changed.push((actor.clone(), subject.clone()));
                }
            }
        }
    }
    changed.sort();
    for (actor, subject) in changed.iter().take(400) {
        probes.push(Probe::Follows(actor.clone(), subject.clone()));
        probes.push(Probe::Actor(subject.clone()));
    }
    // Blocks of every viewer involved in one, against its partners, random DIDs, an unknown one.
    let mut partners: HashMap<&str, BTreeSet<String>> = HashMap::new();
    for (a, b) in before.blocks.iter().chain(&after.blocks) {
        partners.entry(a).or_default().insert(b.clone());
        partners.entry(b).or_default().insert(a.clone());
    }
    let mut viewers: Vec<&&str> = partners.keys().collect();
    viewers.sort();
    for viewer in viewers.into_iter().take(150) {
        let mut others: Vec<String> = partners[*viewer].iter().cloned().collect();
        others.extend((0..5).map(|_| did(rng.range(0, n) as u32)));
        others.push(UNKNOWN_DID.to_owned());
        probes.push(Probe::Blocks((*viewer).to_owned(), others));
    }
    probes
}

/// The seeded sample stream, written to `dir/sample.jsonl`; returns its lines.
fn sample_stream(dir: &Path, seed: u64) -> Vec<String> {
    let lines = util::sample(&dir.join("sample.jsonl"), SAMPLE_ACTORS, seed);
    assert!(lines.len() > 10_000, "{} sample lines", lines.len());
    lines
}

/// A data directory whose graph snapshot is older than the store: the first half of a seeded
/// sample stream replayed, `serve` run once (no snapshot yet: it rebuilds the graph from the
/// store, writes one, and its answers must match a model of the first half), then the second
/// half replayed, which grows the store's graph log past the snapshot.
struct SnapshotThenLog {
    _dir: tempfile::TempDir,
    data: std::path::PathBuf,
    probes: Vec<Probe>,
    /// The model of the whole stream.
    full: StreamModel,
}

impl SnapshotThenLog {
    fn new(seed: u64) -> SnapshotThenLog {
        let mut rng = Rng::new(seed);
        let dir = util::test_dir();
        let data = dir.path().join("data");
        let lines = sample_stream(dir.path(), seed);
        let (first, second) = lines.split_at(lines.len() / 2);
        let half = Records::of(first).relations();
        let full = Records::of(&lines).relations();
        let probes = sample_probes(&mut rng, &half, &full);
        let n_changed = probes
            .iter()
            .filter(|probe| match probe {
                Probe::Follows(a, b) => half.follows(a, b) != full.follows(a, b),
                Probe::Blocks(..) => true,
                _ => false,
            })
            .count();
        assert!(
            n_changed > 100,
            "the second half changes only {n_changed} probed relations"
        );
        let first_file = dir.path().join("first.jsonl");
        let second_file = dir.path().join("second.jsonl");
        write_lines(&first_file, first);
        write_lines(&second_file, second);

        util::replay(&first_file, &data);
        let mut server = Serve::start(&data);
        assert!(!server.loaded_snapshot(), "{}", server.loaded);
        check_probes(&mut server, &probes, &half, "first half, graph rebuilt");
        server.stop();
        assert!(data.join("graph.snapshot").is_file());
        util::replay(&second_file, &data);
        SnapshotThenLog {
            _dir: dir,
            data,
            probes,
            full,
        }
    }
}

// Checks that the graph survives a restart as snapshot plus the graph log after it, and that
// such a start leaves a snapshot covering the log. How: one seeded sample stream split in two
// halves (see `SnapshotThenLog`): after the second half is replayed, start `serve` again
// (snapshot plus log) and compare its answers with a model of the whole stream; stop it with
// no new events, and start once more: the graph must come from a snapshot with nothing left to
// replay from the log, and give the same answers. The queries include every follow the second
// half adds or removes and the blocks it adds.
#[test]
fn restart_from_snapshot_plus_graph_log() {
    let seed = util::seed("restart_from_snapshot_plus_graph_log");
    let setup = SnapshotThenLog::new(seed);
    let mut server = Serve::start(&setup.data);
    check_probes(
        &mut server,
        &setup.probes,
        &setup.full,
        "whole stream, graph from the snapshot of the first half plus the graph log",
    );
    assert!(server.loaded_snapshot(), "{}", server.loaded);
    assert!(server.n_logged() > 0, "{}", server.loaded);
    server.stop();
    let mut server = Serve::start(&setup.data);
    assert!(server.loaded_snapshot(), "{}", server.loaded);
    assert_eq!(server.n_logged(), 0, "{}", server.loaded);
    let context = "whole stream, graph from the snapshot the start before wrote";
    check_probes(&mut server, &setup.probes, &setup.full, context);
    server.stop();
}

// Checks that a snapshot whose log sequence is corrupt is not trusted: `serve` must still give
// the answers of the whole stream (and warn). How: as `restart_from_snapshot_plus_graph_log`,
// but before the second start flip one seeded bit in bytes 9..16 of `graph.snapshot`, the high
// bytes of the little-endian log sequence that `graph_sync` writes before the graph itself. The
// sequence grows by at least 256, past every logged change, so trusting it skips them all.
#[test]
fn corrupt_log_sequence_in_the_snapshot_is_not_trusted() {
    let seed = util::seed("corrupt_log_sequence_in_the_snapshot_is_not_trusted");
    let setup = SnapshotThenLog::new(seed);
    let mut rng = Rng::new(seed ^ 1);
    let snapshot = setup.data.join("graph.snapshot");
    let mut bytes = std::fs::read(&snapshot).unwrap();
    assert_eq!(&bytes[..8], b"STRLSEQ1", "the snapshot's layout changed");
    let at = rng.range(9, 16) as usize;
    bytes[at] ^= 1 << rng.range(0, 8);
    std::fs::write(&snapshot, bytes).unwrap();
    let mut server = Serve::start(&setup.data);
    check_probes(
        &mut server,
        &setup.probes,
        &setup.full,
        &format!("snapshot with byte {at} of its log sequence flipped"),
    );
    let warned = server
        .before
        .iter()
        .any(|line| line.contains("graph snapshot unusable"));
    assert!(warned, "no warning; stderr: {:?}", server.before);
    server.stop();
}

/// Flips three bytes of the snapshot past its 16-byte header (the graph's own bytes, which are
/// checksummed), at seeded positions.
fn flip_bytes(path: &Path, rng: &mut Rng) {
    let mut bytes = std::fs::read(path).unwrap();
    assert!(bytes.len() > 64, "snapshot of {} bytes", bytes.len());
    for _ in 0..3 {
        let at = rng.range(16, bytes.len() as u64) as usize;
        bytes[at] ^= 0xa5;
    }
    std::fs::write(path, bytes).unwrap();
}

// Checks that the graph is the same whichever way `serve` loads it: rebuilt from the store,
// from the snapshot, rebuilt again when the snapshot is deleted, when three of its bytes are
// flipped, and when it is truncated (both with a warning), and from the snapshot that rebuild
// wrote. How: replay a seeded sample stream, then start and stop (SIGTERM) `serve` once per
// case and compare its answers with a model of the stream computed from the events' JSON.
#[test]
fn graph_is_rebuilt_when_the_snapshot_is_missing_or_corrupt() {
    let seed = util::seed("graph_is_rebuilt_when_the_snapshot_is_missing_or_corrupt");
    let mut rng = Rng::new(seed);
    let dir = util::test_dir();
    let data = dir.path().join("data");
    let lines = sample_stream(dir.path(), seed);
    let model = Records::of(&lines).relations();
    let probes = sample_probes(&mut rng, &model, &model);
    let snapshot = data.join("graph.snapshot");
    util::replay(&dir.path().join("sample.jsonl"), &data);

    let expect_source = |server: &Serve, from_snapshot: bool, warned: bool| {
        assert_eq!(server.loaded_snapshot(), from_snapshot, "{}", server.loaded);
        let warning = server
            .before
            .iter()
            .any(|line| line.contains("graph snapshot unusable"));
        assert_eq!(
            warning, warned,
            "stderr before loading: {:?}",
            server.before
        );
    };
    let mut server = Serve::start(&data);
    expect_source(&server, false, false);
    check_probes(&mut server, &probes, &model, "graph rebuilt from the store");
    server.stop();

    let mut server = Serve::start(&data);
    expect_source(&server, true, false);
    check_probes(&mut server, &probes, &model, "graph from the snapshot");
    server.stop();

    std::fs::remove_file(&snapshot).unwrap();
    let mut server = Serve::start(&data);
    expect_source(&server, false, false);
    check_probes(
        &mut server,
        &probes,
        &model,
        "snapshot deleted, graph rebuilt",
    );
    server.stop();

    flip_bytes(&snapshot, &mut rng);
    let mut server = Serve::start(&data);
    expect_source(&server, false, true);
    check_probes(&mut server, &probes, &model, "snapshot bytes flipped");
    server.stop();

    let len = std::fs::metadata(&snapshot).unwrap().len();
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(&snapshot)
        .unwrap();
    file.set_len(rng.range(1, len)).unwrap();
    drop(file);
    let mut server = Serve::start(&data);
    expect_source(&server, false, true);
    check_probes(&mut server, &probes, &model, "snapshot truncated");
    server.stop();

    let mut server = Serve::start(&data);
    expect_source(&server, true, false);
    check_probes(
        &mut server,
        &probes,
        &model,
        "snapshot written by the rebuild",
    );
    server.stop();
}

// ----- import-follows on soc-Slashdot0902 -----

/// Edge lines of soc-Slashdot0902 and its self-loops, from `../shared/data/README.md`.
const SLASHDOT_EDGES: usize = 948_464;
const SLASHDOT_SELF_LOOPS: usize = 78_303;

/// The DID of a Slashdot node: 19 characters from a hash of the id, then the id in base32 (5
/// characters reach 32^5 > 82,168 nodes), so DIDs look random but never collide.
fn node_did(node: u32) -> String {
    const ALPHABET: &[u8; 32] = b"abcdefghijklmnopqrstuvwxyz234567";
    let mut rng = Rng::new(u64::from(node) ^ 0x736c_6173_6864_6f74);
    let mut res = String::with_capacity(32);
    res.push_str("did:plc:");
    for _ in 0..19 {
        res.push(char::from(ALPHABET[(rng.next_u64() & 31) as usize]));
    }
    for shift in (0..5).rev() {
        res.push(char::from(ALPHABET[((node >> (shift * 5)) & 31) as usize]));
    }
    res
}

/// Every `from<TAB>to` edge line of the compressed SNAP file, self-loops included.
fn read_slashdot(path: &Path) -> Vec<(u32, u32)> {
    let file = std::fs::File::open(path).unwrap();
    let reader = BufReader::new(zstd::Decoder::new(file).unwrap());
    let mut edges = Vec::with_capacity(SLASHDOT_EDGES);
    for line in reader.lines() {
        let line = line.unwrap();
        let line = line.strip_suffix('\r').unwrap_or(&line);
        if line.starts_with('#') || line.is_empty() {
            continue;
        }
        let (from, to) = line.split_once('\t').unwrap();
        edges.push((from.parse().unwrap(), to.parse().unwrap()));
    }
    edges
}

// Checks `import-follows` on the real directed graph soc-Slashdot0902 (948,464 edges, 78,303 of
// them self-loops). How: convert it in the test to `did,did` lines (a zstd file), with comment
// and blank lines, some CRLF endings, and malformed lines added at seeded places; check the
// printed counts of follows and bad lines (self-loops and malformed lines), and the first bad
// line numbers, against the test's own count; then start `serve` (it loads the snapshot the
// import wrote) and compare follows, known followers (with and without a limit), mutuals and
// follower counts for ~500 seeded random pairs and actors with a naive HashMap<u32,
// HashSet<u32>> computation. All 948k edges: in a debug build the import takes ~7 s, and
// `serve` ~13 s to start (almost all of it opening the store), ~25 s for the whole test.
#[test]
fn import_follows_on_slashdot_matches_a_naive_graph() {
    let Some(shared) = util::shared_data() else {
        return;
    };
    let seed = util::seed("import_follows_on_slashdot_matches_a_naive_graph");
    let mut rng = Rng::new(seed);
    let path = shared.join("graphs/soc-Slashdot0902.txt.zst");
    assert!(path.is_file(), "{} is missing", path.display());
    let started = Instant::now();
    let edges = read_slashdot(&path);
    assert_eq!(edges.len(), SLASHDOT_EDGES);
    let self_loops = edges.iter().filter(|(a, b)| a == b).count();
    assert_eq!(self_loops, SLASHDOT_SELF_LOOPS);

    let n_nodes = edges.iter().map(|&(a, b)| a.max(b)).max().unwrap() + 1;
    let dids: Vec<String> = (0..n_nodes).map(node_did).collect();
    let mut model = NodeModel {
        following: HashMap::new(),
        followers: HashMap::new(),
        node_of: dids.iter().cloned().zip(0..).collect(),
        dids,
    };
    for &(a, b) in edges.iter().filter(|(a, b)| a != b) {
        model.following.entry(a).or_default().insert(b);
        model.followers.entry(b).or_default().insert(a);
    }
    // The edges are distinct (the data's README says so; this checks it).
    let n_model_edges: usize = model.following.values().map(HashSet::len).sum();
    assert_eq!(n_model_edges, edges.len() - self_loops);

    // The adjacency file, with malformed lines at seeded places.
    let (d1, d2, d3) = (&model.dids[1], &model.dids[2], &model.dids[3]);
    let malformed = [
        "did:plc:aaaaaaaaaaaaaaaaaaaaaaaa".to_owned(),
        format!("not-a-did,{d1}"),
        format!("{d1},did:plc:"),
        format!("{d1}\t{d2}"),
        format!("{d1},{d2},{d3}"),
        "12\t34".to_owned(),
        " , ".to_owned(),
        format!("did:plc:abc def,{d2}"),
        format!("{d1};{d2}"),
        format!("{d2},DID:plc:{}", &d3["did:plc:".len()..]),
        ",".to_owned(),
        format!("{d3},"),
    ];
    let mut at: Vec<usize> = malformed
        .iter()
        .map(|_| rng.range(0, edges.len() as u64) as usize)
        .collect();
    at.sort_unstable();
    let dir = util::test_dir();
    let file = dir.path().join("slashdot.csv.zst");
    let mut out = zstd::Encoder::new(std::fs::File::create(&file).unwrap(), 1).unwrap();
    let mut line_no = 0u64;
    let mut bad_lines = Vec::new();
    let mut write_line = |out: &mut zstd::Encoder<'_, std::fs::File>, line: &str, bad: bool| {
        line_no += 1;
        if bad {
            bad_lines.push(line_no);
        }
        let ending = if line_no.is_multiple_of(7) {
            "\r\n"
        } else {
            "\n"
        };
        out.write_all(line.as_bytes()).unwrap();
        out.write_all(ending.as_bytes()).unwrap();
    };
    write_line(
        &mut out,
        "# soc-Slashdot0902 as actor_did,subject_did",
        false,
    );
    write_line(&mut out, "", false);
    let mut next_malformed = 0;
    let mut line = String::new();
    for (idx, &(a, b)) in edges.iter().enumerate() {
        while next_malformed < at.len() && at[next_malformed] == idx {
            write_line(&mut out, &malformed[next_malformed], true);
            next_malformed += 1;
        }
        line.clear();
        line.push_str(&model.dids[a as usize]);
        line.push(',');
        line.push_str(&model.dids[b as usize]);
        write_line(&mut out, &line, a == b);
        if idx == edges.len() / 2 {
            write_line(&mut out, "   ", false);
        }
    }
    out.finish().unwrap();
    assert_eq!(next_malformed, malformed.len());
    let imported = edges.len() - self_loops;
    assert_eq!(bad_lines.len(), self_loops + malformed.len());
    eprintln!("converted in {:.1} s", started.elapsed().as_secs_f64());

    let data = dir.path().join("data");
    let import_started = Instant::now();
    let stdout = util::run_ok(util::starling([
        OsStr::new("import-follows"),
        file.as_os_str(),
        OsStr::new("--data-dir"),
        data.as_os_str(),
    ]));
    eprintln!(
        "import-follows took {:.1} s",
        import_started.elapsed().as_secs_f64()
    );
    let first_bad: Vec<u64> = bad_lines.iter().copied().take(10).collect();
    assert_eq!(
        stdout.trim_end(),
        format!(
            "imported {imported} follows; {} bad lines (first at lines {first_bad:?})",
            bad_lines.len()
        )
    );

    // Queries: pairs along real edges (self-loops among them), reversed edges, and random
    // pairs; known followers of a viewer's followees' followees, so that many are non-empty.
    let nodes_with_following: Vec<u32> = {
        let mut nodes: Vec<u32> = model.following.keys().copied().collect();
        nodes.sort_unstable();
        nodes
    };
    let random_node = |rng: &mut Rng| rng.range(0, u64::from(n_nodes)) as u32;
    let pick = |rng: &mut Rng, set: &HashSet<u32>| -> Option<u32> {
        let mut sorted: Vec<u32> = set.iter().copied().collect();
        sorted.sort_unstable();
        (!sorted.is_empty()).then(|| sorted[rng.range(0, sorted.len() as u64) as usize])
    };
    let mut probes = Vec::new();
    for idx in 0..500 {
        let (a, b) = match idx % 4 {
            0 => edges[rng.range(0, edges.len() as u64) as usize],
            1 => {
                let (a, b) = edges[rng.range(0, edges.len() as u64) as usize];
                (b, a)
            }
            2 => (random_node(&mut rng), random_node(&mut rng)),
            _ => {
                let viewer =
                    nodes_with_following[rng.range(0, nodes_with_following.len() as u64) as usize];
                let followee = pick(&mut rng, &model.following[&viewer]).unwrap();
                let target = model
                    .following
                    .get(&followee)
                    .and_then(|set| pick(&mut rng, set))
                    .unwrap_or(followee);
                (viewer, target)
            }
        };
        let (a, b) = (node_did(a), node_did(b));
        probes.push(Probe::Follows(a.clone(), b.clone()));
        probes.push(Probe::KnownFollowers(a.clone(), b.clone(), None));
        let limit = rng.range(1, 20) as usize;
        probes.push(Probe::KnownFollowers(a.clone(), b, Some(limit)));
        if idx % 5 == 0 {
            probes.push(Probe::Actor(a.clone()));
            probes.push(Probe::Mutuals(a.clone(), None));
            probes.push(Probe::Mutuals(a, Some(limit)));
        }
    }
    // The node with the most edges, as viewer and as target, and an unknown DID.
    let hub = node_did(2494);
    probes.push(Probe::Actor(hub.clone()));
    probes.push(Probe::Mutuals(hub.clone(), None));
    probes.push(Probe::KnownFollowers(hub.clone(), node_did(1), None));
    probes.push(Probe::KnownFollowers(node_did(1), hub.clone(), None));
    probes.push(Probe::Follows(hub, UNKNOWN_DID.to_owned()));
    let n_known = probes
        .iter()
        .filter(|probe| match probe {
            Probe::KnownFollowers(a, b, None) => {
                !model.following(a).is_disjoint(&model.followers(b))
            }
            _ => false,
        })
        .count();
    let n_follows = probes
        .iter()
        .filter(|probe| matches!(probe, Probe::Follows(a, b) if model.follows(a, b)))
        .count();
    eprintln!(
        "{} probes: {n_follows} follows, {n_known} with known followers",
        probes.len()
    );
    assert!(n_known > 100, "only {n_known} pairs have known followers");
    assert!(n_follows > 100, "only {n_follows} pairs follow");

    let serve_started = Instant::now();
    let mut server = Serve::start(&data);
    eprintln!(
        "serve started in {:.1} s",
        serve_started.elapsed().as_secs_f64()
    );
    assert!(server.loaded_snapshot(), "{}", server.loaded);
    // One follow per imported line, the edges being distinct.
    assert!(
        server.loaded.contains(&format!(" follows={imported} ")),
        "{}",
        server.loaded
    );
    check_probes(&mut server, &probes, &model, "after import-follows");
    server.stop();
}
