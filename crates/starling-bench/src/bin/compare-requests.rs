//! `compare-requests`: the request sets of the side-by-side benchmark, drawn from the Jetstream
//! file both dataplanes were loaded from.
//!
//! ```text
//! compare-requests --events FILE.jsonl.zst --out DIR [--seed 7] [--requests 2000]
//!                  [--limit 50] [--batch 25] [--top 500] [--track N]
//!                  [--imported FOLLOWS.csv.zst] [--timeline-classes C,C,…] [--targets T]
//! ```
//!
//! Reads the file once (each line through Starling's decoder; lines it drops are skipped, as
//! both dataplanes skip them) and keeps its final state (`starling_bench::content::Content`).
//! Then writes, in `DIR`, for each set `NAME.json` and `NAME.bin` (see
//! `starling_bench::requests`), `NAME.expect`: one line per request, `FIELD KIND COUNT`, how
//! many elements the response's top-level field FIELD must hold (KIND `m` counts messages, `p`
//! the values of a packed repeated integer), and `NAME.content.jsonl`: each request's expected
//! answer (see `starling_bench::content`). The sets, `--requests` each:
//! - `timeline`: GetTimeline (`--limit`) for random readers whose followed accounts and own
//!   posts and reposts number more than the limit, so a full page is due;
//! - `timeline-C` for each C of `--timeline-classes`: the same, for readers following C
//!   accounts ±10% (the gRPC targets ask for readers following ~100 and ~1,000);
//! - `follows-following`: GetFollowsFollowing from a random viewer (who follows someone) to
//!   one target among the `--top` most followed (the AppView's getProfile asks one): one result;
//!   with `--targets T`, also `follows-following-T`: T distinct targets a request;
//! - `author-feed`: GetAuthorFeed (`--limit`) for random authors with more items than that
//!   (at a small scale where there are none, any author with items);
//! - `followers`: GetFollowers (`--limit`) for random followed accounts;
//! - `interaction-counts`: GetInteractionCounts for `--batch` random live posts;
//! - `counts-for-users`: GetCountsForUsers for `--batch` random actors;
//! - `actor-likes`, `list-members`, `search-actors`: GetActorLikes, GetListMembers and
//!   SearchActors (`--limit`);
//! - `notifications`, `unread-count`: GetNotifications (`--limit`, one request in four for
//!   priority notifications only) and GetUnreadNotificationCount for random recipients with
//!   notifications to show (`unread-count` has no `NAME.expect`: its answer is one count).
//!
//! `--track N` follows a network too large to model whole for one actor in N, and draws every
//! set about those actors only (`follows-following`: to the most followed tracked targets),
//! leaving out `search-actors` (see `starling_bench::content`). `--imported` reads the follows
//! a store imported without records (`starling import-follows`, one `actor_did,subject_did` a
//! line): graph edges, which count as followers, fill timelines and make a notification a
//! priority one.
//!
//! Prints one `key: value` line per fact about the draw.

use std::error::Error;
use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use starling_bench::cli::number;
use starling_bench::content::{Content, FeedDraw};
use starling_core::jetstream;

type Res<T> = Result<T, Box<dyn Error>>;

const USAGE: &str = "usage: compare-requests --events FILE.jsonl.zst --out DIR [--seed N] \
                     [--requests N] [--limit N] [--batch N] [--top N] [--track N] \
                     [--imported FOLLOWS.csv.zst] [--timeline-classes C,C,...] [--targets T]";

struct Args {
    events: PathBuf,
    out: PathBuf,
    seed: u64,
    n_requests: usize,
    limit: u32,
    batch: usize,
    top: usize,
    track: u64,
    imported: Option<PathBuf>,
    timeline_classes: Vec<usize>,
    many_targets: Option<usize>,
}

