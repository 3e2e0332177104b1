//! The operator's view of `starling serve`: `/livez` and `/readyz` while it starts and after,
//! `/metrics` with help and type for every family, and the Grafana dashboard and Prometheus
//! alert rules of `ops/` checked against the metrics a running `serve` exports.

// Test code: a panic is the failure report.
#![allow(clippy::unwrap_used, clippy::indexing_slicing)]

mod util;

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsString;
use std::io::Write;
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::sync::mpsc;
use std::time::Duration;

use serde_json::Value;
use util::{Event, FakeJetstream, Proc};

/// How long the service gets to reach a state before the test fails.
const DEADLINE: Duration = Duration::from_secs(60);

/// `GET path`: the status and the body parsed as JSON.
fn get_json(addr: &str, path: &str) -> Result<(u16, Value), String> {
    let (status, body) = util::http_get(addr, path).map_err(|err| err.to_string())?;
    let value = serde_json::from_str(&body).map_err(|err| format!("{err}: {body}"))?;
    Ok((status, value))
}

/// The names in `/readyz`'s `not_ready`.
fn not_ready(body: &Value) -> Vec<String> {
    body["not_ready"]
        .as_array()
        .unwrap()
        .iter()
        .map(|name| name.as_str().unwrap().to_owned())
        .collect()
}

/// A Jetstream address that accepts connections and never answers the websocket handshake,
/// until `close` is sent: then it resets the connections it holds, and the client moves on to
/// its next URL.
struct SilentJetstream {
    url: String,
    close: mpsc::Sender<()>,
}

impl SilentJetstream {
    fn start() -> SilentJetstream {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("ws://{}/subscribe", listener.local_addr().unwrap());
        let (close, closed) = mpsc::channel::<()>();
        let (accepted_tx, accepted_rx) = mpsc::channel::<TcpStream>();
        let accept = listener.try_clone().unwrap();
        std::thread::spawn(move || {
            for stream in accept.incoming().flatten() {
                if accepted_tx.send(stream).is_err() {
                    return;
                }
            }
        });
        std::thread::spawn(move || {
            let _ = closed.recv();
            // Dropping the streams closes them mid-handshake; a later connection ends the
            // accept thread, whose send then fails.
            let held: Vec<TcpStream> = accepted_rx.try_iter().collect();
            drop(held);
            drop(listener);
        });
        SilentJetstream { url, close }
    }
}

