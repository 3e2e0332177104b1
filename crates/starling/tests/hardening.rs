//! `starling serve` and `replay` under hostile input and a failing host: events nested deep
//! enough to overflow a parser's stack, events dated far in the future, a Jetstream that goes
//! silent, and writes that fail. Each test compares against a replay of the same events.

// Test code: a panic is the failure report.
#![allow(clippy::unwrap_used, clippy::indexing_slicing)]

mod util;

use std::ffi::OsString;
use std::path::Path;
use std::time::Duration;

use util::{Event, FakeJetstream, Proc};

/// How long the service gets to reach a state before the test fails.
const DEADLINE: Duration = Duration::from_secs(60);

/// `time_us` of 9999-12-31T23:59:59Z: the far future.
const FAR_FUTURE_US: u64 = 253_402_300_799_000_000;

/// An event like `template` (a commit) with `depth` levels of arrays in its record.
fn nested_event(template: &Event, depth: usize) -> Event {
    let nested = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
    let line = template.line.replacen(
        r#""record":{"#,
        &format!(r#""record":{{"nested":{nested},"#),
        1,
    );
    assert_ne!(line, template.line, "the template has no record");
    Event {
        time_us: template.time_us,
        line,
    }
}

/// A sample network with two events nested 13,000 and 64,000 deep in the middle (each a copy of
/// an event that stays in the stream) and one dated in the far future at the end.
fn hostile_stream(dir: &Path, seed: u64) -> Vec<Event> {
    let mut events = util::events_of(util::sample(&dir.join("sample.jsonl"), 60, seed));
    assert!(events.len() > 500, "too few events: {}", events.len());
    let commit_idx = (events.len() / 2..events.len())
        .find(|&idx| events[idx].line.contains(r#""record":{"#))
        .unwrap();
    let template = events[commit_idx].clone();
    for depth in [13_000, 64_000] {
        events.insert(commit_idx, nested_event(&template, depth));
    }
    let mut future = events.last().unwrap().clone();
    future.line = future.line.replacen(
        &format!("\"time_us\":{}", future.time_us),
        &format!("\"time_us\":{FAR_FUTURE_US}"),
        1,
    );
    future.time_us = FAR_FUTURE_US;
    events.push(future);
    events
}

/// `serve --data-dir DIR --jetstream URL --http-addr 127.0.0.1:0` plus `extra`.
fn serve(data_dir: &Path, url: &str, extra: &[&str]) -> (Proc, String) {
    let mut args: Vec<OsString> = ["serve", "--data-dir"].map(OsString::from).to_vec();
    args.push(data_dir.as_os_str().to_owned());
    args.extend(["--jetstream", url, "--http-addr", "127.0.0.1:0"].map(OsString::from));
    args.extend(extra.iter().map(OsString::from));
    let child = Proc::spawn(util::starling(&args), "serve");
    let addr = child.wait_for_stdout("starling: http listening on ", Duration::from_secs(30));
    (child, addr)
}

/// Polls until the served `/v1/stats` equal `reference`.
fn wait_for_stats(child: &mut Proc, addr: &str, reference: &serde_json::Value) {
    util::poll_until(
        DEADLINE,
        "/v1/stats to equal the replayed reference",
        || {
            child.assert_healthy();
            let stats = util::store_stats(addr)?;
            if &stats == reference {
                Ok(())
            } else {
                Err(format!("\n  live:      {stats}\n  reference: {reference}"))
            }
        },
    );
}

// Checks that hostile events are counted drops, live and in replay: two events nested 13,000 and
// 64,000 deep (which once overflowed the decoding thread's stack and killed the process on every
// restart) and one dated in the year 9999 (which once fixed the stored cursor there). How: the
// stream is replayed from a file, then served by a loopback Jetstream; both must finish, count
// two `too_deep` and one `future_time` drops, store every other event (stats equal between the
// two and the cursor that of the last real event), and serve must stay up with its queue gauge
// back at 0.
#[test]
fn nested_and_future_events_are_counted_drops_live_and_in_replay() {
    let seed = util::seed("nested_and_future_events_are_counted_drops_live_and_in_replay");
    let dir = util::test_dir();
    let events = hostile_stream(dir.path(), seed);
    let events_file = dir.path().join("events.jsonl");
    util::write_events(&events_file, &events);
    let last_real_time_us = events[events.len() - 2].time_us;

    let reference_dir = dir.path().join("reference");
    util::replay(&events_file, &reference_dir);
    let reference = util::stats(&reference_dir);
    assert_eq!(reference["dropped"]["too_deep"], 2, "{reference}");
    assert_eq!(reference["dropped"]["future_time"], 1, "{reference}");
    assert_eq!(reference["cursor"], last_real_time_us, "{reference}");
    assert!(reference["posts"].as_u64().unwrap() > 0, "{reference}");

    let server = FakeJetstream::start(events.clone(), None, None);
    let data_dir = dir.path().join("live");
    let (mut child, addr) = serve(&data_dir, &server.url(), &[]);
    wait_for_stats(&mut child, &addr, &reference);
    let (status, metrics) = util::http_get(&addr, "/metrics").unwrap();
    assert_eq!(status, 200);
    assert_eq!(
        util::metric(&metrics, "starling_ingest_queue_depth"),
        Some(0.0),
        "the queue gauge is not back at 0:\n{metrics}"
    );
    assert_eq!(util::http_get(&addr, "/health").unwrap().0, 200);
    let connections = server.connections();
    assert!(
        connections
            .iter()
            .all(|conn| conn.cursor.is_none_or(|c| c < FAR_FUTURE_US)),
        "asked Jetstream for the future: {connections:?}"
    );
    child.terminate();
    let status = child.wait_exit(Duration::from_secs(30));
    assert!(
        status.success(),
        "serve exited with {status}\n{}",
        child.output_so_far()
    );
    assert_eq!(util::stats(&data_dir), reference);
}

// Checks the read watchdog: a Jetstream that accepts the websocket and then says nothing, nor
// answers pings, is left after `jetstream.read_timeout_secs`, counted in
// `starling_ingest_stalled_connections_total`, and the next connection's events are ingested.
// How: the stand-in's first connection sends no event and never reads (so pongs never come);
// with a 1 s timeout, `/v1/stats` must reach the replayed reference long before the deadline
// (without the watchdog the service waits on the silent socket forever).
#[test]
fn a_silent_jetstream_is_left_for_the_next_connection() {
    let seed = util::seed("a_silent_jetstream_is_left_for_the_next_connection");
    let dir = util::test_dir();
    let events = util::events_of(util::sample(&dir.path().join("sample.jsonl"), 40, seed));
    let events_file = dir.path().join("events.jsonl");
    util::write_events(&events_file, &events);
    let reference_dir = dir.path().join("reference");
    util::replay(&events_file, &reference_dir);
    let reference = util::stats(&reference_dir);
    assert!(reference["posts"].as_u64().unwrap() > 0, "{reference}");

    let config = dir.path().join("starling.toml");
    std::fs::write(&config, "[jetstream]\nread_timeout_secs = 1\n").unwrap();
    let server = FakeJetstream::start(events, None, Some(0));
    let data_dir = dir.path().join("live");
    let config_arg = config.to_str().unwrap();
    let (mut child, addr) = serve(&data_dir, &server.url(), &["--config", config_arg]);
    wait_for_stats(&mut child, &addr, &reference);
    let connections = server.connections();
    assert!(connections.len() >= 2, "no reconnect: {connections:?}");
    assert_eq!(connections[0].sent, 0, "{connections:?}");
    let (_, metrics) = util::http_get(&addr, "/metrics").unwrap();
    let stalls = util::metric(&metrics, "starling_ingest_stalled_connections_total");
    assert!(
        stalls.is_some_and(|n| n >= 1.0),
        "stalls not counted:\n{metrics}"
    );
    child.terminate();
    let status = child.wait_exit(Duration::from_secs(30));
    assert!(
        status.success(),
        "serve exited with {status}\n{}",
        child.output_so_far()
    );
}

/// Whether this host lets a test mount a tmpfs in a mount namespace of its own (`unshare -Urm`,
/// unprivileged user namespaces). On CI it must.
fn can_mount_tmpfs() -> bool {
    let ok = std::process::Command::new("unshare")
        .args(["-Urm", "sh", "-c", "mount -t tmpfs -o size=1m tmpfs /mnt"])
        .output()
        .is_ok_and(|out| out.status.success());
    if !ok {
        let message = "this test needs `unshare -Urm` and a tmpfs mount in it";
        assert!(std::env::var("CI").as_deref() != Ok("true"), "{message}");
        eprintln!("skipping: {message}");
    }
    ok
}

// Checks that a full disk stops `serve` with a non-zero exit and a clear message, instead of the
// hang it once caused (a graceful shutdown waiting forever on the storage engine's dead flush
// worker), and that a restart on a freed disk ends equal to a replay. How: `serve` runs with its
// data directory on a 2 MiB tmpfs (in a mount namespace of its own) against a loopback Jetstream
// sending ~3 MB of events; when it exits, its data directory is copied out of the tmpfs, and a
// second `serve` on the copy must reach the replayed reference.
#[test]
fn a_full_disk_stops_serve_and_a_restart_recovers() {
    if !can_mount_tmpfs() {
        return;
    }
    let seed = util::seed("a_full_disk_stops_serve_and_a_restart_recovers");
    let dir = util::test_dir();
    let events = util::events_of(util::sample(&dir.path().join("sample.jsonl"), 300, seed));
    let events_file = dir.path().join("events.jsonl");
    util::write_events(&events_file, &events);
    assert!(std::fs::metadata(&events_file).unwrap().len() > 2_500_000);
    let reference_dir = dir.path().join("reference");
    util::replay(&events_file, &reference_dir);
    let reference = util::stats(&reference_dir);

    let server = FakeJetstream::start(events, None, None);
    let mount = dir.path().join("tmpfs");
    let freed = dir.path().join("freed");
    std::fs::create_dir_all(&mount).unwrap();
    std::fs::create_dir_all(&freed).unwrap();
    // The data directory is copied out whatever the exit; the script exits as `serve` did.
    let script = r#"mount -t tmpfs -o size=2m tmpfs "$1" || exit 90
"$2" serve --data-dir "$1" --jetstream "$3" --http-addr 127.0.0.1:0
status=$?
cp -a "$1"/. "$4"/ || exit 91
exit $status"#;
    let mut cmd = std::process::Command::new("unshare");
    cmd.args(["-Urm", "sh", "-c", script, "sh"]);
    cmd.arg(&mount)
        .arg(util::bin())
        .arg(server.url())
        .arg(&freed);
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("STARLING_") {
            cmd.env_remove(key);
        }
    }
    let started = std::time::Instant::now();
    let mut child = Proc::spawn(cmd, "serve on a full disk");
    let status = child.wait_exit(DEADLINE);
    eprintln!("serve on a full disk exited after {:?}", started.elapsed());
    let output = child.output_so_far();
    assert_eq!(status.code(), Some(1), "exit {status}\n{output}");
    assert!(
        output.contains("starling: error: ingest stopped") && output.contains("No space left"),
        "no clear error:\n{output}"
    );

    let (mut child, addr) = serve(&freed, &server.url(), &[]);
    wait_for_stats(&mut child, &addr, &reference);
    child.terminate();
    let status = child.wait_exit(Duration::from_secs(30));
    assert!(
        status.success(),
        "serve exited with {status}\n{}",
        child.output_so_far()
    );
}
