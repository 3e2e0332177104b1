//! The `starling` binary: a thin shell that parses flags and config and calls the libraries.

mod config;
mod r#gen;

/// mimalloc instead of the system allocator: ingest allocates many small keys and values, and
/// the system allocator measured at 15-19% of the replay profile.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::{Args, Parser, Subcommand};
use starling_api::AppState;
use starling_graph::Graph;
use starling_ingest::graph_sync::{self, GraphSource, GraphUpdater};
use starling_ingest::live::LiveStatus;
use starling_ingest::replay::ReplayProgress;
use starling_ingest::timeline_sync::StoreFeeds;
use starling_ingest::{CommitSink, ReplayOptions, replay_file, run_live};
use starling_store::{CassandraStore, Committed, EmbeddedStore, Store};
use starling_timeline::Timelines;
use tokio::sync::watch;
use tracing::info;

use crate::config::{Config, Overrides, StoreChoice};

/// Starling: an open-source dataplane for Bluesky AppViews.
#[derive(Parser)]
#[command(version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the service: ingest from Jetstream and serve the HTTP API and metrics.
    Serve(ServeArgs),
    /// Ingest recorded events (`.jsonl` or `.jsonl.zst`) and exit.
    Replay(ReplayArgs),
    /// Print counts of the store's contents.
    Stats(StatsArgs),
    /// Write a deterministic sample event stream (Jetstream JSON lines).
    Sample(SampleArgs),
    /// Generate a synthetic network and its activity (seeded, deterministic) as Jetstream JSON:
    /// actors, a Bluesky-shaped follow graph, then posts, likes, reposts, follows, blocks and
    /// deletes in the firehose's proportions.
    Gen(GenArgs),
    /// Bulk-load a follow adjacency list (`actor_did,subject_did` per line) into the store and
    /// the graph.
    ImportFollows(ImportFollowsArgs),
}

#[derive(Args)]
struct ImportFollowsArgs {
    /// The adjacency list, plain or zstd-compressed.
    file: PathBuf,
    #[command(flatten)]
    common: CommonArgs,
}

#[derive(Args)]
struct CommonArgs {
    /// The data directory.
    #[arg(long, env = "STARLING_DATA_DIR")]
    data_dir: Option<PathBuf>,
    /// A TOML config file; flags and STARLING_* variables override it.
    #[arg(long, env = "STARLING_CONFIG")]
    config: Option<PathBuf>,
    /// The store backend: `embedded` (in the data directory) or `cassandra` [default:
    /// embedded].
    #[arg(long, env = "STARLING_STORE")]
    store: Option<String>,
    /// Cassandra contact points, HOST:PORT, comma-separated (with --store cassandra).
    #[arg(long, env = "STARLING_CASSANDRA_NODES", value_delimiter = ',')]
    cassandra_nodes: Vec<String>,
    /// The Cassandra keyspace, created if missing [default: starling].
    #[arg(long, env = "STARLING_CASSANDRA_KEYSPACE")]
    cassandra_keyspace: Option<String>,
    /// Consistency of Cassandra reads and writes: one, quorum, all, local_quorum, ...
    /// [default: quorum].
    #[arg(long, env = "STARLING_CASSANDRA_CONSISTENCY")]
    cassandra_consistency: Option<String>,
    /// Replication factor of a keyspace Starling creates [default: 1].
    #[arg(long, env = "STARLING_CASSANDRA_REPLICATION_FACTOR")]
    cassandra_replication_factor: Option<u32>,
}

#[derive(Args)]
struct ServeArgs {
    #[command(flatten)]
    common: CommonArgs,
    /// A Jetstream `/subscribe` URL; repeat for fail-over instances.
    #[arg(long = "jetstream", env = "STARLING_JETSTREAM", value_delimiter = ',')]
    jetstream: Vec<String>,
    /// Where the HTTP API listens [default: 127.0.0.1:6010].
    #[arg(long, env = "STARLING_HTTP_ADDR")]
    http_addr: Option<String>,
    /// Where the `bsky.Service` gRPC API for the AppView listens (h2c), e.g. 127.0.0.1:6011;
    /// off unless given.
    #[arg(long, env = "STARLING_GRPC_ADDR")]
    grpc_addr: Option<String>,
    /// Serve gRPC over TLS with this PEM certificate chain (needs --grpc-tls-key); the AppView
    /// then uses an `https://` dataplane URL.
    #[arg(long, env = "STARLING_GRPC_TLS_CERT")]
    grpc_tls_cert: Option<PathBuf>,
    /// The PEM private key of --grpc-tls-cert.
    #[arg(long, env = "STARLING_GRPC_TLS_KEY")]
    grpc_tls_key: Option<PathBuf>,
    /// The PLC directory DID documents are fetched from [default: https://plc.directory].
    #[arg(long, env = "STARLING_PLC_URL")]
    plc_url: Option<String>,
    /// Only ingest these collections (NSIDs or `prefix.*`); repeat for more.
    #[arg(
        long = "wanted-collection",
        env = "STARLING_WANTED_COLLECTIONS",
        value_delimiter = ','
    )]
    wanted_collections: Vec<String>,
    /// The Jetstream zstd dictionary; enables `compress=true`.
    #[arg(long, env = "STARLING_ZSTD_DICTIONARY")]
    zstd_dictionary: Option<PathBuf>,
    /// Events per store batch at most.
    #[arg(long, env = "STARLING_BATCH_EVENTS_MAX")]
    batch_events_max: Option<usize>,
    /// Before serving, replay a generated sample network so there is something to see.
    #[arg(long)]
    demo: bool,
}