/// A sample network as Jetstream events, sorted, with one malformed event among them.
fn sample_events(dir: &Path, n_actors: u32) -> Vec<Event> {
    let lines = util::sample(&dir.join("sample.jsonl"), n_actors, 7);
    let mut events = util::events_of(lines);
    events.sort_by_key(|event| event.time_us);
    let time_us = events[events.len() / 2].time_us;
    events.insert(
        events.len() / 2,
        Event {
            time_us,
            line: format!(r#"{{"did":"not a did","time_us":{time_us},"kind":"commit"}}"#),
        },
    );
    events
}

/// A `serve` whose start is held twice: its graph snapshot is a FIFO (returned) that the
/// graph loader waits on, and its first Jetstream URL never answers. The second URL is a
/// stand-in Jetstream serving a sample network.
struct HeldStart {
    serve: Proc,
    fifo: std::path::PathBuf,
    silent: SilentJetstream,
    _jetstream: FakeJetstream,
}

fn start_held(dir: &Path) -> HeldStart {
    let events = sample_events(dir, 40);
    let data_dir = dir.join("data");
    // A store with a few events in it, so the start has a store to open.
    let head = dir.join("head.jsonl");
    util::write_events(&head, &events[..5]);
    util::replay(&head, &data_dir);
    let fifo = data_dir.join("graph.snapshot");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(made.success(), "mkfifo {}", fifo.display());
    let silent = SilentJetstream::start();
    let jetstream = FakeJetstream::start(events, None, None);
    let mut args: Vec<OsString> = ["serve", "--data-dir"].map(OsString::from).to_vec();
    args.push(data_dir.into_os_string());
    for arg in ["--http-addr", "127.0.0.1:0", "--grpc-addr", "127.0.0.1:0"] {
        args.push(arg.into());
    }
    for url in [&silent.url, &jetstream.url()] {
        args.push("--jetstream".into());
        args.push(url.into());
    }
    HeldStart {
        serve: Proc::spawn(util::starling(&args), "serve"),
        fifo,
        silent,
        _jetstream: jetstream,
    }
}

// Checks the probes through a start held at known points: the graph snapshot is a FIFO, so
// the graph loader waits until the test writes to it, and the first Jetstream URL accepts
// connections without ever answering. `/livez` answers 200 from the start; `/readyz` is 503
// and names `graph` (and API paths are 503) while the graph loads, then names only `ingest`
// while Jetstream is not connected, then is 200 once it connects to the second URL.
#[test]
fn probes_answer_during_start_and_after() {
    let dir = util::test_dir();
    let HeldStart {
        mut serve,
        fifo,
        silent,
        _jetstream,
    } = start_held(dir.path());
    let addr = serve.wait_for_stdout("starling: ops listening on ", DEADLINE);

    // Held at the graph: the store opens, the graph waits for the FIFO.
    let (status, live) = get_json(&addr, "/livez").unwrap();
    assert_eq!((status, live["status"].as_str()), (200, Some("alive")));
    let ready = util::poll_until(DEADLINE, "the store to open", || {
        serve.assert_healthy();
        let (status, body) = get_json(&addr, "/readyz")?;
        match body["checks"]["store"]["ready"].as_bool() {
            Some(true) => Ok((status, body)),
            _ => Err(body.to_string()),
        }
    });
    assert_eq!(ready.0, 503, "{}", ready.1);
    assert_eq!(ready.1["status"], "not_ready");
    assert!(
        not_ready(&ready.1).contains(&"graph".to_owned()),
        "{}",
        ready.1
    );
    assert_eq!(ready.1["checks"]["graph"]["detail"], "loading");
    let (status, body) = get_json(&addr, "/v1/stats").unwrap();
    assert_eq!(status, 503, "{body}");
    assert!(not_ready(&body).contains(&"graph".to_owned()), "{body}");
    let (status, metrics) = util::http_get(&addr, "/metrics").unwrap();
    assert_eq!(status, 200);
    assert!(
        metrics.contains("# TYPE process_resident_memory_bytes gauge"),
        "{metrics}"
    );

    // An empty snapshot is unusable: the graph is rebuilt from the store and the start goes on.
    drop(std::fs::OpenOptions::new().write(true).open(&fifo).unwrap());
    serve.wait_for_stdout("starling: http listening on ", DEADLINE);
    let waiting = util::poll_until(DEADLINE, "only ingest to be not ready", || {
        serve.assert_healthy();
        let (status, body) = get_json(&addr, "/readyz")?;
        let detail = &body["checks"]["ingest"]["detail"];
        if not_ready(&body) == ["ingest"] && detail == "not connected to Jetstream" {
            Ok((status, body))
        } else {
            Err(body.to_string())
        }
    });
    assert_eq!(waiting.0, 503, "{}", waiting.1);
    assert_eq!(waiting.1["checks"]["lease"]["ready"], true);
    assert_eq!(get_json(&addr, "/livez").unwrap().0, 200);
    assert_eq!(util::http_get(&addr, "/v1/stats").unwrap().0, 200);

    // The silent URL goes away; ingest moves on to the stand-in Jetstream and connects.
    silent.close.send(()).unwrap();
    let ready = util::poll_until(DEADLINE, "/readyz to be 200", || {
        serve.assert_healthy();
        match get_json(&addr, "/readyz")? {
            (200, body) => Ok(body),
            (status, body) => Err(format!("HTTP {status}: {body}")),
        }
    });
    assert_eq!(ready["status"], "ready");
    assert_eq!(
        ready["checks"]["ingest"]["detail"],
        "connected to Jetstream"
    );
    let connected = util::http_get(&addr, "/metrics").unwrap().1;
    assert!(
        connected.contains("starling_ingest_jetstream_connected 1"),
        "{connected}"
    );

    // Shutting down: the process drains and exits cleanly.
    serve.terminate();
    assert!(
        serve.wait_exit(DEADLINE).success(),
        "{}",
        serve.output_so_far()
    );
}

/// Sends one `bsky.Service/Ping` over h2c with prior knowledge, written by hand (HTTP/2
/// frames, HPACK literals), and keeps the connection open for the caller to drop.
fn grpc_ping(addr: &str) -> TcpStream {
    fn frame(kind: u8, flags: u8, stream_id: u32, payload: &[u8]) -> Vec<u8> {
        let len = payload.len() as u32;
        let mut res = len.to_be_bytes()[1..].to_vec();
        res.extend([kind, flags]);
        res.extend(stream_id.to_be_bytes());
        res.extend(payload);
        res
    }
    fn literal(res: &mut Vec<u8>, name_idx: u8, value: &str) {
        // A literal header field without indexing, with an indexed name (RFC 7541, 6.2.2).
        res.push(name_idx);
        res.push(value.len() as u8);
        res.extend(value.as_bytes());
    }
    let mut headers = vec![0x83, 0x86]; // :method POST, :scheme http
    literal(&mut headers, 0x04, "/bsky.Service/Ping"); // :path
    literal(&mut headers, 0x01, addr); // :authority
    headers.extend([0x0f, 0x10]); // content-type (static index 31)
    headers.push(16);
    headers.extend(b"application/grpc");
    headers.extend([0x00, 2]); // te: trailers, a literal name
    headers.extend(b"te");
    headers.push(8);
    headers.extend(b"trailers");
    let mut stream = TcpStream::connect(addr).unwrap();
    let mut out = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    out.extend(frame(0x4, 0, 0, &[])); // SETTINGS
    out.extend(frame(0x1, 0x4, 1, &headers)); // HEADERS, END_HEADERS
    out.extend(frame(0x0, 0x1, 1, &[0, 0, 0, 0, 0])); // DATA: an empty message, END_STREAM
    stream.write_all(&out).unwrap();
    stream
}

/// Every metric family `/metrics` declares: name to type, and the names that have help.
fn families(text: &str) -> (BTreeMap<String, String>, BTreeSet<String>) {
    let mut types = BTreeMap::new();
    let mut helped = BTreeSet::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap();
            types.insert(name.to_owned(), kind.to_owned());
        } else if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, help) = rest.split_once(' ').unwrap();
            if !help.trim().is_empty() {
                helped.insert(name.to_owned());
            }
        }
    }
    (types, helped)
}

