//! Configuration: built-in defaults, then `starling.toml`, then `STARLING_*` environment
//! variables, then flags; later sources win.
//!
//! Two stages: [`RawConfig`] is what the user wrote in the TOML file (every key optional,
//! unknown keys an error); [`Config`] is validated, with defaults applied and units converted.
//! Environment variables and flags are read by clap (see `Cli` in `main.rs`), which is where every
//! `STARLING_*` variable is listed.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, bail};
use serde::Deserialize;
use starling_api::ListenerLimits;
use starling_api::grpc::{GRPC_IN_FLIGHT_MAX, GrpcTls};
use starling_api::guard::{self, GuardConfig};
use starling_identity::ResolverConfig;
use starling_ingest::{BatchLimits, BsyncOptions, LiveOptions, check_bsync_url};
use starling_store::{CassandraOptions, CqlConsistency};
use starling_timeline::TimelineConfig;

/// The TOML file as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawConfig {
    /// Where the store lives.
    pub data_dir: Option<PathBuf>,
    /// Where the HTTP API listens.
    pub http_addr: Option<String>,
    /// Where the `bsky.Service` gRPC API listens; off when absent.
    pub grpc_addr: Option<String>,
    /// PEM certificate chain for gRPC over TLS (with `grpc_tls_key`); h2c when absent.
    pub grpc_tls_cert: Option<PathBuf>,
    /// PEM private key of `grpc_tls_cert`.
    pub grpc_tls_key: Option<PathBuf>,
    /// The live Jetstream connection.
    #[serde(default)]
    pub jetstream: RawJetstream,
    /// Batching.
    #[serde(default)]
    pub ingest: RawIngest,
    /// The in-memory graph.
    #[serde(default)]
    pub graph: RawGraph,
    /// Home timelines.
    #[serde(default)]
    pub timeline: RawTimeline,
    /// DID resolution.
    #[serde(default)]
    pub identity: RawIdentity,
    /// Each user's private state from bsync.
    #[serde(default)]
    pub bsync: RawBsync,
    /// Labelers whose `subscribeLabels` streams are consumed (service URLs).
    #[serde(default)]
    pub labelers: Vec<String>,
    /// Which store backend.
    #[serde(default)]
    pub store: RawStore,
    /// Limits of the HTTP and gRPC listeners.
    #[serde(default)]
    pub listeners: RawListeners,
    /// The HTTP API's guard on expensive queries.
    #[serde(default)]
    pub http: RawHttp,
    /// The DIDs whose `app.bsky.graph.verification` records verify accounts.
    pub trusted_verifiers: Option<Vec<String>>,
    /// The relay firehose, instead of Jetstream.
    #[serde(default)]
    pub relay: RawRelay,
    /// The relay whose repositories `serve` backfills beside live ingest (`--backfill`).
    pub backfill_relay: Option<String>,
}

/// `[relay]` in the TOML file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRelay {
    /// The relay's `ws://` or `wss://` URL (`subscribeRepos`); replaces Jetstream when set.
    pub url: Option<String>,
}

/// `[listeners]` in the TOML file: limits of the HTTP and the gRPC listener, each.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawListeners {
    /// Connections open at once, per listener.
    pub connections_max: Option<usize>,
    /// Seconds a new connection may take to send its first bytes (and an HTTP request its
    /// headers).
    pub header_timeout_secs: Option<u64>,
    /// Seconds a connection may stay silent before it is closed.
    pub idle_timeout_secs: Option<u64>,
    /// gRPC calls in flight at once, over all connections.
    pub grpc_in_flight_max: Option<usize>,
}

/// `[http]` in the TOML file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawHttp {
    /// The bearer token expensive queries need when the HTTP listener is not on loopback.
    pub token: Option<String>,
    /// Expensive queries running at once, at most.
    pub expensive_queries_max: Option<usize>,
    /// Milliseconds an expensive query may take.
    pub query_deadline_ms: Option<u64>,
    /// The bearer token the admin endpoints (backups, takedowns) need on every listener.
    pub admin_token: Option<String>,
}

