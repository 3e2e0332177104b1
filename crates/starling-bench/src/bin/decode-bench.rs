//! `decode-bench`: decode-only speed of `starling_core::jetstream::decode` on one core.
//!
//! ```text
//! decode-bench FILE [--passes N] [--limit N]
//! ```
//!
//! Loads `FILE` (`.jsonl`, or `.jsonl.zst` recognized by the zstd magic) into memory
//! decompressed, splits it into lines, then decodes every line on this one thread, `--passes`
//! times (3 by default), and prints events/s and MB/s for each pass and for the best one. Loading
//! and splitting are not timed. The target is 1,000,000 events/s per core.

use starling_bench::cli::number;
use std::hint::black_box;
use std::io::Read;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use starling_core::jetstream::{self, Body};

const USAGE: &str = "usage: decode-bench FILE [--passes N] [--limit N]";
/// The decode-only target, in events per second per core.
const TARGET_EVENTS_PER_S: f64 = 1_000_000.0;
/// Bytes read from the file at a time while loading.
const LOAD_CHUNK_BYTES: usize = 1 << 20;

struct Args {
    file: PathBuf,
    passes: usize,
    limit: usize,
}

fn parse_args() -> Result<Args, String> {
    let mut file = None;
    let mut passes = 3usize;
    let mut limit = usize::MAX;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = || {
            args.next()
                .ok_or_else(|| format!("`{arg}` needs a value\n{USAGE}"))
        };
        match arg.as_str() {
            "--passes" => passes = number(&arg, &value()?)?,
            "--limit" => limit = number(&arg, &value()?)?,
            "-h" | "--help" => return Err(USAGE.to_owned()),
            flag if flag.starts_with("--") => {
                return Err(format!("unknown flag `{flag}`\n{USAGE}"));
            }
            _ if file.is_none() => file = Some(PathBuf::from(arg)),
            _ => return Err(format!("one file only\n{USAGE}")),
        }
    }
    let file = file.ok_or_else(|| USAGE.to_owned())?;
    if passes == 0 {
        return Err("`--passes 0`: at least one pass is needed".to_owned());
    }
    Ok(Args {
        file,
        passes,
        limit,
    })
}

fn main() -> ExitCode {
    let result = parse_args().and_then(|args| run(&args));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("decode-bench: {err}");
            ExitCode::FAILURE
        }
    }
}

/// The first `args.limit` lines of the file, decompressed; reading stops once it has them.
fn load(args: &Args) -> Result<Vec<u8>, String> {
    let path = &args.file;
    let context = |err: std::io::Error| format!("reading `{}`: {err}", path.display());
    let mut file = std::fs::File::open(path).map_err(context)?;
    let mut magic = [0u8; 4];
    let n = file.read(&mut magic).map_err(context)?;
    let head = std::io::Cursor::new(magic.get(..n).unwrap_or_default().to_vec());
    let raw = head.chain(file);
    let mut stream: Box<dyn Read> = if n == 4 && magic == [0x28, 0xb5, 0x2f, 0xfd] {
        Box::new(zstd::stream::read::Decoder::new(raw).map_err(context)?)
    } else {
        Box::new(raw)
    };
    let mut text = Vec::new();
    let mut lines = 0usize;
    let mut buf = vec![0u8; LOAD_CHUNK_BYTES];
    loop {
        let n = stream.read(&mut buf).map_err(context)?;
        let Some(chunk) = buf.get(..n).filter(|chunk| !chunk.is_empty()) else {
            break;
        };
        text.extend_from_slice(chunk);
        lines += chunk.iter().filter(|&&b| b == b'\n').count();
        if lines >= args.limit {
            break;
        }
    }
    Ok(text)
}

/// What one pass decoded.
#[derive(Default, Clone, Copy, PartialEq, Eq, Debug)]
struct Tally {
    commits: u64,
    others: u64,
    bad: u64,
}

fn decode_all(lines: &[&[u8]]) -> Tally {
    let mut tally = Tally::default();
    for line in lines {
        match jetstream::decode(black_box(line)) {
            Ok(event) => {
                match event.body {
                    Body::Commit(_) => tally.commits += 1,
                    _ => tally.others += 1,
                }
                black_box(&event);
            }
            Err(err) => {
                tally.bad += 1;
                black_box(&err);
            }
        }
    }
    tally
}

fn run(args: &Args) -> Result<(), String> {
    let load_started = Instant::now();
    let text = load(args)?;
    let lines: Vec<&[u8]> = text
        .split(|&b| b == b'\n')
        .filter(|line| !line.is_empty())
        .take(args.limit)
        .collect();
    if lines.is_empty() {
        return Err(format!("`{}` has no events", args.file.display()));
    }
    let bytes: usize = lines.iter().map(|line| line.len()).sum();
    println!(
        "loaded {} events, {:.1} MB of JSON ({:.0} bytes/event) from {} in {:.1} s; decoding on one thread",
        lines.len(),
        bytes as f64 / 1e6,
        bytes as f64 / lines.len() as f64,
        args.file.display(),
        load_started.elapsed().as_secs_f64()
    );
    let mut rates = Vec::with_capacity(args.passes);
    let mut first: Option<Tally> = None;
    for pass in 1..=args.passes {
        let started = Instant::now();
        let tally = decode_all(&lines);
        let seconds = started.elapsed().as_secs_f64();
        let rate = lines.len() as f64 / seconds;
        println!(
            "pass {pass}: {:.3} s, {:.0} events/s, {:.0} MB/s ({} commits, {} identity/account, {} dropped)",
            seconds,
            rate,
            bytes as f64 / 1e6 / seconds,
            tally.commits,
            tally.others,
            tally.bad
        );
        assert!(first.is_none_or(|first| first == tally), "passes disagree");
        first = Some(tally);
        rates.push(rate);
    }
    rates.sort_by(f64::total_cmp);
    let best = rates.last().copied().unwrap_or(0.0);
    let median = rates.get(rates.len() / 2).copied().unwrap_or(0.0);
    let per_event_bytes = bytes as f64 / lines.len() as f64;
    println!(
        "best {:.0} events/s ({:.0} MB/s), median {:.0} events/s; target {:.0} events/s per core: {}",
        best,
        best * per_event_bytes / 1e6,
        median,
        TARGET_EVENTS_PER_S,
        if best >= TARGET_EVENTS_PER_S {
            format!("met ({:.2}x)", best / TARGET_EVENTS_PER_S)
        } else {
            format!(
                "missed by {:.0}%",
                (1.0 - best / TARGET_EVENTS_PER_S) * 100.0
            )
        }
    );
    Ok(())
}
