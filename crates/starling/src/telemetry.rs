//! Logs and metrics. Logs: the `tracing` subscriber, text or JSON lines on stderr. Metrics: the
//! Prometheus recorder, the one list of every metric Starling exports with its
//! help text, and the gauges read at scrape time (process, graph, ingest, data directory).
//!
//! Counters and histograms are recorded where things happen (the libraries use the `metrics`
//! facade); gauges that describe a state (ingest lag, the Jetstream connection, graph sizes,
//! memory) are read when `/metrics` is rendered, so they are never stale, and cost nothing
//! between scrapes. Every `_seconds` histogram has the same buckets, so it can be aggregated
//! across replicas (`histogram_quantile(0.99, sum by (le) (rate(..._bucket[5m])))`).

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock};

use anyhow::Context;
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use starling_graph::Graph;
use starling_ingest::live::{IngestMode, LiveStatus};
use starling_store::CacheStats;
use starling_timeline::Timelines;

use crate::cli::LogFormat;

/// The log filter when `STARLING_LOG` is not set: lifecycle events, and only warnings from the
/// storage engine, the search index and the Cassandra driver, which are chatty at `info`
/// (tantivy logs every commit, merge and deleted file).
const LOG_FILTER_DEFAULT: &str = "info,fjall=warn,lsm_tree=warn,tantivy=warn,scylla=off";

/// Starts logging to stderr in `format`, filtered by `STARLING_LOG` (a `tracing` filter such
/// as `info,starling_ingest=debug`). A filter that does not parse is an error, not a silent
/// default: an operator who asked for debug logs must not get none.
pub fn init_logging(format: LogFormat) -> anyhow::Result<()> {
    let filter = match std::env::var("STARLING_LOG") {
        // The parse error's text already holds its cause: no context chain, or it shows twice.
        Ok(text) => tracing_subscriber::EnvFilter::try_new(&text).map_err(|err| {
            anyhow::anyhow!(
                "STARLING_LOG=`{text}` is not a log filter ({err}); try `info` or `info,starling_ingest=debug`"
            )
        })?,
        Err(std::env::VarError::NotPresent) => tracing_subscriber::EnvFilter::new(LOG_FILTER_DEFAULT),
        Err(std::env::VarError::NotUnicode(_)) => anyhow::bail!("STARLING_LOG is not UTF-8"),
    };
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.with_ansi(std::io::stderr().is_terminal()).init(),
        // Each line one JSON object: time, level, target, the event's fields under `fields`,
        // and the spans it is in.
        LogFormat::Json => builder
            .json()
            .with_ansi(false)
            .with_current_span(true)
            .init(),
    }
    Ok(())
}

/// The buckets of every `_seconds` histogram: 0.5 ms to 10 s, about 2.5× apart.
const SECONDS_BUCKETS: [f64; 14] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// What kind of series a metric is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
    Histogram,
}