/// `[store]` in the TOML file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawStore {
    /// `embedded` (the data directory) or `cassandra`.
    pub backend: Option<String>,
    /// `[store.cassandra]`.
    #[serde(default)]
    pub cassandra: RawCassandra,
}

/// `[store.cassandra]` in the TOML file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawCassandra {
    /// Contact points, `host:port`.
    pub nodes: Option<Vec<String>>,
    /// The keyspace.
    pub keyspace: Option<String>,
    /// Replication factor of the keyspace when Starling creates it.
    pub replication_factor: Option<u32>,
    /// Consistency level of reads and writes.
    pub consistency: Option<String>,
}

/// `[identity]` in the TOML file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawIdentity {
    /// Base URL of the PLC directory that `did:plc` documents are fetched from.
    pub plc_url: Option<String>,
}

/// `[bsync]` in the TOML file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawBsync {
    /// `http://host:port` of the bsync service; private state is not consumed when absent.
    pub url: Option<String>,
    /// One of bsync's API keys.
    pub api_key: Option<String>,
}

/// `[timeline]` in the TOML file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawTimeline {
    /// Items held in memory per active reader.
    pub length: Option<usize>,
    /// Lossy timelines: follows above which a reader keeps `limit / follows` of fanned-out
    /// items; 0 turns lossy timelines off.
    pub reasonable_limit: Option<u32>,
    /// Followers above which an author is merged at read time instead of fanned out; 0 fans
    /// out every author.
    pub celebrity_threshold: Option<u32>,
    /// Readers whose timelines stay in memory.
    pub active_readers_max: Option<usize>,
    /// Items of recently read author feeds kept in memory; 0 turns the cache off.
    pub author_heads_items: Option<usize>,
    /// Seconds between refreshes of the celebrity and lossy follow-count caches.
    pub refresh_interval_secs: Option<u64>,
}

/// `[graph]` in the TOML file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawGraph {
    /// Seconds between graph snapshots (when the graph changed).
    pub snapshot_interval_secs: Option<u64>,
}

/// `[jetstream]` in the TOML file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawJetstream {
    /// `/subscribe` URLs.
    pub urls: Option<Vec<String>>,
    /// `wantedCollections`.
    pub wanted_collections: Option<Vec<String>>,
    /// Path of the Jetstream zstd dictionary; enables `compress=true`.
    pub zstd_dictionary: Option<PathBuf>,
    /// Seconds to rewind the cursor on reconnect.
    pub rewind_secs: Option<u64>,
    /// Seconds a connection may stay silent before it is dropped and made again.
    pub read_timeout_secs: Option<u64>,
}

/// `[ingest]` in the TOML file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawIngest {
    /// Events per batch at most.
    pub batch_events_max: Option<usize>,
    /// Milliseconds a live batch waits before it commits, at most.
    pub batch_wait_ms: Option<u64>,
    /// Messages queued between the socket and the applier, at most.
    pub queue_messages_max: Option<usize>,
}

