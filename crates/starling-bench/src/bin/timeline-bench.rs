//! `timeline-bench`: home timelines (`starling-timeline`) at the 2024 network's scale.
//!
//! ```text
//! timeline-bench setup            --dir DIR [--actors N --follows N --seed N --celebrity-followers N]
//! timeline-bench read             --dir DIR [--heads N]
//! timeline-bench fanout-celebrity --dir DIR --heads N --length N --active random|followers [--reps N]
//! timeline-bench fanout-sustained --dir DIR --heads N --length N --authors followers|zipf
//!                                 --celebrity-threshold N|none [--items N --seconds S]
//! timeline-bench e2e              --dir DIR --stream PATH --events N --heads N --length N
//!                                 [--timelines on|off]
//! ```
//!
//! `setup` builds the synthetic graph (`starling_graph::synthetic`, 5.5M actors, 160M follows,
//! seed 7) plus one extra account, the *celebrity* (id `actors`), followed by
//! `--celebrity-followers` (2M) distinct random actors, and writes its snapshot to
//! `DIR/graph.snapshot`. It then picks the readers of the read benchmark (actors following
//! ~100, ~1,000 and ~10,000 accounts), interns every actor's DID
//! (`starling_core::sample::did`) into a fresh `EmbeddedStore` in `DIR/store` in id order, so
//! that store ids equal graph ids, and writes 20-30 posts and reposts for every author those
//! readers follow, for every account over the default celebrity threshold and for the readers
//! themselves, as real Jetstream JSON events through `Batch::apply`.
//!
//! The other commands load the snapshot and measure one thing each, in a process of their own
//! so that memory figures are theirs alone:
//! - `read`: warm reads (head in memory) of the first page and of a page past the head, cold
//!   rebuilds (first read after the head was dropped), and the process's memory with `--heads`
//!   (100,000) random active readers, all over the store (`StoreFeeds`), default config.
//! - `fanout-celebrity`: one post by the celebrity, celebrity threshold off, lossy on, after
//!   `--heads` heads were built by reading them.
//! - `fanout-sustained`: `Timelines::apply` over a stream of post and repost items (12:10, the
//!   Jetstream mix), authors drawn in proportion to their followers or by a Zipf law over a
//!   random ranking, in batches of the items of one 20,000-event batch.
//! - `e2e`: replays the first `--events` events of a `gen-stream` stream into a fresh store
//!   through `Applier` and `GraphUpdater::new(..).with_timelines(..)` (or without timelines).
//!
//! The fan-out commands read author feeds from [`SyntheticFeeds`] (computed, not stored):
//! fan-out never reads the source, and building millions of heads from the store would take
//! most of the time budget. Prints one `key: value` line per measurement.

use std::collections::HashSet;
use std::error::Error;
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::{Duration, Instant};

use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use starling_bench::cli::number;
use starling_bench::stream::actor_did;
use starling_core::ActorId;
use starling_core::feed::{FeedChange, FeedItem, FeedKey, PostRef, flag};
use starling_core::jetstream;
use starling_core::sample::{datetime, did, tid};
use starling_graph::synthetic::{self, SyntheticParams};
use starling_graph::{Graph, GraphBuilder};
use starling_ingest::graph_sync::GraphUpdater;
use starling_ingest::replay::{ReplayOptions, ReplayProgress, replay_file};
use starling_ingest::timeline_sync::StoreFeeds;
use starling_ingest::{BatchLimits, CommitSink};
use starling_store::{Batch, Committed, EmbeddedStore, Store};
use starling_timeline::{
    ACTIVE_READERS_DEFAULT, CELEBRITY_THRESHOLD_DEFAULT, FeedSource, REASONABLE_LIMIT_DEFAULT,
    SourceError, TimelineConfig, Timelines,
};

type Res<T> = Result<T, Box<dyn Error>>;

/// The newest item time of every stored or synthetic feed: 2026-07-04T14:38:08Z. Items fanned
/// out by the benchmarks are newer.
const FEED_END_US: i64 = 1_783_175_888_000_000;
/// Stored posts are spread over this span before [`FEED_END_US`]: 14 days.
const STORED_SPAN_US: i64 = 14 * 86_400 * 1_000_000;
/// Stored items per author: this many at least, up to [`STORED_ITEMS_EXTRA_MAX`] more.
const STORED_ITEMS_MIN: u64 = 20;
const STORED_ITEMS_EXTRA_MAX: u64 = 10;
/// One stored or synthetic item in this many is a repost.
const REPOST_EVERY: u64 = 5;
/// Events per store batch while writing posts, as the replay default.
const SETUP_BATCH_EVENTS: usize = 20_000;
/// DIDs interned per call.
const INTERN_CHUNK: usize = 500_000;
/// Items per author in [`SyntheticFeeds`], spread over [`STORED_SPAN_US`].
const SYNTHETIC_ITEMS: i64 = 20;
/// The read benchmark's reader classes: accounts followed (±10%) and readers wanted.
const READER_CLASSES: [(usize, usize); 3] = [(100, 100), (1_000, 300), (10_000, 20)];
/// Warm readers per class (the first ones of each class).
const WARM_READERS_MAX: usize = 100;
/// Page size of every read, as the issue asks.
const PAGE_LIMIT: usize = 50;
/// Pages walked to get a cursor past the head: twice `LENGTH_DEFAULT` (500) items, because
/// pages also hold the celebrities' items, which the head does not.
const PAGES_TO_DEEP: usize = 20;
/// Jetstream's mix: ~12% of events are posts and ~10% reposts.
const POST_SHARE: f64 = 12.0 / 22.0;
/// Feed items of one 20,000-event batch (22% of it).
const ITEMS_PER_BATCH: usize = 4_400;
/// The Zipf exponent of authors' activity, as `gen-stream` picks repos.
const ACTIVITY_EXPONENT: f64 = 0.8;
/// Heads room above the heads built, so that shards of uneven size evict nothing.
const ACTIVE_ROOM: f64 = 1.25;
/// Mixed into seeds so that each draw has its own stream.
const SALT_CELEBRITY: u64 = 0xCE1E_B817;
const SALT_READERS: u64 = 0x0EAD_E125;
const SALT_ACTIVE: u64 = 0xAC71_7E00;
const SALT_POSTS: u64 = 0x9057_5000;
const SALT_ITEMS: u64 = 0x17E8_5000;

