//! Measures the graph at a given scale: load time, resident memory, snapshot size and restart
//! time, known-followers latency (GraphD's worst case: random viewers against the 500
//! most-followed accounts), and follow/unfollow throughput while queries run.
//!
//! ```text
//! cargo run --release -p starling-graph --example graph_bench -- \
//!     --actors 5500000 --follows 160000000 --seed 7
//! ```
//!
//! Options: `--queries N` (default 200,000 per run), `--writes N` (default 1,000,000),
//! `--snapshot PATH` (default a file in the temp directory, removed at the end).
//! Prints one `key: value` line per measurement. A sample of the known-followers answers is
//! checked against a recount from the generated edges (`kf_answers_checked`); a wrong one
//! fails the run. The restart is measured in a child process
//! (this binary with `--read-snapshot PATH`) so that its memory is the loaded graph's alone.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::error::Error;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use starling_core::ActorId;
use starling_graph::synthetic::{self, SyntheticParams};
use starling_graph::{EdgeChange, Graph, GraphBuilder};

/// How many of the most-followed accounts the known-followers runs target, as GraphD did.
const TARGETS_TOP_N: usize = 500;

/// How many answers of each known-followers run are checked against a recount.
const CHECKED_PER_RUN: usize = 1_000;

/// Some of a run's (viewer, target) queries, with the run's limit on the ids listed.
type Sample = (Vec<(ActorId, ActorId)>, Option<usize>);

struct Args {
    n_actors: u32,
    n_follows: u64,
    seed: u64,
    n_queries: usize,
    n_writes: usize,
    snapshot: Option<String>,
    read_snapshot: Option<String>,
}

fn parse_args() -> Result<Args, Box<dyn Error>> {
    let mut args = Args {
        n_actors: 5_500_000,
        n_follows: 160_000_000,
        seed: 7,
        n_queries: 200_000,
        n_writes: 1_000_000,
        snapshot: None,
        read_snapshot: None,
    };
    let mut iter = std::env::args().skip(1);
    while let Some(flag) = iter.next() {
        let mut value = || iter.next().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--actors" => args.n_actors = value()?.parse()?,
            "--follows" => args.n_follows = value()?.parse()?,
            "--seed" => args.seed = value()?.parse()?,
            "--queries" => args.n_queries = value()?.parse()?,
            "--writes" => args.n_writes = value()?.parse()?,
            "--snapshot" => args.snapshot = Some(value()?),
            "--read-snapshot" => args.read_snapshot = Some(value()?),
            other => return Err(format!("unknown flag `{other}`").into()),
        }
    }
    Ok(args)
}

/// `VmRSS` and `VmHWM` of this process, in MiB.
fn memory_mib() -> (f64, f64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|line| line.strip_prefix(name))
            .and_then(|rest| {
                rest.trim()
                    .trim_end_matches("kB")
                    .trim()
                    .parse::<f64>()
                    .ok()
            })
            .map_or(f64::NAN, |kib| kib / 1024.0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// CPU time (user + system) this process has used, in seconds; unlike wall time it does not
/// grow when other processes compete for the cores.
fn cpu_s() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the command name (which may hold spaces, so split after its `)`): utime and
    // stime are the 12th and 13th, in clock ticks of 1/100 s on Linux.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map_or("", |(_, rest)| rest)
        .split_whitespace()
        .collect();
    let ticks = |idx: usize| {
        fields
            .get(idx)
            .and_then(|field| field.parse::<f64>().ok())
            .unwrap_or(f64::NAN)
    };
    (ticks(11) + ticks(12)) / 100.0
}

fn print_memory(prefix: &str) {
    let (rss, hwm) = memory_mib();
    println!("{prefix}_rss_mib: {rss:.0}");
    println!("{prefix}_hwm_mib: {hwm:.0}");
}