/// Values given by environment variables or flags; they override the file.
#[derive(Debug, Default)]
pub struct Overrides {
    /// `--data-dir` / `STARLING_DATA_DIR`.
    pub data_dir: Option<PathBuf>,
    /// `--http-addr` / `STARLING_HTTP_ADDR`.
    pub http_addr: Option<String>,
    /// `--grpc-addr` / `STARLING_GRPC_ADDR`.
    pub grpc_addr: Option<String>,
    /// `--grpc-tls-cert` / `STARLING_GRPC_TLS_CERT`.
    pub grpc_tls_cert: Option<PathBuf>,
    /// `--grpc-tls-key` / `STARLING_GRPC_TLS_KEY`.
    pub grpc_tls_key: Option<PathBuf>,
    /// `--plc-url` / `STARLING_PLC_URL`.
    pub plc_url: Option<String>,
    /// `--bsync-url` / `STARLING_BSYNC_URL`.
    pub bsync_url: Option<String>,
    /// `--bsync-api-key` / `STARLING_BSYNC_API_KEY`.
    pub bsync_api_key: Option<String>,
    /// `--jetstream` / `STARLING_JETSTREAM` (comma-separated in the variable).
    pub jetstream: Vec<String>,
    /// `--wanted-collection` / `STARLING_WANTED_COLLECTIONS`.
    pub wanted_collections: Vec<String>,
    /// `--zstd-dictionary` / `STARLING_ZSTD_DICTIONARY`.
    pub zstd_dictionary: Option<PathBuf>,
    /// `--batch-events-max` / `STARLING_BATCH_EVENTS_MAX`.
    pub batch_events_max: Option<usize>,
    /// `--store` / `STARLING_STORE`.
    pub store: Option<String>,
    /// `--cassandra-nodes` / `STARLING_CASSANDRA_NODES` (comma-separated).
    pub cassandra_nodes: Vec<String>,
    /// `--cassandra-keyspace` / `STARLING_CASSANDRA_KEYSPACE`.
    pub cassandra_keyspace: Option<String>,
    /// `--cassandra-consistency` / `STARLING_CASSANDRA_CONSISTENCY`.
    pub cassandra_consistency: Option<String>,
    /// `--cassandra-replication-factor` / `STARLING_CASSANDRA_REPLICATION_FACTOR`.
    pub cassandra_replication_factor: Option<u32>,
    /// `STARLING_HTTP_TOKEN`.
    pub http_token: Option<String>,
    /// `--admin-token` / `STARLING_ADMIN_TOKEN`.
    pub admin_token: Option<String>,
    /// `--labeler` (repeated) / `STARLING_LABELERS` (comma-separated).
    pub labelers: Vec<String>,
    /// `--http-expensive-queries-max` / `STARLING_HTTP_EXPENSIVE_QUERIES_MAX`.
    pub http_expensive_queries_max: Option<usize>,
    /// `--relay` / `STARLING_RELAY`.
    pub relay: Option<String>,
    /// `--backfill` / `STARLING_BACKFILL`.
    pub backfill: Option<String>,
    /// `--trusted-verifier` / `STARLING_TRUSTED_VERIFIERS` (comma-separated).
    pub trusted_verifiers: Vec<String>,
}

/// Where the store lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreChoice {
    /// The embedded store in the data directory.
    Embedded,
    /// A Cassandra keyspace.
    Cassandra(CassandraOptions),
}

/// The validated configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// Where the store lives.
    pub data_dir: PathBuf,
    /// Where the HTTP API listens.
    pub http_addr: SocketAddr,
    /// Where the gRPC API listens, if it is on.
    pub grpc_addr: Option<SocketAddr>,
    /// The certificate and key when gRPC is served over TLS.
    pub grpc_tls: Option<GrpcTls>,
    /// Batch limits.
    pub limits: BatchLimits,
    /// The live client's options.
    pub live: LiveOptions,
    /// Where the dictionary came from, for the startup log.
    pub zstd_dictionary_path: Option<PathBuf>,
    /// Time between graph snapshots.
    pub graph_snapshot_interval: Duration,
    /// Home timelines.
    pub timeline: TimelineConfig,
    /// Time between refreshes of the timelines' follow-count caches.
    pub timeline_refresh_interval: Duration,
    /// DID resolution for GetIdentityByDid.
    pub identity: ResolverConfig,
    /// The store backend.
    pub store: StoreChoice,
    /// Where each user's private state comes from, if anywhere.
    pub bsync: Option<BsyncOptions>,
    /// The labelers whose label streams are consumed (service or endpoint URLs).
    pub labelers: Vec<String>,
    /// Limits of each listener.
    pub listeners: ListenerLimits,
    /// gRPC calls in flight at once, at most.
    pub grpc_in_flight_max: usize,
    /// The guard on the HTTP API's expensive queries.
    pub http_guard: GuardConfig,
    /// The relay to ingest instead of Jetstream, checked.
    pub relay_url: Option<String>,
    /// The relay whose repositories are backfilled beside live ingest, checked.
    pub backfill_relay: Option<String>,
    /// The DIDs whose verifications count, checked.
    pub trusted_verifiers: Vec<String>,
}

