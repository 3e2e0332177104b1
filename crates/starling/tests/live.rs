//! Live ingest: `starling serve` against a stand-in Jetstream on loopback, as text and
//! zstd-compressed with the official dictionary, through a dropped connection.

// Test code: a panic is the failure report.
#![allow(clippy::unwrap_used, clippy::indexing_slicing)]

mod util;

use std::ffi::OsString;
use std::time::{Duration, Instant};

use util::{Event, FakeJetstream, Proc, Rng};

/// How long the service gets to reach a state before the test fails.
const DEADLINE: Duration = Duration::from_secs(60);

fn live_ingest_survives_a_dropped_connection(test: &str, compressed: bool) {
    let Some(data) = util::shared_data() else {
        return;
    };
    let seed = util::seed(test);
    let mut rng = Rng::new(seed);
    let dir = util::test_dir();
    let started = Instant::now();

    // The stream: the real events and a sample network, in `time_us` order.
    let mut lines = util::read_lines_of(&data.join("jetstream/expected_v1.jsonl"));
    lines.extend(util::read_lines_of(&data.join("jetstream/golden_v1.jsonl")));
    let real = lines.len();
    lines.extend(util::sample(&dir.path().join("sample.jsonl"), 300, seed));
    let mut events: Vec<Event> = util::events_of(lines);
    events.sort_by_key(|event| event.time_us);
    assert!(
        real > 100 && events.len() > 5_000,
        "too few events: {real} real, {} in all",
        events.len()
    );
    let events_file = dir.path().join("events.jsonl");
    util::write_events(&events_file, &events);

    // The reference: a replay of the same events.
    let reference_dir = dir.path().join("reference");
    util::replay(&events_file, &reference_dir);
    let reference = util::stats(&reference_dir);
    assert_eq!(
        reference["cursor"],
        events.last().unwrap().time_us,
        "{reference}"
    );
    assert!(reference["posts"].as_u64().unwrap() > 0 && reference["follows"].as_u64().unwrap() > 0);

    // The first connection sends part of the stream, then is reset.
    let first_part = rng.range(events.len() as u64 / 4, events.len() as u64 * 3 / 4) as usize;
    let dictionary_path = data.join("jetstream/jetstream_v1.zdict");
    let dictionary = compressed.then(|| std::fs::read(&dictionary_path).unwrap());
    let server = FakeJetstream::start(events.clone(), dictionary, Some(first_part));

    let data_dir = dir.path().join("live");
    let mut args: Vec<OsString> = ["serve", "--data-dir"].map(OsString::from).to_vec();
    args.push(data_dir.clone().into_os_string());
    args.extend(["--jetstream", &server.url(), "--http-addr", "127.0.0.1:0"].map(OsString::from));
    if compressed {
        args.push("--zstd-dictionary".into());
        args.push(dictionary_path.into_os_string());
    }
    let mut child = Proc::spawn(util::starling(&args), "serve");
    let addr = child.wait_for_stdout("starling: http listening on ", Duration::from_secs(30));
    util::poll_until(DEADLINE, "/health", || {
        match util::http_get(&addr, "/health") {
            Ok((200, _)) => Ok(()),
            other => Err(format!("{other:?}")),
        }
    });

    // Let the service commit what the first connection delivered, so that it has a cursor to
    // resume from; then reset the connection.
    let first = util::poll_until(DEADLINE, "the first connection to send its part", || {
        child.assert_healthy();
        match server.connections().first() {
            Some(conn) if conn.sent == first_part => Ok(conn.clone()),
            conn => Err(format!("{conn:?}")),
        }
    });
    let delivered = first.last_time_us.unwrap();
    util::poll_until(DEADLINE, "the first part to be committed", || {
        child.assert_healthy();
        let stats = util::http_json(&addr, "/v1/stats")?;
        if stats["cursor"] == delivered {
            Ok(())
        } else {
            Err(format!("{stats}"))
        }
    });
    server.drop_first_connection();

    util::poll_until(
        DEADLINE,
        "/v1/stats to equal the replayed reference",
        || {
            child.assert_healthy();
            let stats = util::store_stats(&addr)?;
            if stats == reference {
                Ok(())
            } else {
                Err(format!("\n  live:      {stats}\n  reference: {reference}"))
            }
        },
    );

    let connections = server.connections();
    eprintln!(
        "sent {first_part} of {} events on the first connection; connections: {connections:#?}",
        events.len()
    );
    assert!(
        connections.len() >= 2,
        "the service did not reconnect: {connections:?}"
    );
    assert_eq!(
        connections[0].cursor, None,
        "a fresh store asked for a cursor: {connections:?}"
    );
    let resumed_at = connections[1]
        .cursor
        .expect("the reconnect did not ask for a cursor");
    assert!(
        resumed_at <= delivered,
        "the reconnect asked for {resumed_at}, after the {delivered} delivered"
    );
    for conn in &connections {
        assert_eq!(
            conn.compress, compressed,
            "compress=true asked for or not as configured: {conn:?}"
        );
    }

    let (status, metrics) = util::http_get(&addr, "/metrics").unwrap();
    assert_eq!(status, 200);
    check_metrics(&metrics);

    child.terminate();
    let status = child.wait_exit(Duration::from_secs(30));
    assert!(
        status.success(),
        "serve exited with {status} after SIGTERM\n{}",
        child.output_so_far()
    );
    // What was served over HTTP is what is on disk.
    assert_eq!(util::stats(&data_dir), reference);
    eprintln!("took {:?}", started.elapsed());
}

/// `/metrics` has the event counter, and each of the embedded store's caches holding no more
/// than it may.
fn check_metrics(metrics: &str) {
    assert!(
        metrics.contains("starling_ingest_events_total"),
        "/metrics lacks the event counter:\n{metrics}"
    );
    for cache in ["counts", "count_rows", "liveness", "list_heads"] {
        let label = format!("{{cache=\"{cache}\"}}");
        let capacity = util::metric(metrics, &format!("starling_store_cache_capacity{label}"));
        let entries = util::metric(metrics, &format!("starling_store_cache_entries{label}"));
        let (Some(capacity), Some(entries)) = (capacity, entries) else {
            panic!("/metrics lacks the {cache} cache:\n{metrics}");
        };
        assert!(
            capacity > 0.0 && entries <= capacity,
            "the {cache} cache holds {entries} of {capacity}:\n{metrics}"
        );
    }
}

// Checks that `starling serve` ingests a plain-text stream from a stand-in Jetstream, survives
// the connection being reset part-way, reconnects asking for a rewound cursor, and ends with the
// same `/v1/stats` (and, after SIGTERM and a clean exit, the same stored `stats`) as a replay of
// the same events. How: a loopback websocket server records each connection's query, resets the
// first one after a seeded number of events once they are committed, and the test polls
// `/v1/stats` against the replayed reference until a deadline.
#[test]
fn live_text_stream_survives_a_dropped_connection() {
    live_ingest_survives_a_dropped_connection(
        "live_text_stream_survives_a_dropped_connection",
        false,
    );
}

// Checks the same as the plain-text test, with `--zstd-dictionary`: the client asks for
// `compress=true` and the server sends every event as a binary message compressed with the
// official Jetstream dictionary.
#[test]
fn live_compressed_stream_survives_a_dropped_connection() {
    live_ingest_survives_a_dropped_connection(
        "live_compressed_stream_survives_a_dropped_connection",
        true,
    );
}