fn main() -> Result<(), Box<dyn Error>> {
    let args = parse_args()?;
    if let Some(path) = &args.read_snapshot {
        return restart(path);
    }
    println!("actors: {}", args.n_actors);
    println!("follows_requested: {}", args.n_follows);
    println!("seed: {}", args.seed);
    print_memory("start");

    let started = Instant::now();
    let edges: Vec<(ActorId, ActorId)> = synthetic::generate(SyntheticParams::new(
        args.n_actors,
        args.n_follows,
        args.seed,
    ))
    .collect();
    println!("generate_s: {:.2}", started.elapsed().as_secs_f64());
    println!("follows_generated: {}", edges.len());
    print_degree_stats(&edges, args.n_actors as usize);

    let started = Instant::now();
    let mut builder = GraphBuilder::with_capacity(edges.len());
    for &(actor, subject) in &edges {
        builder.follow(actor, subject);
    }
    drop(edges);
    let graph = builder.build();
    println!("load_s: {:.2}", started.elapsed().as_secs_f64());
    print_memory("loaded");
    let stats = graph.stats();
    println!("graph_follows: {}", stats.n_follows);
    println!("array_sets: {}", stats.n_array_sets);
    println!("bitmap_sets: {}", stats.n_bitmap_sets);
    println!(
        "array_member_mib: {:.0}",
        stats.array_bytes as f64 / 1048576.0
    );
    let mib = |bytes: u64| bytes as f64 / 1048576.0;
    println!("bitmap_container_mib: {:.0}", mib(stats.bitmap_bytes));
    println!("slot_mib: {:.0}", mib(stats.slot_bytes));
    println!("garbage_mib: {:.0}", mib(stats.garbage_bytes));
    println!("spare_mib: {:.0}", mib(stats.spare_bytes));

    let path = args.snapshot.clone().unwrap_or_else(|| {
        std::env::temp_dir()
            .join(format!("graph_bench_{}.snapshot", std::process::id()))
            .display()
            .to_string()
    });
    let started = Instant::now();
    let mut file = std::fs::File::create(&path)?;
    graph.write_snapshot(&mut file)?;
    file.sync_all()?;
    drop(file);
    println!("snapshot_write_s: {:.2}", started.elapsed().as_secs_f64());
    println!(
        "snapshot_mib: {:.0}",
        std::fs::metadata(&path)?.len() as f64 / 1048576.0
    );
    let child = Command::new(std::env::current_exe()?)
        .args(["--read-snapshot", &path])
        .output()?;
    print!("{}", String::from_utf8_lossy(&child.stdout));
    if !child.status.success() {
        return Err(format!("restart failed: {}", String::from_utf8_lossy(&child.stderr)).into());
    }
    if args.snapshot.is_none() {
        std::fs::remove_file(&path)?;
    }

    let graph = Arc::new(graph);
    let targets = most_followed(&graph, TARGETS_TOP_N);
    println!(
        "target_followers_min_max: {} {}",
        targets.last().map_or(0, |&t| graph.n_followers(t)),
        targets.first().map_or(0, |&t| graph.n_followers(t))
    );
    let mut rng = ChaCha8Rng::seed_from_u64(args.seed);
    let samples = measure_known_followers(&graph, &targets, args.n_queries, &mut rng);

    // Two reader threads, each with its own queries: what the two cores serve together.
    let per_thread_queries: Vec<_> = (0..2)
        .map(|_| make_queries(&graph, &targets, args.n_queries, true, &mut rng))
        .collect();
    let started = Instant::now();
    let threads: Vec<_> = per_thread_queries
        .into_iter()
        .map(|queries| {
            let graph = Arc::clone(&graph);
            std::thread::spawn(move || run_queries(&graph, &queries, None, None))
        })
        .collect();
    let mut all_latencies = Vec::new();
    for thread in threads {
        let (latencies, _, _) = thread.join().map_err(|_| "reader panicked")?;
        all_latencies.extend(latencies);
    }
    print_latencies("kf_2_threads", &all_latencies, started.elapsed());

    measure_writes(&graph, &targets, args.n_writes, args.n_queries, &mut rng)?;

    // Follows then unfollows left the graph as it was: its answers are checked now.
    let (n_checked, n_nonempty) = check_known_followers(&graph, &args, &samples)?;
    println!("kf_answers_checked: {n_checked}");
    println!("kf_answers_checked_nonempty: {n_nonempty}");

    // Account deletion of the most-followed account: the largest single update.
    if let Some(&top) = targets.first() {
        let started = Instant::now();
        let n_removed = graph.remove_actor(top);
        println!("remove_top_actor_edges: {n_removed}");
        println!("remove_top_actor_s: {:.3}", started.elapsed().as_secs_f64());
    }
    print_memory("end");
    Ok(())
}

