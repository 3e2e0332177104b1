//! Crash tests: `kill -9` the binary at seeded points, restart it, and compare the final state
//! with a run that was never interrupted.

// Test code: a panic is the failure report.
#![allow(clippy::unwrap_used, clippy::indexing_slicing)]

mod util;

use std::ffi::OsStr;
use std::path::Path;
use std::time::{Duration, Instant};

use util::{Event, FakeJetstream, Proc, Rng};

/// Malformed lines mixed into the stream, with the drop reason each must be counted under.
fn malformed_lines(rng: &mut Rng) -> Vec<(Vec<u8>, &'static str)> {
    let t = 1_725_148_800_000_000 + rng.range(0, 1_000_000);
    vec![
        (br#"{"did":"did:plc:aaaa"#.to_vec(), "bad_json"),
        (
            format!(
                r#"{{"did":"not-a-did","time_us":{t},"kind":"identity","identity":{{"did":"not-a-did","handle":"x.test","seq":1,"time":"2024-09-01T00:00:00Z"}}}}"#
            )
            .into_bytes(),
            "bad_did",
        ),
        (
            format!(r#"{{"did":"did:plc:aaaaaaaaaaaaaaaaaaaaaaaa","time_us":{t},"kind":"bogus"}}"#).into_bytes(),
            "unknown_kind",
        ),
        (
            [
                &br#"{"did":"did:plc:"#[..],
                &[0xff, 0xfe],
                format!(r#"aaaaaaaaaaaaaaaaaaaaaa","time_us":{t},"kind":"identity"}}"#).as_bytes(),
            ]
            .concat(),
            "not_utf8",
        ),
    ]
}

fn replay_cmd(file: &Path, data_dir: &Path, batch_events_max: usize) -> std::process::Command {
    let batch = batch_events_max.to_string();
    util::starling([
        OsStr::new("replay"),
        file.as_os_str(),
        OsStr::new("--data-dir"),
        data_dir.as_os_str(),
        OsStr::new("--batch-events-max"),
        OsStr::new(&batch),
    ])
}

/// The `offset=N` of a "resuming replay" log line, if the run resumed.
fn resumed_offset(stderr: &[String]) -> Option<u64> {
    let line = stderr
        .iter()
        .find(|line| line.contains("resuming replay"))?;
    let rest = &line[line.find("offset=")? + "offset=".len()..];
    rest.split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()
}

// Checks that a replay killed with SIGKILL at seeded random moments and restarted each time
// (it resumes from the offset stored with each batch) ends with exactly the state of an
// uninterrupted replay: every `stats` field, drop counts and cursor included. How: a sample
// stream of tens of thousands of events with malformed lines of four kinds inserted at seeded
// positions; a reference replay into one directory; into another, replay with small batches as a
// child process, kill it a few times after a seeded delay (the crash point), then let the last
// run finish. The drop counts and cursor are also checked against values computed here from the
// input, and the test fails unless some restart actually resumed part-way through the file.
#[test]
fn replay_killed_at_random_points_ends_in_the_uninterrupted_state() {
    const KILLS: usize = 5;
    let seed = util::seed("replay_killed_at_random_points_ends_in_the_uninterrupted_state");
    let mut rng = Rng::new(seed);
    let dir = util::test_dir();
    let started = Instant::now();

    // The input: the sample stream with malformed lines mixed in.
    let lines = util::sample(&dir.path().join("sample.jsonl"), 3000, seed);
    assert!(
        lines.len() > 20_000,
        "the sample stream is too short: {} events",
        lines.len()
    );
    let max_time_us = util::events_of(lines.clone())
        .iter()
        .map(|e| e.time_us)
        .max()
        .unwrap();
    let mut input: Vec<Vec<u8>> = lines.into_iter().map(String::into_bytes).collect();
    let mut expected_dropped = serde_json::Map::new();
    for _ in 0..10 {
        for (line, reason) in malformed_lines(&mut rng) {
            let at = rng.range(0, input.len() as u64 + 1) as usize;
            input.insert(at, line);
            let count = expected_dropped
                .entry(reason)
                .or_insert(serde_json::json!(0));
            *count = serde_json::json!(count.as_u64().unwrap() + 1);
        }
    }
    let file = dir.path().join("events.jsonl");
    let bytes: Vec<u8> = input
        .iter()
        .flat_map(|line| line.iter().copied().chain([b'\n']))
        .collect();
    std::fs::write(&file, &bytes).unwrap();
    let file_len = bytes.len() as u64;

    // The reference: one uninterrupted replay with the default batch size, in a thread, while
    // the crash runs go on.
    let reference_dir = dir.path().join("reference");
    let reference_file = file.clone();
    let reference = std::thread::spawn(move || {
        util::replay(&reference_file, &reference_dir);
        util::stats(&reference_dir)
    });

    // The crash runs: small batches, so there are many commits to land between. The crash
    // point is a seeded delay after the run has started work: for the first run, on an empty
    // store, from its start; for a restart, from its first log line ("resuming replay", printed
    // once the store is open; opening a store after a crash replays its journal, which takes a
    // while in a debug build, and a kill during it would test little).
    let crash_dir = dir.path().join("crashed");
    let mut kills = Vec::new();
    let mut resumed = Vec::new();
    for round in 0..KILLS {
        let mut child = Proc::spawn(replay_cmd(&file, &crash_dir, 500), "replay");
        if round > 0 {
            let _ = child.next_stderr_line(Duration::from_secs(60));
        }
        let delay = Duration::from_millis(rng.range(100, 1_000));
        match child.run_until(Instant::now() + delay) {
            Some(status) => {
                assert!(
                    status.success(),
                    "round {round}: replay failed: {status}\n{}",
                    child.output_so_far()
                );
            }
            None => {
                child.kill9();
                kills.push(delay);
            }
        }
        resumed.extend(resumed_offset(&child.stderr_lines()));
    }
    let mut last = Proc::spawn(replay_cmd(&file, &crash_dir, 500), "replay");
    let status = last.wait_exit(Duration::from_secs(120));
    assert!(
        status.success(),
        "the last replay failed: {status}\n{}",
        last.output_so_far()
    );
    resumed.extend(resumed_offset(&last.stderr_lines()));
    let delay_ms: Vec<u128> = kills.iter().map(Duration::as_millis).collect();
    eprintln!(
        "killed {delay_ms:?} ms after each run started work; resumed from offsets {resumed:?} of {file_len} bytes"
    );

    // The test must have crashed the replay part-way, or it proves nothing.
    assert!(
        !kills.is_empty(),
        "no run was killed before it finished; kill earlier"
    );
    assert!(
        resumed
            .iter()
            .any(|&offset| 0 < offset && offset < file_len),
        "no restart resumed part-way through the file (offsets {resumed:?} of {file_len})"
    );

    let reference = reference.join().unwrap();
    assert_eq!(
        reference["dropped"],
        serde_json::Value::Object(expected_dropped),
        "{reference}"
    );
    assert_eq!(reference["cursor"], max_time_us, "{reference}");
    assert_eq!(reference["actors"], 3000, "{reference}");
    let crashed = util::stats(&crash_dir);
    assert_eq!(
        crashed, reference,
        "state after crashes differs from the uninterrupted run"
    );
    eprintln!("took {:?}", started.elapsed());
}

fn serve_cmd(data_dir: &Path, jetstream: &str) -> std::process::Command {
    util::starling([
        OsStr::new("serve"),
        OsStr::new("--data-dir"),
        data_dir.as_os_str(),
        OsStr::new("--jetstream"),
        OsStr::new(jetstream),
        OsStr::new("--http-addr"),
        OsStr::new("127.0.0.1:0"),
        OsStr::new("--batch-events-max"),
        OsStr::new("300"),
    ])
}

/// A restarted service must ask to resume from the stored cursor, rewound (not ahead of it).
fn check_resumed(conn: &util::Connection, stored: Option<u64>) {
    match (conn.cursor, stored) {
        (None, None) => {}
        (Some(asked), Some(stored)) => {
            assert!(
                asked <= stored,
                "asked for cursor {asked}, ahead of the stored {stored}"
            )
        }
        (asked, stored) => panic!("asked for cursor {asked:?} with {stored:?} stored: {conn:?}"),
    }
}

// Checks the live path under `kill -9`: after each crash the stored state is exactly a replay
// of the events up to the stored cursor (nothing acknowledged is lost, nothing half-applied),
// the cursor never goes back, and after a restart the service catches up to the state of a
// plain replay of the whole stream. How: a stand-in Jetstream on loopback serves a sample
// stream; `starling serve` is killed a seeded delay after `/v1/stats` shows a seeded point of the
// stream committed; `stats` is read from the data directory and compared with a replay of the prefix;
// the last run is polled on `/v1/stats` until it matches a replay of everything.
#[test]
fn serve_killed_at_random_points_keeps_a_consistent_prefix_and_catches_up() {
    const KILLS: usize = 3;
    let seed = util::seed("serve_killed_at_random_points_keeps_a_consistent_prefix_and_catches_up");
    let mut rng = Rng::new(seed);
    let dir = util::test_dir();
    let started = Instant::now();

    let events: Vec<Event> =
        util::events_of(util::sample(&dir.path().join("sample.jsonl"), 800, seed));
    assert!(
        events.len() > 10_000,
        "the sample stream is too short: {} events",
        events.len()
    );
    let all_file = dir.path().join("all.jsonl");
    util::write_events(&all_file, &events);
    let reference_dir = dir.path().join("reference");
    util::replay(&all_file, &reference_dir);
    let reference = util::stats(&reference_dir);

    let server = FakeJetstream::start(events.clone(), None, None);
    let data_dir = dir.path().join("live");
    // The crash points: seeded positions in the stream, increasing, each to be acknowledged
    // (visible in `/v1/stats`) before a seeded delay and the kill.
    let mut targets: Vec<usize> = (0..KILLS)
        .map(|_| rng.range(events.len() as u64 / 10, events.len() as u64 * 9 / 10) as usize)
        .collect();
    targets.sort_unstable();
    let mut acknowledged: Option<u64> = None;
    let mut partway = false;
    for (round, &target) in targets.iter().enumerate() {
        let first_conn = server.connections().len();
        let mut child = Proc::spawn(serve_cmd(&data_dir, &server.url()), "serve");
        let addr = child.wait_for_stdout("starling: http listening on ", Duration::from_secs(30));
        let target_us = events[target].time_us;
        let seen = util::poll_until(
            Duration::from_secs(60),
            "the crash point to be acknowledged",
            || {
                child.assert_healthy();
                let stats = util::http_json(&addr, "/v1/stats")?;
                match stats["cursor"].as_u64() {
                    Some(cursor) if cursor >= target_us => Ok(cursor),
                    cursor => Err(format!("cursor {cursor:?} < {target_us}")),
                }
            },
        );
        // Short enough that ingest, however fast, is still part-way through the stream.
        let delay = Duration::from_millis(rng.range(0, 30));
        if let Some(status) = child.run_until(Instant::now() + delay) {
            panic!(
                "serve exited by itself: {status}\n{}",
                child.output_so_far()
            );
        }
        child.kill9();
        // A kill right after the restart may land before it connected.
        if let Some(conn) = server.connections().get(first_conn) {
            check_resumed(conn, acknowledged);
        }
        let stored = util::stats(&data_dir);
        let cursor = stored["cursor"].as_u64();
        eprintln!(
            "round {round}: killed {delay:?} after cursor {seen} (event {target}); stored cursor {cursor:?}"
        );
        // What the service acknowledged over HTTP survives the crash.
        assert!(
            cursor >= Some(seen),
            "acknowledged cursor {seen} lost: stored {cursor:?}"
        );
        assert!(
            cursor >= acknowledged,
            "the cursor went back from {acknowledged:?} to {cursor:?}"
        );
        acknowledged = cursor;
        let last_time_us = events.last().map(|e| e.time_us);
        partway |= cursor.is_some_and(|c| Some(c) < last_time_us);

        // The state must be exactly that of the events up to the cursor.
        let prefix: Vec<Event> = events
            .iter()
            .filter(|e| cursor.is_some_and(|c| e.time_us <= c))
            .cloned()
            .collect();
        let prefix_file = dir.path().join(format!("prefix-{round}.jsonl"));
        util::write_events(&prefix_file, &prefix);
        let prefix_dir = dir.path().join(format!("prefix-{round}"));
        util::replay(&prefix_file, &prefix_dir);
        assert_eq!(
            stored,
            util::stats(&prefix_dir),
            "round {round}: state is not the prefix up to the cursor"
        );
    }
    assert!(
        partway,
        "no crash landed part-way through the stream (last cursor {acknowledged:?})"
    );

    let first_conn = server.connections().len();
    let mut child = Proc::spawn(serve_cmd(&data_dir, &server.url()), "serve");
    let addr = child.wait_for_stdout("starling: http listening on ", Duration::from_secs(30));
    util::poll_until(Duration::from_secs(60), "the service to catch up", || {
        child.assert_healthy();
        let stats = util::store_stats(&addr)?;
        if stats == reference {
            Ok(())
        } else {
            Err(format!("{stats} != {reference}"))
        }
    });
    check_resumed(&server.connections()[first_conn], acknowledged);
    child.terminate();
    let status = child.wait_exit(Duration::from_secs(30));
    assert!(
        status.success(),
        "serve exited with {status}\n{}",
        child.output_so_far()
    );
    assert_eq!(util::stats(&data_dir), reference);
    eprintln!("took {:?}", started.elapsed());
}