/// The largest `timeline.length`.
const TIMELINE_LENGTH_LIMIT: usize = 10_000;

/// Default HTTP listen address: loopback only, so nothing is exposed by accident.
pub const DEFAULT_HTTP_ADDR: &str = "127.0.0.1:6010";
/// Events per batch at most, by default.
const DEFAULT_BATCH_EVENTS_MAX: usize = 20_000;
/// Upper bound on `batch_events_max`: a batch is held in memory until it commits.
const BATCH_EVENTS_MAX_LIMIT: usize = 1_000_000;

/// Reads the TOML file, if any.
pub fn read_file(path: Option<&Path>) -> anyhow::Result<RawConfig> {
    let Some(path) = path else {
        return Ok(RawConfig::default());
    };
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading config file `{}`", path.display()))?;
    toml::from_str(&text).map_err(|err| {
        // The error's own rendering spans several lines; keep one, with the line and its text.
        let at = err
            .span()
            .map(|span| {
                let line_idx = text.get(..span.start).unwrap_or("").matches('\n').count();
                let line_text = text.lines().nth(line_idx).unwrap_or("").trim();
                format!(" line {} (`{line_text}`):", line_idx + 1)
            })
            .unwrap_or_default();
        anyhow::anyhow!("config file `{}`:{at} {}", path.display(), err.message())
    })
}

/// Merges the file with the overrides, applies defaults, and validates.
pub fn resolve(raw: RawConfig, overrides: Overrides) -> anyhow::Result<Config> {
    let Some(data_dir) = overrides.data_dir.or(raw.data_dir) else {
        bail!(
            "no data directory: pass --data-dir DIR, set STARLING_DATA_DIR, or data_dir in the config file"
        );
    };
    let http_text = overrides
        .http_addr
        .or(raw.http_addr)
        .unwrap_or_else(|| DEFAULT_HTTP_ADDR.to_owned());
    let http_addr: SocketAddr = http_text.parse().with_context(|| {
        format!("http address `{http_text}` is not IP:PORT (e.g. 127.0.0.1:6010)")
    })?;
    let grpc_addr = match overrides.grpc_addr.or(raw.grpc_addr) {
        Some(text) => Some(text.parse().with_context(|| {
            format!("grpc address `{text}` is not IP:PORT (e.g. 127.0.0.1:6011)")
        })?),
        None => None,
    };
    let store = resolve_store(
        raw.store,
        StoreOverrides {
            backend: overrides.store,
            nodes: overrides.cassandra_nodes,
            keyspace: overrides.cassandra_keyspace,
            consistency: overrides.cassandra_consistency,
            replication_factor: overrides.cassandra_replication_factor,
        },
    )?;
    let grpc_tls = resolve_grpc_tls(
        overrides.grpc_tls_cert.or(raw.grpc_tls_cert),
        overrides.grpc_tls_key.or(raw.grpc_tls_key),
        grpc_addr.is_some(),
    )?;
    let (live, zstd_dictionary_path) = resolve_live(
        raw.jetstream,
        &raw.ingest,
        LiveOverrides {
            urls: overrides.jetstream,
            wanted_collections: overrides.wanted_collections,
            zstd_dictionary: overrides.zstd_dictionary,
            batch_events_max: overrides.batch_events_max,
        },
    )?;
    let limits = live.limits;
    let snapshot_secs = raw.graph.snapshot_interval_secs.unwrap_or(300);
    if snapshot_secs == 0 || snapshot_secs > 86_400 {
        bail!("graph.snapshot_interval_secs is {snapshot_secs}; it must be between 1 and 86400");
    }
    let timeline = resolve_timeline(&raw.timeline)?;
    let refresh_secs = raw.timeline.refresh_interval_secs.unwrap_or(30);
    if refresh_secs == 0 || refresh_secs > 86_400 {
        bail!("timeline.refresh_interval_secs is {refresh_secs}; it must be between 1 and 86400");
    }
    let http_guard = resolve_http_guard(
        raw.http,
        (overrides.http_token, overrides.admin_token),
        overrides.http_expensive_queries_max,
        &http_addr,
    )?;
    let identity = ResolverConfig {
        plc_url: overrides
            .plc_url
            .or(raw.identity.plc_url)
            .unwrap_or_else(|| ResolverConfig::default().plc_url),
        ..ResolverConfig::default()
    };
    let bsync = resolve_bsync(raw.bsync, overrides.bsync_url, overrides.bsync_api_key)?;
    let relay_url = resolve_relay(overrides.relay.or(raw.relay.url), &live)?;
    let backfill_relay = resolve_backfill(overrides.backfill.or(raw.backfill_relay))?;
    let labelers = resolve_labelers(raw.labelers, overrides.labelers)?;
    let (listeners, grpc_in_flight_max) = resolve_listeners(&raw.listeners)?;
    let trusted_verifiers = resolve_trusted_verifiers(
        overrides.trusted_verifiers,
        raw.trusted_verifiers.unwrap_or_default(),
    )?;
    Ok(Config {
        trusted_verifiers,
        listeners,
        grpc_in_flight_max,
        store,
        bsync,
        labelers,
        identity,
        timeline,
        timeline_refresh_interval: Duration::from_secs(refresh_secs),
        data_dir,
        http_addr,
        grpc_addr,
        grpc_tls,
        limits,
        live,
        zstd_dictionary_path,
        graph_snapshot_interval: Duration::from_secs(snapshot_secs),
        http_guard,
        relay_url,
        backfill_relay,
    })
}

