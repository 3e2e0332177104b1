//! The live Jetstream websocket client.
//!
//! An async task holds the connection and hands raw messages to a bounded queue; one blocking
//! thread decompresses, decodes and applies them in batches. When the store falls behind, the
//! queue fills, the task stops reading the socket, and TCP flow control slows the server down:
//! nothing is buffered without bound.
//!
//! On every (re)connect the client asks for events from the stored cursor rewound by a few
//! seconds: `time_us` is stamped per Jetstream instance and slightly out of order, so the rewind
//! covers both, and idempotent apply makes the overlap harmless. Failed connections back off
//! exponentially and rotate through the configured URLs.
//!
//! A connection that goes quiet is left: the client pings the server every third of
//! `read_timeout`, and when no frame at all (event, pong or ping) arrives for `read_timeout` it
//! drops the connection, counts it in `starling_ingest_stalled_connections_total`, and
//! reconnects. Jetstream sends hundreds of events a second and answers pings, so a silent
//! socket is a stalled server or a half-open connection, which TCP alone never reports. The
//! clock runs only while the client waits on the socket, never while it waits for room in a
//! full queue, so back-pressure does not look like a stall.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use starling_core::Cursor;
use starling_core::jetstream::{DropReason, EVENT_BYTES_MAX};
use starling_store::{Progress, Store};
use tokio::sync::{mpsc, watch};
use tokio_tungstenite::tungstenite::Message;
use tracing::{info, warn};

use crate::IngestError;
use crate::applier::{Applier, BatchLimits, CommitSink, SharedSink, next_until_due, now_us};

/// How the live client connects.
#[derive(Clone, Debug)]
pub struct LiveOptions {
    /// Jetstream `/subscribe` URLs (`ws://` or `wss://`), tried in turn.
    pub urls: Vec<String>,
    /// Collections to ask for (`wantedCollections`); empty means all.
    pub wanted_collections: Vec<String>,
    /// The Jetstream zstd dictionary; when set, the client asks for `compress=true`.
    pub zstd_dictionary: Option<Vec<u8>>,
    /// How far to rewind the cursor on reconnect.
    pub rewind: Duration,
    /// First reconnect delay; doubles per failure up to `backoff_max`.
    pub backoff_min: Duration,
    /// Longest reconnect delay.
    pub backoff_max: Duration,
    /// Messages queued between the socket and the applier, at most.
    pub queue_messages_max: usize,
    /// How long a connection may stay silent (no event, pong or ping) before it is dropped and
    /// the client reconnects; pings go out every third of it.
    pub read_timeout: Duration,
    /// Batch limits.
    pub limits: BatchLimits,
    /// Ingest the relay firehose instead of Jetstream (`urls` is then ignored).
    pub relay: Option<crate::relay::RelayOptions>,
    /// Backfill beside live ingest, into the same store and the same sink, while it runs.
    pub backfill: Option<crate::backfill::BackfillOptions>,
}

impl LiveOptions {
    /// Whether there is a source to ingest: a Jetstream URL, a relay or a backfill.
    pub fn has_source(&self) -> bool {
        self.has_live_source() || self.backfill.is_some()
    }

    /// Whether there is a live source: a Jetstream URL or a relay.
    pub fn has_live_source(&self) -> bool {
        !self.urls.is_empty() || self.relay.is_some()
    }
}

impl Default for LiveOptions {
    fn default() -> LiveOptions {
        LiveOptions {
            urls: Vec::new(),
            wanted_collections: Vec::new(),
            zstd_dictionary: None,
            rewind: Duration::from_secs(5),
            backoff_min: Duration::from_millis(250),
            backoff_max: Duration::from_secs(30),
            queue_messages_max: 16_384,
            read_timeout: Duration::from_secs(30),
            limits: BatchLimits::default(),
            relay: None,
            backfill: None,
        }
    }
}

/// The live client's state, for health checks and metrics.
#[derive(Debug, Default)]
pub struct LiveStatus {
    /// Whether a websocket is connected now.
    pub connected: AtomicBool,
    /// Connections made so far.
    pub connections: AtomicU64,
    /// Events committed so far.
    pub events_committed: AtomicU64,
    /// What ingest is doing, an [`IngestMode`] (read it with [`LiveStatus::mode`]).
    mode: AtomicU8,
}