/// The child process: reads the snapshot and reports time and memory.
fn restart(path: &str) -> Result<(), Box<dyn Error>> {
    print_memory("restart_start");
    let started = Instant::now();
    let cpu_started = cpu_s();
    let mut file = std::fs::File::open(path)?;
    let graph = Graph::read_snapshot(&mut file)?;
    println!("restart_read_s: {:.2}", started.elapsed().as_secs_f64());
    println!("restart_read_cpu_s: {:.2}", cpu_s() - cpu_started);
    println!("restart_follows: {}", graph.n_follows());
    print_memory("restart_loaded");
    // Exiting frees the graph at once; dropping it would free 11M sets one by one.
    std::mem::forget(graph);
    Ok(())
}

fn print_degree_stats(edges: &[(ActorId, ActorId)], n_actors: usize) {
    let mut in_degree = vec![0u32; n_actors];
    let mut out_degree = vec![0u32; n_actors];
    for &(actor, subject) in edges {
        if let Some(count) = out_degree.get_mut(actor.0 as usize) {
            *count += 1;
        }
        if let Some(count) = in_degree.get_mut(subject.0 as usize) {
            *count += 1;
        }
    }
    let mean = edges.len() as f64 / n_actors.max(1) as f64;
    in_degree.sort_unstable_by(|a, b| b.cmp(a));
    out_degree.sort_unstable_by(|a, b| b.cmp(a));
    let at = |sorted: &[u32], rank: usize| sorted.get(rank).copied().unwrap_or(0);
    println!("mean_out_degree: {mean:.1}");
    println!("median_out_degree: {}", at(&out_degree, n_actors / 2));
    println!("max_out_degree: {}", at(&out_degree, 0));
    println!(
        "actors_following_over_10000: {}",
        out_degree.iter().take_while(|&&d| d > 10_000).count()
    );
    println!(
        "actors_following_none: {}",
        out_degree.iter().filter(|&&d| d == 0).count()
    );
    println!("max_in_degree: {}", at(&in_degree, 0));
    println!(
        "in_degree_at_rank_10_100_500_5000: {} {} {} {}",
        at(&in_degree, 10),
        at(&in_degree, 100),
        at(&in_degree, 500),
        at(&in_degree, 5000)
    );
    println!(
        "actors_with_over_4096_followers: {}",
        in_degree.iter().take_while(|&&d| d > 4096).count()
    );
}

/// Known followers of random viewers and `targets`, three ways; returns a sample of each run's
/// queries with its limit, for [`check_known_followers`].
fn measure_known_followers(
    graph: &Graph,
    targets: &[ActorId],
    n_queries: usize,
    rng: &mut ChaCha8Rng,
) -> Vec<Sample> {
    let mut samples = Vec::new();
    for (name, viewers_active, limit) in [
        ("kf_all_viewers", false, None),
        ("kf_active_viewers", true, None),
        ("kf_active_viewers_limit5", true, Some(5)),
    ] {
        let queries = make_queries(graph, targets, n_queries, viewers_active, rng);
        let (latencies, elapsed, n_found) = run_queries(graph, &queries, limit, None);
        print_latencies(name, &latencies, elapsed);
        println!(
            "{name}_mean_count: {:.1}",
            n_found as f64 / queries.len() as f64
        );
        let sample = queries.iter().take(CHECKED_PER_RUN).copied().collect();
        samples.push((sample, limit));
    }
    samples
}