/// The relay to ingest instead of Jetstream, if any: a checked URL, and never beside Jetstream
/// URLs.
fn resolve_relay(url: Option<String>, live: &LiveOptions) -> anyhow::Result<Option<String>> {
    if let Some(url) = &url {
        starling_ingest::live::check_url(url)?;
        if !live.urls.is_empty() {
            bail!(
                "both a relay and Jetstream URLs are set: ingest one (drop --jetstream or --relay)"
            );
        }
    }
    Ok(url)
}

/// The relay to backfill from, if any: an `http://` or `https://` URL (it answers listRepos).
fn resolve_backfill(url: Option<String>) -> anyhow::Result<Option<String>> {
    match url {
        Some(url) if !url.starts_with("http://") && !url.starts_with("https://") => {
            bail!("backfill relay `{url}` must start with http:// or https:// (for listRepos)")
        }
        url => Ok(url),
    }
}

/// The trusted verifiers: the flags' (or the variable's) if any, else the file's; each a DID.
fn resolve_trusted_verifiers(
    overrides: Vec<String>,
    raw: Vec<String>,
) -> anyhow::Result<Vec<String>> {
    let dids = if overrides.is_empty() { raw } else { overrides };
    for did in &dids {
        if !starling_core::syntax::is_valid_did(did) {
            bail!("trusted verifier `{did}` is not a DID (expected `did:plc:…` or `did:web:…`)");
        }
    }
    Ok(dids)
}

/// The largest `http.expensive_queries_max`: each holds a blocking thread.
const EXPENSIVE_QUERIES_MAX_LIMIT: usize = 256;