/// What `serve`'s ingest is doing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum IngestMode {
    /// Not started yet.
    Starting = 0,
    /// Deliberately off: no Jetstream URL on a store of its own.
    Off = 1,
    /// A replica of a shared store following the change log: another replica writes, or
    /// none may (no Jetstream URL).
    Following = 2,
    /// Ingesting from Jetstream: the only process on its store, or the holder of the writer
    /// lease of a shared one.
    Writing = 3,
    /// Stopped.
    Stopped = 4,
}

impl IngestMode {
    /// The mode's name in health answers and logs.
    pub fn as_str(self) -> &'static str {
        match self {
            IngestMode::Starting => "starting",
            IngestMode::Off => "off",
            IngestMode::Following => "following",
            IngestMode::Writing => "writing",
            IngestMode::Stopped => "stopped",
        }
    }
}

impl LiveStatus {
    /// What ingest is doing now.
    pub fn mode(&self) -> IngestMode {
        match self.mode.load(Ordering::Acquire) {
            1 => IngestMode::Off,
            2 => IngestMode::Following,
            3 => IngestMode::Writing,
            4 => IngestMode::Stopped,
            _ => IngestMode::Starting,
        }
    }

    pub(crate) fn set_mode(&self, mode: IngestMode) {
        self.mode.store(mode as u8, Ordering::Release);
    }
}

/// A raw websocket message on its way to the applier.
enum Raw {
    Text(Vec<u8>),
    Compressed(Vec<u8>),
}

/// Checks a Jetstream URL before any connection is tried.
pub fn check_url(url: &str) -> Result<(), IngestError> {
    let bad = |reason: &str| IngestError::BadUrl {
        url: url.to_owned(),
        reason: reason.to_owned(),
    };
    let rest = url
        .strip_prefix("ws://")
        .or_else(|| url.strip_prefix("wss://"))
        .ok_or_else(|| bad("must start with ws:// or wss://"))?;
    if rest.is_empty() || rest.starts_with('/') {
        return Err(bad("has no host"));
    }
    if url.contains('#') {
        return Err(bad("must not have a fragment"));
    }
    Ok(())
}

/// The URL to subscribe with: the base URL plus filter, compression and cursor parameters.
pub fn subscribe_url(base: &str, options: &LiveOptions, cursor: Option<u64>) -> String {
    let mut url = base.to_owned();
    let mut sep = if url.contains('?') { '&' } else { '?' };
    let mut param = |url: &mut String, key: &str, value: &str| {
        url.push(sep);
        url.push_str(key);
        url.push('=');
        url.push_str(value);
        sep = '&';
    };
    for collection in &options.wanted_collections {
        param(&mut url, "wantedCollections", collection);
    }
    if options.zstd_dictionary.is_some() {
        param(&mut url, "compress", "true");
    }
    if let Some(cursor) = cursor {
        param(&mut url, "cursor", &cursor.to_string());
    }
    url
}

/// Repositories waiting to be fetched again after a break in their commit chain, at most.
const RESYNC_QUEUE_MAX: usize = 4_096;