/// Checks the graph's known followers for `samples` against a recount from the generator's
/// edges, drawn again with the same seed (the graph is not consulted): first each sampled
/// viewer's follows, then which of those follow each target. Returns how many answers were
/// checked, and how many of those were not empty; a wrong one is an error.
fn check_known_followers(
    graph: &Graph,
    args: &Args,
    samples: &[Sample],
) -> Result<(usize, usize), Box<dyn Error>> {
    let edges = || {
        synthetic::generate(SyntheticParams::new(
            args.n_actors,
            args.n_follows,
            args.seed,
        ))
        .filter(|(actor, subject)| actor != subject)
    };
    let queries = || samples.iter().flat_map(|(queries, _)| queries);
    let mut following: HashMap<ActorId, BTreeSet<ActorId>> = queries()
        .map(|&(viewer, _)| (viewer, BTreeSet::new()))
        .collect();
    for (actor, subject) in edges() {
        if let Some(follows) = following.get_mut(&actor) {
            follows.insert(subject);
        }
    }
    let followed: HashSet<ActorId> = following.values().flatten().copied().collect();
    let targets: HashSet<ActorId> = queries().map(|&(_, target)| target).collect();
    let pairs: HashSet<(ActorId, ActorId)> = edges()
        .filter(|(actor, subject)| followed.contains(actor) && targets.contains(subject))
        .collect();
    let (mut n_checked, mut n_nonempty) = (0, 0);
    for (queries, limit) in samples {
        for &(viewer, target) in queries {
            let expected: Vec<ActorId> = following
                .get(&viewer)
                .into_iter()
                .flatten()
                .filter(|&&known| pairs.contains(&(known, target)))
                .copied()
                .collect();
            let answer = graph.known_followers(viewer, target, *limit);
            let shown = limit.map_or(expected.len(), |limit| limit.min(expected.len()));
            if answer.count != expected.len()
                || answer.ids.as_slice() != expected.get(..shown).unwrap_or(&[])
            {
                return Err(format!(
                    "known followers of {target} for {viewer}: {} ({:?}), a recount says {} ({:?})",
                    answer.count,
                    answer.ids.as_slice(),
                    expected.len(),
                    expected
                )
                .into());
            }
            n_checked += 1;
            n_nonempty += usize::from(!expected.is_empty());
        }
    }
    Ok((n_checked, n_nonempty))
}

/// The `n` actors with the most followers, most followed first.
fn most_followed(graph: &Graph, n: usize) -> Vec<ActorId> {
    let mut by_followers: Vec<(usize, ActorId)> = (0..graph.n_actors())
        .filter_map(|id| u32::try_from(id).ok())
        .map(|id| (graph.n_followers(ActorId(id)), ActorId(id)))
        .collect();
    by_followers.sort_unstable_by(|a, b| b.cmp(a));
    by_followers.into_iter().take(n).map(|(_, id)| id).collect()
}

/// Random (viewer, target) pairs: viewers uniform over all actors, or over those following at
/// least one account; targets uniform over `targets`.
fn make_queries(
    graph: &Graph,
    targets: &[ActorId],
    n: usize,
    viewers_active: bool,
    rng: &mut ChaCha8Rng,
) -> Vec<(ActorId, ActorId)> {
    let n_actors = u32::try_from(graph.n_actors()).unwrap_or(u32::MAX);
    let mut res = Vec::with_capacity(n);
    while res.len() < n {
        let viewer = ActorId(rng.random_range(0..n_actors));
        if viewers_active && graph.n_following(viewer) == 0 {
            continue;
        }
        let target = targets
            .get(rng.random_range(0..targets.len()))
            .copied()
            .unwrap_or(viewer);
        res.push((viewer, target));
    }
    res
}

/// Runs the queries one after another; returns each latency in ns, the wall time and the sum
/// of counts. Stops early if `stop` is set.
fn run_queries(
    graph: &Graph,
    queries: &[(ActorId, ActorId)],
    limit: Option<usize>,
    stop: Option<&AtomicBool>,
) -> (Vec<u64>, Duration, u64) {
    let mut latencies = Vec::with_capacity(queries.len());
    let mut n_found = 0u64;
    let started = Instant::now();
    for &(viewer, target) in queries {
        if stop.is_some_and(|stop| stop.load(Ordering::Relaxed)) {
            break;
        }
        let query_started = Instant::now();
        let known = graph.known_followers(viewer, target, limit);
        latencies.push(query_started.elapsed().as_nanos() as u64);
        n_found += known.count as u64;
    }
    (latencies, started.elapsed(), n_found)
}

