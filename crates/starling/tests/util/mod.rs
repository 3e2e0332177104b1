//! Helpers shared by the `starling` binary's integration tests: a fresh directory per test, the
//! binary as a child process whose output is read line by line in threads, a tiny HTTP client,
//! polling with a deadline, seeded randomness, and a stand-in Jetstream websocket server on
//! loopback.

// Each test crate (`crash.rs`, `live.rs`, `cli.rs`) uses a different subset of these helpers.
#![allow(dead_code)]
// Test code: a panic is the failure report.
#![allow(clippy::unwrap_used, clippy::indexing_slicing)]

use std::collections::HashMap;
use std::ffi::OsStr;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, ExitStatus, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender, channel};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::handshake::server::{Request, Response};

/// The `starling` binary under test.
pub fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_starling")
}

/// A fresh directory for one test, removed when dropped.
pub fn test_dir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("starling-test-")
        .tempdir()
        .unwrap()
}

/// A `starling` command with the caller's `STARLING_*` variables removed, so a developer's
/// environment cannot change what a test sees.
pub fn starling<I, S>(args: I) -> Command
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let mut cmd = Command::new(bin());
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("STARLING_") {
            cmd.env_remove(key);
        }
    }
    cmd.args(args);
    cmd
}

/// What a finished command printed.
#[derive(Debug)]
pub struct Finished {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

/// Runs a command to completion and captures its output.
pub fn run(mut cmd: Command) -> Finished {
    let out = cmd.stdin(Stdio::null()).output().unwrap();
    Finished {
        status: out.status,
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// Runs a command that must succeed; returns its standard output.
#[track_caller]
pub fn run_ok(cmd: Command) -> String {
    let shown = format!("{cmd:?}");
    let out = run(cmd);
    assert!(
        out.status.success(),
        "{shown} failed: {}\nstderr:\n{}",
        out.status,
        out.stderr
    );
    out.stdout
}

/// `starling sample` into `out`; returns the events as lines.
#[track_caller]
pub fn sample(out: &Path, actors: u32, seed: u64) -> Vec<String> {
    let actors = actors.to_string();
    let seed = seed.to_string();
    run_ok(starling([
        OsStr::new("sample"),
        OsStr::new("--out"),
        out.as_os_str(),
        OsStr::new("--actors"),
        OsStr::new(&actors),
        OsStr::new("--seed"),
        OsStr::new(&seed),
    ]));
    let text = std::fs::read_to_string(out).unwrap();
    text.lines()
        .filter(|line| !line.trim().is_empty())
        .map(str::to_owned)
        .collect()
}

/// `starling replay FILE --data-dir DIR` to completion.
#[track_caller]
pub fn replay(file: &Path, data_dir: &Path) {
    run_ok(starling([
        OsStr::new("replay"),
        file.as_os_str(),
        OsStr::new("--data-dir"),
        data_dir.as_os_str(),
    ]));
}

/// `starling stats --data-dir DIR --json`, parsed.
#[track_caller]
pub fn stats(data_dir: &Path) -> serde_json::Value {
    let stdout = run_ok(starling([
        OsStr::new("stats"),
        OsStr::new("--data-dir"),
        data_dir.as_os_str(),
        OsStr::new("--json"),
    ]));
    let mut lines = stdout.lines();
    let first = lines.next().unwrap_or_default();
    assert_eq!(
        lines.next(),
        None,
        "stats printed more than one line:\n{stdout}"
    );
    serde_json::from_str(first).unwrap()
}

/// The bytes of the files under `dir`, recursively; 0 if it does not exist. Files may vanish
/// while it counts (the store compacts), which counts them as empty.
pub fn dir_size(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|entry| match entry.file_type() {
            Ok(kind) if kind.is_dir() => dir_size(&entry.path()),
            Ok(_) => entry.metadata().map_or(0, |meta| meta.len()),
            Err(_) => 0,
        })
        .sum()
}

/// A running child process whose stdout and stderr are read line by line by two threads.
pub struct Proc {
    child: Child,
    name: String,
    stdout_rx: Receiver<String>,
    stderr_rx: Receiver<String>,
    stdout: Arc<Mutex<Vec<String>>>,
    stderr: Arc<Mutex<Vec<String>>>,
}

fn read_lines<R: Read>(reader: R, keep: Arc<Mutex<Vec<String>>>, tx: Option<Sender<String>>) {
    let mut reader = BufReader::new(reader);
    let mut buf = Vec::new();
    loop {
        buf.clear();
        match reader.read_until(b'\n', &mut buf) {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        let line = String::from_utf8_lossy(&buf)
            .trim_end_matches(['\n', '\r'])
            .to_owned();
        keep.lock().unwrap().push(line.clone());
        if let Some(tx) = &tx {
            let _ = tx.send(line);
        }
    }
}

impl Proc {
    /// Starts `cmd` with piped output.
    pub fn spawn(mut cmd: Command, name: &str) -> Proc {
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|err| panic!("starting {cmd:?}: {err}"));
        let stdout = Arc::new(Mutex::new(Vec::new()));
        let stderr = Arc::new(Mutex::new(Vec::new()));
        let (tx, stdout_rx) = channel();
        let out: ChildStdout = child.stdout.take().unwrap();
        let keep = stdout.clone();
        std::thread::spawn(move || read_lines(out, keep, Some(tx)));
        let (tx, stderr_rx) = channel();
        let err = child.stderr.take().unwrap();
        let keep = stderr.clone();
        std::thread::spawn(move || read_lines(err, keep, Some(tx)));
        Proc {
            child,
            name: name.to_owned(),
            stdout_rx,
            stderr_rx,
            stdout,
            stderr,
        }
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The stderr lines read so far.
    pub fn stderr_lines(&self) -> Vec<String> {
        self.stderr.lock().unwrap().clone()
    }

    /// The output read so far, for failure messages.
    pub fn output_so_far(&self) -> String {
        format!(
            "--- {} stdout:\n{}\n--- {} stderr:\n{}",
            self.name,
            self.stdout.lock().unwrap().join("\n"),
            self.name,
            self.stderr.lock().unwrap().join("\n")
        )
    }

    /// Waits for a stdout line that starts with `prefix` and returns the rest of it.
    #[track_caller]
    pub fn wait_for_stdout(&self, prefix: &str, timeout: Duration) -> String {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.stdout_rx.recv_timeout(left) {
                Ok(line) => {
                    if let Some(rest) = line.strip_prefix(prefix) {
                        return rest.to_owned();
                    }
                }
                Err(RecvTimeoutError::Timeout) => {
                    panic!(
                        "no stdout line `{prefix}...` within {timeout:?}\n{}",
                        self.output_so_far()
                    )
                }
                Err(RecvTimeoutError::Disconnected) => {
                    panic!(
                        "{} closed stdout before printing `{prefix}...`\n{}",
                        self.name,
                        self.output_so_far()
                    )
                }
            }
        }
    }

    /// Waits for the next stderr line; `None` if stderr closes or `timeout` passes first.
    pub fn next_stderr_line(&self, timeout: Duration) -> Option<String> {
        self.stderr_rx.recv_timeout(timeout).ok()
    }

    /// Fails at once, with the output so far, if the process has exited or a thread of it has
    /// panicked: a service whose ingest thread died may otherwise keep answering HTTP.
    #[track_caller]
    pub fn assert_healthy(&mut self) {
        let panicked = self
            .stderr
            .lock()
            .unwrap()
            .iter()
            .any(|line| line.contains("panicked at"));
        let exited = self.try_wait();
        assert!(
            !panicked && exited.is_none(),
            "{} {}\n{}",
            self.name,
            if panicked {
                "panicked".to_owned()
            } else {
                format!("exited: {exited:?}")
            },
            self.output_so_far()
        );
    }

    /// Whether the process has exited, without waiting.
    pub fn try_wait(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().unwrap()
    }

    /// Lets the process run until `until`; returns its exit status if it exited before then.
    /// The deadline is a chosen crash point, not a synchronization: nothing waits for it.
    pub fn run_until(&mut self, until: Instant) -> Option<ExitStatus> {
        loop {
            if let Some(status) = self.try_wait() {
                return Some(status);
            }
            let now = Instant::now();
            if now >= until {
                return None;
            }
            std::thread::sleep((until - now).min(Duration::from_millis(2)));
        }
    }

    /// `kill -9` (std's `Child::kill` sends SIGKILL on Unix) and reaps the process.
    pub fn kill9(&mut self) -> ExitStatus {
        let _ = self.child.kill();
        self.child.wait().unwrap()
    }

    /// Sends SIGTERM, as an orchestrator stopping the service would.
    #[track_caller]
    pub fn terminate(&self) {
        let status = Command::new("kill")
            .arg("-TERM")
            .arg(self.pid().to_string())
            .status()
            .unwrap();
        assert!(
            status.success(),
            "kill -TERM {} failed: {status}",
            self.pid()
        );
    }

    /// Waits for the process to exit, polling until `timeout`; kills it and fails after that.
    #[track_caller]
    pub fn wait_exit(&mut self, timeout: Duration) -> ExitStatus {
        let deadline = Instant::now() + timeout;
        if let Some(status) = self.run_until(deadline) {
            return status;
        }
        self.kill9();
        panic!(
            "{} did not exit within {timeout:?}\n{}",
            self.name,
            self.output_so_far()
        );
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        // A failed test must not leave a process behind.
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Polls `check` until it returns `Ok` or `timeout` passes; on timeout fails with the last
/// `Err`, which should describe what was seen.
#[track_caller]
pub fn poll_until<T>(
    timeout: Duration,
    what: &str,
    mut check: impl FnMut() -> Result<T, String>,
) -> T {
    let deadline = Instant::now() + timeout;
    let mut interval = Duration::from_millis(5);
    loop {
        match check() {
            Ok(value) => return value,
            Err(last) if Instant::now() >= deadline => {
                panic!("timed out after {timeout:?} waiting for {what}; last seen: {last}")
            }
            Err(_) => {}
        }
        std::thread::sleep(interval);
        interval = (interval * 2).min(Duration::from_millis(100));
    }
}

/// The value of the metric line `name` (with its labels, if any) in Prometheus text.
pub fn metric(text: &str, name: &str) -> Option<f64> {
    text.lines().find_map(|line| {
        line.strip_prefix(name)?
            .strip_prefix(' ')?
            .trim()
            .parse()
            .ok()
    })
}

/// A plain HTTP/1.1 GET; returns the status code and the body.
pub fn http_get(addr: &str, path: &str) -> std::io::Result<(u16, String)> {
    let mut stream = TcpStream::connect(addr)?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )?;
    let mut response = Vec::new();
    stream.read_to_end(&mut response)?;
    let text = String::from_utf8_lossy(&response);
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("bad response: {head}")))?;
    if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        return Err(std::io::Error::other(
            "chunked responses are not supported by this client",
        ));
    }
    Ok((status, body.to_owned()))
}