/// Runs the live client until `shutdown` turns true, then commits what it holds and returns.
/// With [`LiveOptions::backfill`], a backfill runs beside it into the same sink (a
/// [`SharedSink`], so the appliers' batches reach it in commit order) until it ends, or until
/// live ingest ends, which then waits for its last batches. With the relay firehose, the
/// repositories whose chain breaks are fetched again beside it the same way
/// ([`crate::backfill::run_resync`]).
pub async fn run_live<S: Store + 'static>(
    store: Arc<S>,
    mut options: LiveOptions,
    graph: Box<dyn CommitSink + Send>,
    status: Arc<LiveStatus>,
    shutdown: watch::Receiver<bool>,
) -> Result<(), IngestError> {
    let backfill = options.backfill.take();
    let resync = options.relay.as_mut().map(|relay| {
        let (tx, rx) = mpsc::channel(RESYNC_QUEUE_MAX);
        relay.resync = Some(tx);
        let source = crate::backfill::BackfillSource::Relay(relay.url.clone());
        (
            rx,
            crate::backfill::BackfillOptions::new(source, relay.resolver.clone()),
        )
    });
    if backfill.is_none() && resync.is_none() {
        return run_source(store, options, graph, status, shutdown).await;
    }
    let shared = SharedSink::new(graph);
    let (stop_helpers, helpers_stopped) = watch::channel(false);
    let mut helpers = Vec::new();
    if let Some(backfill) = backfill {
        helpers.push(tokio::spawn(run_backfill_beside(
            store.clone(),
            backfill,
            Box::new(shared.clone()),
            helpers_stopped.clone(),
        )));
    }
    if let Some((dids, resync)) = resync {
        helpers.push(tokio::spawn(run_resync_beside(
            store.clone(),
            resync,
            Box::new(shared.clone()),
            dids,
            helpers_stopped,
        )));
    }
    let res = if options.has_live_source() {
        run_source(store, options, Box::new(shared), status, shutdown).await
    } else {
        // A backfill alone: it runs until it ends or `serve` stops. No live source is
        // deliberately off, as readiness reports it (never "not connected").
        info!("no --jetstream URL: backfilling only");
        status.set_mode(IngestMode::Off);
        let mut shutdown = shutdown;
        let _ = shutdown.wait_for(|stop| *stop).await;
        Ok(())
    };
    stop_helpers.send_replace(true);
    for helper in helpers {
        if helper.await.is_err() {
            warn!("a backfill or resync task panicked");
        }
    }
    res
}

/// Resyncs beside the relay firehose until the relay client stops asking: logged, never fatal
/// to live ingest, like [`run_backfill_beside`].
async fn run_resync_beside<S: Store + 'static>(
    store: Arc<S>,
    options: crate::backfill::BackfillOptions,
    sink: Box<dyn CommitSink + Send>,
    dids: mpsc::Receiver<String>,
    stop: watch::Receiver<bool>,
) {
    let progress = Arc::new(crate::backfill::BackfillProgress::default());
    let res = crate::backfill::run_resync(store, options, sink, progress.clone(), dids, stop).await;
    let done = progress.repos_done.load(Ordering::Relaxed);
    match res {
        Ok(()) => info!(repos_done = done, "resync stopped"),
        Err(err) => warn!(error = %err, repos_done = done, "resync failed"),
    }
}

/// A backfill beside live ingest: its outcome is logged, never fatal to live ingest (a store
/// failure stops live ingest at its next batch anyway), and a rerun resumes it.
async fn run_backfill_beside<S: Store + 'static>(
    store: Arc<S>,
    options: crate::backfill::BackfillOptions,
    sink: Box<dyn CommitSink + Send>,
    stop: watch::Receiver<bool>,
) {
    info!(source = ?options.source, "backfill started beside live ingest");
    let progress = Arc::new(crate::backfill::BackfillProgress::default());
    let res = crate::backfill::run_backfill(store, options, sink, progress.clone(), stop).await;
    let (done, failed) = (
        progress.repos_done.load(Ordering::Relaxed),
        progress.repos_failed.load(Ordering::Relaxed),
    );
    let records = progress.records.load(Ordering::Relaxed);
    match res {
        Ok(()) => info!(
            repos_done = done,
            repos_failed = failed,
            records,
            "backfill finished"
        ),
        Err(err) => warn!(error = %err, repos_done = done, records, "backfill stopped"),
    }
}

/// Live ingest from the relay firehose or from Jetstream.
async fn run_source<S: Store + 'static>(
    store: Arc<S>,
    options: LiveOptions,
    graph: Box<dyn CommitSink + Send>,
    status: Arc<LiveStatus>,
    shutdown: watch::Receiver<bool>,
) -> Result<(), IngestError> {
    match options.relay.clone() {
        Some(relay) => {
            crate::relay::run_relay(store, options, relay, graph, status, shutdown).await
        }
        None => run_jetstream(store, options, graph, status, shutdown).await,
    }
}