#[derive(Args)]
struct ReplayArgs {
    /// Files to replay, in order.
    #[arg(required = true)]
    files: Vec<PathBuf>,
    #[command(flatten)]
    common: CommonArgs,
    /// Events per store batch at most.
    #[arg(long, env = "STARLING_BATCH_EVENTS_MAX")]
    batch_events_max: Option<usize>,
    /// Replay from the start even if an earlier run of the same file stopped part-way.
    #[arg(long)]
    from_start: bool,
}

#[derive(Args)]
struct StatsArgs {
    #[command(flatten)]
    common: CommonArgs,
    /// Print one JSON object (the only format for now).
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct SampleArgs {
    /// Where to write the events; `-` for standard output.
    #[arg(long, default_value = "-")]
    out: PathBuf,
    /// Actors in the sample network.
    #[arg(long, default_value_t = 200)]
    actors: u32,
    /// The random seed.
    #[arg(long, default_value_t = 7)]
    seed: u64,
}

/// `starling gen` flags; the defaults are the "indexer scale" network.
#[derive(Args)]
struct GenArgs {
    /// The output: `FILE.jsonl.zst` (zstd) or `FILE.jsonl`. It is written as `FILE….tmp` and
    /// renamed when complete; the counts go to `FILE.summary.json` beside it.
    #[arg(long)]
    out: PathBuf,
    /// Actors, each with an identity event (handle `user{N}.gen.test`) and a profile.
    #[arg(long, default_value_t = 10_000)]
    actors: u32,
    /// Follows of the Bluesky-shaped follow graph, written after the actors and before the
    /// activity (at most an eighth of the actors per actor) [default: 30 per actor, the
    /// network's ratio].
    #[arg(long)]
    follows: Option<u64>,
    /// Posts of the activity phase (40% replies, 6% quotes); every other activity count
    /// follows from it: per post ~5.6 likes, 0.83 reposts, 0.42 follows, 0.1 unfollows,
    /// 0.08 blocks, and some deletes and profile updates [default: 10 per actor].
    #[arg(long)]
    posts: Option<u64>,
    /// Likes, instead of the mix's ~5.6 per post.
    #[arg(long)]
    likes: Option<u64>,
    /// Reposts, instead of the mix's ~0.83 per post.
    #[arg(long)]
    reposts: Option<u64>,
    /// The random seed; the same flags and seed give the same bytes.
    #[arg(long, default_value_t = 7)]
    seed: u64,
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(err) if !err.use_stderr() => err.exit(),
        Err(err) => {
            // One line that names the problem; `--help` has the rest.
            let rendered = err.render().to_string();
            let message = rendered
                .lines()
                .take_while(|line| !line.starts_with("Usage:") && !line.trim().starts_with("tip:"))
                .map(str::trim)
                .filter(|line| !line.is_empty())
                .collect::<Vec<_>>()
                .join(" ");
            let message = message.strip_prefix("error: ").unwrap_or(&message);
            eprintln!("starling: error: {message} (see `starling --help`)");
            return ExitCode::from(2);
        }
    };
    init_logging();
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("starling: error: {err:#}");
            ExitCode::FAILURE
        }
    }
}

fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("STARLING_LOG").unwrap_or_else(|_| {
        tracing_subscriber::EnvFilter::new("info,fjall=warn,lsm_tree=warn,scylla=off")
    });
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
}

fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Serve(args) => serve(args),
        Command::Replay(args) => replay(args),
        Command::Stats(args) => stats(args),
        Command::Sample(args) => sample(args),
        Command::Gen(args) => r#gen::run(args),
        Command::ImportFollows(args) => import_follows(args),
    }
}

fn load_config(common: &CommonArgs, overrides: Overrides) -> anyhow::Result<Config> {
    let raw = config::read_file(common.config.as_deref())?;
    config::resolve(
        raw,
        Overrides {
            data_dir: common.data_dir.clone(),
            store: common.store.clone(),
            cassandra_nodes: common.cassandra_nodes.clone(),
            cassandra_keyspace: common.cassandra_keyspace.clone(),
            cassandra_consistency: common.cassandra_consistency.clone(),
            cassandra_replication_factor: common.cassandra_replication_factor,
            ..overrides
        },
    )
}

