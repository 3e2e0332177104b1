//! `gen-follows`: writes a synthetic Bluesky-shaped follow graph as GraphD's CSV adjacency list
//! (`actor_did,subject_did` per line), zstd-compressed, for `starling import-follows`.
//!
//! ```text
//! gen-follows --actors 5500000 --follows 160000000 --seed 7 --out FILE.csv.zst \
//!     [--side FILE.side.txt] [--targets 500] [--viewers 10000] [--level 3]
//! ```
//!
//! The edges are `starling_graph::synthetic::generate(SyntheticParams::new(actors, follows,
//! seed))`, the same graph as `graph_bench` measures in-process, with actor `i` written as
//! `starling_core::sample::did(i)`. The side file (default: `--out` with `.side.txt` for
//! `.csv.zst`) lists the `--targets` most-followed accounts and `--viewers` distinct viewers
//! drawn uniformly, with a seed derived from `--seed`, from the actors that follow at least one
//! account: GraphD's worst case of social proof. See `starling_bench::follows`.
//!
//! Two threads share the work: this one generates the lines, a second compresses them (zstd
//! `--level`). On two cores a multi-threaded zstd would only compete with the generator. Both
//! files are written under temporary names and renamed when complete.

use starling_bench::cli::{number, tmp_path};
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::mpsc::{Receiver, sync_channel};
use std::thread;
use std::time::Instant;

use starling_bench::follows::{FollowCsv, write_side_file};
use starling_graph::synthetic::SyntheticParams;

/// Bytes of CSV handed to the compressing thread at a time.
const CHUNK_BYTES: usize = 4 * 1024 * 1024;
/// Chunks queued for the compressing thread, at most.
const CHUNKS_QUEUED_MAX: usize = 8;

const USAGE: &str = "usage: gen-follows --actors N --follows N --seed N --out FILE.csv.zst \
                     [--side FILE] [--targets N] [--viewers N] [--level N]";

struct Args {
    params: SyntheticParams,
    out: PathBuf,
    side: PathBuf,
    n_targets: usize,
    n_viewers: usize,
    level: i32,
}

fn parse_args() -> Result<Args, String> {
    let mut actors = 5_500_000u32;
    let mut follows = 160_000_000u64;
    let mut seed = 7u64;
    let mut out: Option<PathBuf> = None;
    let mut side = None;
    let mut n_targets = 500usize;
    let mut n_viewers = 10_000usize;
    let mut level = 3i32;
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let mut value = || {
            args.next()
                .ok_or_else(|| format!("`{flag}` needs a value\n{USAGE}"))
        };
        match flag.as_str() {
            "--actors" => actors = number(&flag, &value()?)?,
            "--follows" => follows = number(&flag, &value()?)?,
            "--seed" => seed = number(&flag, &value()?)?,
            "--out" => out = Some(PathBuf::from(value()?)),
            "--side" => side = Some(PathBuf::from(value()?)),
            "--targets" => n_targets = number(&flag, &value()?)?,
            "--viewers" => n_viewers = number(&flag, &value()?)?,
            "--level" => level = number(&flag, &value()?)?,
            "-h" | "--help" => return Err(USAGE.to_owned()),
            other => return Err(format!("unknown argument `{other}`\n{USAGE}")),
        }
    }
    let out = out.ok_or_else(|| format!("`--out FILE` is required\n{USAGE}"))?;
    if actors < 2 {
        return Err(format!("`--actors {actors}` is too few: at least 2"));
    }
    let side = side.unwrap_or_else(|| default_side(&out));
    Ok(Args {
        params: SyntheticParams::new(actors, follows, seed),
        out,
        side,
        n_targets,
        n_viewers,
        level,
    })
}

/// `X.csv.zst` -> `X.side.txt`; any other name gets `.side.txt` appended.
fn default_side(out: &Path) -> PathBuf {
    let name = out.file_name().unwrap_or_default().to_string_lossy();
    let stem = name.strip_suffix(".csv.zst").unwrap_or(&name);
    out.with_file_name(format!("{stem}.side.txt"))
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(args) => args,
        Err(err) => {
            eprintln!("gen-follows: {err}");
            return ExitCode::FAILURE;
        }
    };
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("gen-follows: error: {err}");
            let _ = std::fs::remove_file(tmp_path(&args.out));
            let _ = std::fs::remove_file(tmp_path(&args.side));
            ExitCode::FAILURE
        }
    }
}