/// Live ingest from Jetstream; see [`run_live`].
async fn run_jetstream<S: Store + 'static>(
    store: Arc<S>,
    options: LiveOptions,
    mut graph: Box<dyn CommitSink + Send>,
    status: Arc<LiveStatus>,
    mut shutdown: watch::Receiver<bool>,
) -> Result<(), IngestError> {
    for url in &options.urls {
        check_url(url)?;
    }
    let (tx, rx) = mpsc::channel::<Raw>(options.queue_messages_max);
    metrics::gauge!("starling_ingest_queue_capacity").set(options.queue_messages_max as f64);
    let handle = tokio::runtime::Handle::current();
    let apply_store = store.clone();
    let apply_options = options.clone();
    let apply_status = status.clone();
    let applier = std::thread::Builder::new()
        .name("live-applier".to_owned())
        .spawn(move || {
            apply_loop(
                &*apply_store,
                &apply_options,
                &mut *graph,
                &apply_status,
                rx,
                &handle,
            )
        })
        .map_err(|err| IngestError::BadUrl {
            url: "-".into(),
            reason: err.to_string(),
        })?;

    let mut backoff = options.backoff_min;
    let mut url_idx = 0usize;
    while !*shutdown.borrow() {
        let Some(base) = options.urls.get(url_idx % options.urls.len().max(1)) else {
            break;
        };
        // Never ask for the future: a cursor stored past the bound is started over by the
        // applier, and until its first commit this connection asks for now.
        let cursor = match store.progress(None)? {
            Some(Progress::Live(cursor)) => Some(
                Cursor(cursor.0.min(now_us()))
                    .rewind(options.rewind.as_micros() as u64)
                    .0,
            ),
            _ => None,
        };
        let url = subscribe_url(base, &options, cursor);
        let connected_at = Instant::now();
        match read_connection(&url, options.read_timeout, &tx, &status, &mut shutdown).await {
            Ok(()) => info!(url = %base, "jetstream connection closed"),
            Err(ReadError::Silent(silence)) => {
                metrics::counter!("starling_ingest_stalled_connections_total").increment(1);
                warn!(url = %base, silent_ms = silence.as_millis() as u64, "jetstream connection went silent: reconnecting");
            }
            Err(ReadError::Socket(err)) => {
                warn!(url = %base, error = %err, "jetstream connection failed");
            }
        }
        status.connected.store(false, Ordering::Relaxed);
        if *shutdown.borrow() || tx.is_closed() {
            break;
        }
        // A connection that lasted a while was healthy: start the backoff over.
        if connected_at.elapsed() > options.backoff_max {
            backoff = options.backoff_min;
        }
        url_idx += 1;
        tokio::select! {
            _ = tokio::time::sleep(backoff) => {}
            _ = shutdown.changed() => {}
        }
        backoff = (backoff * 2).min(options.backoff_max);
    }
    drop(tx);
    match tokio::task::spawn_blocking(move || applier.join()).await {
        Ok(Ok(res)) => res,
        Ok(Err(_)) | Err(_) => Err(IngestError::ApplierPanicked),
    }
}

/// Why a connection ended other than by a close or a shutdown.
enum ReadError {
    /// The socket failed.
    Socket(tokio_tungstenite::tungstenite::Error),
    /// No frame arrived for this long.
    Silent(Duration),
}

impl From<tokio_tungstenite::tungstenite::Error> for ReadError {
    fn from(err: tokio_tungstenite::tungstenite::Error) -> ReadError {
        ReadError::Socket(err)
    }
}