fn open_store(dir: &Path) -> anyhow::Result<EmbeddedStore> {
    EmbeddedStore::open(dir).with_context(|| {
        format!(
            "opening the store in `{}` (is another starling using it?)",
            dir.display()
        )
    })
}

/// What the binary needs of a store beyond [`Store`].
trait Backend: Store + 'static {
    /// Called at a clean exit: leaves the store quick to open next time.
    fn finish(&self) -> anyhow::Result<()>;

    /// The shared store, when several replicas may use it at once: then only the holder of
    /// the writer lease ingests, and the others follow its change log.
    fn shared(&self) -> Option<&CassandraStore> {
        None
    }
}

impl Backend for EmbeddedStore {
    fn finish(&self) -> anyhow::Result<()> {
        self.flush_to_tables().context("flushing the store")
    }
}

impl Backend for CassandraStore {
    fn finish(&self) -> anyhow::Result<()> {
        // Every commit is acknowledged by the cluster before it returns: nothing to flush.
        Ok(())
    }

    fn shared(&self) -> Option<&CassandraStore> {
        Some(self)
    }
}

/// How long the writer lease lasts without renewal: a dead writer's replacement starts within
/// about this long.
const LEASE_TTL: Duration = Duration::from_secs(10);
/// How often the writer renews its lease, and how often the others try to take it.
const LEASE_RENEW: Duration = Duration::from_secs(2);
/// How often a replica that does not write reads the change log.
const TAIL_INTERVAL: Duration = Duration::from_millis(500);

/// This process's name in the writer lease: unique per process start.
fn lease_owner() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("starling-{}-{nanos}", std::process::id())
}

/// Applies the change log after `applied_seq` to the graph and timelines: how a replica that
/// does not write keeps them current.
fn tail_changes(
    store: &CassandraStore,
    graph: &Graph,
    timelines: &Timelines,
    applied_seq: &AtomicU64,
) -> anyhow::Result<()> {
    let after = applied_seq.load(Ordering::Acquire);
    let mut edges = Vec::new();
    let last = store
        .changes_since(after, &mut |_, committed| {
            edges.clear();
            edges.extend(committed.graph.iter().copied().map(graph_sync::edge_change));
            graph.apply(&edges);
            if let Err(err) = timelines.apply(&edges, &committed.feed) {
                tracing::error!(error = %err, "timelines could not take a logged batch; rebuilding them on read");
                timelines.drop_heads();
            }
            if let Some(cursor) = committed.cursor {
                timelines.mark_applied(cursor.0);
            }
        })
        .context("reading the change log")?;
    applied_seq.store(last, Ordering::Release);
    Ok(())
}

/// The parts of a replica that follow the change log.
struct Follower<S> {
    store: Arc<S>,
    graph: Arc<Graph>,
    timelines: Arc<Timelines>,
    applied_seq: Arc<AtomicU64>,
    owner: String,
}

impl<S> Clone for Follower<S> {
    fn clone(&self) -> Self {
        Follower {
            store: self.store.clone(),
            graph: self.graph.clone(),
            timelines: self.timelines.clone(),
            applied_seq: self.applied_seq.clone(),
            owner: self.owner.clone(),
        }
    }
}

impl<S: Backend> Follower<S> {
    /// Follows the change log until this replica takes the writer lease (then the batch the
    /// previous writer may have left half applied is applied and the in-memory tables are
    /// reloaded); `false` if shutdown came first.
    async fn await_lease(&self, mut shutdown: watch::Receiver<bool>) -> anyhow::Result<bool> {
        let mut last_try: Option<Instant> = None;
        loop {
            if *shutdown.borrow() {
                return Ok(false);
            }
            let now = Instant::now();
            let try_lease = last_try.is_none_or(|at| now.duration_since(at) >= LEASE_RENEW);
            if try_lease {
                last_try = Some(now);
            }
            let me = self.clone();
            let took = tokio::task::spawn_blocking(move || -> anyhow::Result<bool> {
                let Some(store) = me.store.shared() else {
                    return Ok(true);
                };
                let took = try_lease && store.try_lease(&me.owner, LEASE_TTL)?;
                if took {
                    store.recover().context("taking over as the writer")?;
                }
                tail_changes(store, &me.graph, &me.timelines, &me.applied_seq)?;
                Ok(took)
            })
            .await
            .context("the change log task")??;
            if took {
                info!(owner = %self.owner, "holding the writer lease: ingesting");
                return Ok(true);
            }
            tokio::select! {
                _ = tokio::time::sleep(TAIL_INTERVAL) => {}
                _ = shutdown.wait_for(|stop| *stop) => return Ok(false),
            }
        }
    }

