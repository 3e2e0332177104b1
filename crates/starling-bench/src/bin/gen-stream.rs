//! `gen-stream`: writes a long Jetstream stream, zstd-compressed, made by re-keying real events.
//!
//! ```text
//! gen-stream --events 10000000 --actors 1000000 --seed 7 --out FILE.jsonl.zst [--templates DIR]
//! ```
//!
//! See `starling_bench::stream` for how events are made. Two threads share the work: this one
//! generates, a second decodes every line with `starling_core::jetstream::decode` and compresses
//! (plain zstd, level 3). Any line that does not decode is counted, and the run fails without
//! leaving the output file behind. The file is written under a temporary name and renamed at
//! the end, so a file with the final name is always complete.

use starling_bench::cli::{number, tmp_path};
use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::mpsc::{Receiver, sync_channel};
use std::thread;
use std::time::Instant;

use starling_bench::stream::{Generator, StreamParams};
use starling_bench::templates::{load_templates, shared_data_dir};

/// Bytes of lines handed to the writer thread at a time.
const CHUNK_BYTES: usize = 4 * 1024 * 1024;
/// Chunks queued for the writer thread, at most.
const CHUNKS_QUEUED_MAX: usize = 8;
/// The zstd level: the default, fast and still about 5:1 on this data.
const ZSTD_LEVEL: i32 = 3;
/// Bad lines quoted in the error, at most.
const BAD_LINES_SHOWN_MAX: usize = 3;

const USAGE: &str =
    "usage: gen-stream --events N --actors N --seed N --out FILE.jsonl.zst [--templates DIR]";

struct Args {
    events: u64,
    params: StreamParams,
    out: PathBuf,
    templates: PathBuf,
}

fn parse_args() -> Result<Args, String> {
    let mut events = 10_000_000u64;
    let mut actors = 1_000_000u32;
    let mut seed = 7u64;
    let mut out = None;
    let mut templates = shared_data_dir();
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let mut value = || {
            args.next()
                .ok_or_else(|| format!("`{flag}` needs a value\n{USAGE}"))
        };
        match flag.as_str() {
            "--events" => events = number(&flag, &value()?)?,
            "--actors" => actors = number(&flag, &value()?)?,
            "--seed" => seed = number(&flag, &value()?)?,
            "--out" => out = Some(PathBuf::from(value()?)),
            "--templates" => templates = PathBuf::from(value()?),
            "-h" | "--help" => return Err(USAGE.to_owned()),
            other => return Err(format!("unknown argument `{other}`\n{USAGE}")),
        }
    }
    let out = out.ok_or_else(|| format!("`--out FILE` is required\n{USAGE}"))?;
    if actors < 2 {
        return Err(format!(
            "`--actors {actors}` is too few: the pool needs at least 2"
        ));
    }
    Ok(Args {
        events,
        params: StreamParams { actors, seed },
        out,
        templates,
    })
}

