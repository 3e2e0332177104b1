//! `grpc-requests`: request data for the gRPC benchmark (`run-grpc-bench.sh`), drawn from the
//! timeline benchmark's data set.
//!
//! ```text
//! grpc-requests --dir DIR --out OUT [--seed 7] [--viewers 10000] [--requests 10000]
//!               [--targets 25] [--top 500] [--snapshot-out PATH]
//! ```
//!
//! Reads `DIR/graph.snapshot` as `timeline-bench setup` wrote it (the bare graph) and writes, in
//! `OUT`, each set of request messages twice: `NAME.json`, a JSON array for `ghz --data-file`
//! (which sends the elements round-robin), and `NAME.bin`, the same messages encoded as protobuf,
//! each behind its length as a little-endian `u32`, for `grpc-load` (`src/bin/grpc-load.rs`). Sets:
//! - `timeline-100`, `timeline-1000`, `timeline-10000`: `GetTimeline` (limit 50)
//!   for the readers of `timeline-bench`'s read benchmark (the same draw: actors following
//!   ~100, ~1,000 and ~10,000 accounts). Only the authors those readers follow have posts in
//!   that store, so other readers would see nearly empty timelines. Their DIDs also go to
//!   `readers-100.txt`, `readers-1000.txt`, one per line.
//! - `follows-following-T` (T = `--targets`) and `follows-following-1`:
//!   `GetFollowsFollowing` with a random viewer (uniform over the actors that follow anyone) and
//!   T (or 1) distinct random targets among the `--top` most-followed accounts: GraphD's worst
//!   case.
//! - `ping`: one empty `PingRequest`.
//!
//! With `--snapshot-out`, it also writes the snapshot as `starling serve` reads it: Starling's
//! header (magic, graph-log sequence 0, CRC-32) before the bare graph. Prints one `key: value`
//! line per fact about the draw.

use std::error::Error;
use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use rand::seq::{IndexedRandom, SliceRandom};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use starling_bench::cli::number;
use starling_bench::requests::{Request, write_requests};
use starling_core::ActorId;
use starling_core::sample::did;
use starling_graph::Graph;

type Res<T> = Result<T, Box<dyn Error>>;

/// `timeline-bench`'s reader classes (accounts followed ±10%, readers wanted) and the salt of
/// its draw: the same seed gives the same readers, whose followed authors have posts.
const READER_CLASSES: [(usize, usize); 3] = [(100, 100), (1_000, 300), (10_000, 20)];
const SALT_READERS: u64 = 0x0EAD_E125;
/// Salt of this tool's own draws (viewers and targets).
const SALT_REQUESTS: u64 = 0x6E9C_0000;
/// Page size of every `GetTimeline` request, as the target asks.
const PAGE_LIMIT: u32 = 50;
/// `starling-ingest`'s snapshot header: magic, then the graph-log sequence it covers.
const SNAPSHOT_MAGIC: &[u8; 8] = b"STRLSEQ1";
/// The bare graph snapshot starts with this magic (`starling-graph/src/snapshot.rs`).
const GRAPH_MAGIC_LEN: usize = 8;

struct Args {
    dir: PathBuf,
    out: PathBuf,
    seed: u64,
    n_viewers: usize,
    n_requests: usize,
    n_targets: usize,
    n_top: usize,
    snapshot_out: Option<PathBuf>,
}

fn parse_args() -> Res<Args> {
    let mut args = Args {
        dir: PathBuf::new(),
        out: PathBuf::new(),
        seed: 7,
        n_viewers: 10_000,
        n_requests: 10_000,
        n_targets: 25,
        n_top: 500,
        snapshot_out: None,
    };
    let mut iter = std::env::args().skip(1);
    while let Some(flag) = iter.next() {
        let value = iter
            .next()
            .ok_or_else(|| format!("`{flag}` needs a value"))?;
        match flag.as_str() {
            "--dir" => args.dir = PathBuf::from(value),
            "--out" => args.out = PathBuf::from(value),
            "--seed" => args.seed = number(&flag, &value)?,
            "--viewers" => args.n_viewers = number(&flag, &value)?,
            "--requests" => args.n_requests = number(&flag, &value)?,
            "--targets" => args.n_targets = number(&flag, &value)?,
            "--top" => args.n_top = number(&flag, &value)?,
            "--snapshot-out" => args.snapshot_out = Some(PathBuf::from(value)),
            other => return Err(format!("unknown flag `{other}`").into()),
        }
    }
    if args.dir.as_os_str().is_empty() || args.out.as_os_str().is_empty() {
        return Err("usage: grpc-requests --dir DIR --out OUT [FLAGS]".into());
    }
    if args.n_targets == 0 || args.n_targets > args.n_top {
        return Err(format!(
            "`--targets {}` must be between 1 and `--top` ({})",
            args.n_targets, args.n_top
        )
        .into());
    }
    Ok(args)
}