fn run(args: &Args) -> Result<(), String> {
    let started = Instant::now();
    if let Some(dir) = args.out.parent().filter(|dir| !dir.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)
            .map_err(|err| format!("creating `{}`: {err}", dir.display()))?;
    }
    let tmp = tmp_path(&args.out);
    let file = File::create(&tmp).map_err(|err| format!("creating `{}`: {err}", tmp.display()))?;
    let (tx, rx) = sync_channel::<Vec<u8>>(CHUNKS_QUEUED_MAX);
    let level = args.level;
    let compressor = thread::Builder::new()
        .name("gen-follows-zstd".to_owned())
        .spawn(move || compress(rx, file, level))
        .map_err(|err| format!("starting the compressing thread: {err}"))?;

    let mut csv = FollowCsv::new(args.params.clone())?;
    let generated = csv.write_all(CHUNK_BYTES, |chunk| {
        tx.send(chunk)
            .map_err(|_| std::io::Error::other("the compressing thread stopped"))
    });
    drop(tx);
    let compressed = compressor
        .join()
        .map_err(|_| "the compressing thread panicked".to_owned())?;
    // The compressor's error explains a failed send, so it goes first.
    compressed?;
    generated.map_err(|err| format!("generating: {err}"))?;
    let generate_s = started.elapsed().as_secs_f64();

    let summary = csv.finish(args.n_targets, args.n_viewers);
    let side_tmp = tmp_path(&args.side);
    let side_error = |err: std::io::Error| format!("writing `{}`: {err}", side_tmp.display());
    let mut side = BufWriter::new(File::create(&side_tmp).map_err(side_error)?);
    write_side_file(&mut side, &args.params, &summary).map_err(side_error)?;
    side.into_inner()
        .map_err(|err| side_error(err.into_error()))?
        .sync_all()
        .map_err(side_error)?;
    for (from, to) in [(&tmp, &args.out), (&side_tmp, &args.side)] {
        std::fs::rename(from, to)
            .map_err(|err| format!("renaming `{}` to `{}`: {err}", from.display(), to.display()))?;
    }

    let compressed_bytes = std::fs::metadata(&args.out).map_or(0, |meta| meta.len());
    let p = &args.params;
    println!(
        "wrote {} follows ({} actors, seed {}) to {}",
        summary.n_follows,
        p.n_actors,
        p.seed,
        args.out.display()
    );
    println!(
        "{:.1} MB of CSV, {:.1} MB as zstd level {} ({:.1} bytes/follow), in {generate_s:.1} s ({:.0} follows/s)",
        summary.n_bytes as f64 / 1e6,
        compressed_bytes as f64 / 1e6,
        args.level,
        compressed_bytes as f64 / summary.n_follows.max(1) as f64,
        summary.n_follows as f64 / generate_s
    );
    let first =
        |picks: &[starling_bench::follows::Picked]| picks.first().map_or(0, |pick| pick.degree);
    let last =
        |picks: &[starling_bench::follows::Picked]| picks.last().map_or(0, |pick| pick.degree);
    println!(
        "side file {}: {} targets with {}..{} followers; {} viewers of {} active actors",
        args.side.display(),
        summary.targets.len(),
        last(&summary.targets),
        first(&summary.targets),
        summary.viewers.len(),
        summary.n_active
    );
    let mut viewer_follows: Vec<u32> = summary.viewers.iter().map(|v| v.degree).collect();
    viewer_follows.sort_unstable();
    let at = |q: f64| {
        let idx = ((viewer_follows.len() as f64 * q) as usize)
            .min(viewer_follows.len().saturating_sub(1));
        viewer_follows.get(idx).copied().unwrap_or(0)
    };
    println!(
        "viewers' follows: median {}, p90 {}, p99 {}, max {}",
        at(0.5),
        at(0.9),
        at(0.99),
        at(1.0)
    );
    Ok(())
}

/// Compresses every chunk from `rx` into `file`, then syncs it.
fn compress(rx: Receiver<Vec<u8>>, file: File, level: i32) -> Result<(), String> {
    let mut encoder = zstd::stream::write::Encoder::new(BufWriter::new(file), level)
        .map_err(|err| format!("starting zstd: {err}"))?;
    encoder
        .include_checksum(true)
        .map_err(|err| format!("configuring zstd: {err}"))?;
    for chunk in rx {
        encoder
            .write_all(&chunk)
            .map_err(|err| format!("writing: {err}"))?;
    }
    let mut inner = encoder
        .finish()
        .map_err(|err| format!("finishing zstd: {err}"))?;
    inner.flush().map_err(|err| format!("writing: {err}"))?;
    let file = inner
        .into_inner()
        .map_err(|err| format!("writing: {}", err.error()))?;
    file.sync_all().map_err(|err| format!("syncing: {err}"))?;
    Ok(())
}