    /// Renews the writer lease until it cannot; returns why. The writer must stop writing at
    /// once then: another replica may take over when the lease expires.
    async fn keep_lease(&self) -> anyhow::Error {
        let mut last_held = Instant::now();
        loop {
            tokio::time::sleep(LEASE_RENEW).await;
            let me = self.clone();
            let res = tokio::task::spawn_blocking(move || match me.store.shared() {
                Some(store) => store.try_lease(&me.owner, LEASE_TTL),
                None => Ok(true),
            })
            .await;
            match res {
                Ok(Ok(true)) => last_held = Instant::now(),
                Ok(Ok(false)) => return anyhow::anyhow!("another replica holds the writer lease"),
                Ok(Err(err)) if last_held.elapsed() < LEASE_TTL - 2 * LEASE_RENEW => {
                    tracing::warn!(error = %err, "renewing the writer lease; retrying");
                }
                Ok(Err(err)) => {
                    return anyhow::Error::new(err)
                        .context("the writer lease could not be renewed");
                }
                Err(err) => return anyhow::Error::new(err).context("the lease task"),
            }
        }
    }
}

/// The configured store, opened.
// One per process, moved once into an `Arc`: its size does not matter.
#[allow(clippy::large_enum_variant)]
enum AnyStore {
    Embedded(EmbeddedStore),
    Cassandra(CassandraStore),
}

fn open_any(config: &Config) -> anyhow::Result<AnyStore> {
    Ok(match &config.store {
        StoreChoice::Embedded => AnyStore::Embedded(open_store(&config.data_dir)?),
        StoreChoice::Cassandra(options) => {
            // The data directory still holds this replica's graph snapshot.
            std::fs::create_dir_all(&config.data_dir).with_context(|| {
                format!(
                    "creating the data directory `{}`",
                    config.data_dir.display()
                )
            })?;
            AnyStore::Cassandra(
                CassandraStore::open(options).with_context(|| {
                    format!("opening cassandra keyspace `{}`", options.keyspace)
                })?,
            )
        }
    })
}

/// Runs `$body` with `$store` bound to the concrete store inside `$any`.
macro_rules! with_store {
    ($any:expr, |$store:ident| $body:expr) => {
        match $any {
            AnyStore::Embedded($store) => $body,
            AnyStore::Cassandra($store) => $body,
        }
    };
}

/// The graph sink until the in-memory graph exists: counts graph changes for metrics.
fn count_graph_changes(committed: &Committed) {
    let changes = &committed.graph;
    metrics::counter!("starling_ingest_graph_changes_total").increment(changes.len() as u64);
}

fn replay(args: ReplayArgs) -> anyhow::Result<()> {
    let overrides = Overrides {
        batch_events_max: args.batch_events_max,
        ..Overrides::default()
    };
    let config = load_config(&args.common, overrides)?;
    // Check every file before creating or opening anything.
    for file in &args.files {
        if !file.is_file() {
            anyhow::bail!(
                "event file `{}` does not exist or is not a file",
                file.display()
            );
        }
    }
    let options = ReplayOptions {
        limits: config.limits,
        from_start: args.from_start,
    };
    with_store!(open_any(&config)?, |store| {
        for file in &args.files {
            replay_one(&store, file, &options)?;
        }
        store.finish()
    })
}

fn replay_one<S: Store>(store: &S, file: &Path, options: &ReplayOptions) -> anyhow::Result<()> {
    let total = std::fs::metadata(file)
        .with_context(|| format!("reading `{}`", file.display()))?
        .len();
    let progress = Arc::new(ReplayProgress::default());
    let started = Instant::now();
    let done = AtomicBool::new(false);
    let report = std::thread::scope(|scope| {
        let reporter = scope.spawn(|| report_progress(file, total, &progress, &done));
        let res = replay_file(
            store,
            file,
            options,
            &mut count_graph_changes,
            progress.clone(),
        );
        done.store(true, Ordering::Relaxed);
        reporter.thread().unpark();
        let _ = reporter.join();
        res
    })?;
    let secs = started.elapsed().as_secs_f64();
    info!(
        file = %file.display(),
        events = report.events,
        resumed_from = report.resumed_from,
        seconds = format!("{secs:.1}"),
        events_per_second = (report.events as f64 / secs.max(1e-9)) as u64,
        "replay finished"
    );
    Ok(())
}