fn print_latencies(name: &str, latencies: &[u64], elapsed: Duration) {
    let mut sorted = latencies.to_vec();
    sorted.sort_unstable();
    let quantile = |q: f64| {
        let idx = ((sorted.len() as f64 * q) as usize).min(sorted.len().saturating_sub(1));
        sorted.get(idx).copied().unwrap_or(0) as f64 / 1000.0
    };
    println!("{name}_queries: {}", sorted.len());
    println!(
        "{name}_per_s: {:.0}",
        sorted.len() as f64 / elapsed.as_secs_f64()
    );
    println!("{name}_p50_us: {:.1}", quantile(0.50));
    println!("{name}_p99_us: {:.1}", quantile(0.99));
    println!("{name}_p999_us: {:.1}", quantile(0.999));
    println!("{name}_max_us: {:.1}", quantile(1.0));
}

/// Applies follows then unfollows of random edges (half of them to the most-followed accounts,
/// whose follower sets are bitmaps) on this thread while another thread runs queries.
fn measure_writes(
    graph: &Arc<Graph>,
    targets: &[ActorId],
    n_writes: usize,
    n_queries: usize,
    rng: &mut ChaCha8Rng,
) -> Result<(), Box<dyn Error>> {
    let n_actors = u32::try_from(graph.n_actors()).unwrap_or(u32::MAX);
    // Only edges the graph lacks, once each, so that following then unfollowing them all
    // leaves the graph as it was.
    let mut seen = std::collections::HashSet::new();
    let mut edges: Vec<(ActorId, ActorId)> = Vec::with_capacity(n_writes / 2);
    while edges.len() < n_writes / 2 {
        let actor = ActorId(rng.random_range(0..n_actors));
        let subject = if edges.len().is_multiple_of(2) {
            targets
                .get(rng.random_range(0..targets.len()))
                .copied()
                .unwrap_or(actor)
        } else {
            ActorId(rng.random_range(0..n_actors))
        };
        if actor != subject && !graph.does_follow(actor, subject) && seen.insert((actor, subject)) {
            edges.push((actor, subject));
        }
    }
    let queries = make_queries(graph, targets, n_queries * 10, true, rng);
    let stop = Arc::new(AtomicBool::new(false));
    let reader = {
        let graph = Arc::clone(graph);
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || run_queries(&graph, &queries, None, Some(&stop)))
    };

    let started = Instant::now();
    let mut n_changed = 0;
    for &(actor, subject) in &edges {
        n_changed += usize::from(graph.follow(actor, subject));
    }
    for &(actor, subject) in &edges {
        n_changed += usize::from(graph.unfollow(actor, subject));
    }
    let single_elapsed = started.elapsed();

    let follows: Vec<EdgeChange> = edges
        .iter()
        .map(|&(actor, subject)| EdgeChange::Follow { actor, subject })
        .collect();
    let unfollows: Vec<EdgeChange> = edges
        .iter()
        .map(|&(actor, subject)| EdgeChange::Unfollow { actor, subject })
        .collect();
    let started = Instant::now();
    for batch in follows.chunks(1000).chain(unfollows.chunks(1000)) {
        graph.apply(batch);
    }
    let batch_elapsed = started.elapsed();

    stop.store(true, Ordering::Relaxed);
    let (latencies, elapsed, _) = reader.join().map_err(|_| "reader panicked")?;
    println!("writes: {}", edges.len() * 2);
    println!("writes_changed: {n_changed}");
    println!(
        "writes_single_per_s: {:.0}",
        (edges.len() * 2) as f64 / single_elapsed.as_secs_f64()
    );
    println!(
        "writes_batched_per_s: {:.0}",
        (edges.len() * 2) as f64 / batch_elapsed.as_secs_f64()
    );
    print_latencies("kf_during_writes", &latencies, elapsed);
    Ok(())
}