/// A plain HTTP/1.1 GET with extra request headers; returns the status code and the body,
/// decoded when the server streams it with `Transfer-Encoding: chunked` (as Express may).
pub fn http_get_with(
    addr: &str,
    path: &str,
    headers: &[(&str, &str)],
) -> std::io::Result<(u16, String)> {
    let mut stream = TcpStream::connect(addr)?;
    stream.set_read_timeout(Some(Duration::from_secs(30)))?;
    let mut request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("\r\n");
    stream.write_all(request.as_bytes())?;
    let mut response = Vec::new();
    stream.read_to_end(&mut response)?;
    let split = response
        .windows(4)
        .position(|window| window == b"\r\n\r\n")
        .ok_or_else(|| std::io::Error::other("response has no end of headers"))?;
    let head = String::from_utf8_lossy(&response[..split]).to_ascii_lowercase();
    let body = &response[split + 4..];
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("bad response: {head}")))?;
    let body = if head.contains("transfer-encoding: chunked") {
        dechunk(body)?
    } else {
        body.to_vec()
    };
    Ok((status, String::from_utf8_lossy(&body).into_owned()))
}

/// The payload of a chunked HTTP/1.1 body: `SIZE-IN-HEX[;ext]\r\nDATA\r\n`, ending with a
/// zero-size chunk (trailers, if any, are dropped).
fn dechunk(mut body: &[u8]) -> std::io::Result<Vec<u8>> {
    let bad = |what: &str| std::io::Error::other(format!("bad chunked body: {what}"));
    let mut res = Vec::new();
    loop {
        let line_end = body
            .windows(2)
            .position(|window| window == b"\r\n")
            .ok_or_else(|| bad("no chunk size line"))?;
        let line = String::from_utf8_lossy(&body[..line_end]);
        let size_hex = line.split(';').next().unwrap_or_default().trim();
        let size = usize::from_str_radix(size_hex, 16).map_err(|_| bad(&line))?;
        body = &body[line_end + 2..];
        if size == 0 {
            return Ok(res);
        }
        if body.len() < size + 2 {
            return Err(bad("chunk shorter than its size"));
        }
        res.extend_from_slice(&body[..size]);
        body = &body[size + 2..];
    }
}