struct Args {
    command: String,
    dir: PathBuf,
    n_actors: u32,
    n_follows: u64,
    seed: u64,
    celebrity_followers: u32,
    heads: usize,
    length: usize,
    active: String,
    authors: String,
    celebrity_threshold: Option<u32>,
    items: usize,
    seconds: f64,
    reps: usize,
    stream: Option<PathBuf>,
    events: u64,
    with_timelines: bool,
}

fn parse_args() -> Res<Args> {
    let mut iter = std::env::args().skip(1);
    let command = iter
        .next()
        .ok_or("usage: timeline-bench COMMAND --dir DIR [FLAGS]")?;
    let mut args = Args {
        command,
        dir: PathBuf::new(),
        n_actors: 5_500_000,
        n_follows: 160_000_000,
        seed: 7,
        celebrity_followers: 2_000_000,
        heads: ACTIVE_READERS_DEFAULT,
        length: starling_timeline::LENGTH_DEFAULT,
        active: "random".to_owned(),
        authors: "followers".to_owned(),
        celebrity_threshold: Some(CELEBRITY_THRESHOLD_DEFAULT),
        items: 2_000_000,
        seconds: 120.0,
        reps: 5,
        stream: None,
        events: 2_000_000,
        with_timelines: true,
    };
    while let Some(flag) = iter.next() {
        let value = iter
            .next()
            .ok_or_else(|| format!("`{flag}` needs a value"))?;
        match flag.as_str() {
            "--dir" => args.dir = PathBuf::from(value),
            "--actors" => args.n_actors = number(&flag, &value)?,
            "--follows" => args.n_follows = number(&flag, &value)?,
            "--seed" => args.seed = number(&flag, &value)?,
            "--celebrity-followers" => args.celebrity_followers = number(&flag, &value)?,
            "--heads" => args.heads = number(&flag, &value)?,
            "--length" => args.length = number(&flag, &value)?,
            "--active" => args.active = value,
            "--authors" => args.authors = value,
            "--celebrity-threshold" if value == "none" => args.celebrity_threshold = None,
            "--celebrity-threshold" => args.celebrity_threshold = Some(number(&flag, &value)?),
            "--items" => args.items = number(&flag, &value)?,
            "--seconds" => args.seconds = number(&flag, &value)?,
            "--reps" => args.reps = number(&flag, &value)?,
            "--stream" => args.stream = Some(PathBuf::from(value)),
            "--events" => args.events = number(&flag, &value)?,
            "--timelines" => args.with_timelines = value == "on",
            other => return Err(format!("unknown flag `{other}`").into()),
        }
    }
    if args.dir.as_os_str().is_empty() {
        return Err("`--dir DIR` is required".into());
    }
    Ok(args)
}

fn main() -> std::process::ExitCode {
    let res = parse_args().and_then(|args| match args.command.as_str() {
        "setup" => setup(&args),
        "read" => read_bench(&args),
        "fanout-celebrity" => fanout_celebrity(&args),
        "fanout-sustained" => fanout_sustained(&args),
        "e2e" => e2e(&args),
        other => Err(format!(
            "unknown command `{other}` (setup, read, fanout-celebrity, fanout-sustained, e2e)"
        )
        .into()),
    });
    match res {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("timeline-bench: error: {err}");
            std::process::ExitCode::FAILURE
        }
    }
}

// ----- Measuring -----

/// A field of `/proc/self/status` in MiB (`VmRSS:`, `VmHWM:`).
fn status_mib(name: &str) -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
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
}

fn rss_mib() -> f64 {
    status_mib("VmRSS:")
}

/// CPU time (user + system) of this process in seconds.
fn cpu_s() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
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

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .trim()
        .to_owned()
}

/// Prints `NAME_count`, `_p50_us`, `_p90_us`, `_p99_us`, `_max_us` of latencies in seconds.
fn print_latencies(name: &str, latencies: &mut [f64]) {
    latencies.sort_unstable_by(f64::total_cmp);
    let at = |q: f64| {
        let idx = ((latencies.len() as f64 * q).ceil() as usize).saturating_sub(1);
        latencies.get(idx).map_or(f64::NAN, |s| s * 1e6)
    };
    println!("{name}_count: {}", latencies.len());
    println!("{name}_p50_us: {:.1}", at(0.5));
    println!("{name}_p90_us: {:.1}", at(0.9));
    println!("{name}_p99_us: {:.1}", at(0.99));
    println!("{name}_max_us: {:.1}", at(1.0));
}

