//! The command line: subcommands and their flags (clap derive). Every flag with an environment
//! variable is listed here; the config file's keys are in `config.rs`.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

/// `--version`: the release and the commit built (`build.rs`), so that a benchmark's output or
/// an operator's report names the exact build.
const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("STARLING_COMMIT"),
    ")"
);

/// Starling: an open-source dataplane for Bluesky AppViews.
#[derive(Parser)]
#[command(version = VERSION, about)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
    /// How log lines are written to stderr: `text` for people, `json` (one object per line,
    /// with the event's fields) for log collectors.
    #[arg(long, global = true, env = "STARLING_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
}

/// The format of log lines.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

// Parsed once at startup: the size of the largest variant costs nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand)]
pub enum Command {
    /// Run the service: ingest from Jetstream and serve the HTTP API and metrics.
    // Boxed: its flags make it much larger than the other commands.
    Serve(Box<ServeArgs>),
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
    /// Fetch every repository from a relay's listing (or read a directory of CAR files),
    /// verify each commit's signature and MST, and apply their records; resumable.
    Backfill(BackfillArgs),
    /// Take an actor, a record or a blob down: hidden by the AppView (actors and records) or
    /// refused by its image proxy (blobs). Through a running `serve` with --server, else in
    /// the configured store directly.
    Takedown(TakedownArgs),
    /// Lift a takedown (the same arguments).
    Untakedown(TakedownArgs),
}

#[derive(Args)]
pub struct BackfillArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// The relay whose `com.atproto.sync.listRepos` lists the repositories (`http://` or
    /// `https://`); each is fetched from its PDS.
    #[arg(long, env = "STARLING_BACKFILL_RELAY", conflicts_with = "car")]
    pub relay: Option<String>,
    /// Read repositories from the `*.car` files of this directory instead of a relay.
    #[arg(long, required_unless_present = "relay")]
    pub car: Option<PathBuf>,
    /// The PLC directory DID documents are fetched from [default: https://plc.directory].
    #[arg(long, env = "STARLING_PLC_URL")]
    pub plc_url: Option<String>,
    /// Repositories fetched and verified at once.
    #[arg(long, default_value_t = 32)]
    pub repos_concurrent_max: usize,
    /// Repositories fetched at once from one PDS host.
    #[arg(long, default_value_t = 4)]
    pub repos_per_host_max: usize,
    /// Seconds one `getRepo` may take, body included.
    #[arg(long, default_value_t = 120)]
    pub repo_timeout_secs: u64,
    /// The largest repository accepted, in MiB of CAR.
    #[arg(long, default_value_t = 512)]
    pub repo_mib_max: usize,
    /// Tries per repository (429, 5xx, timeouts) before it is counted as failed.
    #[arg(long, default_value_t = 5)]
    pub attempts_max: u32,
    /// Events per store batch at most.
    #[arg(long, env = "STARLING_BATCH_EVENTS_MAX")]
    pub batch_events_max: Option<usize>,
}

/// What a takedown applies to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum TakedownKind {
    Actor,
    Record,
    Blob,
}

#[derive(Args)]
pub struct TakedownArgs {
    /// What is taken down.
    #[arg(value_enum)]
    pub kind: TakedownKind,
    /// The actor's or the blob owner's DID, or the record's AT-URI.
    pub subject: String,
    /// The blob's CID (blobs only).
    pub cid: Option<String>,
    /// The moderation reference kept with the takedown [default: TAKEDOWN].
    #[arg(long = "ref")]
    pub reference: Option<String>,
    /// A running `serve`'s HTTP address (HOST:PORT): the takedown goes through its admin
    /// endpoint, with the admin token. Needed for the embedded store while `serve` runs on it.
    #[arg(long, env = "STARLING_ADMIN_SERVER")]
    pub server: Option<String>,
    /// The admin token for --server (or `http.admin_token` in the config file).
    #[arg(long, env = "STARLING_ADMIN_TOKEN", hide_env_values = true)]
    pub admin_token: Option<String>,
    #[command(flatten)]
    pub common: CommonArgs,
}

#[derive(Args)]
pub struct ImportFollowsArgs {
    /// The adjacency list, plain or zstd-compressed.
    pub file: PathBuf,
    #[command(flatten)]
    pub common: CommonArgs,
}