/// The guard on expensive queries: a token is asked for when the listener is not loopback.
fn resolve_http_guard(
    raw: RawHttp,
    (token, admin_token): (Option<String>, Option<String>),
    expensive_queries_max: Option<usize>,
    http_addr: &SocketAddr,
) -> anyhow::Result<GuardConfig> {
    let token = token.or(raw.token).filter(|token| !token.is_empty());
    let admin_token = admin_token
        .or(raw.admin_token)
        .filter(|token| !token.is_empty());
    let concurrent_max = expensive_queries_max
        .or(raw.expensive_queries_max)
        .unwrap_or(guard::EXPENSIVE_QUERIES_MAX_DEFAULT);
    if concurrent_max == 0 || concurrent_max > EXPENSIVE_QUERIES_MAX_LIMIT {
        bail!(
            "http.expensive_queries_max is {concurrent_max}; it must be between 1 and {EXPENSIVE_QUERIES_MAX_LIMIT}"
        );
    }
    let deadline_ms = raw
        .query_deadline_ms
        .unwrap_or(guard::QUERY_DEADLINE_DEFAULT.as_millis() as u64);
    if deadline_ms == 0 || deadline_ms > 600_000 {
        bail!("http.query_deadline_ms is {deadline_ms}; it must be between 1 and 600000");
    }
    Ok(GuardConfig {
        token,
        token_required: !http_addr.ip().is_loopback(),
        concurrent_max,
        deadline: Duration::from_millis(deadline_ms),
        admin_token,
    })
}

/// The bsync consumer's options: the URL checked, the key kept.
fn resolve_bsync(
    raw: RawBsync,
    url: Option<String>,
    api_key: Option<String>,
) -> anyhow::Result<Option<BsyncOptions>> {
    let api_key = api_key.or(raw.api_key).filter(|key| !key.is_empty());
    let Some(url) = url.or(raw.url).filter(|url| !url.is_empty()) else {
        if api_key.is_some() {
            bail!("a bsync API key without a bsync URL: pass --bsync-url too (or bsync.url)");
        }
        return Ok(None);
    };
    check_bsync_url(&url)?;
    Ok(Some(BsyncOptions { url, api_key }))
}

/// The labelers: the flags (or the variable) replace the file's list; each must be a
/// `ws://`, `wss://`, `http://` or `https://` URL.
fn resolve_labelers(raw: Vec<String>, flags: Vec<String>) -> anyhow::Result<Vec<String>> {
    let labelers: Vec<String> = if flags.is_empty() { raw } else { flags };
    for url in &labelers {
        let scheme = url.split_once("://").map(|(scheme, _)| scheme);
        if !matches!(scheme, Some("ws" | "wss" | "http" | "https")) {
            bail!("labeler `{url}` is not a ws://, wss://, http:// or https:// URL");
        }
    }
    Ok(labelers)
}

/// `[listeners]`, validated: the limits of each listener and the gRPC in-flight bound.
fn resolve_listeners(raw: &RawListeners) -> anyhow::Result<(ListenerLimits, usize)> {
    let defaults = ListenerLimits::default();
    let in_range = |key: &str, value: u64, max: u64| -> anyhow::Result<u64> {
        if value == 0 || value > max {
            bail!("listeners.{key} is {value}; it must be between 1 and {max}");
        }
        Ok(value)
    };
    let connections_max = raw.connections_max.unwrap_or(defaults.connections_max);
    in_range("connections_max", connections_max as u64, 1_000_000)?;
    let header_secs = raw
        .header_timeout_secs
        .unwrap_or(defaults.header_timeout.as_secs());
    let idle_secs = raw
        .idle_timeout_secs
        .unwrap_or(defaults.idle_timeout.as_secs());
    let grpc_in_flight_max = raw.grpc_in_flight_max.unwrap_or(GRPC_IN_FLIGHT_MAX);
    in_range("grpc_in_flight_max", grpc_in_flight_max as u64, 100_000)?;
    let limits = ListenerLimits {
        connections_max,
        header_timeout: Duration::from_secs(in_range("header_timeout_secs", header_secs, 3_600)?),
        idle_timeout: Duration::from_secs(in_range("idle_timeout_secs", idle_secs, 86_400)?),
    };
    Ok((limits, grpc_in_flight_max))
}

/// The Jetstream and ingest settings given by environment variables or flags.
struct LiveOverrides {
    urls: Vec<String>,
    wanted_collections: Vec<String>,
    zstd_dictionary: Option<PathBuf>,
    batch_events_max: Option<usize>,
}