/// Every metric Starling exports: name, kind, help. The dashboard and the alert rules in
/// `ops/` may use only these (a test checks them against a running `serve`).
pub const METRICS: &[(&str, Kind, &str)] = &[
    // Build and process.
    (
        "starling_build_info",
        Kind::Gauge,
        "Always 1; the labels say which build runs (version, commit).",
    ),
    (
        "process_resident_memory_bytes",
        Kind::Gauge,
        "Resident memory of the process, in bytes.",
    ),
    (
        "process_virtual_memory_bytes",
        Kind::Gauge,
        "Virtual memory of the process, in bytes.",
    ),
    // A gauge only because the recorder's counters are whole numbers; it only grows.
    (
        "process_cpu_seconds_total",
        Kind::Gauge,
        "CPU time the process has used, user and system, in seconds.",
    ),
    (
        "process_open_fds",
        Kind::Gauge,
        "File descriptors the process has open.",
    ),
    ("process_threads", Kind::Gauge, "Threads of the process."),
    (
        "process_start_time_seconds",
        Kind::Gauge,
        "When the process started, in seconds since the Unix epoch.",
    ),
    // APIs.
    (
        "starling_http_requests_total",
        Kind::Counter,
        "HTTP requests answered, by route pattern and status code.",
    ),
    (
        "starling_http_request_duration_seconds",
        Kind::Histogram,
        "Time to answer an HTTP request, by route pattern, in seconds.",
    ),
    (
        "starling_grpc_requests_total",
        Kind::Counter,
        "bsky.Service RPCs answered, by method and gRPC status code (UNIMPLEMENTED ones under method=\"other\").",
    ),
    (
        "starling_grpc_request_duration_seconds",
        Kind::Histogram,
        "Time to answer a bsky.Service RPC, by method, in seconds.",
    ),
    (
        "starling_http_shed_total",
        Kind::Counter,
        "Expensive HTTP queries answered 503 instead of run, by reason (busy, deadline).",
    ),
    (
        "starling_api_connections_refused_total",
        Kind::Counter,
        "Connections closed at once because the listener was at its connection cap, by listener.",
    ),
    (
        "starling_api_connections_evicted_total",
        Kind::Counter,
        "HTTP connections closed gracefully, oldest first, to make room under the connection cap.",
    ),
    // Ingest.
    (
        "starling_ingest_events_total",
        Kind::Counter,
        "Events ingested, by outcome (applied or dropped).",
    ),
    (
        "starling_ingest_dropped_total",
        Kind::Counter,
        "Malformed events skipped, by reason.",
    ),
    (
        "starling_ingest_batches_total",
        Kind::Counter,
        "Store write batches committed by ingest.",
    ),
    (
        "starling_ingest_commit_seconds",
        Kind::Histogram,
        "Time to write one batch to the store durably (store write latency), in seconds.",
    ),
    (
        "starling_ingest_lag_seconds",
        Kind::Gauge,
        "Now minus the time of the newest event whose changes reads reflect, in seconds.",
    ),
    (
        "starling_ingest_newest_event_timestamp_seconds",
        Kind::Gauge,
        "Jetstream time of the newest event whose changes reads reflect, in seconds since the Unix epoch.",
    ),
    (
        "starling_ingest_jetstream_connected",
        Kind::Gauge,
        "1 while a Jetstream websocket is connected, else 0.",
    ),
    (
        "starling_ingest_jetstream_connections_total",
        Kind::Counter,
        "Jetstream connections made (the first and every reconnect).",
    ),
    (
        "starling_ingest_writer",
        Kind::Gauge,
        "1 while this process ingests (the only process on its store, or the writer lease holder), else 0.",
    ),
    (
        "starling_ingest_lease_held",
        Kind::Gauge,
        "1 while this replica holds the writer lease of a shared store, else 0.",
    ),
    (
        "starling_ingest_mode",
        Kind::Gauge,
        "1 for the mode ingest is in (starting, off, following, writing, stopped), 0 for the others.",
    ),
    (
        "starling_ingest_queue_depth",
        Kind::Gauge,
        "Jetstream messages queued between the socket and the store.",
    ),
    (
        "starling_ingest_queue_capacity",
        Kind::Gauge,
        "Capacity of the Jetstream message queue.",
    ),
    (
        "starling_ingest_graph_changes_total",
        Kind::Counter,
        "Graph edge changes applied by replay.",
    ),
    (
        "starling_ingest_stalled_connections_total",
        Kind::Counter,
        "Jetstream connections left because they stayed silent past the read timeout.",
    ),
    (
        "starling_ingest_bsync_up",
        Kind::Gauge,
        "1 while the last request of a bsync scan succeeded, else 0, by stream.",
    ),
    (
        "starling_ingest_bsync_failures_total",
        Kind::Counter,
        "bsync scan requests that failed (and will be retried), by stream.",
    ),
    (
        "starling_ingest_bsync_operations_total",
        Kind::Counter,
        "bsync operations read, by stream and outcome (applied, malformed, ignored).",
    ),
    // Identity.
    (
        "starling_identity_lookups_total",
        Kind::Counter,
        "DID document lookups, by result (hit or miss of the cache).",
    ),
    (
        "starling_identity_fetches_total",
        Kind::Counter,
        "DID document fetches, by outcome.",
    ),
    (
        "starling_identity_cache_entries",
        Kind::Gauge,
        "DID documents cached.",
    ),
    (
        "starling_identity_cache_entries_capacity",
        Kind::Gauge,
        "DID documents the cache holds at most.",
    ),
    (
        "starling_identity_fetch_slots",
        Kind::Gauge,
        "DID document fetches allowed at once.",
    ),
    (
        "starling_identity_fetch_queue_depth",
        Kind::Gauge,
        "DID document fetches waiting for a slot.",
    ),
    // Store.
    (
        "starling_store_data_dir_bytes",
        Kind::Gauge,
        "Bytes of the files in the data directory (store, graph snapshot).",
    ),
    // Graph and timelines.
    (
        "starling_graph_actors",
        Kind::Gauge,
        "Actor ids the graph has room for (one past the largest seen).",
    ),
    (
        "starling_graph_follows",
        Kind::Gauge,
        "Follow edges in the in-memory graph.",
    ),
    (
        "starling_graph_blocks",
        Kind::Gauge,
        "Block edges in the in-memory graph.",
    ),
    (
        "starling_store_cache_entries",
        Kind::Gauge,
        "Entries in each of the embedded store's caches (counts, count_rows, liveness, \
         list_heads).",
    ),
    (
        "starling_store_cache_capacity",
        Kind::Gauge,
        "Entries each of the embedded store's caches holds at most.",
    ),
    (
        "starling_store_cache_engine_reads_total",
        Kind::Counter,
        "Reads that missed one of the embedded store's caches and read the engine.",
    ),
    (
        "starling_graph_changes_total",
        Kind::Counter,
        "Graph edge changes applied from committed batches.",
    ),
    (
        "starling_timeline_active_readers",
        Kind::Gauge,
        "Readers whose home timeline is held in memory.",
    ),
    (
        "starling_timeline_items",
        Kind::Gauge,
        "Items in the home timelines held in memory.",
    ),
    (
        "starling_timeline_item_bytes",
        Kind::Gauge,
        "Bytes of the timeline items held in memory.",
    ),
    (
        "starling_timeline_author_heads",
        Kind::Gauge,
        "Authors whose newest feed items the author feed cache holds.",
    ),
    (
        "starling_timeline_author_head_items",
        Kind::Gauge,
        "Items in the author feed cache.",
    ),
    (
        "starling_timeline_author_head_fills_total",
        Kind::Counter,
        "Author feed cache entries read from the store.",
    ),
    (
        "starling_timeline_celebrities",
        Kind::Gauge,
        "Authors merged at read time instead of fanned out.",
    ),
    (
        "starling_timeline_lossy_readers",
        Kind::Gauge,
        "Readers whose timelines are lossy (they follow many accounts).",
    ),
    (
        "starling_timeline_inserts_total",
        Kind::Counter,
        "Items fanned out into timelines.",
    ),
    (
        "starling_timeline_builds_total",
        Kind::Counter,
        "Timelines built by fan-in on a first read.",
    ),
    (
        "starling_timeline_evictions_total",
        Kind::Counter,
        "Timelines dropped from memory (least recently read first).",
    ),
    (
        "starling_timeline_apply_errors_total",
        Kind::Counter,
        "Committed batches the timelines could not take (their heads are rebuilt on read).",
    ),
    (
        "starling_ingest_relay_frames_total",
        Kind::Counter,
        "Relay firehose frames by outcome: commit, identity, account, sync, info, or why one was refused (bad_signature, hash_mismatch, bad_car, no_key, too_big, ...).",
    ),
    (
        "starling_backfill_repos_total",
        Kind::Counter,
        "Repositories a backfill finished, by outcome: done, skipped, or why one failed (timeout, rate_limited, hash_mismatch, bad_signature, ...).",
    ),
    (
        "starling_backfill_records_total",
        Kind::Counter,
        "Records a backfill applied.",
    ),
    (
        "starling_backfill_rate_limited_total",
        Kind::Counter,
        "getRepo or listRepos answers of 429 (each waited out, honouring Retry-After).",
    ),
    (
        "starling_search_documents",
        Kind::Gauge,
        "Documents (actors, posts, starter packs, feed generators) searchable in the index.",
    ),
    (
        "starling_search_update_failures_total",
        Kind::Counter,
        "Batches or commits the search index could not take (it is rebuilt at the next start).",
    ),
    // Labels from labelers.
    (
        "starling_ingest_labels_total",
        Kind::Counter,
        "Labeler stream items, by outcome: applied and negated labels, malformed frames and \
         labels with a bad signature (dropped), replayed frames (skipped).",
    ),
];