async fn read_connection(
    url: &str,
    read_timeout: Duration,
    tx: &mpsc::Sender<Raw>,
    status: &LiveStatus,
    shutdown: &mut watch::Receiver<bool>,
) -> Result<(), ReadError> {
    // A server that accepts the TCP connection and never answers the handshake is a stall too.
    let connect = tokio_tungstenite::connect_async(url);
    let (mut socket, _) = tokio::time::timeout(read_timeout, connect)
        .await
        .map_err(|_| ReadError::Silent(read_timeout))??;
    status.connected.store(true, Ordering::Relaxed);
    status.connections.fetch_add(1, Ordering::Relaxed);
    info!(url, "jetstream connected");
    let mut pings = tokio::time::interval(read_timeout / 3);
    pings.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut deadline = tokio::time::Instant::now() + read_timeout;
    loop {
        let message = tokio::select! {
            message = socket.next() => message,
            _ = pings.tick() => {
                socket.send(Message::Ping(Default::default())).await?;
                continue;
            }
            _ = tokio::time::sleep_until(deadline) => return Err(ReadError::Silent(read_timeout)),
            _ = shutdown.changed() => return Ok(()),
            // The applier stopped (the store failed): its error ends ingest.
            _ = tx.closed() => return Ok(()),
        };
        let raw = match message {
            None => return Ok(()),
            Some(Err(err)) => return Err(err.into()),
            Some(Ok(Message::Text(text))) => Raw::Text(text.as_bytes().to_vec()),
            Some(Ok(Message::Binary(bytes))) => Raw::Compressed(bytes.to_vec()),
            Some(Ok(Message::Close(_))) => return Ok(()),
            // Pongs, pings (answered by the library on the next read or write) and frames of
            // no interest still prove the connection alive.
            Some(Ok(_)) => {
                deadline = tokio::time::Instant::now() + read_timeout;
                continue;
            }
        };
        // A full queue makes this wait: back-pressure reaches the socket.
        if tx.send(raw).await.is_err() {
            return Ok(());
        }
        // The silence is measured from here: the wait for room in the queue is ours, not the
        // server's.
        deadline = tokio::time::Instant::now() + read_timeout;
    }
}

fn apply_loop<S: Store>(
    store: &S,
    options: &LiveOptions,
    graph: &mut dyn CommitSink,
    status: &LiveStatus,
    mut rx: mpsc::Receiver<Raw>,
    handle: &tokio::runtime::Handle,
) -> Result<(), IngestError> {
    let mut decompressor = match &options.zstd_dictionary {
        Some(dictionary) => Some(
            zstd::bulk::Decompressor::with_dictionary(dictionary).map_err(|err| {
                IngestError::Dictionary {
                    path: "-".into(),
                    reason: err.to_string(),
                }
            })?,
        ),
        None => None,
    };
    let mut buf = Vec::with_capacity(EVENT_BYTES_MAX);
    let mut applier = Applier::new(store, graph, options.limits)?;
    loop {
        let next = next_until_due(applier.due_at(), &mut rx, handle);
        // Set by the receiving side alone, after each message it takes: the last value set is
        // then what the queue holds, 0 once it has drained.
        metrics::gauge!("starling_ingest_queue_depth").set(rx.len() as f64);
        match next {
            Some(Some(Raw::Text(bytes))) => applier.push(&bytes)?,
            Some(Some(Raw::Compressed(bytes))) => match &mut decompressor {
                Some(decompressor) => {
                    buf.clear();
                    match decompressor.decompress_to_buffer(&bytes, &mut buf) {
                        Ok(_) => applier.push(&buf)?,
                        Err(_) => applier.drop_event(DropReason::BadCompression),
                    }
                }
                None => applier.drop_event(DropReason::BadCompression),
            },
            Some(None) => break,
            None => {}
        }
        if applier.is_full() || applier.is_due(Instant::now()) {
            commit(&mut applier, status)?;
            if rx.is_empty() {
                // Idle: wait for the batch's engine write here, so that a failed one stops
                // ingest now rather than at the next batch, which may be long in coming.
                store.sync()?;
            }
        }
    }
    commit(&mut applier, status)?;
    Ok(store.sync()?)
}

fn commit<S: Store>(
    applier: &mut Applier<'_, '_, S>,
    status: &LiveStatus,
) -> Result<(), IngestError> {
    if applier.pending() == 0 {
        return Ok(());
    }
    // With only malformed events so far there is no cursor to store, only drops to count.
    let n = applier.commit(applier.newest_cursor().map(Progress::Live))?;
    status
        .events_committed
        .fetch_add(n as u64, Ordering::Relaxed);
    Ok(())
}