/// Metric names in a dashboard or rule file: every `starling_*` or `process_*` token, with a
/// histogram's `_bucket`, `_sum` or `_count` series taken back to its family.
fn names_used(text: &str) -> BTreeSet<String> {
    let mut res = BTreeSet::new();
    let bytes = text.as_bytes();
    let mut idx = 0;
    while idx < bytes.len() {
        let rest = &text[idx..];
        let starts = (rest.starts_with("starling_") || rest.starts_with("process_"))
            && (idx == 0 || !(bytes[idx - 1].is_ascii_alphanumeric() || bytes[idx - 1] == b'_'));
        if starts {
            let len = rest
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(rest.len());
            res.insert(rest[..len].to_owned());
            idx += len;
        } else {
            idx += 1;
        }
    }
    res
}

/// The family a series name belongs to, given the families declared.
fn family_of<'a>(name: &'a str, types: &BTreeMap<String, String>) -> Option<&'a str> {
    if types.contains_key(name) {
        return Some(name);
    }
    ["_bucket", "_sum", "_count"]
        .iter()
        .filter_map(|suffix| name.strip_suffix(suffix))
        .find(|family| types.get(*family).is_some_and(|kind| kind == "histogram"))
}

/// Families a running `serve` must export, with their types.
const EXPECTED_FAMILIES: [(&str, &str); 20] = [
    ("starling_build_info", "gauge"),
    ("starling_http_requests_total", "counter"),
    ("starling_http_request_duration_seconds", "histogram"),
    ("starling_grpc_requests_total", "counter"),
    ("starling_grpc_request_duration_seconds", "histogram"),
    ("starling_ingest_commit_seconds", "histogram"),
    ("starling_ingest_lag_seconds", "gauge"),
    ("starling_ingest_events_total", "counter"),
    ("starling_ingest_dropped_total", "counter"),
    ("starling_ingest_jetstream_connected", "gauge"),
    ("starling_ingest_jetstream_connections_total", "counter"),
    ("starling_ingest_lease_held", "gauge"),
    ("starling_store_data_dir_bytes", "gauge"),
    ("starling_store_cache_entries", "gauge"),
    ("starling_store_cache_capacity", "gauge"),
    ("starling_store_cache_engine_reads_total", "counter"),
    ("starling_graph_follows", "gauge"),
    ("starling_timeline_active_readers", "gauge"),
    ("process_resident_memory_bytes", "gauge"),
    ("process_cpu_seconds_total", "gauge"),
];