/// A progress bar on a terminal; a plain log line every few seconds otherwise.
fn report_progress(file: &Path, total: u64, progress: &ReplayProgress, done: &AtomicBool) {
    let started = Instant::now();
    let bar = std::io::stderr().is_terminal().then(|| {
        let bar = indicatif::ProgressBar::new(total);
        let style = indicatif::ProgressStyle::with_template(
            "{spinner} {msg} [{bar:30}] {bytes}/{total_bytes} ETA {eta}",
        )
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar());
        bar.set_style(style);
        bar
    });
    let interval = if bar.is_some() {
        Duration::from_millis(200)
    } else {
        Duration::from_secs(5)
    };
    while !done.load(Ordering::Relaxed) {
        std::thread::park_timeout(interval);
        let read = progress.file_bytes_read.load(Ordering::Relaxed);
        let events = progress.events.load(Ordering::Relaxed);
        let rate = events as f64 / started.elapsed().as_secs_f64().max(1e-9);
        match &bar {
            Some(bar) => {
                bar.set_position(read);
                bar.set_message(format!("{events} events, {rate:.0} events/s"));
            }
            None if !done.load(Ordering::Relaxed) => {
                let percent = if total == 0 {
                    100.0
                } else {
                    read as f64 * 100.0 / total as f64
                };
                let eta = if read == 0 {
                    f64::NAN
                } else {
                    started.elapsed().as_secs_f64() * (total.saturating_sub(read)) as f64
                        / read as f64
                };
                info!(file = %file.display(), events, events_per_second = rate as u64, percent = format!("{percent:.1}"), eta_seconds = format!("{eta:.0}"), "progress");
            }
            None => {}
        }
    }
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
}

fn stats(args: StatsArgs) -> anyhow::Result<()> {
    let config = load_config(&args.common, Overrides::default())?;
    if config.store == StoreChoice::Embedded && !config.data_dir.exists() {
        anyhow::bail!(
            "data directory `{}` does not exist",
            config.data_dir.display()
        );
    }
    let stats = with_store!(open_any(&config)?, |store| store.stats()?);
    // JSON is the only format; `--json` is accepted so scripts can say what they expect.
    let _ = args.json;
    let mut out = std::io::stdout().lock();
    serde_json::to_writer(&mut out, &stats)?;
    writeln!(out)?;
    Ok(())
}

fn sample(args: SampleArgs) -> anyhow::Result<()> {
    let lines = starling_core::sample::events(&starling_core::sample::SampleParams {
        n_actors: args.actors,
        seed: args.seed,
    });
    let text = lines.join("\n") + "\n";
    if args.out == Path::new("-") {
        match std::io::stdout().lock().write_all(text.as_bytes()) {
            // A reader that stops early (`| head`) is not an error.
            Err(err) if err.kind() == std::io::ErrorKind::BrokenPipe => {}
            res => res?,
        }
    } else {
        std::fs::write(&args.out, text)
            .with_context(|| format!("writing `{}`", args.out.display()))?;
    }
    Ok(())
}

fn serve(args: ServeArgs) -> anyhow::Result<()> {
    let overrides = Overrides {
        http_addr: args.http_addr,
        grpc_addr: args.grpc_addr,
        grpc_tls_cert: args.grpc_tls_cert,
        grpc_tls_key: args.grpc_tls_key,
        plc_url: args.plc_url,
        jetstream: args.jetstream,
        wanted_collections: args.wanted_collections,
        zstd_dictionary: args.zstd_dictionary,
        batch_events_max: args.batch_events_max,
        ..Overrides::default()
    };
    let config = load_config(&args.common, overrides)?;
    // One process-wide TLS provider, chosen here so no dependency picks one implicitly.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let recorder = metrics_exporter_prometheus::PrometheusBuilder::new()
        .install_recorder()
        .context("installing the metrics recorder")?;
    // The graph snapshot and the store load side by side: neither needs the other until the
    // snapshot is brought up to date with the store's graph log.
    let snapshot_dir = config.data_dir.clone();
    let snapshot = std::thread::Builder::new()
        .name("graph-load".to_owned())
        .spawn(move || graph_sync::read_snapshot_file(&snapshot_dir))
        .context("starting the graph loader")?;
    let store = open_any(&config);
    let snapshot = match snapshot.join() {
        Ok(res) => res?,
        Err(_) => anyhow::bail!("the graph loader thread panicked"),
    };
    with_store!(store?, |store| serve_on(
        Arc::new(store),
        snapshot,
        args.demo,
        config,
        recorder
    ))
}