/// Prints min, median and max of counts.
fn print_spread(name: &str, mut values: Vec<usize>) {
    values.sort_unstable();
    let at = |idx: usize| values.get(idx).copied().unwrap_or(0);
    println!(
        "{name}_min_median_max: {} {} {}",
        at(0),
        at(values.len() / 2),
        at(values.len().saturating_sub(1))
    );
}

fn print_stats(prefix: &str, timelines: &Timelines) {
    let stats = timelines.stats();
    println!("{prefix}_active_readers: {}", stats.active_readers);
    println!("{prefix}_items: {}", stats.items);
    println!(
        "{prefix}_item_mib: {:.1}",
        stats.item_bytes as f64 / 1048576.0
    );
    if stats.active_readers > 0 {
        println!(
            "{prefix}_items_per_reader: {:.1}",
            stats.items as f64 / stats.active_readers as f64
        );
        println!(
            "{prefix}_item_bytes_per_reader: {:.0}",
            stats.item_bytes as f64 / stats.active_readers as f64
        );
    }
    println!("{prefix}_inserts: {}", stats.inserts);
    println!("{prefix}_builds: {}", stats.builds);
    println!("{prefix}_evictions: {}", stats.evictions);
}

// ----- The graph -----

fn snapshot_path(dir: &Path) -> PathBuf {
    dir.join("graph.snapshot")
}

/// The synthetic graph plus the celebrity, id `n_actors`, with `celebrity_followers` distinct
/// random followers.
fn build_graph(args: &Args) -> Res<Graph> {
    let started = Instant::now();
    let params = SyntheticParams::new(args.n_actors, args.n_follows, args.seed);
    let n_edges = args.n_follows as usize + args.celebrity_followers as usize;
    let mut builder = GraphBuilder::with_capacity(n_edges);
    for (actor, subject) in synthetic::generate(params) {
        builder.follow(actor, subject);
    }
    let celebrity = ActorId(args.n_actors);
    let mut ids: Vec<u32> = (0..args.n_actors).collect();
    let mut rng = ChaCha8Rng::seed_from_u64(args.seed ^ SALT_CELEBRITY);
    let (chosen, _) = ids.partial_shuffle(&mut rng, args.celebrity_followers as usize);
    for &follower in chosen.iter() {
        builder.follow(ActorId(follower), celebrity);
    }
    drop(ids);
    let graph = builder.build();
    println!("graph_build_s: {:.2}", started.elapsed().as_secs_f64());
    println!("graph_follows: {}", graph.n_follows());
    println!("celebrity_id: {}", celebrity.0);
    println!("celebrity_followers: {}", graph.n_followers(celebrity));
    Ok(graph)
}

fn load_graph(dir: &Path) -> Res<Arc<Graph>> {
    let path = snapshot_path(dir);
    let started = Instant::now();
    let file = std::fs::File::open(&path)
        .map_err(|err| format!("opening `{}` (run `setup` first): {err}", path.display()))?;
    let graph = Graph::read_snapshot(&mut BufReader::with_capacity(1 << 20, file))
        .map_err(|err| format!("reading `{}`: {err}", path.display()))?;
    println!("graph_load_s: {:.2}", started.elapsed().as_secs_f64());
    println!("graph_actors: {}", graph.n_actors());
    println!("graph_follows: {}", graph.n_follows());
    println!("graph_rss_mib: {:.0}", rss_mib());
    Ok(Arc::new(graph))
}

/// The celebrity `setup` added: the last actor.
fn celebrity_of(graph: &Graph) -> ActorId {
    ActorId(graph.n_actors().saturating_sub(1) as u32)
}

/// The read benchmark's readers, per class of [`READER_CLASSES`]: actors following the class's
/// count ±10%, drawn at random.
fn pick_readers(graph: &Graph, seed: u64) -> Vec<(usize, Vec<ActorId>)> {
    let celebrity = celebrity_of(graph);
    let mut candidates: Vec<Vec<ActorId>> = vec![Vec::new(); READER_CLASSES.len()];
    for id in 0..celebrity.0 {
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
            println!("readers_{target}_candidates: {}", class.len());
            class.shuffle(&mut rng);
            class.truncate(wanted);
            (target, class)
        })
        .collect()
}

/// `n` distinct actors (not the celebrity) that follow at least one account, at random.
fn random_readers(graph: &Graph, n: usize, seed: u64) -> Vec<ActorId> {
    let celebrity = celebrity_of(graph);
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ SALT_ACTIVE);
    let mut seen = HashSet::new();
    let mut res = Vec::with_capacity(n);
    let mut draws_left = n.saturating_mul(100);
    while res.len() < n && draws_left > 0 {
        draws_left -= 1;
        let reader = ActorId(rng.random_range(0..celebrity.0));
        if graph.n_following(reader) > 0 && seen.insert(reader) {
            res.push(reader);
        }
    }
    res
}

/// Reads every reader's first page once, which builds its head; returns the seconds taken.
fn build_heads(timelines: &Timelines, readers: &[ActorId]) -> Res<f64> {
    let started = Instant::now();
    let mut last_report = Instant::now();
    for (idx, &reader) in readers.iter().enumerate() {
        timelines.read(reader, 1, None)?;
        if last_report.elapsed() > Duration::from_secs(30) {
            last_report = Instant::now();
            eprintln!("  built {idx} of {} heads", readers.len());
        }
    }
    Ok(started.elapsed().as_secs_f64())
}

// ----- setup -----

