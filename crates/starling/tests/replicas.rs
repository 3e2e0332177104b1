//! Several `starling serve` replicas on one Cassandra keyspace: one writer (the holder of the
//! writer lease) ingests, the others follow its change log; when the writer is killed another
//! replica takes over. Runs when `STARLING_TEST_CASSANDRA` names a node (scripts/test.sh starts
//! one and sets it); says it is skipped otherwise.

// Test code: a panic is the failure report.
#![allow(clippy::unwrap_used, clippy::indexing_slicing)]

mod util;

use std::ffi::OsString;
use std::path::Path;
use std::time::{Duration, Instant};

use starling_store::{CassandraOptions, CassandraStore};
use util::{Event, FakeJetstream, Proc};

/// The writer lease's TTL in `starling serve`.
const LEASE_TTL: Duration = Duration::from_secs(10);

fn replica_cmd(data_dir: &Path, node: &str, keyspace: &str, jetstream: Option<&str>) -> Proc {
    let mut args: Vec<OsString> = vec![
        "serve".into(),
        "--data-dir".into(),
        data_dir.into(),
        "--http-addr".into(),
        "127.0.0.1:0".into(),
        "--batch-events-max".into(),
        "300".into(),
        "--store".into(),
        "cassandra".into(),
        "--cassandra-nodes".into(),
        node.into(),
        "--cassandra-keyspace".into(),
        keyspace.into(),
    ];
    if let Some(url) = jetstream {
        args.extend(["--jetstream".into(), url.into()]);
    }
    let name = data_dir.file_name().unwrap().to_string_lossy().into_owned();
    Proc::spawn(util::starling(args), &name)
}

fn holds_lease(proc: &Proc) -> bool {
    proc.stderr_lines()
        .iter()
        .any(|line| line.contains("holding the writer lease"))
}

/// Follower and following counts of `did` as a replica's in-memory graph answers them.
fn graph_counts(addr: &str, did: &str) -> Result<serde_json::Value, String> {
    util::http_json(addr, &format!("/v1/graph/actor?actor={did}"))
}