/// The recorder, and what the scrape-time gauges read once `serve` has them.
pub struct Telemetry {
    handle: PrometheusHandle,
    served: OnceLock<ServedGauges>,
    data_dir: PathBuf,
}

/// What `serve` hands over once the graph is loaded.
pub struct ServedGauges {
    pub graph: Arc<Graph>,
    pub timelines: Arc<Timelines>,
    pub ingest: Arc<LiveStatus>,
    /// Whether the store is shared by replicas (then the writer holds a lease).
    pub shared: bool,
    /// The store's caches in memory, read at each scrape.
    pub store_caches: Box<dyn Fn() -> Vec<CacheStats> + Send + Sync>,
}

impl Telemetry {
    /// Installs the process-wide recorder with Starling's buckets and help texts.
    pub fn install(data_dir: &Path) -> anyhow::Result<Arc<Telemetry>> {
        let handle = PrometheusBuilder::new()
            .set_buckets_for_metric(Matcher::Suffix("_seconds".to_owned()), &SECONDS_BUCKETS)
            .context("configuring histogram buckets")?
            .install_recorder()
            .context("installing the metrics recorder")?;
        for &(name, kind, help) in METRICS {
            match kind {
                Kind::Counter => metrics::describe_counter!(name, help),
                Kind::Gauge => metrics::describe_gauge!(name, help),
                Kind::Histogram => metrics::describe_histogram!(name, help),
            }
        }
        metrics::gauge!(
            "starling_build_info",
            "version" => env!("CARGO_PKG_VERSION"),
            "commit" => env!("STARLING_COMMIT"),
        )
        .set(1.0);
        if let Some(start) = process::start_time_secs() {
            metrics::gauge!("process_start_time_seconds").set(start);
        }
        Ok(Arc::new(Telemetry {
            handle,
            served: OnceLock::new(),
            data_dir: data_dir.to_owned(),
        }))
    }