fn setup(args: &Args) -> Res<()> {
    println!("load_average_start: {}", load_average());
    std::fs::create_dir_all(&args.dir)?;
    let graph = build_graph(args)?;
    let path = snapshot_path(&args.dir);
    let started = Instant::now();
    let mut file = BufWriter::new(std::fs::File::create(&path)?);
    graph.write_snapshot(&mut file)?;
    file.into_inner()
        .map_err(|err| err.into_error())?
        .sync_all()?;
    println!("snapshot_write_s: {:.2}", started.elapsed().as_secs_f64());

    let readers = pick_readers(&graph, args.seed);
    let mut authors: Vec<ActorId> = Vec::new();
    for (_, class) in &readers {
        for &reader in class {
            authors.push(reader);
            authors.extend_from_slice(graph.following(reader).as_slice());
        }
    }
    let threshold = CELEBRITY_THRESHOLD_DEFAULT as usize;
    let high = graph.high_degree(threshold, usize::MAX);
    authors.extend(high.followed.iter().map(|&(id, _)| id));
    authors.sort_unstable();
    authors.dedup();
    println!("celebrities_at_default_threshold: {}", high.followed.len());
    println!("authors_with_posts: {}", authors.len());
    drop(graph);

    let store_dir = args.dir.join("store");
    if store_dir.exists() {
        std::fs::remove_dir_all(&store_dir)?;
    }
    let store = EmbeddedStore::open(&store_dir)?;
    intern_all(&store, args.n_actors + 1, did)?;
    write_posts(&store, &authors, args.seed)?;
    let started = Instant::now();
    store.sync()?;
    store.flush_to_tables()?;
    println!("store_flush_s: {:.2}", started.elapsed().as_secs_f64());
    println!("store_stats: {:?}", store.stats()?);
    println!("load_average_end: {}", load_average());
    Ok(())
}

/// Interns the DIDs of ids `0..n` in order and checks that the store gave them those ids.
fn intern_all(store: &EmbeddedStore, n: u32, did_of: impl Fn(u32) -> String) -> Res<()> {
    let started = Instant::now();
    let mut next = 0u32;
    while next < n {
        let end = (next as usize + INTERN_CHUNK).min(n as usize) as u32;
        let dids: Vec<String> = (next..end).map(&did_of).collect();
        let refs: Vec<&str> = dids.iter().map(String::as_str).collect();
        let ids = store.intern_actors(&refs)?;
        for (offset, id) in ids.iter().enumerate() {
            let want = next as usize + offset;
            if id.0 as usize != want {
                return Err(format!(
                    "the store gave DID {want} the id {} (a store that was not empty?)",
                    id.0
                )
                .into());
            }
        }
        next = end;
    }
    println!("intern_s: {:.2}", started.elapsed().as_secs_f64());
    println!("intern_actors: {n}");
    Ok(())
}

/// A random CID-shaped string.
fn cid(rng: &mut ChaCha8Rng) -> String {
    const BASE32: &[u8; 32] = b"abcdefghijklmnopqrstuvwxyz234567";
    let mut res = String::from("bafyrei");
    for _ in 0..52 {
        let digit = BASE32.get(rng.random_range(0..32)).copied().unwrap_or(b'a');
        res.push(char::from(digit));
    }
    res
}

/// The Jetstream event of `author` creating a post (or, with `subject`, a repost of it) at
/// `time_us`.
fn post_event(
    rng: &mut ChaCha8Rng,
    author: ActorId,
    time_us: i64,
    subject: Option<&str>,
) -> String {
    let micros = time_us as u64;
    let clock = (author.0 & 0x3ff) as u16;
    let (rkey, rev) = (tid(micros, clock), tid(micros + 1, clock));
    let created = datetime(micros);
    let (collection, record) = match subject {
        None => (
            "app.bsky.feed.post",
            format!(
                r#"{{"$type":"app.bsky.feed.post","createdAt":"{created}","langs":["en"],"text":"timeline bench post at {micros}"}}"#
            ),
        ),
        Some(uri) => (
            "app.bsky.feed.repost",
            format!(
                r#"{{"$type":"app.bsky.feed.repost","createdAt":"{created}","subject":{{"cid":"{}","uri":"{uri}"}}}}"#,
                cid(rng)
            ),
        ),
    };
    format!(
        r#"{{"did":"{}","time_us":{},"kind":"commit","commit":{{"rev":"{rev}","operation":"create","collection":"{collection}","rkey":"{rkey}","record":{record},"cid":"{}"}}}}"#,
        did(author.0),
        micros + 1,
        cid(rng)
    )
}