#[derive(Args)]
pub struct CommonArgs {
    /// The data directory.
    #[arg(long, env = "STARLING_DATA_DIR")]
    pub data_dir: Option<PathBuf>,
    /// A TOML config file; flags and STARLING_* variables override it.
    #[arg(long, env = "STARLING_CONFIG")]
    pub config: Option<PathBuf>,
    /// The store backend: `embedded` (in the data directory) or `cassandra` [default:
    /// embedded].
    #[arg(long, env = "STARLING_STORE")]
    pub store: Option<String>,
    /// Cassandra contact points, HOST:PORT, comma-separated (with --store cassandra).
    #[arg(long, env = "STARLING_CASSANDRA_NODES", value_delimiter = ',')]
    pub cassandra_nodes: Vec<String>,
    /// The Cassandra keyspace, created if missing [default: starling].
    #[arg(long, env = "STARLING_CASSANDRA_KEYSPACE")]
    pub cassandra_keyspace: Option<String>,
    /// Consistency of Cassandra reads and writes: one, quorum, all, local_quorum, ...
    /// [default: quorum].
    #[arg(long, env = "STARLING_CASSANDRA_CONSISTENCY")]
    pub cassandra_consistency: Option<String>,
    /// Replication factor of a keyspace Starling creates [default: 1].
    #[arg(long, env = "STARLING_CASSANDRA_REPLICATION_FACTOR")]
    pub cassandra_replication_factor: Option<u32>,
}

#[derive(Args)]
pub struct ServeArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// A Jetstream `/subscribe` URL; repeat for fail-over instances.
    #[arg(long = "jetstream", env = "STARLING_JETSTREAM", value_delimiter = ',')]
    pub jetstream: Vec<String>,
    /// Where the HTTP API listens [default: 127.0.0.1:6010].
    #[arg(long, env = "STARLING_HTTP_ADDR")]
    pub http_addr: Option<String>,
    /// The bearer token the expensive HTTP queries need when --http-addr is not loopback
    /// (`Authorization: Bearer TOKEN`). Prefer the variable or the config file to the flag:
    /// a flag shows in `ps`.
    #[arg(long, env = "STARLING_HTTP_TOKEN", hide_env_values = true)]
    pub http_token: Option<String>,
    /// The bearer token the HTTP admin endpoints (backups, takedowns) need on every listener,
    /// loopback included; without one they answer 403. Prefer the variable or the config
    /// file (`http.admin_token`) to the flag.
    #[arg(long, env = "STARLING_ADMIN_TOKEN", hide_env_values = true)]
    pub admin_token: Option<String>,
    /// A labeler whose `com.atproto.label.subscribeLabels` stream is consumed (its service
    /// URL, `https://…` or `wss://…`); repeat for several. Labels are checked against each
    /// source's `#atproto_label` key. On a shared store, give it to one replica only.
    #[arg(long = "labeler", env = "STARLING_LABELERS", value_delimiter = ',')]
    pub labelers: Vec<String>,
    /// Expensive HTTP queries (graph lists, timelines, author feeds) running at once; more are
    /// answered 503 [default: 8].
    #[arg(long, env = "STARLING_HTTP_EXPENSIVE_QUERIES_MAX")]
    pub http_expensive_queries_max: Option<usize>,
    /// Where the `bsky.Service` gRPC API for the AppView listens (h2c), e.g. 127.0.0.1:6011;
    /// off unless given.
    #[arg(long, env = "STARLING_GRPC_ADDR")]
    pub grpc_addr: Option<String>,
    /// Serve gRPC over TLS with this PEM certificate chain (needs --grpc-tls-key); the AppView
    /// then uses an `https://` dataplane URL.
    #[arg(long, env = "STARLING_GRPC_TLS_CERT")]
    pub grpc_tls_cert: Option<PathBuf>,
    /// The PEM private key of --grpc-tls-cert.
    #[arg(long, env = "STARLING_GRPC_TLS_KEY")]
    pub grpc_tls_key: Option<PathBuf>,
    /// The PLC directory DID documents are fetched from [default: https://plc.directory].
    #[arg(long, env = "STARLING_PLC_URL")]
    pub plc_url: Option<String>,
    /// Consume each user's private state (mutes, bookmarks, notification settings, activity
    /// subscriptions, drafts) from the bsync service at this `http://host:port`.
    #[arg(long, env = "STARLING_BSYNC_URL")]
    pub bsync_url: Option<String>,
    /// One of bsync's API keys (`BSYNC_API_KEYS`), sent as a bearer token.
    #[arg(long, env = "STARLING_BSYNC_API_KEY", hide_env_values = true)]
    pub bsync_api_key: Option<String>,
    /// Only ingest these collections (NSIDs or `prefix.*`); repeat for more.
    #[arg(
        long = "wanted-collection",
        env = "STARLING_WANTED_COLLECTIONS",
        value_delimiter = ','
    )]
    pub wanted_collections: Vec<String>,
    /// The Jetstream zstd dictionary; enables `compress=true`.
    #[arg(long, env = "STARLING_ZSTD_DICTIONARY")]
    pub zstd_dictionary: Option<PathBuf>,
    /// Events per store batch at most.
    #[arg(long, env = "STARLING_BATCH_EVENTS_MAX")]
    pub batch_events_max: Option<usize>,
    /// Before serving, replay a generated sample network so there is something to see.
    #[arg(long)]
    pub demo: bool,
    /// Ingest the relay firehose (`com.atproto.sync.subscribeRepos`, `ws://` or `wss://`)
    /// instead of Jetstream, checking every commit's signature against its DID's key. A
    /// repository whose commit chain breaks (`#sync`, `tooBig`, a `prevData` mismatch) is
    /// fetched again from its PDS.
    #[arg(long, env = "STARLING_RELAY")]
    pub relay: Option<String>,
    /// Backfill every repository that this relay lists (`http://` or `https://`;
    /// `com.atproto.sync.listRepos`, then each PDS's `getRepo`) beside live ingest, with the
    /// bounds of `starling backfill`'s defaults; repositories already complete are skipped, so a
    /// restart resumes it.
    #[arg(long = "backfill", env = "STARLING_BACKFILL", value_name = "RELAY_URL")]
    pub backfill: Option<String>,
    /// A trusted verifier's DID: its `app.bsky.graph.verification` records verify accounts
    /// (`verified_by`); repeat for more.
    #[arg(
        long = "trusted-verifier",
        env = "STARLING_TRUSTED_VERIFIERS",
        value_delimiter = ','
    )]
    pub trusted_verifiers: Vec<String>,
}

