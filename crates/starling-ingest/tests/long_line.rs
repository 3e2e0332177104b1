//! Replay of a file with a line far over the event size limit: the line is skipped as it is
//! read and counted as `too_large`, every other line is applied, and memory stays bounded.
//! Once, the reader held the whole line (a 256 MB line took 1.17 GB) and searched it for a
//! newline again on every read, in time quadratic in its length.
//!
//! Alone in its test binary, so that no other test moves the process's peak memory.

// Test code: a panic is the failure report.
#![allow(clippy::unwrap_used, clippy::indexing_slicing)]

use std::io::Write;
use std::path::Path;
use std::sync::Arc;

use starling_core::sample::{SampleParams, events};
use starling_ingest::replay::ReplayProgress;
use starling_ingest::{ReplayOptions, replay_file};
use starling_store::{Committed, EmbeddedStore, Stats, Store};

/// The length of the long line: 100 MB.
const LONG_LINE_BYTES: usize = 100_000_000;

/// How much the process's peak resident memory may grow during the replay: the read-ahead
/// bound (`(CHUNK_BYTES + LINE_BYTES_MAX) * (CHUNKS_AHEAD_MAX + 2)`, ~30 MiB) and the store's
/// memtables and caches for a few hundred events, with room to spare, and far below the line.
const PEAK_GROWTH_MAX_BYTES: u64 = 80 * 1024 * 1024;

/// The process's peak resident memory (`VmHWM`), in bytes.
fn peak_rss_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status
        .lines()
        .find(|line| line.starts_with("VmHWM:"))
        .unwrap();
    let kib: u64 = line
        .trim_start_matches("VmHWM:")
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .unwrap();
    kib * 1024
}

/// Replays `path` into a fresh store in `data_dir`; returns its stats.
fn replay(path: &Path, data_dir: &Path) -> Stats {
    let store = EmbeddedStore::open(data_dir).unwrap();
    let mut sink = |_: &Committed| {};
    let progress = Arc::new(ReplayProgress::default());
    replay_file(&store, path, &ReplayOptions::default(), &mut sink, progress).unwrap();
    store.stats().unwrap()
}

// Checks that a 100 MB line in the middle of a file is dropped as `too_large` with bounded
// memory, and that every other event is applied: the stats equal a replay of the file without
// the line, plus one drop. How: the file is written in pieces (the test never holds the line),
// and the process's peak resident memory is read before and after the replay.
#[test]
fn a_100_mb_line_is_dropped_with_bounded_memory() {
    let dir = tempfile::tempdir().unwrap();
    let lines = events(&SampleParams {
        n_actors: 40,
        seed: 7,
    });
    assert!(lines.len() > 200, "too few events: {}", lines.len());
    let (before, after) = lines.split_at(lines.len() / 2);
    let plain = dir.path().join("plain.jsonl");
    std::fs::write(&plain, lines.join("\n") + "\n").unwrap();
    let long = dir.path().join("long.jsonl");
    let mut file = std::io::BufWriter::new(std::fs::File::create(&long).unwrap());
    for line in before {
        writeln!(file, "{line}").unwrap();
    }
    let piece = vec![b'x'; 1_000_000];
    file.write_all(br#"{"did":"did:plc:aaaaaaaaaaaaaaaaaaaaaaaa","text":""#)
        .unwrap();
    for _ in 0..LONG_LINE_BYTES / piece.len() {
        file.write_all(&piece).unwrap();
    }
    file.write_all(b"\"}\n").unwrap();
    for line in after {
        writeln!(file, "{line}").unwrap();
    }
    file.flush().unwrap();
    drop(file);
    assert!(std::fs::metadata(&long).unwrap().len() > LONG_LINE_BYTES as u64);

    let peak_before = peak_rss_bytes();
    let stats = replay(&long, &dir.path().join("long-store"));
    let peak_growth = peak_rss_bytes().saturating_sub(peak_before);
    eprintln!("peak resident memory grew by {} MiB", peak_growth >> 20);
    assert!(
        peak_growth < PEAK_GROWTH_MAX_BYTES,
        "peak memory grew by {peak_growth} bytes replaying a {LONG_LINE_BYTES}-byte line"
    );

    let mut expected = replay(&plain, &dir.path().join("plain-store"));
    assert!(expected.posts > 0, "{expected:?}");
    *expected.dropped.entry("too_large".to_owned()).or_default() += 1;
    assert_eq!(stats, expected);
}