    /// Starts reading the served state's gauges at each scrape.
    pub fn serve(&self, gauges: ServedGauges) {
        let _ = self.served.set(gauges);
    }

    /// The Prometheus text of every metric, with the scrape-time gauges read now.
    pub fn render(&self) -> String {
        process::record();
        metrics::gauge!("starling_store_data_dir_bytes").set(dir_bytes(&self.data_dir) as f64);
        if let Some(served) = self.served.get() {
            served.record();
        }
        self.handle.render()
    }
}

impl ServedGauges {
    fn record(&self) {
        metrics::gauge!("starling_graph_actors").set(self.graph.n_actors() as f64);
        metrics::gauge!("starling_graph_follows").set(self.graph.n_follows() as f64);
        metrics::gauge!("starling_graph_blocks").set(self.graph.n_blocks() as f64);
        for cache in (self.store_caches)() {
            let name = cache.name;
            metrics::gauge!("starling_store_cache_entries", "cache" => name)
                .set(cache.entries as f64);
            metrics::gauge!("starling_store_cache_capacity", "cache" => name)
                .set(cache.capacity as f64);
            metrics::counter!("starling_store_cache_engine_reads_total", "cache" => name)
                .absolute(cache.engine_reads);
        }
        let timelines = self.timelines.stats();
        starling_ingest::timeline_sync::export_metrics(&timelines);
        if let Some(cursor_us) = timelines.applied_cursor {
            let newest_secs = cursor_us as f64 / 1e6;
            metrics::gauge!("starling_ingest_newest_event_timestamp_seconds").set(newest_secs);
            metrics::gauge!("starling_ingest_lag_seconds").set((now_secs() - newest_secs).max(0.0));
        }
        let ingest = &self.ingest;
        let connected = ingest.connected.load(Ordering::Relaxed);
        metrics::gauge!("starling_ingest_jetstream_connected").set(f64::from(u8::from(connected)));
        metrics::counter!("starling_ingest_jetstream_connections_total")
            .absolute(ingest.connections.load(Ordering::Relaxed));
        let mode = ingest.mode();
        let writing = mode == IngestMode::Writing;
        metrics::gauge!("starling_ingest_writer").set(f64::from(u8::from(writing)));
        metrics::gauge!("starling_ingest_lease_held")
            .set(f64::from(u8::from(writing && self.shared)));
        for each in [
            IngestMode::Starting,
            IngestMode::Off,
            IngestMode::Following,
            IngestMode::Writing,
            IngestMode::Stopped,
        ] {
            metrics::gauge!("starling_ingest_mode", "mode" => each.as_str())
                .set(f64::from(u8::from(each == mode)));
        }
    }
}