/// GET `path` and parse the body as JSON, or describe why not.
pub fn http_json(addr: &str, path: &str) -> Result<serde_json::Value, String> {
    match http_get(addr, path) {
        Ok((200, body)) => serde_json::from_str(&body).map_err(|err| format!("{err}: {body}")),
        Ok((status, body)) => Err(format!("HTTP {status}: {body}")),
        Err(err) => Err(err.to_string()),
    }
}

/// `/v1/stats` without its `timelines` part: what `starling stats --json` prints.
pub fn store_stats(addr: &str) -> Result<serde_json::Value, String> {
    let mut stats = http_json(addr, "/v1/stats")?;
    if let Some(object) = stats.as_object_mut() {
        object.remove("timelines");
    }
    Ok(stats)
}

/// The seed of a randomized test: `STARLING_TEST_SEED` if set, otherwise new each run.
/// Printed, so a failure can be reproduced.
pub fn seed(test: &str) -> u64 {
    let seed = match std::env::var("STARLING_TEST_SEED") {
        Ok(text) => text
            .parse()
            .unwrap_or_else(|_| panic!("STARLING_TEST_SEED={text} is not a u64")),
        Err(_) => {
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos();
            (nanos as u64) ^ u64::from(std::process::id()).rotate_left(32)
        }
    };
    eprintln!("{test}: seed {seed} (rerun with STARLING_TEST_SEED={seed})");
    seed
}