fn parse_args() -> Res<Args> {
    let mut args = Args {
        events: PathBuf::new(),
        out: PathBuf::new(),
        seed: 7,
        n_requests: 2_000,
        limit: 50,
        batch: 25,
        top: 500,
        track: 1,
        imported: None,
        timeline_classes: Vec::new(),
        many_targets: None,
    };
    let mut iter = std::env::args().skip(1);
    while let Some(flag) = iter.next() {
        let value = iter
            .next()
            .ok_or_else(|| format!("`{flag}` needs a value\n{USAGE}"))?;
        match flag.as_str() {
            "--events" => args.events = PathBuf::from(value),
            "--out" => args.out = PathBuf::from(value),
            "--seed" => args.seed = number(&flag, &value)?,
            "--requests" => args.n_requests = number(&flag, &value)?,
            "--limit" => args.limit = number(&flag, &value)?,
            "--batch" => args.batch = number(&flag, &value)?,
            "--top" => args.top = number(&flag, &value)?,
            "--track" => args.track = number(&flag, &value)?,
            "--imported" => args.imported = Some(PathBuf::from(value)),
            "--targets" => args.many_targets = Some(number(&flag, &value)?),
            "--timeline-classes" => {
                let classes = value.split(',').map(|class| number(&flag, class));
                args.timeline_classes = classes.collect::<Result<_, _>>()?;
            }
            _ => return Err(format!("unknown flag `{flag}`\n{USAGE}").into()),
        }
    }
    if args.events.as_os_str().is_empty() || args.out.as_os_str().is_empty() {
        return Err(USAGE.into());
    }
    if args.limit == 0 || args.limit > 100 || args.batch == 0 || args.n_requests == 0 {
        return Err("`--limit` must be 1..=100, `--batch` and `--requests` at least 1".into());
    }
    if args.many_targets.is_some_and(|n| n < 2) {
        return Err("`--targets` is at least 2 (the one-target set is always drawn)".into());
    }
    if args.timeline_classes.contains(&0) {
        return Err("`--timeline-classes` are follow counts of at least 1".into());
    }
    if args.track == 0 {
        return Err("`--track` must be at least 1 (1 tracks every actor)".into());
    }
    Ok(args)
}

fn main() -> std::process::ExitCode {
    match parse_args().and_then(|args| run(&args)) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("compare-requests: error: {err}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// The lines of a plain or zstd-compressed file.
fn open_lines(path: &PathBuf) -> Res<Box<dyn BufRead>> {
    let file = File::open(path).map_err(|err| format!("opening `{}`: {err}", path.display()))?;
    Ok(if path.extension().is_some_and(|ext| ext == "zst") {
        Box::new(BufReader::new(zstd::Decoder::new(file)?))
    } else {
        Box::new(BufReader::new(file))
    })
}

/// Adds the imported follows of `path` to `content`; returns how many lines it read.
fn read_imported(content: &mut Content, path: &PathBuf) -> Res<u64> {
    let mut n_lines = 0u64;
    for line in open_lines(path)?.lines() {
        let line = line.map_err(|err| format!("reading `{}`: {err}", path.display()))?;
        n_lines += 1;
        let (actor, subject) = line
            .trim_end()
            .split_once(',')
            .ok_or_else(|| format!("`{}` line {n_lines}: not `actor,subject`", path.display()))?;
        content.import_follow(actor, subject);
    }
    Ok(n_lines)
}

/// Reads the file into the final state the request sets are drawn from, tracking one actor
/// in `track`; returns it and the number of lines read.
fn read_events(path: &PathBuf, track: u64) -> Res<(Content, u64)> {
    let mut content = Content::tracking(track);
    let mut n_lines = 0u64;
    for line in open_lines(path)?.lines() {
        let line = line.map_err(|err| format!("reading `{}`: {err}", path.display()))?;
        n_lines += 1;
        if let Ok(event) = jetstream::decode_str(&line) {
            content.apply(&event);
        }
    }
    Ok((content, n_lines))
}

fn run(args: &Args) -> Res<()> {
    let (mut content, n_lines) = read_events(&args.events, args.track)?;
    std::fs::create_dir_all(&args.out)?;
    println!("events: {n_lines}");
    if let Some(path) = &args.imported {
        println!("imported follows: {}", read_imported(&mut content, path)?);
    }
    if args.track > 1 {
        println!("tracked: one actor in {}", args.track);
    }
    let mut rng = ChaCha8Rng::seed_from_u64(args.seed);
    let (out, n_requests, limit) = (&args.out, args.n_requests, args.limit);
    let feeds = FeedDraw {
        timeline_classes: args.timeline_classes.clone(),
        many_targets: args.many_targets,
        ..FeedDraw::new(n_requests, limit, args.top)
    };
    let mut facts = content.write_feed_sets(out, &mut rng, &feeds)?;
    facts.extend(content.write_count_sets(out, &mut rng, n_requests, limit, args.batch)?);
    facts.extend(content.write_sets(out, &mut rng, n_requests, limit)?);
    facts.extend(content.write_notification_sets(out, &mut rng, n_requests, limit)?);
    facts.iter().for_each(|fact| println!("{fact}"));
    Ok(())
}