#[derive(Args)]
pub struct ReplayArgs {
    /// Files to replay, in order; `-` reads standard input (plain or zstd, never resumed).
    #[arg(required = true)]
    pub files: Vec<PathBuf>,
    #[command(flatten)]
    pub common: CommonArgs,
    /// Events per store batch at most.
    #[arg(long, env = "STARLING_BATCH_EVENTS_MAX")]
    pub batch_events_max: Option<usize>,
    /// Replay from the start even if an earlier run of the same file stopped part-way.
    #[arg(long)]
    pub from_start: bool,
}

#[derive(Args)]
pub struct StatsArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// Print one JSON object (the only format for now).
    #[arg(long)]
    pub json: bool,
    /// Print what the store holds by kind instead (records by collection, index entries by
    /// tag: entries and bytes before compression) and its bytes on disk; reads all of it.
    #[arg(long)]
    pub usage: bool,
}

#[derive(Args)]
pub struct SampleArgs {
    /// Where to write the events; `-` for standard output.
    #[arg(long, default_value = "-")]
    pub out: PathBuf,
    /// Actors in the sample network.
    #[arg(long, default_value_t = 200)]
    pub actors: u32,
    /// The random seed.
    #[arg(long, default_value_t = 7)]
    pub seed: u64,
}

/// `starling gen` flags; the defaults are the "indexer scale" network.
#[derive(Args)]
pub struct GenArgs {
    /// The output: `FILE.jsonl.zst` (zstd) or `FILE.jsonl`. It is written as `FILE….tmp` and
    /// renamed when complete; the counts go to `FILE.summary.json` beside it. `-` writes plain
    /// JSON lines to standard output (for `starling replay -`) and no summary file.
    #[arg(long)]
    pub out: PathBuf,
    /// Actors, each with an identity event (handle `user{N}.gen.test`) and a profile.
    #[arg(long, default_value_t = 10_000)]
    pub actors: u32,
    /// Follows of the Bluesky-shaped follow graph, written after the actors and before the
    /// activity (at most an eighth of the actors per actor) [default: 30 per actor, the
    /// network's ratio].
    #[arg(long)]
    pub follows: Option<u64>,
    /// Posts of the activity phase (40% replies, 6% quotes); every other activity count
    /// follows from it: per post ~5.6 likes, 0.83 reposts, 0.42 follows, 0.1 unfollows,
    /// 0.08 blocks, and some deletes and profile updates [default: 10 per actor].
    #[arg(long)]
    pub posts: Option<u64>,
    /// Likes, instead of the mix's ~5.6 per post.
    #[arg(long)]
    pub likes: Option<u64>,
    /// Reposts, instead of the mix's ~0.83 per post.
    #[arg(long)]
    pub reposts: Option<u64>,
    /// The random seed; the same flags and seed give the same bytes.
    #[arg(long, default_value_t = 7)]
    pub seed: u64,
}