/// A small seeded generator (SplitMix64): enough for choosing crash points and positions.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `lo..hi` (`hi > lo`).
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        assert!(hi > lo, "empty range {lo}..{hi}");
        lo + self.next_u64() % (hi - lo)
    }
}

/// `../shared/data` next to the repository, if present. The tests that need it print why they
/// skip when it is absent, and fail instead when `CI=true`.
pub fn shared_data() -> Option<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/data");
    if dir.join("jetstream").is_dir() {
        return Some(dir);
    }
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "this test needs ../shared/data (looked in {}), and CI=true",
        dir.display()
    );
    eprintln!(
        "skipping: this test needs ../shared/data (looked in {})",
        dir.display()
    );
    None
}

/// An event line and its `time_us`.
#[derive(Clone, Debug)]
pub struct Event {
    pub time_us: u64,
    pub line: String,
}

/// Parses `time_us` out of each line.
pub fn events_of(lines: impl IntoIterator<Item = String>) -> Vec<Event> {
    lines
        .into_iter()
        .map(|line| {
            let value: serde_json::Value = serde_json::from_str(&line).unwrap();
            let time_us = value["time_us"].as_u64().unwrap();
            Event { time_us, line }
        })
        .collect()
}

/// The non-empty lines of a file.
pub fn read_lines_of(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .filter(|line| !line.trim().is_empty())
        .map(str::to_owned)
        .collect()
}

/// Writes events as JSON lines.
pub fn write_events(path: &Path, events: &[Event]) {
    let mut text = String::new();
    for event in events {
        text.push_str(&event.line);
        text.push('\n');
    }
    std::fs::write(path, text).unwrap();
}

/// What one websocket connection to the stand-in Jetstream asked for and got.
#[derive(Clone, Debug, Default)]
pub struct Connection {
    /// The request path and query.
    pub uri: String,
    /// The `cursor` query parameter.
    pub cursor: Option<u64>,
    /// Whether `compress=true` was asked for.
    pub compress: bool,
    /// Events sent on this connection.
    pub sent: usize,
    /// The `time_us` of the last event sent.
    pub last_time_us: Option<u64>,
}

struct Shared {
    events: Vec<Event>,
    dictionary: Option<Vec<u8>>,
    first_connection_events: Option<usize>,
    connections: Mutex<Vec<Connection>>,
    drop_first: tokio::sync::watch::Sender<bool>,
}

/// A stand-in Jetstream on loopback: serves `events` (sorted by `time_us`) to every connection
/// from its `cursor` on (all of them without one), as text, or zstd-compressed with the
/// dictionary when the client asks for `compress=true`. Then it holds the connection open.
///
/// With `first_connection_events = Some(n)`, the first connection gets `n` events and then waits
/// for [`FakeJetstream::drop_first_connection`], which resets it (no close frame).
pub struct FakeJetstream {
    addr: SocketAddr,
    shared: Arc<Shared>,
    // Dropped last: stops the server's tasks.
    runtime: tokio::runtime::Runtime,
}

