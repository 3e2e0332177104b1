//! `starling gen` as a user runs it: a small network written as `.jsonl.zst` with its summary,
//! or streamed into `starling replay -` through a pipe,
//! a summary line naming the counts, nothing left under a temporary name, the same bytes for the
//! same seed, and one-line errors naming the bad flag or path.

// Test code: a panic is the failure report.
#![allow(clippy::unwrap_used, clippy::indexing_slicing)]

mod util;

use std::io::Read;
use std::path::Path;

fn gen_cmd(out: &Path, extra: &[&str]) -> std::process::Command {
    let mut args = vec![
        "gen",
        "--actors",
        "120",
        "--follows",
        "1200",
        "--posts",
        "400",
    ];
    args.extend_from_slice(extra);
    let mut cmd = util::starling(args);
    cmd.arg("--out").arg(out);
    cmd
}

// Checks a successful run end to end: exit 0, one summary line on stdout naming the event
// count and the file, the file's lines all decoding and numbering what the summary file says,
// no `.tmp` file left, and the same bytes from a second run with the same seed but not from
// another seed.
#[test]
fn gen_writes_the_file_and_its_summary() {
    let dir = util::test_dir();
    let out = dir.path().join("net.jsonl.zst");
    let stdout = util::run_ok(gen_cmd(&out, &["--seed", "4"]));
    let summary: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dir.path().join("net.summary.json")).unwrap(),
    )
    .unwrap();
    let events = summary["events"].as_u64().unwrap();
    assert!(
        stdout.starts_with(&format!("wrote {events} events to {}", out.display())),
        "{stdout}"
    );
    assert_eq!(stdout.lines().count(), 1, "{stdout}");
    assert!(stdout.contains("120 identity"), "{stdout}");

    let mut text = String::new();
    zstd::stream::read::Decoder::new(std::fs::File::open(&out).unwrap())
        .unwrap()
        .read_to_string(&mut text)
        .unwrap();
    let mut lines = 0;
    for line in text.lines() {
        lines += 1;
        if let Err(err) = starling_core::jetstream::decode(line.as_bytes()) {
            panic!("does not decode: {err}: {line}");
        }
    }
    assert!(lines > 3_000, "{lines} lines");
    assert_eq!(lines, events);
    assert_eq!(summary["actors"], 120);
    assert_eq!(summary["graph_follows"], 1_200);

    let mut names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["net.jsonl.zst", "net.summary.json"]);

    let same = dir.path().join("same.jsonl.zst");
    util::run_ok(gen_cmd(&same, &["--seed", "4"]));
    assert!(std::fs::read(&out).unwrap() == std::fs::read(&same).unwrap());
    let other = dir.path().join("other.jsonl.zst");
    util::run_ok(gen_cmd(&other, &["--seed", "5"]));
    assert!(std::fs::read(&out).unwrap() != std::fs::read(&other).unwrap());
}

/// Runs `starling gen ARGS` and checks that it fails with exit code 1 and one stderr line,
/// `starling: error: ...`, containing every string of `expected`.
#[track_caller]
fn check_error(args: &[&str], expected: &[&str]) {
    let args: Vec<&dyn AsRef<std::ffi::OsStr>> = args.iter().map(|arg| arg as _).collect();
    util::check_error(&args, &[], expected);
}

// Checks that bad flags and paths are one-line errors naming the flag and value or the path,
// and that nothing is written for them.
#[test]
fn gen_errors_name_the_bad_flag() {
    let dir = util::test_dir();
    let out = dir.path().join("net.jsonl.zst");
    let out = out.to_str().unwrap();
    check_error(&["gen", "--actors", "0", "--out", out], &["`--actors 0`"]);
    check_error(
        &["gen", "--actors", "100", "--follows", "9900", "--out", out],
        &["`--follows 9900`", "at most 1200"],
    );
    check_error(
        &[
            "gen",
            "--actors",
            "10",
            "--posts",
            "0",
            "--reposts",
            "3",
            "--out",
            out,
        ],
        &["`--reposts 3`", "`--posts` is 0"],
    );
    let missing = dir.path().join("no-such-dir").join("net.jsonl.zst");
    check_error(
        &["gen", "--actors", "10", "--out", missing.to_str().unwrap()],
        &["output directory", "no-such-dir", "does not exist"],
    );
    let dir_path = dir.path().to_str().unwrap();
    check_error(
        &["gen", "--actors", "10", "--out", dir_path],
        &["is a directory"],
    );
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

// Checks `starling gen --out - | starling replay -`: the stream is the file's bytes
// uncompressed, the summary line goes to stderr, and the store the pipe fills has the same
// counts as one replayed from the file (and as the summary's live records).
#[test]
fn gen_streams_into_replay_through_a_pipe() {
    let dir = util::test_dir();
    let file = dir.path().join("net.jsonl.zst");
    util::run_ok(gen_cmd(&file, &["--seed", "4"]));
    let summary: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dir.path().join("net.summary.json")).unwrap(),
    )
    .unwrap();
    let mut text = Vec::new();
    zstd::stream::read::Decoder::new(std::fs::File::open(&file).unwrap())
        .unwrap()
        .read_to_end(&mut text)
        .unwrap();

    let streamed = util::run(gen_cmd(Path::new("-"), &["--seed", "4"]));
    assert!(streamed.status.success(), "{}", streamed.stderr);
    assert!(
        streamed.stdout.as_bytes() == text,
        "the stream differs from the file"
    );
    let events = summary["events"].as_u64().unwrap();
    assert!(
        streamed
            .stderr
            .contains(&format!("wrote {events} events to -")),
        "{}",
        streamed.stderr
    );

    let from_pipe = dir.path().join("piped");
    let mut gen_child = gen_cmd(Path::new("-"), &["--seed", "4"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut replay = util::starling(["replay", "-", "--data-dir"]);
    let replayed = replay
        .arg(&from_pipe)
        .stdin(gen_child.stdout.take().unwrap())
        .output()
        .unwrap();
    let replay_stderr = String::from_utf8_lossy(&replayed.stderr);
    assert!(replayed.status.success(), "{replay_stderr}");
    assert!(
        replay_stderr.contains(&format!("events={events}")),
        "{replay_stderr}"
    );
    assert!(gen_child.wait().unwrap().success());
    let from_file = dir.path().join("filed");
    let mut replay = util::starling(["replay", "--data-dir"]);
    replay.arg(&from_file).arg(&file);
    util::run_ok(replay);

    let stats = |data: &Path| -> serde_json::Value {
        let mut cmd = util::starling(["stats", "--data-dir"]);
        cmd.arg(data);
        serde_json::from_str(&util::run_ok(cmd)).unwrap()
    };
    let piped = stats(&from_pipe);
    let twice = dir.path().join("twice");
    let twice = twice.to_str().unwrap();
    check_error(
        &["replay", "-", "-", "--data-dir", twice],
        &["`-` (standard input) can be replayed only once"],
    );
    assert_eq!(piped, stats(&from_file));
    assert_eq!(
        piped["records"]["app.bsky.feed.like"],
        summary["live"]["app.bsky.feed.like"]
    );
    assert_eq!(
        piped["records"]["app.bsky.graph.follow"],
        summary["live"]["app.bsky.graph.follow"]
    );
}