fn main() -> std::process::ExitCode {
    match parse_args().and_then(|args| run(&args)) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("grpc-requests: error: {err}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run(args: &Args) -> Res<()> {
    let path = args.dir.join("graph.snapshot");
    let file = File::open(&path).map_err(|err| {
        format!(
            "opening `{}` (run `timeline-bench setup`): {err}",
            path.display()
        )
    })?;
    let graph = Graph::read_snapshot(&mut BufReader::with_capacity(1 << 20, file))
        .map_err(|err| format!("reading `{}`: {err}", path.display()))?;
    println!("graph_actors: {}", graph.n_actors());
    println!("graph_follows: {}", graph.n_follows());
    std::fs::create_dir_all(&args.out)?;

    for (target, readers) in pick_readers(&graph, args.seed) {
        let requests: Vec<Request> = readers
            .iter()
            .map(|&reader| Request::actor_page(&did(reader.0), PAGE_LIMIT))
            .collect();
        write_requests(&args.out, &format!("timeline-{target}"), &requests)?;
        let dids: String = readers.iter().map(|&r| did(r.0) + "\n").collect();
        std::fs::write(args.out.join(format!("readers-{target}.txt")), dids)?;
        let mut follows: Vec<usize> = readers.iter().map(|&r| graph.n_following(r)).collect();
        follows.sort_unstable();
        println!(
            "readers_{target}: {} (following {}..{}, median {})",
            readers.len(),
            follows.first().copied().unwrap_or(0),
            follows.last().copied().unwrap_or(0),
            follows.get(follows.len() / 2).copied().unwrap_or(0)
        );
    }

    let top = most_followed(&graph, args.n_top);
    println!(
        "top_{}_followers: {}..{}",
        args.n_top,
        top.last().map_or(0, |&(_, n)| n),
        top.first().map_or(0, |&(_, n)| n)
    );
    let mut rng = ChaCha8Rng::seed_from_u64(args.seed ^ SALT_REQUESTS);
    let viewers = random_followers(&graph, args.n_viewers, &mut rng);
    let mut viewer_follows: Vec<usize> = viewers.iter().map(|&v| graph.n_following(v)).collect();
    viewer_follows.sort_unstable();
    println!(
        "viewers: {} (following median {}, p99 {}, max {})",
        viewers.len(),
        viewer_follows
            .get(viewer_follows.len() / 2)
            .copied()
            .unwrap_or(0),
        viewer_follows
            .get(viewer_follows.len() * 99 / 100)
            .copied()
            .unwrap_or(0),
        viewer_follows.last().copied().unwrap_or(0)
    );
    let top_ids: Vec<ActorId> = top.iter().map(|&(id, _)| id).collect();
    for n_targets in [args.n_targets, 1] {
        let requests = follows_following(&graph, &viewers, &top_ids, n_targets, args, &mut rng)?;
        write_requests(
            &args.out,
            &format!("follows-following-{n_targets}"),
            &requests,
        )?;
    }
    let ping = Request {
        json: "{}".to_owned(),
        proto: Vec::new(),
    };
    write_requests(&args.out, "ping", &[ping])?;

    if let Some(out) = &args.snapshot_out {
        write_starling_snapshot(&path, out)?;
        println!("snapshot_out: {}", out.display());
    }
    Ok(())
}

/// `timeline-bench`'s `pick_readers`, draw for draw: per class, every non-celebrity actor
/// following the class's count ±10%, shuffled, the first ones kept.
fn pick_readers(graph: &Graph, seed: u64) -> Vec<(usize, Vec<ActorId>)> {
    let celebrity = graph.n_actors().saturating_sub(1) as u32;
    let mut candidates: Vec<Vec<ActorId>> = vec![Vec::new(); READER_CLASSES.len()];
    for id in 0..celebrity {
        let n_following = graph.n_following(ActorId(id));
        for (&(target, _), class) in READER_CLASSES.iter().zip(candidates.iter_mut()) {
            if n_following * 10 >= target * 9 && n_following * 10 <= target * 11 {
                class.push(ActorId(id));
            }
        }
    }
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ SALT_READERS);
    READER_CLASSES
        .iter()
        .zip(candidates)
        .map(|(&(target, wanted), mut class)| {
            class.shuffle(&mut rng);
            class.truncate(wanted);
            (target, class)
        })
        .collect()
}