/// The live client's options (with the batch limits), and where the dictionary came from.
fn resolve_live(
    jetstream: RawJetstream,
    ingest: &RawIngest,
    overrides: LiveOverrides,
) -> anyhow::Result<(LiveOptions, Option<PathBuf>)> {
    let batch_events_max = overrides
        .batch_events_max
        .or(ingest.batch_events_max)
        .unwrap_or(DEFAULT_BATCH_EVENTS_MAX);
    if batch_events_max == 0 || batch_events_max > BATCH_EVENTS_MAX_LIMIT {
        bail!(
            "batch_events_max is {batch_events_max}; it must be between 1 and {BATCH_EVENTS_MAX_LIMIT}"
        );
    }
    let batch_wait_ms = ingest.batch_wait_ms.unwrap_or(100);
    if batch_wait_ms == 0 || batch_wait_ms > 60_000 {
        bail!("ingest.batch_wait_ms is {batch_wait_ms}; it must be between 1 and 60000");
    }
    let limits = BatchLimits {
        events_max: batch_events_max,
        wait_max: Duration::from_millis(batch_wait_ms),
    };
    let urls = if overrides.urls.is_empty() {
        jetstream.urls.unwrap_or_default()
    } else {
        overrides.urls
    };
    for url in &urls {
        starling_ingest::live::check_url(url)?;
    }
    let wanted_collections = if overrides.wanted_collections.is_empty() {
        jetstream.wanted_collections.unwrap_or_default()
    } else {
        overrides.wanted_collections
    };
    for collection in &wanted_collections {
        let nsid = collection.strip_suffix(".*").unwrap_or(collection);
        if !starling_core::syntax::is_valid_nsid(nsid) && collection.strip_suffix(".*").is_none() {
            bail!("wanted collection `{collection}` is not an NSID or an `prefix.*` pattern");
        }
    }
    let zstd_dictionary_path = overrides.zstd_dictionary.or(jetstream.zstd_dictionary);
    let zstd_dictionary = match &zstd_dictionary_path {
        Some(path) => Some(
            std::fs::read(path)
                .with_context(|| format!("reading zstd dictionary `{}`", path.display()))?,
        ),
        None => None,
    };
    let queue_messages_max = ingest.queue_messages_max.unwrap_or(16_384);
    if queue_messages_max == 0 || queue_messages_max > 1_000_000 {
        bail!(
            "ingest.queue_messages_max is {queue_messages_max}; it must be between 1 and 1000000"
        );
    }
    let read_timeout_secs = jetstream.read_timeout_secs.unwrap_or(30);
    if !(1..=3_600).contains(&read_timeout_secs) {
        bail!("jetstream.read_timeout_secs is {read_timeout_secs}; it must be between 1 and 3600");
    }
    let live = LiveOptions {
        urls,
        wanted_collections,
        zstd_dictionary,
        rewind: Duration::from_secs(jetstream.rewind_secs.unwrap_or(5)),
        read_timeout: Duration::from_secs(read_timeout_secs),
        queue_messages_max,
        limits,
        ..LiveOptions::default()
    };
    Ok((live, zstd_dictionary_path))
}

/// The store settings given by environment variables or flags.
struct StoreOverrides {
    backend: Option<String>,
    nodes: Vec<String>,
    keyspace: Option<String>,
    consistency: Option<String>,
    replication_factor: Option<u32>,
}