fn serve_on<S: Backend>(
    store: Arc<S>,
    snapshot: Option<graph_sync::LoadedSnapshot>,
    demo_first: bool,
    config: Config,
    recorder: metrics_exporter_prometheus::PrometheusHandle,
) -> anyhow::Result<()> {
    if demo_first {
        demo(&*store, &config)?;
    }
    let (graph, source) = graph_sync::finish_load(&*store, snapshot)?;
    let applied_seq = store.graph_log_seq();
    if source == GraphSource::Rebuilt && graph.n_follows() + graph.n_blocks() > 0 {
        // The next start then loads the snapshot instead of scanning every edge.
        graph_sync::write_snapshot(&*store, &graph, applied_seq, &config.data_dir)?;
    }
    let graph = Arc::new(graph);
    info!(
        data_dir = %config.data_dir.display(),
        http_addr = %config.http_addr,
        grpc_addr = ?config.grpc_addr,
        jetstream = ?config.live.urls,
        wanted_collections = ?config.live.wanted_collections,
        zstd_dictionary = ?config.zstd_dictionary_path,
        batch_events_max = config.limits.events_max,
        "starting"
    );
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let applied_seq = Arc::new(AtomicU64::new(applied_seq));
    let snapshots = start_snapshots(store.clone(), graph.clone(), applied_seq.clone(), &config)?;
    let timelines = Arc::new(Timelines::new(
        config.timeline,
        graph.clone(),
        Arc::new(StoreFeeds(store.clone())),
    ));
    let refresh = {
        let timelines = timelines.clone();
        timelines.refresh().context("loading the timeline caches")?;
        Periodic::start(
            "timeline-refresh",
            config.timeline_refresh_interval,
            move || {
                timelines
                    .refresh()
                    .context("refreshing the timeline caches")?;
                export_timeline_metrics(&timelines.stats());
                Ok(())
            },
        )?
    };
    let res = runtime.block_on(serve_async(
        store.clone(),
        graph,
        timelines,
        applied_seq,
        config,
        recorder,
    ));
    // The final snapshot runs after ingest has stopped, so it covers everything applied.
    let snapshot_res = snapshots.stop();
    let refresh_res = refresh.stop();
    let flush_res = store.finish();
    res.and(snapshot_res).and(refresh_res).and(flush_res)
}

fn demo<S: Store>(store: &S, config: &Config) -> anyhow::Result<()> {
    let path = config.data_dir.join("demo-sample.jsonl");
    let lines = starling_core::sample::events(&starling_core::sample::SampleParams {
        n_actors: 500,
        seed: 7,
    });
    std::fs::write(&path, lines.join("\n") + "\n")
        .with_context(|| format!("writing `{}`", path.display()))?;
    let options = ReplayOptions {
        limits: config.limits,
        from_start: false,
    };
    replay_one(store, &path, &options)
}