fn now_secs() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |since| since.as_secs_f64())
}

/// The bytes of the files under `dir`, recursively. Files the store removes while this walks
/// (compaction) count as empty; the walk is bounded by what the directory holds.
fn dir_bytes(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|entry| match entry.file_type() {
            Ok(kind) if kind.is_dir() => dir_bytes(&entry.path()),
            Ok(kind) if kind.is_file() => entry.metadata().map_or(0, |meta| meta.len()),
            _ => 0,
        })
        .sum()
}

/// The process's own resource use, from `/proc/self` (Linux; elsewhere these stay absent).
mod process {
    /// Clock ticks per second of `/proc/self/stat`'s CPU times: `USER_HZ`, which Linux fixes
    /// at 100 in its user-space ABI on every architecture it runs on.
    const TICKS_PER_SEC: f64 = 100.0;

    /// Page size of `statm`'s counts; 4 KiB on the platforms Starling is built for.
    const PAGE_BYTES: f64 = 4096.0;

    pub fn record() {
        if let Ok(statm) = std::fs::read_to_string("/proc/self/statm") {
            let mut fields = statm.split_whitespace().map(|f| f.parse::<f64>().ok());
            if let (Some(Some(virtual_pages)), Some(Some(resident_pages))) =
                (fields.next(), fields.next())
            {
                metrics::gauge!("process_virtual_memory_bytes").set(virtual_pages * PAGE_BYTES);
                metrics::gauge!("process_resident_memory_bytes").set(resident_pages * PAGE_BYTES);
            }
        }
        if let Some(fields) = stat_fields() {
            // utime and stime are fields 14 and 15 of stat(5); after the command they are
            // the 12th and 13th.
            let ticks = |idx: usize| fields.get(idx).and_then(|f| f.parse::<u64>().ok());
            if let (Some(user), Some(system)) = (ticks(11), ticks(12)) {
                let seconds = (user + system) as f64 / TICKS_PER_SEC;
                metrics::gauge!("process_cpu_seconds_total").set(seconds);
            }
            if let Some(threads) = ticks(17) {
                metrics::gauge!("process_threads").set(threads as f64);
            }
        }
        if let Ok(fds) = std::fs::read_dir("/proc/self/fd") {
            metrics::gauge!("process_open_fds").set(fds.count() as f64);
        }
    }

    /// The fields of `/proc/self/stat` after the command name (which may hold spaces).
    fn stat_fields() -> Option<Vec<String>> {
        let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
        let (_, rest) = stat.rsplit_once(')')?;
        Some(rest.split_whitespace().map(str::to_owned).collect())
    }

    /// When the process started, in seconds since the epoch: boot time plus its start tick.
    pub fn start_time_secs() -> Option<f64> {
        let start_ticks: f64 = stat_fields()?.get(19)?.parse().ok()?;
        let boot_secs: f64 = std::fs::read_to_string("/proc/stat")
            .ok()?
            .lines()
            .find_map(|line| line.strip_prefix("btime "))?
            .trim()
            .parse()
            .ok()?;
        Some(boot_secs + start_ticks / TICKS_PER_SEC)
    }
}