/// What the writer thread saw.
#[derive(Default)]
struct Written {
    lines: u64,
    bytes: u64,
    bad: u64,
    bad_examples: Vec<String>,
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(args) => args,
        Err(err) => {
            eprintln!("gen-stream: {err}");
            return ExitCode::FAILURE;
        }
    };
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("gen-stream: error: {err}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: &Args) -> Result<(), String> {
    let started = Instant::now();
    let templates = load_templates(&args.templates).map_err(|err| err.to_string())?;
    if let Some(dir) = args.out.parent().filter(|dir| !dir.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)
            .map_err(|err| format!("creating `{}`: {err}", dir.display()))?;
    }
    let tmp = tmp_path(&args.out);
    let file = File::create(&tmp).map_err(|err| format!("creating `{}`: {err}", tmp.display()))?;
    let (tx, rx) = sync_channel::<Vec<u8>>(CHUNKS_QUEUED_MAX);
    let writer = thread::Builder::new()
        .name("gen-stream-writer".to_owned())
        .spawn(move || check_and_compress(rx, file))
        .map_err(|err| format!("starting the writer thread: {err}"))?;

    let mut generator = Generator::new(&templates, args.params);
    let mut per_template = vec![0u64; templates.len()];
    let mut chunk = Vec::with_capacity(CHUNK_BYTES + 64 * 1024);
    for _ in 0..args.events {
        let idx = generator.next_event(&mut chunk);
        if let Some(count) = per_template.get_mut(idx) {
            *count += 1;
        }
        if chunk.len() >= CHUNK_BYTES {
            let full = std::mem::replace(&mut chunk, Vec::with_capacity(CHUNK_BYTES + 64 * 1024));
            if tx.send(full).is_err() {
                break;
            }
        }
    }
    if !chunk.is_empty() {
        let _ = tx.send(chunk);
    }
    drop(tx);
    let written = writer
        .join()
        .map_err(|_| "the writer thread panicked".to_owned())?
        .inspect_err(|_| {
            let _ = std::fs::remove_file(&tmp);
        })?;

    if written.bad > 0 || written.lines != args.events {
        let _ = std::fs::remove_file(&tmp);
        return Err(format!(
            "{} of {} generated events do not decode (expected {} events); first: {}",
            written.bad,
            written.lines,
            args.events,
            written.bad_examples.join(" | ")
        ));
    }
    std::fs::rename(&tmp, &args.out).map_err(|err| {
        format!(
            "renaming `{}` to `{}`: {err}",
            tmp.display(),
            args.out.display()
        )
    })?;
    let compressed = std::fs::metadata(&args.out)
        .map(|meta| meta.len())
        .unwrap_or(0);
    print_summary(
        args,
        &templates,
        &per_template,
        &written,
        compressed,
        started,
    );
    Ok(())
}

/// Decodes every line of every chunk, then compresses the chunk into `file`.
fn check_and_compress(rx: Receiver<Vec<u8>>, file: File) -> Result<Written, String> {
    let mut encoder = zstd::stream::write::Encoder::new(BufWriter::new(file), ZSTD_LEVEL)
        .map_err(|err| format!("starting zstd: {err}"))?;
    encoder
        .include_checksum(true)
        .map_err(|err| format!("configuring zstd: {err}"))?;
    let mut written = Written::default();
    for chunk in rx {
        for line in chunk.split(|&b| b == b'\n').filter(|line| !line.is_empty()) {
            written.lines += 1;
            if let Err(err) = starling_core::jetstream::decode(line) {
                written.bad += 1;
                if written.bad_examples.len() < BAD_LINES_SHOWN_MAX {
                    let text = String::from_utf8_lossy(line);
                    written.bad_examples.push(format!("{err}: {text}"));
                }
            }
        }
        written.bytes += chunk.len() as u64;
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
    Ok(written)
}

fn print_summary(
    args: &Args,
    templates: &[starling_bench::templates::Template],
    per_template: &[u64],
    written: &Written,
    compressed: u64,
    started: Instant,
) {
    let mut mix: BTreeMap<&str, u64> = BTreeMap::new();
    for (template, count) in templates.iter().zip(per_template) {
        *mix.entry(&template.label).or_default() += count;
    }
    let mut mix: Vec<(&str, u64)> = mix.into_iter().collect();
    mix.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    let seconds = started.elapsed().as_secs_f64();
    println!(
        "wrote {} events ({} actors, seed {}) to {}",
        written.lines,
        args.params.actors,
        args.params.seed,
        args.out.display()
    );
    println!(
        "{:.1} MB of JSON ({:.0} bytes/event), {:.1} MB compressed, in {seconds:.1} s ({:.0} events/s); every event decodes",
        written.bytes as f64 / 1e6,
        written.bytes as f64 / written.lines.max(1) as f64,
        compressed as f64 / 1e6,
        written.lines as f64 / seconds
    );
    println!("mix:");
    for (label, count) in mix {
        println!(
            "  {:>6.2}%  {count:>10}  {label}",
            count as f64 * 100.0 / written.lines.max(1) as f64
        );
    }
}