/// The `n` accounts with the most followers, most-followed first.
fn most_followed(graph: &Graph, n: usize) -> Vec<(ActorId, usize)> {
    let mut res: Vec<(ActorId, usize)> = (0..graph.n_actors() as u32)
        .map(|id| (ActorId(id), graph.n_followers(ActorId(id))))
        .collect();
    res.sort_unstable_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    res.truncate(n);
    res
}

/// `n` distinct actors that follow at least one account, uniformly at random.
fn random_followers(graph: &Graph, n: usize, rng: &mut ChaCha8Rng) -> Vec<ActorId> {
    let mut res: Vec<ActorId> = Vec::with_capacity(n);
    let mut seen = std::collections::HashSet::new();
    let mut draws_left = n.saturating_mul(100);
    while res.len() < n && draws_left > 0 {
        draws_left -= 1;
        let actor = ActorId(rng.random_range(0..graph.n_actors() as u32));
        if graph.n_following(actor) > 0 && seen.insert(actor) {
            res.push(actor);
        }
    }
    res
}

/// `args.n_requests` requests, each a random viewer and `n_targets` distinct random targets;
/// prints the mean number of known followers per (viewer, target) pair.
fn follows_following(
    graph: &Graph,
    viewers: &[ActorId],
    top: &[ActorId],
    n_targets: usize,
    args: &Args,
    rng: &mut ChaCha8Rng,
) -> Res<Vec<Request>> {
    let mut res = Vec::with_capacity(args.n_requests);
    let (mut n_pairs, mut n_known) = (0u64, 0u64);
    for _ in 0..args.n_requests {
        let viewer = *viewers.choose(rng).ok_or("no viewers follow anyone")?;
        let targets: Vec<ActorId> = top.choose_multiple(rng, n_targets).copied().collect();
        for &target in &targets {
            n_pairs += 1;
            n_known += graph.known_followers(viewer, target, None).count as u64;
        }
        let target_dids: Vec<String> = targets.iter().map(|t| did(t.0)).collect();
        res.push(Request::follows_following(&did(viewer.0), &target_dids));
    }
    println!(
        "follows_following_{n_targets}: {} requests, {:.2} known followers per pair",
        res.len(),
        n_known as f64 / n_pairs.max(1) as f64
    );
    Ok(res)
}

/// Copies the bare snapshot `from` to `to` behind Starling's header, claiming log sequence 0:
/// the store's graph log is empty, so `serve` applies nothing on top of it.
fn write_starling_snapshot(from: &Path, to: &Path) -> Res<()> {
    let mut input = File::open(from)?;
    let mut magic = [0u8; GRAPH_MAGIC_LEN];
    input.read_exact(&mut magic)?;
    if &magic == SNAPSHOT_MAGIC {
        return Err(format!("`{}` already has Starling's header", from.display()).into());
    }
    input.seek(SeekFrom::Start(0))?;
    let mut header = SNAPSHOT_MAGIC.to_vec();
    header.extend_from_slice(&0u64.to_le_bytes());
    let crc = crc32(&header);
    let mut w = BufWriter::with_capacity(1 << 20, File::create(to)?);
    w.write_all(&header)?;
    w.write_all(&crc.to_le_bytes())?;
    std::io::copy(&mut input, &mut w)?;
    w.into_inner().map_err(|err| err.into_error())?.sync_all()?;
    Ok(())
}

/// CRC-32 (IEEE, reflected, as `crc32fast`), bit by bit: it only covers a 16-byte header.
fn crc32(bytes: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &byte in bytes {
        crc ^= u32::from(byte);
        for _ in 0..8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ 0xEDB8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

#[cfg(test)]
mod tests {
    use super::*;

    // Checks the bitwise CRC-32 against the standard check value of "123456789" and against
    // the header checksum zlib computes for Starling's magic with sequence 0.
    #[test]
    fn crc32_matches_the_ieee_check_values() {
        assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
        let mut header = SNAPSHOT_MAGIC.to_vec();
        header.extend_from_slice(&0u64.to_le_bytes());
        assert_eq!(crc32(&header), 1_811_649_860);
    }
}