fn resolve_store(raw: RawStore, overrides: StoreOverrides) -> anyhow::Result<StoreChoice> {
    let backend = overrides
        .backend
        .or(raw.backend)
        .unwrap_or_else(|| "embedded".to_owned());
    let cassandra = raw.cassandra;
    let nodes = if overrides.nodes.is_empty() {
        cassandra.nodes.unwrap_or_default()
    } else {
        overrides.nodes
    };
    match backend.as_str() {
        "embedded" => return Ok(StoreChoice::Embedded),
        "cassandra" => {}
        other => bail!("store backend `{other}` is not `embedded` or `cassandra`"),
    }
    if nodes.is_empty() {
        bail!(
            "store backend is cassandra but no nodes are given: pass --cassandra-nodes HOST:PORT,..., \
             set STARLING_CASSANDRA_NODES, or store.cassandra.nodes in the config file"
        );
    }
    for node in &nodes {
        let port = node
            .rsplit_once(':')
            .map(|(host, port)| (host, port.parse::<u16>()));
        if !matches!(port, Some((host, Ok(_))) if !host.is_empty()) {
            bail!("cassandra node `{node}` is not HOST:PORT (e.g. 127.0.0.1:9042)");
        }
    }
    let mut options = CassandraOptions::new(nodes);
    if let Some(keyspace) = overrides.keyspace.or(cassandra.keyspace) {
        if !starling_store::cql::valid_keyspace(&keyspace) {
            bail!(
                "cassandra keyspace `{keyspace}` is not a lowercase CQL name (a-z first, then a-z, 0-9, _; at most 48)"
            );
        }
        options.keyspace = keyspace;
    }
    if let Some(text) = overrides.consistency.or(cassandra.consistency) {
        options.consistency = text
            .parse::<CqlConsistency>()
            .map_err(|err| anyhow::anyhow!("cassandra {err}"))?;
    }
    if let Some(rf) = overrides
        .replication_factor
        .or(cassandra.replication_factor)
    {
        if rf == 0 || rf > 16 {
            bail!("cassandra replication_factor is {rf}; it must be between 1 and 16");
        }
        options.replication_factor = rf;
    }
    Ok(StoreChoice::Cassandra(options))
}

fn resolve_grpc_tls(
    cert: Option<PathBuf>,
    key: Option<PathBuf>,
    grpc_on: bool,
) -> anyhow::Result<Option<GrpcTls>> {
    let (cert, key) = match (cert, key) {
        (None, None) => return Ok(None),
        (Some(cert), Some(key)) => (cert, key),
        (Some(_), None) => bail!("grpc_tls_cert is set without grpc_tls_key: TLS needs both"),
        (None, Some(_)) => bail!("grpc_tls_key is set without grpc_tls_cert: TLS needs both"),
    };
    if !grpc_on {
        bail!("grpc_tls_cert and grpc_tls_key are set but gRPC is off: set grpc_addr too");
    }
    let read = |path: &Path, what: &str| {
        std::fs::read(path)
            .with_context(|| format!("reading the gRPC TLS {what} `{}`", path.display()))
    };
    let tls = GrpcTls::new(&read(&cert, "certificate")?, &read(&key, "key")?)
        .map_err(|err| anyhow::anyhow!("{err} (`{}`, `{}`)", cert.display(), key.display()))?;
    Ok(Some(tls))
}

fn resolve_timeline(raw: &RawTimeline) -> anyhow::Result<TimelineConfig> {
    let defaults = TimelineConfig::default();
    let length = raw.length.unwrap_or(defaults.length);
    if length == 0 || length > TIMELINE_LENGTH_LIMIT {
        bail!("timeline.length is {length}; it must be between 1 and {TIMELINE_LENGTH_LIMIT}");
    }
    let active_readers_max = raw
        .active_readers_max
        .unwrap_or(defaults.active_readers_max);
    if active_readers_max == 0 {
        bail!("timeline.active_readers_max is 0; it must be at least 1");
    }
    let off_if_zero = |value: Option<u32>, default: Option<u32>| match value {
        Some(0) => None,
        Some(value) => Some(value),
        None => default,
    };
    Ok(TimelineConfig {
        length,
        reasonable_limit: off_if_zero(raw.reasonable_limit, defaults.reasonable_limit),
        celebrity_threshold: off_if_zero(raw.celebrity_threshold, defaults.celebrity_threshold),
        active_readers_max,
        author_heads_items: raw
            .author_heads_items
            .unwrap_or(defaults.author_heads_items),
        ..defaults
    })
}

#[cfg(test)]
mod tests;