impl FakeJetstream {
    pub fn start(
        events: Vec<Event>,
        dictionary: Option<Vec<u8>>,
        first_connection_events: Option<usize>,
    ) -> FakeJetstream {
        assert!(
            events.windows(2).all(|w| w[0].time_us <= w[1].time_us),
            "events must be sorted"
        );
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .unwrap();
        let addr = listener.local_addr().unwrap();
        let (drop_first, _) = tokio::sync::watch::channel(false);
        let shared = Arc::new(Shared {
            events,
            dictionary,
            first_connection_events,
            connections: Mutex::new(Vec::new()),
            drop_first,
        });
        let accept_shared = shared.clone();
        runtime.spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let shared = accept_shared.clone();
                tokio::spawn(async move {
                    if let Err(err) = serve_connection(stream, &shared).await {
                        eprintln!("fake jetstream: connection ended: {err}");
                    }
                });
            }
        });
        FakeJetstream {
            addr,
            shared,
            runtime,
        }
    }

    /// The `/subscribe` URL.
    pub fn url(&self) -> String {
        format!("ws://{}/subscribe", self.addr)
    }

    /// The connections so far, in order.
    pub fn connections(&self) -> Vec<Connection> {
        self.shared.connections.lock().unwrap().clone()
    }

    /// Resets the first connection once it has sent its events.
    pub fn drop_first_connection(&self) {
        self.shared.drop_first.send_replace(true);
    }
}

fn query_params(uri: &str) -> HashMap<String, Vec<String>> {
    let mut params: HashMap<String, Vec<String>> = HashMap::new();
    let query = uri.split_once('?').map_or("", |(_, query)| query);
    for pair in query.split('&').filter(|pair| !pair.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        params
            .entry(key.to_owned())
            .or_default()
            .push(value.to_owned());
    }
    params
}

// The handshake callback's error type is tungstenite's, however large.
#[allow(clippy::result_large_err)]
async fn serve_connection(
    stream: tokio::net::TcpStream,
    shared: &Shared,
) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let uri = Arc::new(Mutex::new(String::new()));
    let seen = uri.clone();
    let mut socket =
        tokio_tungstenite::accept_hdr_async(stream, move |req: &Request, resp: Response| {
            *seen.lock().unwrap() = req.uri().to_string();
            Ok(resp)
        })
        .await?;
    let uri = uri.lock().unwrap().clone();
    let params = query_params(&uri);
    let cursor = match params.get("cursor").and_then(|values| values.first()) {
        Some(text) => Some(text.parse::<u64>()?),
        None => None,
    };
    let compress = params
        .get("compress")
        .is_some_and(|values| values.iter().any(|v| v == "true"));
    let index = {
        let mut connections = shared.connections.lock().unwrap();
        connections.push(Connection {
            uri,
            cursor,
            compress,
            ..Connection::default()
        });
        connections.len() - 1
    };
    let limit = match (index, shared.first_connection_events) {
        (0, Some(n)) => n,
        _ => usize::MAX,
    };
    let mut compressor = match (&shared.dictionary, compress) {
        (Some(dictionary), true) => Some(zstd::bulk::Compressor::with_dictionary(3, dictionary)?),
        (None, true) => {
            return Err("client asked for compress=true but no dictionary is loaded".into());
        }
        _ => None,
    };
    let start = shared
        .events
        .partition_point(|event| cursor.is_some_and(|c| event.time_us < c));
    for event in shared.events.iter().skip(start).take(limit) {
        let message = match &mut compressor {
            Some(compressor) => Message::binary(compressor.compress(event.line.as_bytes())?),
            None => Message::text(event.line.clone()),
        };
        socket.send(message).await?;
        let mut connections = shared.connections.lock().unwrap();
        let connection = &mut connections[index];
        connection.sent += 1;
        connection.last_time_us = Some(event.time_us);
    }
    if limit != usize::MAX {
        let mut drop_first = shared.drop_first.subscribe();
        let _ = drop_first.wait_for(|drop| *drop).await;
        // Abruptly: a TCP reset, no close frame.
        socket.get_ref().set_zero_linger()?;
        drop(socket);
        return Ok(());
    }
    // Like Jetstream, keep the connection open; answer until the client goes away.
    while let Some(message) = socket.next().await {
        message?;
    }
    Ok(())
}