async fn serve_async<S: Backend>(
    store: Arc<S>,
    graph: Arc<Graph>,
    timelines: Arc<Timelines>,
    applied_seq: Arc<AtomicU64>,
    config: Config,
    recorder: metrics_exporter_prometheus::PrometheusHandle,
) -> anyhow::Result<()> {
    let (shutdown_tx, shutdown_rx) = watch::channel(false);
    let ready = Arc::new(AtomicBool::new(false));
    let state = AppState {
        store: store.clone(),
        graph: graph.clone(),
        timelines: timelines.clone(),
        metrics: Arc::new(move || recorder.render()),
        ready: ready.clone(),
    };
    let listener = tokio::net::TcpListener::bind(config.http_addr)
        .await
        .with_context(|| format!("binding the HTTP API to {}", config.http_addr))?;
    let local = listener.local_addr()?;
    // Tests and scripts wait for this line rather than sleeping.
    println!("starling: http listening on {local}");
    let mut http_shutdown = shutdown_rx.clone();
    let http = tokio::spawn(starling_api::serve(
        listener,
        starling_api::router(state.clone()),
        async move {
            let _ = http_shutdown.wait_for(|stop| *stop).await;
        },
    ));
    let resolver = starling_identity::Resolver::new(config.identity.clone())
        .context("configuring DID resolution")?;
    let grpc = match config.grpc_addr {
        Some(addr) => {
            let listener = tokio::net::TcpListener::bind(addr)
                .await
                .with_context(|| format!("binding the gRPC API to {addr}"))?;
            let service = starling_api::grpc::DataplaneService::new(state.clone())
                .with_identity(resolver.clone());
            let router = match &config.grpc_tls {
                Some(tls) => {
                    starling_api::grpc::grpc_tls_router(service, tls).map_err(anyhow::Error::msg)?
                }
                None => starling_api::grpc::grpc_router(service),
            };
            let wire = if config.grpc_tls.is_some() {
                "TLS"
            } else {
                "h2c"
            };
            info!(wire, "serving bsky.Service over gRPC");
            println!("starling: grpc listening on {}", listener.local_addr()?);
            let mut grpc_shutdown = shutdown_rx.clone();
            Some(tokio::spawn(starling_api::grpc::serve_grpc(
                listener,
                router,
                async move {
                    let _ = grpc_shutdown.wait_for(|stop| *stop).await;
                },
            )))
        }
        None => None,
    };
    let follower = Follower {
        store: store.clone(),
        graph: graph.clone(),
        timelines: timelines.clone(),
        applied_seq: applied_seq.clone(),
        owner: lease_owner(),
    };
    let feeder = Box::new(CommitFeeder {
        updater: GraphUpdater::new(store.clone(), graph, applied_seq).with_timelines(timelines),
        store: store.clone(),
        resolver,
    });
    let live = if store.shared().is_some() {
        // A shared store: ingest only while holding the writer lease; until then, and with no
        // Jetstream URL at all, follow the change log.
        let urls = config.live.urls.clone();
        let options = config.live.clone();
        let shutdown = shutdown_rx.clone();
        Some(tokio::spawn(async move {
            if urls.is_empty() {
                info!("no --jetstream URL: following the change log only");
                let mut shutdown_follow = shutdown.clone();
                let never = async {
                    // Without URLs this replica never writes: it only follows.
                    loop {
                        let me = follower.clone();
                        tokio::task::spawn_blocking(move || match me.store.shared() {
                            Some(store) => {
                                tail_changes(store, &me.graph, &me.timelines, &me.applied_seq)
                            }
                            None => Ok(()),
                        })
                        .await
                        .context("the change log task")??;
                        tokio::select! {
                            _ = tokio::time::sleep(TAIL_INTERVAL) => {}
                            _ = shutdown_follow.wait_for(|stop| *stop) => return Ok::<(), anyhow::Error>(()),
                        }
                    }
                };
                return never.await;
            }
            if !follower.await_lease(shutdown.clone()).await? {
                return Ok(());
            }
            let status = Arc::new(LiveStatus::default());
            let ingest = run_live(store.clone(), options, feeder, status, shutdown);
            tokio::select! {
                res = ingest => {
                    // A clean stop hands the lease over at once instead of after its TTL.
                    let me = follower.clone();
                    let released = tokio::task::spawn_blocking(move || match me.store.shared() {
                        Some(store) => store.release_lease(&me.owner),
                        None => Ok(()),
                    })
                    .await;
                    if let Ok(Err(err)) = released {
                        tracing::warn!(error = %err, "releasing the writer lease");
                    }
                    Ok(res?)
                }
                err = follower.keep_lease() => {
                    // Writing on without the lease could race the next writer: exit now, and
                    // let the supervisor restart this replica as a follower.
                    tracing::error!(error = %format!("{err:#}"), "lost the writer lease: exiting");
                    eprintln!("starling: error: lost the writer lease: {err:#}");
                    std::process::exit(1);
                }
            }
        }))
    } else if config.live.urls.is_empty() {
        info!("no --jetstream URL: serving stored data only");
        None
    } else {
        let status = Arc::new(LiveStatus::default());
        let live = run_live(
            store.clone(),
            config.live.clone(),
            feeder,
            status,
            shutdown_rx.clone(),
        );
        Some(tokio::spawn(
            async move { Ok::<(), anyhow::Error>(live.await?) },
        ))
    };
    ready.store(true, Ordering::Relaxed);
    // Ingest ending on its own means the store failed or a bug: stop serving, exit non-zero.
    let ingest_result = match live {
        Some(mut live) => tokio::select! {
            _ = wait_for_signal() => {
                let _ = shutdown_tx.send(true);
                (&mut live).await
            }
            res = &mut live => res,
        },
        None => {
            wait_for_signal().await;
            Ok(Ok(()))
        }
    };
    info!("shutting down");
    ready.store(false, Ordering::Relaxed);
    let _ = shutdown_tx.send(true);
    http.await.context("http task")?.context("http server")?;
    if let Some(grpc) = grpc {
        grpc.await.context("grpc task")?.context("grpc server")?;
    }
    ingest_result
        .context("ingest task")?
        .context("ingest stopped")?;
    info!("stopped");
    Ok(())
}

async fn wait_for_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(term) => term,
                Err(_) => {
                    let _ = ctrl_c.await;
                    return;
                }
            };
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
}

/// What `serve` does with each committed batch: graph and timelines, then drops the cached
/// DID documents of actors whose identity changed.
struct CommitFeeder<S: Store> {
    updater: GraphUpdater<S>,
    store: Arc<S>,
    resolver: starling_identity::Resolver,
}

impl<S: Store> CommitSink for CommitFeeder<S> {
    fn apply(&mut self, committed: &Committed) {
        self.updater.apply(committed);
        for &actor in &committed.identities {
            if let Some(did) = self.store.did(actor) {
                self.resolver.invalidate(&did);
            }
        }
    }
}