// Checks fail-over between replicas: two replicas with a Jetstream URL and one without share a
// fresh keyspace; the first to take the lease ingests a loopback Jetstream's sample stream; it is
// killed with SIGKILL part-way; the second takes the lease within its TTL (plus one renewal
// period and slack), resumes from the stored cursor, and the store's counts end equal to a
// replay of the whole stream into the embedded store (an independent recount through the other
// backend). The replica that never writes must end with the same graph as the writer, built
// only from the change log.
#[test]
fn writer_killed_another_replica_takes_over_and_nothing_is_lost() {
    let Ok(node) = std::env::var("STARLING_TEST_CASSANDRA") else {
        eprintln!(
            "skipping the replica fail-over test: STARLING_TEST_CASSANDRA is unset \
             (scripts/test.sh starts a node and sets it)"
        );
        return;
    };
    let seed = util::seed("writer_killed_another_replica_takes_over_and_nothing_is_lost");
    let dir = util::test_dir();
    let started = Instant::now();
    let events: Vec<Event> =
        util::events_of(util::sample(&dir.path().join("sample.jsonl"), 300, seed));
    assert!(
        events.len() > 3_000,
        "the sample stream is too short: {} events",
        events.len()
    );
    let all_file = dir.path().join("all.jsonl");
    util::write_events(&all_file, &events);
    let reference_dir = dir.path().join("reference");
    util::replay(&all_file, &reference_dir);
    let reference = util::stats(&reference_dir);
    let keyspace = format!(
        "starling_replicas_{}_{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .subsec_nanos()
    );
    let server = FakeJetstream::start(events.clone(), None, None);

    // The follower that never writes starts first, on the empty keyspace.
    let mut watcher = replica_cmd(&dir.path().join("watcher"), &node, &keyspace, None);
    let watcher_addr =
        watcher.wait_for_stdout("starling: http listening on ", Duration::from_secs(60));
    let mut first = replica_cmd(
        &dir.path().join("first"),
        &node,
        &keyspace,
        Some(&server.url()),
    );
    let first_addr = first.wait_for_stdout("starling: http listening on ", Duration::from_secs(60));
    util::poll_until(
        Duration::from_secs(30),
        "the first replica to take the lease",
        || {
            first.assert_healthy();
            holds_lease(&first)
                .then_some(())
                .ok_or("not yet".to_owned())
        },
    );
    let mut second = replica_cmd(
        &dir.path().join("second"),
        &node,
        &keyspace,
        Some(&server.url()),
    );
    let second_addr =
        second.wait_for_stdout("starling: http listening on ", Duration::from_secs(60));

    // Kill the writer once a third of the stream is acknowledged.
    let target_us = events[events.len() / 3].time_us;
    let acknowledged = util::poll_until(
        Duration::from_secs(120),
        "a third of the stream to be acknowledged",
        || {
            first.assert_healthy();
            second.assert_healthy();
            let stats = util::http_json(&first_addr, "/v1/stats")?;
            match stats["cursor"].as_u64() {
                Some(cursor) if cursor >= target_us => Ok(cursor),
                cursor => Err(format!("cursor {cursor:?} < {target_us}")),
            }
        },
    );
    assert!(!holds_lease(&second), "two replicas hold the writer lease");
    let n_connections = server.connections().len();
    first.kill9();
    let killed = Instant::now();
    util::poll_until(
        LEASE_TTL + Duration::from_secs(20),
        "the second replica to take the lease",
        || {
            second.assert_healthy();
            holds_lease(&second)
                .then_some(())
                .ok_or("not yet".to_owned())
        },
    );
    let takeover = killed.elapsed();
    eprintln!("took over {takeover:?} after the kill");
    assert!(
        takeover <= LEASE_TTL + Duration::from_secs(8),
        "takeover took {takeover:?}"
    );
    util::poll_until(
        Duration::from_secs(240),
        "the second replica to finish the stream",
        || {
            second.assert_healthy();
            let stats = util::store_stats(&second_addr)?;
            if stats == reference {
                Ok(())
            } else {
                Err(format!("{stats} != {reference}"))
            }
        },
    );
    // It resumed from the stored cursor (rewound), not from the start or ahead.
    let resumed = &server.connections()[n_connections..];
    let asked = resumed.first().and_then(|conn| conn.cursor);
    assert!(
        asked.is_some_and(|cursor| cursor <= acknowledged.max(target_us)),
        "the new writer asked for cursor {asked:?}; {acknowledged} was acknowledged"
    );

    // The watcher's graph, built from the change log alone, equals the writer's.
    let dids: Vec<String> = events
        .iter()
        .filter_map(|event| {
            let value: serde_json::Value = serde_json::from_str(&event.line).ok()?;
            value["did"].as_str().map(str::to_owned)
        })
        .take(2_000)
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .take(40)
        .collect();
    assert!(!dids.is_empty());
    util::poll_until(Duration::from_secs(30), "the watcher's graph", || {
        watcher.assert_healthy();
        for did in &dids {
            let want = graph_counts(&second_addr, did)?;
            let have = graph_counts(&watcher_addr, did)?;
            if want != have {
                return Err(format!("{did}: watcher {have}, writer {want}"));
            }
        }
        Ok(())
    });
    let follows: u64 = dids
        .iter()
        .map(|did| {
            graph_counts(&second_addr, did).unwrap()["following"]
                .as_u64()
                .unwrap_or(0)
        })
        .sum();
    assert!(follows > 0, "the compared actors follow no one");

    for proc in [&second, &watcher] {
        proc.terminate();
    }
    for proc in [&mut second, &mut watcher] {
        let status = proc.wait_exit(Duration::from_secs(60));
        assert!(
            status.success(),
            "replica exited with {status}\n{}",
            proc.output_so_far()
        );
    }
    let mut options = CassandraOptions::new(vec![node]);
    options.keyspace = keyspace.clone();
    CassandraStore::open(&options)
        .unwrap()
        .drop_keyspace(&keyspace)
        .unwrap();
    eprintln!("took {:?}", started.elapsed());
}