/// Runs `starling ARGS` with `env` and checks that it fails with exit code 1 and exactly one
/// stderr line, `starling: error: ...`, containing every string of `expected`.
#[track_caller]
pub fn check_error(args: &[&dyn AsRef<std::ffi::OsStr>], env: &[(&str, &str)], expected: &[&str]) {
    let args: Vec<std::ffi::OsString> = args.iter().map(|arg| arg.as_ref().to_owned()).collect();
    let mut cmd = starling(&args);
    cmd.envs(env.iter().copied());
    let out = run(cmd);
    let shown = format!("starling {args:?} with {env:?}");
    assert_eq!(
        out.status.code(),
        Some(1),
        "{shown}: exit {}\n{}",
        out.status,
        out.stderr
    );
    let lines: Vec<&str> = out.stderr.lines().collect();
    assert_eq!(
        lines.len(),
        1,
        "{shown}: not a one-line error:\n{}",
        out.stderr
    );
    assert!(
        lines[0].starts_with("starling: error: "),
        "{shown}: {}",
        lines[0]
    );
    for needle in expected {
        assert!(
            lines[0].contains(needle),
            "{shown}: `{}` does not name `{needle}`",
            lines[0]
        );
    }
    assert_eq!(out.stdout, "", "{shown}: printed to stdout");
}

/// The repository's root directory.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

/// Runs `scripts/setup-appview.sh` (a no-op when the install is current); returns Node 22.
pub fn setup_appview() -> PathBuf {
    let out = run_ok(Command::new(repo_root().join("scripts/setup-appview.sh")));
    let line = out.lines().last().unwrap_or_default();
    let node = line
        .strip_prefix("appview: node ")
        .and_then(|rest| rest.split(' ').next())
        .unwrap_or_else(|| panic!("setup-appview.sh printed no node path: {out}"));
    PathBuf::from(node)
}

/// Runs an inline ES module with Node (`node -e`), `args` after it and `stdin` as its input;
/// its stdout. Fails with its stderr if it exits non-zero.
pub fn node_eval(node: &Path, script: &str, args: &[&std::ffi::OsStr], stdin: &str) -> String {
    let mut child = Command::new(node)
        .args(["--input-type=module", "-e", script])
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = child.stdin.take().unwrap();
    input.write_all(stdin.as_bytes()).unwrap();
    drop(input);
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "node script failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Standard base64 with padding (protobuf's JSON form of bytes).
pub fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .fold(0u32, |acc, &byte| (acc << 8) | u32::from(byte))
            << (8 * (3 - chunk.len()));
        for idx in 0..4 {
            if idx <= chunk.len() {
                out.push(char::from(ALPHABET[((n >> (18 - 6 * idx)) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// The items of a newest-first home timeline that the reference data plane's `getTimeline`
/// shows when it is read in pages of `limit`, as indices into it; `own[i]` says whether item
/// `i` is the reader's own. Of the `limit + 1` newest followed and own items below the
/// cursor, at most `max(min(limit, 10), limit - followed)` own ones are merged in; own items
/// left out of a page are never shown, and when some were left out the page still ends with
/// a cursor.
pub fn reference_timeline_pages(own: &[bool], limit: usize) -> Vec<usize> {
    let mut shown = Vec::new();
    let mut below = 0;
    while below < own.len() {
        let rest = own.get(below..).unwrap_or_default();
        let of_kind = |is_own: bool| {
            (0..rest.len())
                .filter(|&i| rest[i] == is_own)
                .take(limit + 1)
                .collect::<Vec<usize>>()
        };
        let (followed, own_items) = (of_kind(false), of_kind(true));
        let own_max = limit.min(10).max(limit - followed.len().min(limit));
        let mut merged: Vec<usize> = followed
            .iter()
            .chain(own_items.iter().take(own_max))
            .copied()
            .collect();
        merged.sort_unstable();
        let more = merged.len() > limit || own_items.len() > own_max;
        merged.truncate(limit);
        shown.extend(merged.iter().map(|&i| below + i));
        match merged.last() {
            Some(&last) if more => below += last + 1,
            _ => break,
        }
    }
    shown
}