/// Publishes the timelines' counts; called with each cache refresh.
fn export_timeline_metrics(stats: &starling_timeline::TimelineStats) {
    metrics::gauge!("starling_timeline_active_readers").set(stats.active_readers as f64);
    metrics::gauge!("starling_timeline_items").set(stats.items as f64);
    metrics::gauge!("starling_timeline_item_bytes").set(stats.item_bytes as f64);
    metrics::gauge!("starling_timeline_celebrities").set(stats.celebrities as f64);
    metrics::gauge!("starling_timeline_lossy_readers").set(stats.lossy_readers as f64);
    metrics::counter!("starling_timeline_inserts_total").absolute(stats.inserts);
    metrics::counter!("starling_timeline_builds_total").absolute(stats.builds);
    metrics::counter!("starling_timeline_evictions_total").absolute(stats.evictions);
}

/// A background thread that runs a task every interval, and once more when stopped.
struct Periodic {
    what: &'static str,
    stop_tx: mpsc::Sender<()>,
    thread: std::thread::JoinHandle<anyhow::Result<()>>,
}

impl Periodic {
    fn start(
        what: &'static str,
        interval: Duration,
        mut task: impl FnMut() -> anyhow::Result<()> + Send + 'static,
    ) -> anyhow::Result<Periodic> {
        let (stop_tx, stop_rx) = mpsc::channel::<()>();
        let thread = std::thread::Builder::new()
            .name(what.to_owned())
            .spawn(move || {
                loop {
                    let stopping = !matches!(
                        stop_rx.recv_timeout(interval),
                        Err(mpsc::RecvTimeoutError::Timeout)
                    );
                    task()?;
                    if stopping {
                        return Ok(());
                    }
                }
            })
            .with_context(|| format!("starting the {what} thread"))?;
        Ok(Periodic {
            what,
            stop_tx,
            thread,
        })
    }

    fn stop(self) -> anyhow::Result<()> {
        let _ = self.stop_tx.send(());
        match self.thread.join() {
            Ok(res) => res.with_context(|| format!("{} thread", self.what)),
            Err(_) => anyhow::bail!("the {} thread panicked", self.what),
        }
    }
}

/// Writes a graph snapshot every `graph.snapshot_interval_secs` when the graph changed, and
/// once more when stopped. `applied_seq` is where the graph updater says the graph is.
fn start_snapshots<S: Store + 'static>(
    store: Arc<S>,
    graph: Arc<Graph>,
    applied_seq: Arc<AtomicU64>,
    config: &Config,
) -> anyhow::Result<Periodic> {
    let data_dir = config.data_dir.clone();
    let mut covered = applied_seq.load(Ordering::Acquire);
    Periodic::start(
        "graph-snapshots",
        config.graph_snapshot_interval,
        move || {
            let now = applied_seq.load(Ordering::Acquire);
            if now > covered {
                graph_sync::write_snapshot(&*store, &graph, now, &data_dir)
                    .context("writing the graph snapshot")?;
                covered = now;
            }
            Ok(())
        },
    )
}

fn import_follows(args: ImportFollowsArgs) -> anyhow::Result<()> {
    let config = load_config(&args.common, Overrides::default())?;
    if !args.file.is_file() {
        anyhow::bail!(
            "adjacency file `{}` does not exist or is not a file",
            args.file.display()
        );
    }
    with_store!(open_any(&config)?, |store| import_into(
        &store, &args, &config
    ))
}

fn import_into<S: Backend>(
    store: &S,
    args: &ImportFollowsArgs,
    config: &Config,
) -> anyhow::Result<()> {
    let (graph, _) = graph_sync::load_graph(store, &config.data_dir)?;
    // An empty graph is built anew in bulk, which is far faster than adding edges one by one.
    let existing = (graph.n_follows() + graph.n_blocks() > 0).then_some(graph);
    let total = std::fs::metadata(&args.file)
        .with_context(|| format!("reading `{}`", args.file.display()))?
        .len();
    let progress = Arc::new(ReplayProgress::default());
    let started = Instant::now();
    let done = AtomicBool::new(false);
    let (graph, report) = std::thread::scope(|scope| {
        let reporter = scope.spawn(|| report_progress(&args.file, total, &progress, &done));
        let res =
            starling_ingest::import::import_follows(store, &args.file, existing, progress.clone());
        done.store(true, Ordering::Relaxed);
        reporter.thread().unpark();
        let _ = reporter.join();
        res
    })?;
    graph_sync::write_snapshot(store, &graph, store.graph_log_seq(), &config.data_dir)?;
    store.finish()?;
    info!(
        file = %args.file.display(),
        follows = report.follows,
        bad_lines = report.bad_lines,
        first_bad_lines = ?report.first_bad_lines,
        graph_follows = graph.n_follows(),
        seconds = format!("{:.1}", started.elapsed().as_secs_f64()),
        "import finished"
    );
    println!(
        "imported {} follows; {} bad lines{}",
        report.follows,
        report.bad_lines,
        if report.first_bad_lines.is_empty() {
            String::new()
        } else {
            format!(" (first at lines {:?})", report.first_bad_lines)
        }
    );
    Ok(())
}
