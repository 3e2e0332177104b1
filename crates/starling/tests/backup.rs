//! Backups of a running `serve`: `POST /v1/admin/backup` while it ingests, the copy moved
//! elsewhere and opened as a data directory, compared with a replay of the same events.

// Test code: a panic is the failure report.
#![allow(clippy::unwrap_used, clippy::indexing_slicing)]

mod util;

use std::ffi::OsString;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use serde_json::Value;
use util::{FakeJetstream, Proc};

/// How long the service gets to reach a state before the test fails.
const DEADLINE: Duration = Duration::from_secs(60);

/// The admin token `serve` is given: backups need it, loopback included.
const ADMIN_TOKEN: &str = "backup-admin-token";

/// `POST path` with an empty body and the admin token: the status and the body.
fn http_post(addr: &str, path: &str) -> (u16, String) {
    http_post_as(addr, path, Some(ADMIN_TOKEN))
}

/// `POST path` with an empty body and `token`, if any: the status and the body.
fn http_post_as(addr: &str, path: &str, token: Option<&str>) -> (u16, String) {
    let mut stream = TcpStream::connect(addr).unwrap();
    let authorization = token.map_or(String::new(), |token| {
        format!("Authorization: Bearer {token}\r\n")
    });
    let request = format!(
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\n{authorization}Content-Length: 0\r\nConnection: close\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let status = response[9..12].parse().unwrap();
    let body = response.split_once("\r\n\r\n").unwrap().1.to_owned();
    (status, body)
}

/// `stats --json` without the cursor, and the cursor.
fn stats_and_cursor(data_dir: &std::path::Path) -> (Value, u64) {
    let mut stats = util::stats(data_dir);
    let cursor = stats["cursor"].as_u64().unwrap();
    stats.as_object_mut().unwrap().remove("cursor");
    (stats, cursor)
}

// Checks a backup taken while `serve` ingests: the stand-in Jetstream sends part of a sample
// network, then the rest is released and the backup asked for at once, so batches commit while
// it copies. The copy, moved to another directory as an operator would, opens as a data
// directory; its cursor names an event of the stream, and its contents equal a replay of the
// stream up to that event (a consistent cut: whole batches, nothing torn). Then `serve` on the
// copy resumes from that cursor and catches up to the source. A second backup under the same
// name, and a name with a slash, are refused.
#[test]
fn backup_of_a_running_serve_restores_equal_to_the_source() {
    let dir = util::test_dir();
    let lines = util::sample(&dir.path().join("sample.jsonl"), 300, 7);
    let events = util::events_of(lines);
    assert!(events.windows(2).all(|w| w[0].time_us < w[1].time_us));
    let first_part = events.len() / 3;
    let jetstream = FakeJetstream::start(events.clone(), None, Some(first_part));
    let data_dir = dir.path().join("data");
    let serve_args = |data_dir: &std::path::Path, url: &str| {
        let mut args: Vec<OsString> = ["serve", "--data-dir"].map(OsString::from).to_vec();
        args.push(data_dir.as_os_str().to_owned());
        for arg in ["--http-addr", "127.0.0.1:0", "--jetstream", url] {
            args.push(arg.into());
        }
        let mut cmd = util::starling(&args);
        cmd.env("STARLING_ADMIN_TOKEN", ADMIN_TOKEN);
        cmd
    };
    let mut serve = Proc::spawn(serve_args(&data_dir, &jetstream.url()), "serve");
    let addr = serve.wait_for_stdout("starling: http listening on ", DEADLINE);
    util::poll_until(DEADLINE, "the first part to be applied", || {
        serve.assert_healthy();
        let stats = util::http_json(&addr, "/v1/stats")?;
        (stats["cursor"] == events[first_part - 1].time_us)
            .then_some(())
            .ok_or_else(|| stats.to_string())
    });
    jetstream.drop_first_connection();
    // Without the admin token, or with another, nothing is written.
    for token in [None, Some("not-the-token")] {
        let (status, body) = http_post_as(&addr, "/v1/admin/backup?name=nightly-1", token);
        assert_eq!(status, 401, "{body}");
    }
    let (status, body) = http_post(&addr, "/v1/admin/backup?name=nightly-1");
    assert_eq!(status, 200, "{body}");
    let report: Value = serde_json::from_str(&body).unwrap();
    assert!(report["n_keys"].as_u64().unwrap() > 1_000, "{report}");
    let (status, body) = http_post(&addr, "/v1/admin/backup?name=nightly-1");
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("already exists"), "{body}");
    let (status, body) = http_post(&addr, "/v1/admin/backup?name=../up");
    assert_eq!(status, 400, "{body}");
    let newest = events.last().unwrap().time_us;
    util::poll_until(DEADLINE, "every event to be applied", || {
        let stats = util::http_json(&addr, "/v1/stats")?;
        (stats["cursor"] == newest)
            .then_some(())
            .ok_or_else(|| stats.to_string())
    });
    serve.terminate();
    assert!(
        serve.wait_exit(DEADLINE).success(),
        "{}",
        serve.output_so_far()
    );

    // Restore: the copy moved out of the source and opened where it lands.
    let restored = dir.path().join("restored");
    std::fs::rename(data_dir.join("backups/nightly-1"), &restored).unwrap();
    let (copy, cursor) = stats_and_cursor(&restored);
    let cut = events
        .iter()
        .position(|event| event.time_us == cursor)
        .unwrap();
    assert!(
        cut + 1 >= first_part,
        "the copy misses applied events: cut {cut}"
    );
    let prefix = dir.path().join("prefix.jsonl");
    util::write_events(&prefix, &events[..=cut]);
    let reference_dir = dir.path().join("reference");
    util::replay(&prefix, &reference_dir);
    let (reference, reference_cursor) = stats_and_cursor(&reference_dir);
    assert_eq!(reference_cursor, cursor);
    assert_eq!(copy, reference, "cut after event {cut} of {}", events.len());

    // Served, the copy resumes from its cursor and ends equal to the source.
    let resumed = FakeJetstream::start(events.clone(), None, None);
    let mut serve = Proc::spawn(serve_args(&restored, &resumed.url()), "restored");
    let addr = serve.wait_for_stdout("starling: http listening on ", DEADLINE);
    util::poll_until(DEADLINE, "the restored copy to catch up", || {
        serve.assert_healthy();
        let stats = util::http_json(&addr, "/v1/stats")?;
        (stats["cursor"] == newest)
            .then_some(())
            .ok_or_else(|| stats.to_string())
    });
    serve.terminate();
    assert!(
        serve.wait_exit(DEADLINE).success(),
        "{}",
        serve.output_so_far()
    );
    assert_eq!(stats_and_cursor(&restored), stats_and_cursor(&data_dir));
}