/// Writes 20-30 items per author, each a post or (one in [`REPOST_EVERY`]) a repost of a
/// random author's post, at random times of the last [`STORED_SPAN_US`], through `Batch::apply`.
fn write_posts(store: &EmbeddedStore, authors: &[ActorId], seed: u64) -> Res<()> {
    let started = Instant::now();
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ SALT_POSTS);
    let mut batch = store.batch();
    let (mut n_events, mut n_reposts) = (0u64, 0u64);
    let mut times = Vec::new();
    for &author in authors {
        let n_items = STORED_ITEMS_MIN + rng.random_range(0..=STORED_ITEMS_EXTRA_MAX);
        times.clear();
        times.extend((0..n_items).map(|_| FEED_END_US - rng.random_range(1..STORED_SPAN_US)));
        times.sort_unstable();
        times.dedup();
        for &time_us in &times {
            let subject = (rng.random_range(0..REPOST_EVERY) == 0).then(|| {
                let other = authors
                    .get(rng.random_range(0..authors.len()))
                    .copied()
                    .unwrap_or(author);
                let when =
                    (FEED_END_US - rng.random_range(STORED_SPAN_US..2 * STORED_SPAN_US)) as u64;
                format!("at://{}/app.bsky.feed.post/{}", did(other.0), tid(when, 0))
            });
            n_reposts += u64::from(subject.is_some());
            let line = post_event(&mut rng, author, time_us, subject.as_deref());
            let event = jetstream::decode(line.as_bytes())
                .map_err(|err| format!("a generated event does not decode: {err:?}: {line}"))?;
            batch.apply(&event)?;
            n_events += 1;
            if batch.len() >= SETUP_BATCH_EVENTS {
                batch.commit()?;
                batch = store.batch();
            }
        }
    }
    batch.commit()?;
    let elapsed = started.elapsed().as_secs_f64();
    println!("posts_written: {}", n_events - n_reposts);
    println!("reposts_written: {n_reposts}");
    println!("posts_write_s: {elapsed:.2}");
    println!("posts_events_per_s: {:.0}", n_events as f64 / elapsed);
    Ok(())
}

// ----- read -----

fn open_store(dir: &Path) -> Res<Arc<EmbeddedStore>> {
    let started = Instant::now();
    let store = EmbeddedStore::open(&dir.join("store"))?;
    println!("store_open_s: {:.2}", started.elapsed().as_secs_f64());
    println!("store_rss_mib: {:.0}", rss_mib());
    Ok(Arc::new(store))
}

fn refresh(timelines: &Timelines) -> Res<()> {
    let started = Instant::now();
    timelines.refresh()?;
    let stats = timelines.stats();
    println!("refresh_s: {:.2}", started.elapsed().as_secs_f64());
    println!("celebrities: {}", stats.celebrities);
    println!("lossy_readers: {}", stats.lossy_readers);
    Ok(())
}

fn read_bench(args: &Args) -> Res<()> {
    println!("load_average_start: {}", load_average());
    println!("start_rss_mib: {:.0}", rss_mib());
    let graph = load_graph(&args.dir)?;
    let store = open_store(&args.dir)?;
    let source: Arc<dyn FeedSource> = Arc::new(StoreFeeds(store.clone()));
    let config = TimelineConfig::default();
    println!("config: {config:?}");
    let timelines = Timelines::new(config, graph.clone(), source);
    refresh(&timelines)?;
    let readers = pick_readers(&graph, args.seed);
    let celebrities: HashSet<ActorId> = graph
        .high_degree(CELEBRITY_THRESHOLD_DEFAULT as usize, usize::MAX)
        .followed
        .iter()
        .map(|&(id, _)| id)
        .collect();
    for (target, class) in &readers {
        print_spread(
            &format!("readers_{target}_following"),
            class.iter().map(|&r| graph.n_following(r)).collect(),
        );
        let followed_celebrities = class
            .iter()
            .map(|&r| {
                graph
                    .following(r)
                    .as_slice()
                    .iter()
                    .filter(|a| celebrities.contains(a))
                    .count()
            })
            .collect();
        print_spread(
            &format!("readers_{target}_followed_celebrities"),
            followed_celebrities,
        );
    }
    let cold_readers = readers
        .iter()
        .find(|(target, _)| *target == 1_000)
        .map(|(_, class)| class.clone())
        .unwrap_or_default();
    for pass in 1..=2 {
        timelines.drop_heads();
        let mut latencies = Vec::with_capacity(cold_readers.len());
        for &reader in &cold_readers {
            let started = Instant::now();
            timelines.read(reader, PAGE_LIMIT, None)?;
            latencies.push(started.elapsed().as_secs_f64());
        }
        print_latencies(&format!("cold_rebuild_1000_pass{pass}"), &mut latencies);
    }
    print_stats("after_cold", &timelines);
    for (target, class) in &readers {
        warm_reads(
            &timelines,
            *target,
            class
                .get(..WARM_READERS_MAX.min(class.len()))
                .unwrap_or_default(),
        )?;
    }
    memory_with_heads(&graph, &timelines, args)?;
    println!("load_average_end: {}", load_average());
    Ok(())
}

/// Warm reads of the first page and of the page after [`PAGES_TO_DEEP`] pages (past the head),
/// each repeated, for readers whose heads are built first.
fn warm_reads(timelines: &Timelines, target: usize, readers: &[ActorId]) -> Res<()> {
    timelines.drop_heads();
    let reps = if target >= 10_000 { 10 } else { 20 };
    let mut first = Vec::new();
    let mut deep = Vec::new();
    let mut n_items_first = Vec::new();
    let mut n_items_deep = Vec::new();
    for &reader in readers {
        let page = timelines.read(reader, PAGE_LIMIT, None)?;
        let mut cursor = page.cursor;
        for _ in 1..PAGES_TO_DEEP {
            cursor = match cursor {
                Some(cursor) => timelines.read(reader, PAGE_LIMIT, Some(cursor))?.cursor,
                None => None,
            };
        }
        for _ in 0..reps {
            let started = Instant::now();
            let page = timelines.read(reader, PAGE_LIMIT, None)?;
            first.push(started.elapsed().as_secs_f64());
            n_items_first.push(page.items.len());
        }
        let Some(cursor) = cursor else { continue };
        for _ in 0..reps {
            let started = Instant::now();
            let page = timelines.read(reader, PAGE_LIMIT, Some(cursor))?;
            deep.push(started.elapsed().as_secs_f64());
            n_items_deep.push(page.items.len());
        }
    }
    print_latencies(&format!("warm_first_page_{target}"), &mut first);
    print_spread(&format!("warm_first_page_{target}_items"), n_items_first);
    print_latencies(&format!("warm_deep_page_{target}"), &mut deep);
    print_spread(&format!("warm_deep_page_{target}_items"), n_items_deep);
    Ok(())
}