// Checks `/metrics` of a `serve` that ingested from a stand-in Jetstream (with one malformed
// event) and answered HTTP and gRPC requests: every family has `# HELP` and `# TYPE`; the ones
// an operator needs are there with the right type (latencies as histograms, not summaries);
// and every metric name in `ops/grafana-dashboard.json` and `ops/prometheus-alerts.yml` is one
// `serve` exports.
#[test]
fn metrics_have_help_and_type_and_ops_files_use_only_them() {
    let dir = util::test_dir();
    let events = sample_events(dir.path(), 40);
    let n_events = events.len();
    let jetstream = FakeJetstream::start(events, None, None);
    let mut args: Vec<OsString> = ["serve", "--data-dir"].map(OsString::from).to_vec();
    args.push(dir.path().join("data").into_os_string());
    for arg in ["--http-addr", "127.0.0.1:0", "--grpc-addr", "127.0.0.1:0"] {
        args.push(arg.into());
    }
    args.push("--jetstream".into());
    args.push(jetstream.url().into());
    let mut serve = Proc::spawn(util::starling(&args), "serve");
    let addr = serve.wait_for_stdout("starling: http listening on ", DEADLINE);
    let grpc = serve.wait_for_stdout("starling: grpc listening on ", DEADLINE);
    util::poll_until(DEADLINE, "every event to be ingested", || {
        serve.assert_healthy();
        let sent = jetstream
            .connections()
            .iter()
            .map(|c| c.sent)
            .sum::<usize>();
        let stats = util::http_json(&addr, "/v1/stats")?;
        (sent == n_events && stats["dropped"].as_object().is_some_and(|d| !d.is_empty()))
            .then_some(())
            .ok_or_else(|| format!("sent {sent} of {n_events}: {stats}"))
    });
    let ping = grpc_ping(&grpc);
    let text = util::poll_until(DEADLINE, "the gRPC call to be counted", || {
        let (_, text) = util::http_get(&addr, "/metrics").map_err(|err| err.to_string())?;
        if text.contains(r#"starling_grpc_requests_total{method="Ping",code="OK"} 1"#) {
            Ok(text)
        } else {
            Err(text)
        }
    });

    let (types, helped) = families(&text);
    assert!(types.len() > 30, "{text}");
    for name in types.keys() {
        assert!(helped.contains(name), "{name} has no # HELP\n{text}");
    }
    for (name, kind) in EXPECTED_FAMILIES {
        assert_eq!(
            types.get(name).map(String::as_str),
            Some(kind),
            "{name}\n{text}"
        );
    }
    assert!(text.contains(r#"starling_build_info{version=""#), "{text}");
    assert!(
        text.contains(
            r#"starling_grpc_request_duration_seconds_bucket{method="Ping",le="0.0005"}"#
        ),
        "{text}"
    );

    let ops = util::repo_root().join("ops");
    for file in ["grafana-dashboard.json", "prometheus-alerts.yml"] {
        let content = std::fs::read_to_string(ops.join(file)).unwrap();
        if file.ends_with(".json") {
            serde_json::from_str::<Value>(&content).unwrap();
        }
        let used = names_used(&content);
        assert!(used.len() >= 8, "{file} names only {used:?}");
        for name in &used {
            assert!(
                family_of(name, &types).is_some(),
                "{file} uses `{name}`, which a running serve does not export"
            );
        }
    }
    // A graceful stop waits for open connections; this client would never close its own.
    drop(ping);
    serve.terminate();
    assert!(
        serve.wait_exit(DEADLINE).success(),
        "{}",
        serve.output_so_far()
    );
}

// Checks `--log-format json`: a `serve` started and stopped with `STARLING_LOG=debug` writes
// nothing on stderr but JSON objects, each with a level and its fields, among them the
// `starting` line with the data directory as a field of its own. And a `STARLING_LOG` that
// does not parse stops a command with an error naming the variable, instead of logging at a
// default level the operator did not ask for.
#[test]
fn json_logs_parse_and_a_bad_log_filter_is_an_error() {
    let dir = util::test_dir();
    let data_dir = dir.path().join("data");
    let mut cmd = util::starling([
        "serve".as_ref(),
        "--data-dir".as_ref(),
        data_dir.as_os_str(),
        "--http-addr".as_ref(),
        "127.0.0.1:0".as_ref(),
        "--log-format".as_ref(),
        "json".as_ref() as &std::ffi::OsStr,
    ]);
    cmd.env("STARLING_LOG", "debug");
    let mut serve = Proc::spawn(cmd, "serve");
    serve.wait_for_stdout("starling: http listening on ", DEADLINE);
    serve.terminate();
    assert!(
        serve.wait_exit(DEADLINE).success(),
        "{}",
        serve.output_so_far()
    );
    let lines = serve.stderr_lines();
    assert!(lines.len() >= 3, "{lines:?}");
    let mut starting = None;
    for line in &lines {
        let value: Value = serde_json::from_str(line)
            .unwrap_or_else(|err| panic!("log line is not JSON ({err}): {line}"));
        assert!(
            value["level"].is_string() && value["fields"].is_object(),
            "{line}"
        );
        if value["fields"]["message"] == "starting" {
            starting = Some(value);
        }
    }
    let starting = starting.unwrap_or_else(|| panic!("no `starting` line: {lines:?}"));
    assert_eq!(
        starting["fields"]["data_dir"].as_str(),
        Some(data_dir.to_str().unwrap())
    );

    for filter in ["starling=loud", "info,[["] {
        util::check_error(
            &[&"stats", &"--data-dir", &data_dir, &"--json"],
            &[("STARLING_LOG", filter)],
            &["STARLING_LOG", filter, "not a log filter"],
        );
    }
}

/// A `did:plc` DID for actor `idx`: 24 base32 characters.
fn plc_did(idx: usize) -> String {
    const ALPHABET: &[u8; 32] = b"abcdefghijklmnopqrstuvwxyz234567";
    let mut chars = [b'a'; 24];
    let mut rest = idx;
    for slot in chars.iter_mut().rev() {
        *slot = ALPHABET[rest % 32];
        rest /= 32;
    }
    format!("did:plc:{}", std::str::from_utf8(&chars).unwrap())
}

/// Imports a star into `data_dir`: `plc_did(0)` and each of `plc_did(1..=n)` follow each other.
fn import_star(dir: &Path, data_dir: &Path, n: usize) {
    let hub = plc_did(0);
    let mut edges = String::new();
    for idx in 1..=n {
        let other = plc_did(idx);
        edges.push_str(&format!("{hub},{other}\n{other},{hub}\n"));
    }
    let edges_file = dir.join("follows.csv");
    std::fs::write(&edges_file, edges).unwrap();
    util::run_ok(util::starling([
        "import-follows".as_ref(),
        edges_file.as_os_str(),
        "--data-dir".as_ref(),
        data_dir.as_os_str(),
    ]));
}

/// What the flood of expensive queries got back.
#[derive(Default)]
struct FloodAnswers {
    /// 200s, each checked to hold every mutual.
    complete: usize,
    /// 503s, each checked to say why.
    shed: usize,
}

// Checks the bound on expensive queries: 24 clients ask `mutuals?limit=100000` of a hub with
// 20,000 mutual follows (every answer is ~900 KB of DIDs) as fast as they can against a bound of
// 2; meanwhile `/livez` and a cheap read (`/v1/graph/follows`) are asked in a loop. Every
// expensive answer is either complete (all 20,000 mutuals, counted from the imported file) or a
// 503 with `Retry-After` saying the bound was hit, at least one is a 503, `/metrics` counts
// exactly the 503s the clients saw, and no probe or cheap read is ever refused. Time is never
// asserted; the cheap reads' slowest answer is printed.
#[test]
fn a_flood_of_expensive_queries_is_shed_while_probes_and_cheap_reads_answer() {
    const N_MUTUALS: usize = 20_000;
    let dir = util::test_dir();
    let hub = plc_did(0);
    let data_dir = dir.path().join("data");
    import_star(dir.path(), &data_dir, N_MUTUALS);
    let mut args: Vec<OsString> = ["serve", "--data-dir"].map(OsString::from).to_vec();
    args.push(data_dir.into_os_string());
    for arg in [
        "--http-addr",
        "127.0.0.1:0",
        "--http-expensive-queries-max",
        "2",
    ] {
        args.push(arg.into());
    }
    let mut serve = Proc::spawn(util::starling(&args), "serve");
    let addr = serve.wait_for_stdout("starling: http listening on ", DEADLINE);

    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mutuals = format!("/v1/graph/mutuals?actor={hub}&limit=100000");
    let clients: Vec<_> = (0..24)
        .map(|_| {
            let (addr, path, stop) = (addr.clone(), mutuals.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut answers = FloodAnswers::default();
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    // The body is not parsed: a client parsing 900 KB of JSON is slower than
                    // the server making it, and the flood would not be one.
                    match util::http_get(&addr, &path).unwrap() {
                        (200, body) => {
                            let count = format!(r#"{{"count":{N_MUTUALS},"dids":["did:plc:"#);
                            assert!(body.starts_with(&count), "{}", &body[..100]);
                            assert_eq!(body.matches("did:plc:").count(), N_MUTUALS);
                            answers.complete += 1;
                        }
                        (503, body) => {
                            assert!(body.contains("too many expensive queries"), "{body}");
                            answers.shed += 1;
                        }
                        (status, body) => panic!("HTTP {status}: {body}"),
                    }
                }
                answers
            })
        })
        .collect();
    let cheap = format!("/v1/graph/follows?actor={}&subject={hub}", plc_did(7));
    let mut slowest = Duration::ZERO;
    let mut n_cheap = 0;
    let shed_seen = util::poll_until(DEADLINE, "a query to be shed", || {
        for path in ["/livez", cheap.as_str()] {
            let started = std::time::Instant::now();
            let (status, body) = get_json(&addr, path)?;
            slowest = slowest.max(started.elapsed());
            n_cheap += 1;
            assert_eq!(status, 200, "{path} during the flood: {body}");
            assert!(
                body["status"] == "alive" || body["follows"] == true,
                "{path}: {body}"
            );
        }
        let metrics = util::http_get(&addr, "/metrics")
            .map_err(|err| err.to_string())?
            .1;
        match shed_count(&metrics) {
            n if n > 0 && n_cheap >= 20 => Ok(n),
            n => Err(format!("{n} shed, {n_cheap} cheap reads so far")),
        }
    });
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let mut answers = FloodAnswers::default();
    for client in clients {
        let seen = client.join().unwrap();
        answers.complete += seen.complete;
        answers.shed += seen.shed;
    }
    eprintln!(
        "flood: {} complete, {} shed; {n_cheap} probes and cheap reads, slowest {slowest:?}",
        answers.complete, answers.shed
    );
    assert!(answers.shed >= shed_seen && answers.complete > 0);
    let metrics = util::http_get(&addr, "/metrics").unwrap().1;
    assert_eq!(shed_count(&metrics), answers.shed, "{metrics}");
    serve.terminate();
    assert!(
        serve.wait_exit(DEADLINE).success(),
        "{}",
        serve.output_so_far()
    );
}

/// `starling_http_shed_total{reason="busy"}` in a `/metrics` text; 0 when absent.
fn shed_count(metrics: &str) -> usize {
    metrics
        .lines()
        .find_map(|line| line.strip_prefix(r#"starling_http_shed_total{reason="busy"} "#))
        .map_or(0, |value| value.trim().parse().unwrap())
}