/// The whole process with `--heads` random active readers over the store.
fn memory_with_heads(graph: &Graph, timelines: &Timelines, args: &Args) -> Res<()> {
    timelines.drop_heads();
    let before = rss_mib();
    let readers = random_readers(graph, args.heads, args.seed);
    let build_s = build_heads(timelines, &readers)?;
    let after = rss_mib();
    println!("heads_built: {}", readers.len());
    println!("heads_build_s: {build_s:.2}");
    println!("heads_builds_per_s: {:.0}", readers.len() as f64 / build_s);
    println!("heads_rss_before_mib: {before:.0}");
    println!("heads_rss_after_mib: {after:.0}");
    println!(
        "heads_rss_delta_mib_per_100k: {:.1}",
        (after - before) * 100_000.0 / readers.len().max(1) as f64
    );
    print_stats("heads", timelines);
    println!("process_rss_mib: {after:.0}");
    println!("process_hwm_mib: {:.0}", status_mib("VmHWM:"));
    Ok(())
}

// ----- Fan-out -----

/// Author feeds computed from the author's id: [`SYNTHETIC_ITEMS`] items, evenly spaced over
/// [`STORED_SPAN_US`] with a phase per author, one in [`REPOST_EVERY`] a repost.
struct SyntheticFeeds;

fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// A feed item of `author` at `sort_at_us`; a repost of a post by another actor when `repost`.
fn feed_item(author: ActorId, sort_at_us: i64, repost: bool) -> FeedItem {
    let code = (sort_at_us as u64) << 10 | u64::from(author.0 & 0x3ff);
    let post = if repost {
        let other = mix(code) as u32 % author.0.max(1);
        PostRef {
            actor: ActorId(other),
            code: code ^ 0x155,
        }
    } else {
        PostRef {
            actor: author,
            code,
        }
    };
    FeedItem {
        key: FeedKey {
            sort_at_us,
            code,
            author,
            repost,
        },
        flags: if repost { flag::REPOST } else { 0 },
        post,
    }
}

impl FeedSource for SyntheticFeeds {
    fn author_feed(
        &self,
        author: ActorId,
        below: Option<FeedKey>,
        visit: &mut dyn FnMut(FeedItem) -> bool,
    ) -> Result<(), SourceError> {
        let gap = STORED_SPAN_US / SYNTHETIC_ITEMS;
        let phase = (mix(u64::from(author.0)) % gap as u64) as i64;
        for idx in 0..SYNTHETIC_ITEMS {
            let item = feed_item(
                author,
                FEED_END_US - phase - idx * gap,
                idx as u64 % REPOST_EVERY == REPOST_EVERY - 1,
            );
            if below.is_some_and(|below| item.key >= below) {
                continue;
            }
            if !visit(item) {
                break;
            }
        }
        Ok(())
    }
}

fn fanout_config(args: &Args, celebrity_threshold: Option<u32>) -> TimelineConfig {
    TimelineConfig {
        length: args.length,
        reasonable_limit: Some(REASONABLE_LIMIT_DEFAULT),
        celebrity_threshold,
        active_readers_max: ACTIVE_READERS_DEFAULT.max((args.heads as f64 * ACTIVE_ROOM) as usize),
        ..TimelineConfig::default()
    }
}

/// Builds the heads of `readers` and prints the time and memory it took.
fn build_heads_reporting(timelines: &Timelines, readers: &[ActorId]) -> Res<()> {
    let before = rss_mib();
    let build_s = build_heads(timelines, readers)?;
    let after = rss_mib();
    println!("heads_built: {}", readers.len());
    println!("heads_build_s: {build_s:.2}");
    println!("heads_rss_before_mib: {before:.0}");
    println!("heads_rss_after_mib: {after:.0}");
    println!(
        "heads_rss_delta_bytes_per_reader: {:.0}",
        (after - before) * 1048576.0 / readers.len().max(1) as f64
    );
    print_stats("built", timelines);
    Ok(())
}

fn fanout_celebrity(args: &Args) -> Res<()> {
    println!("load_average_start: {}", load_average());
    let graph = load_graph(&args.dir)?;
    let celebrity = celebrity_of(&graph);
    let config = fanout_config(args, None);
    println!("config: {config:?}");
    let timelines = Timelines::new(config, graph.clone(), Arc::new(SyntheticFeeds));
    refresh(&timelines)?;
    let readers = match args.active.as_str() {
        "followers" => {
            let mut followers = graph.followers(celebrity).into_vec();
            followers.shuffle(&mut ChaCha8Rng::seed_from_u64(args.seed ^ SALT_ACTIVE));
            followers.truncate(args.heads);
            followers
        }
        _ => random_readers(&graph, args.heads, args.seed),
    };
    let followers = graph.followers(celebrity);
    let active_followers = readers.iter().filter(|&&r| followers.contains(r)).count();
    println!("celebrity_followers: {}", followers.as_slice().len());
    println!("active_followers: {active_followers}");
    drop(followers);
    build_heads_reporting(&timelines, &readers)?;
    let mut inserts_before = timelines.stats().inserts;
    for rep in 0..args.reps {
        let item = feed_item(celebrity, FEED_END_US + 1_000_000 * (rep as i64 + 1), false);
        let (cpu_before, started) = (cpu_s(), Instant::now());
        timelines.apply(&[], &[FeedChange::Add(item)])?;
        let elapsed = started.elapsed().as_secs_f64();
        let inserts = timelines.stats().inserts;
        println!(
            "fanout_rep{rep}: seconds {elapsed:.3} cpu_s {:.2} inserts {} inserts_per_s {:.0}",
            cpu_s() - cpu_before,
            inserts - inserts_before,
            (inserts - inserts_before) as f64 / elapsed
        );
        inserts_before = inserts;
    }
    print_stats("after", &timelines);
    println!("after_rss_mib: {:.0}", rss_mib());
    println!("load_average_end: {}", load_average());
    Ok(())
}

/// Draws authors: `followers` in proportion to follower counts, `zipf` by rank^-0.8 over a
/// random ranking of the actors. The celebrity of `setup` is never drawn.
struct AuthorDraw {
    /// `followers`: prefix sums of follower counts; `zipf`: unused.
    cumulative: Vec<u64>,
    /// `zipf`: actors by rank.
    ranking: Vec<u32>,
}

impl AuthorDraw {
    fn new(graph: &Graph, kind: &str, rng: &mut ChaCha8Rng) -> AuthorDraw {
        let n_actors = celebrity_of(graph).0;
        let mut res = AuthorDraw {
            cumulative: Vec::new(),
            ranking: Vec::new(),
        };
        if kind == "zipf" {
            res.ranking = (0..n_actors).collect();
            res.ranking.shuffle(rng);
        } else {
            let mut total = 0u64;
            res.cumulative = (0..n_actors)
                .map(|id| {
                    total += graph.n_followers(ActorId(id)) as u64;
                    total
                })
                .collect();
        }
        res
    }

    fn draw(&self, rng: &mut ChaCha8Rng) -> ActorId {
        if let Some(&total) = self.cumulative.last() {
            let x = rng.random_range(0..total.max(1));
            return ActorId(self.cumulative.partition_point(|&c| c <= x) as u32);
        }
        let n = self.ranking.len() as f64;
        let u: f64 = rng.random();
        let a = 1.0 - ACTIVITY_EXPONENT;
        let rank = (((n + 1.0).powf(a) - 1.0) * u + 1.0).powf(1.0 / a) as usize;
        ActorId(
            self.ranking
                .get(rank.saturating_sub(1))
                .copied()
                .unwrap_or(0),
        )
    }
}

fn fanout_sustained(args: &Args) -> Res<()> {
    println!("load_average_start: {}", load_average());
    let graph = load_graph(&args.dir)?;
    let config = fanout_config(args, args.celebrity_threshold);
    println!("config: {config:?}");
    println!("authors: {}", args.authors);
    let timelines = Timelines::new(config, graph.clone(), Arc::new(SyntheticFeeds));
    refresh(&timelines)?;
    let readers = random_readers(&graph, args.heads, args.seed);
    build_heads_reporting(&timelines, &readers)?;
    let mut rng = ChaCha8Rng::seed_from_u64(args.seed ^ SALT_ITEMS);
    let draw = AuthorDraw::new(&graph, &args.authors, &mut rng);
    let threshold = args.celebrity_threshold.map_or(usize::MAX, |t| t as usize);
    let inserts_before = timelines.stats().inserts;
    let (mut n_items, mut n_visits, mut n_celebrity_items) = (0u64, 0u64, 0u64);
    let (mut apply_s, mut batch_s) = (0.0f64, Vec::new());
    let mut time_us = FEED_END_US;
    let cpu_before = cpu_s();
    let mut batch = Vec::with_capacity(ITEMS_PER_BATCH);
    while (n_items as usize) < args.items && apply_s < args.seconds {
        batch.clear();
        for _ in 0..ITEMS_PER_BATCH {
            let author = draw.draw(&mut rng);
            time_us += 1 + rng.random_range(0..200);
            batch.push(FeedChange::Add(feed_item(
                author,
                time_us,
                !rng.random_bool(POST_SHARE),
            )));
            let n_followers = graph.n_followers(author);
            if n_followers > threshold {
                n_celebrity_items += 1;
            } else {
                n_visits += n_followers as u64;
            }
        }
        let started = Instant::now();
        timelines.apply(&[], &batch)?;
        let elapsed = started.elapsed().as_secs_f64();
        apply_s += elapsed;
        batch_s.push(elapsed);
        n_items += batch.len() as u64;
    }
    let cpu = cpu_s() - cpu_before;
    let inserts = timelines.stats().inserts - inserts_before;
    println!("items: {n_items}");
    println!("celebrity_items: {n_celebrity_items}");
    println!("follower_visits: {n_visits}");
    println!(
        "follower_visits_per_item: {:.0}",
        n_visits as f64 / n_items.max(1) as f64
    );
    println!("inserts: {inserts}");
    println!("apply_s: {apply_s:.2}");
    println!("cpu_s_incl_item_generation: {cpu:.2}");
    println!("items_per_s: {:.0}", n_items as f64 / apply_s);
    println!("inserts_per_s: {:.0}", inserts as f64 / apply_s);
    println!("follower_visits_per_s: {:.0}", n_visits as f64 / apply_s);
    print_latencies(&format!("batch_of_{ITEMS_PER_BATCH}_items"), &mut batch_s);
    print_stats("after", &timelines);
    println!("after_rss_mib: {:.0}", rss_mib());
    println!("load_average_end: {}", load_average());
    Ok(())
}

// ----- End to end -----

/// Counts what each batch brought and times the graph and timeline updates.
struct TimedSink {
    inner: GraphUpdater<EmbeddedStore>,
    seconds: f64,
    batches: u64,
    feed_adds: u64,
    feed_removes: u64,
    graph_changes: u64,
}

impl CommitSink for TimedSink {
    fn apply(&mut self, committed: &Committed) {
        self.batches += 1;
        self.graph_changes += committed.graph.len() as u64;
        for change in &committed.feed {
            match change {
                FeedChange::Add(_) => self.feed_adds += 1,
                FeedChange::Remove(_) => self.feed_removes += 1,
            }
        }
        let started = Instant::now();
        self.inner.apply(committed);
        self.seconds += started.elapsed().as_secs_f64();
    }
}

/// The first `n_events` lines of `stream`, as a zstd file in `dir` (written once, then reused).
fn stream_prefix(stream: &Path, n_events: u64, dir: &Path) -> Res<PathBuf> {
    let path = dir.join(format!("e2e-stream-{n_events}.jsonl.zst"));
    if path.exists() {
        return Ok(path);
    }
    let input = std::fs::File::open(stream)
        .map_err(|err| format!("opening `{}`: {err}", stream.display()))?;
    let mut lines = BufReader::new(zstd::Decoder::new(input)?);
    let tmp = starling_bench::cli::tmp_path(&path);
    let mut out = zstd::Encoder::new(BufWriter::new(std::fs::File::create(&tmp)?), 1)?;
    let mut line = Vec::new();
    for _ in 0..n_events {
        line.clear();
        if lines.read_until(b'\n', &mut line)? == 0 {
            break;
        }
        out.write_all(&line)?;
    }
    out.finish()?.flush()?;
    std::fs::rename(&tmp, &path)?;
    Ok(path)
}

fn e2e(args: &Args) -> Res<()> {
    println!("load_average_start: {}", load_average());
    let stream = args
        .stream
        .as_deref()
        .ok_or("`e2e` needs `--stream PATH` (a gen-stream file)")?;
    let prefix = stream_prefix(stream, args.events, &args.dir)?;
    let graph = load_graph(&args.dir)?;
    let store_dir = args.dir.join(format!("e2e-store-{}", std::process::id()));
    let store = Arc::new(EmbeddedStore::open(&store_dir)?);
    // Stream actor `i` is `actor_did(seed, i)`: interned in order, it is graph actor `i`.
    let seed = args.seed;
    intern_all(&store, graph.n_actors() as u32, |id| actor_did(seed, id))?;
    let mut updater = GraphUpdater::new(store.clone(), graph.clone(), Arc::new(AtomicU64::new(0)));
    let timelines = if args.with_timelines {
        let config = fanout_config(args, Some(CELEBRITY_THRESHOLD_DEFAULT));
        println!("config: {config:?}");
        let source: Arc<dyn FeedSource> = Arc::new(StoreFeeds(store.clone()));
        let timelines = Arc::new(Timelines::new(config, graph.clone(), source));
        refresh(&timelines)?;
        let readers = random_readers(&graph, args.heads, args.seed);
        build_heads_reporting(&timelines, &readers)?;
        updater = updater.with_timelines(timelines.clone());
        Some(timelines)
    } else {
        println!("config: no timelines");
        None
    };
    let inserts_before = timelines.as_ref().map_or(0, |t| t.stats().inserts);
    let mut sink = TimedSink {
        inner: updater,
        seconds: 0.0,
        batches: 0,
        feed_adds: 0,
        feed_removes: 0,
        graph_changes: 0,
    };
    let options = ReplayOptions {
        limits: BatchLimits::default(),
        from_start: true,
    };
    let (cpu_before, started) = (cpu_s(), Instant::now());
    let report = replay_file(
        &*store,
        &prefix,
        &options,
        &mut sink,
        Arc::new(ReplayProgress::default()),
    )?;
    let elapsed = started.elapsed().as_secs_f64();
    let inserts = timelines.as_ref().map_or(0, |t| t.stats().inserts) - inserts_before;
    println!("events: {}", report.events);
    println!("replay_s: {elapsed:.2}");
    println!("replay_cpu_s: {:.2}", cpu_s() - cpu_before);
    println!("events_per_s: {:.0}", report.events as f64 / elapsed);
    println!("batches: {}", sink.batches);
    println!("feed_adds: {}", sink.feed_adds);
    println!("feed_removes: {}", sink.feed_removes);
    println!("graph_changes: {}", sink.graph_changes);
    println!("sink_s (graph + timelines): {:.2}", sink.seconds);
    println!("sink_share_of_wall: {:.3}", sink.seconds / elapsed);
    println!("inserts: {inserts}");
    println!("inserts_per_s_of_wall: {:.0}", inserts as f64 / elapsed);
    if sink.seconds > 0.0 {
        println!(
            "inserts_per_s_of_sink: {:.0}",
            inserts as f64 / sink.seconds
        );
    }
    if let Some(timelines) = &timelines {
        print_stats("after", timelines);
    }
    println!("after_rss_mib: {:.0}", rss_mib());
    println!("after_hwm_mib: {:.0}", status_mib("VmHWM:"));
    drop(sink);
    drop(timelines);
    drop(store);
    std::fs::remove_dir_all(&store_dir)?;
    println!("load_average_end: {}", load_average());
    Ok(())
}
