//! The relay firehose (`com.atproto.sync.subscribeRepos`) with every commit's signature checked.
//!
//! Three stages, each bounded, so back-pressure reaches the socket as in `live`:
//! - the reader task holds the websocket and queues binary frames;
//! - the key task decodes each frame and looks up the signing key of each commit's DID (its
//!   own cache of parsed keys in front of the identity resolver, several lookups at once,
//!   frames kept in order); an `#identity` frame forgets the DID's key before any later frame
//!   of it is looked up, so a rotated key is fetched again;
//! - the applying thread checks each commit ([`CommitFrame::events`]: CAR slice, commit CID,
//!   DID, revision, signature, record blocks), writes its operations as Jetstream events and
//!   applies them through [`Applier`], the Jetstream path, with the same idempotence and
//!   revision ordering. Each batch stores the relay sequence of its last frame as the durable
//!   cursor (`Progress::File` named by [`relay_source`]), and a reconnect asks for the stream
//!   after it.
//!
//! A frame that fails a check is dropped whole and counted: in the store (`bad_signature`, or
//! `bad_repo` for anything else that does not decode) and in
//! `starling_ingest_relay_frames_total{outcome}`.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use futures_util::stream::FuturesOrdered;
use futures_util::{SinkExt, StreamExt};
use starling_core::jetstream::DropReason;
use starling_identity::Resolver;
use starling_repo::firehose::{CommitFrame, Frame};
use starling_repo::{Cid, PublicKey, RepoError, events};
use starling_store::{Progress, Store};
use tokio::sync::{mpsc, watch};
use tokio_tungstenite::tungstenite::Message;
use tracing::{debug, info, warn};

use crate::IngestError;
use crate::applier::{Applier, CommitSink, next_until_due, now_us};
use crate::live::{LiveOptions, LiveStatus};

/// Where the relay client connects and whom it asks for keys.
#[derive(Clone)]
pub struct RelayOptions {
    /// The relay: `ws://host` or `wss://host`, with or without the
    /// `/xrpc/com.atproto.sync.subscribeRepos` path.
    pub url: String,
    /// Resolves each DID's document for its `#atproto` signing key.
    pub resolver: Resolver,
    /// Key lookups in flight at once.
    pub lookups_concurrent_max: usize,
    /// Parsed keys kept; the cache starts over when full. Also bounds the repositories whose
    /// last commit is remembered to notice a break in their chain.
    pub keys_cached_max: usize,
    /// Where a repository whose commit chain broke (a `#sync` frame, or a commit whose
    /// `prevData` is not the last commit's MST root) is sent to be fetched again (`serve`
    /// sets it up; see [`crate::backfill::run_resync`]); without it, breaks are only counted.
    pub resync: Option<mpsc::Sender<String>>,
}

impl std::fmt::Debug for RelayOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RelayOptions")
            .field("url", &self.url)
            .finish_non_exhaustive()
    }
}

impl RelayOptions {
    /// Options for `url` with the default bounds (64 lookups at once, 1M cached keys).
    pub fn new(url: String, resolver: Resolver) -> RelayOptions {
        RelayOptions {
            url,
            resolver,
            lookups_concurrent_max: 64,
            keys_cached_max: 1_000_000,
            resync: None,
        }
    }
}

/// The name under which the relay's cursor is stored: one per relay URL.
pub fn relay_source(url: &str) -> String {
    format!("relay {}", url.trim_end_matches('/'))
}

/// The subscription URL for `base`, from the stored sequence `cursor` on.
pub fn subscribe_url(base: &str, cursor: Option<u64>) -> String {
    let mut url = base.trim_end_matches('/').to_owned();
    if !url.contains("/xrpc/") {
        url.push_str("/xrpc/com.atproto.sync.subscribeRepos");
    }
    if let Some(cursor) = cursor {
        url.push_str(if url.contains('?') { "&" } else { "?" });
        url.push_str(&format!("cursor={cursor}"));
    }
    url
}

/// A decoded frame and, for a commit, its DID's key (or why there is none).
struct Keyed {
    frame: Result<Frame, RepoError>,
    key: Option<Result<PublicKey, String>>,
}

/// Runs the relay client until `shutdown` turns true, then commits what it holds and returns.
pub async fn run_relay<S: Store + 'static>(
    store: Arc<S>,
    options: LiveOptions,
    relay: RelayOptions,
    mut graph: Box<dyn CommitSink + Send>,
    status: Arc<LiveStatus>,
    mut shutdown: watch::Receiver<bool>,
) -> Result<(), IngestError> {
    crate::live::check_url(&relay.url)?;
    let source = relay_source(&relay.url);
    let (raw_tx, raw_rx) = mpsc::channel::<Vec<u8>>(options.queue_messages_max);
    let (keyed_tx, keyed_rx) = mpsc::channel::<Keyed>(options.queue_messages_max);
    metrics::gauge!("starling_ingest_queue_capacity").set(options.queue_messages_max as f64);
    let keys = tokio::spawn(key_task(relay.clone(), raw_rx, keyed_tx));
    let handle = tokio::runtime::Handle::current();
    let apply_store = store.clone();
    let apply_status = status.clone();
    let apply_source = source.clone();
    let limits = options.limits;
    let mut chains = Chains::new(relay.keys_cached_max, relay.resync.clone());
    let applier = std::thread::Builder::new()
        .name("relay-applier".to_owned())
        .spawn(move || {
            apply_loop(
                &*apply_store,
                (limits, &apply_source),
                &mut *graph,
                &apply_status,
                (keyed_rx, &mut chains),
                &handle,
            )
        })
        .map_err(|err| IngestError::Task {
            what: "relay applier thread",
            reason: err.to_string(),
        })?;
    let mut backoff = options.backoff_min;
    while !*shutdown.borrow() {
        let cursor = match store.progress(Some(&source))? {
            Some(Progress::File { offset, .. }) => Some(offset),
            _ => None,
        };
        let url = subscribe_url(&relay.url, cursor);
        let connected_at = Instant::now();
        match read_connection(&url, options.read_timeout, &raw_tx, &status, &mut shutdown).await {
            Ok(()) => info!(url = %relay.url, "relay connection closed"),
            Err(err) => warn!(url = %relay.url, error = %err, "relay connection failed"),
        }
        status.connected.store(false, Ordering::Relaxed);
        if *shutdown.borrow() || raw_tx.is_closed() {
            break;
        }
        if connected_at.elapsed() > options.backoff_max {
            backoff = options.backoff_min;
        }
        tokio::select! {
            _ = tokio::time::sleep(backoff) => {}
            _ = shutdown.changed() => {}
        }
        backoff = (backoff * 2).min(options.backoff_max);
    }
    drop(raw_tx);
    let _ = keys.await;
    match tokio::task::spawn_blocking(move || applier.join()).await {
        Ok(Ok(res)) => res,
        Ok(Err(_)) | Err(_) => Err(IngestError::ApplierPanicked),
    }
}

async fn read_connection(
    url: &str,
    read_timeout: Duration,
    tx: &mpsc::Sender<Vec<u8>>,
    status: &LiveStatus,
    shutdown: &mut watch::Receiver<bool>,
) -> Result<(), String> {
    let connect = tokio_tungstenite::connect_async(url);
    let (mut socket, _) = tokio::time::timeout(read_timeout, connect)
        .await
        .map_err(|_| "no handshake in time".to_owned())?
        .map_err(|err| err.to_string())?;
    status.connected.store(true, Ordering::Relaxed);
    status.connections.fetch_add(1, Ordering::Relaxed);
    info!(url, "relay connected");
    let mut pings = tokio::time::interval(read_timeout / 3);
    pings.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut deadline = tokio::time::Instant::now() + read_timeout;
    loop {
        let message = tokio::select! {
            message = socket.next() => message,
            _ = pings.tick() => {
                socket.send(Message::Ping(Default::default())).await.map_err(|err| err.to_string())?;
                continue;
            }
            _ = tokio::time::sleep_until(deadline) => {
                metrics::counter!("starling_ingest_stalled_connections_total").increment(1);
                return Err("the connection went silent".to_owned());
            }
            _ = shutdown.changed() => return Ok(()),
            _ = tx.closed() => return Ok(()),
        };
        deadline = tokio::time::Instant::now() + read_timeout;
        let bytes = match message {
            None | Some(Ok(Message::Close(_))) => return Ok(()),
            Some(Err(err)) => return Err(err.to_string()),
            Some(Ok(Message::Binary(bytes))) => bytes.to_vec(),
            Some(Ok(_)) => continue,
        };
        if tx.send(bytes).await.is_err() {
            return Ok(());
        }
        deadline = tokio::time::Instant::now() + read_timeout;
    }
}

/// Decodes frames and looks up keys, several at once, handing them on in order.
async fn key_task(relay: RelayOptions, mut rx: mpsc::Receiver<Vec<u8>>, tx: mpsc::Sender<Keyed>) {
    let mut cache: HashMap<String, PublicKey> = HashMap::new();
    let mut pending = FuturesOrdered::new();
    let mut open = true;
    let mut last_seq: Option<u64> = None;
    while open || !pending.is_empty() {
        tokio::select! {
            bytes = rx.recv(), if open && pending.len() < relay.lookups_concurrent_max.max(1) => {
                let Some(bytes) = bytes else {
                    open = false;
                    continue;
                };
                let frame = Frame::decode(&bytes);
                // After a reconnect the relay sends again what the queues still hold: the
                // sequence only grows, so anything at or below the newest one seen is a repeat.
                let seq = frame.as_ref().ok().and_then(Frame::seq);
                if let Some(seq) = seq {
                    if last_seq.is_some_and(|last| seq <= last) {
                        count("repeat");
                        continue;
                    }
                    last_seq = Some(seq);
                }
                let did = match &frame {
                    Ok(Frame::Commit(commit)) => Some(commit.repo.clone()),
                    Ok(Frame::Identity { did, .. }) => {
                        cache.remove(did);
                        relay.resolver.invalidate(did);
                        None
                    }
                    _ => None,
                };
                if cache.len() >= relay.keys_cached_max {
                    cache.clear();
                }
                let cached = did.as_ref().and_then(|did| cache.get(did).cloned());
                let resolver = relay.resolver.clone();
                pending.push_back(async move {
                    let key = match (did, cached) {
                        (_, Some(key)) => Some(Ok(key)),
                        (Some(did), None) => Some(lookup(&resolver, &did).await),
                        (None, None) => None,
                    };
                    Keyed { frame, key }
                });
            }
            Some(keyed) = pending.next(), if !pending.is_empty() => {
                if let (Ok(Frame::Commit(commit)), Some(Ok(key))) = (&keyed.frame, &keyed.key) {
                    cache.insert(commit.repo.clone(), key.clone());
                }
                if tx.send(keyed).await.is_err() {
                    return;
                }
            }
        }
    }
}

/// The `#atproto` signing key of `did`'s current document.
async fn lookup(resolver: &Resolver, did: &str) -> Result<PublicKey, String> {
    let identity = resolver
        .resolve(did)
        .await
        .map_err(|err| err.to_string())?
        .ok_or_else(|| format!("no DID document for `{did}`"))?;
    let multibase = identity
        .signing_key()
        .ok_or_else(|| format!("`{did}` has no #atproto key"))?;
    PublicKey::from_multikey(&multibase).map_err(|err| err.to_string())
}

fn apply_loop<S: Store>(
    store: &S,
    (limits, source): (crate::BatchLimits, &str),
    graph: &mut dyn CommitSink,
    status: &LiveStatus,
    (mut rx, chains): (mpsc::Receiver<Keyed>, &mut Chains),
    handle: &tokio::runtime::Handle,
) -> Result<(), IngestError> {
    let mut applier = Applier::new(store, graph, limits)?;
    let mut last_seq = None;
    let mut line = String::new();
    loop {
        let next = next_until_due(applier.due_at(), &mut rx, handle);
        metrics::gauge!("starling_ingest_queue_depth").set(rx.len() as f64);
        match next {
            Some(Some(keyed)) => {
                if let Ok(seq) = apply_frame(&mut applier, keyed, chains, &mut line)? {
                    last_seq = Some(seq);
                }
            }
            Some(None) => break,
            None => {}
        }
        if applier.is_full() || applier.is_due(Instant::now()) {
            commit(&mut applier, source, last_seq, status)?;
            if rx.is_empty() {
                store.sync()?;
            }
        }
    }
    commit(&mut applier, source, last_seq, status)?;
    Ok(store.sync()?)
}

fn commit<S: Store>(
    applier: &mut Applier<'_, '_, S>,
    source: &str,
    last_seq: Option<u64>,
    status: &LiveStatus,
) -> Result<(), IngestError> {
    if applier.pending() == 0 {
        return Ok(());
    }
    let progress = last_seq.map(|seq| Progress::File {
        source: source.to_owned(),
        offset: seq,
        cursor: None,
    });
    let n = applier.commit(progress)?;
    status
        .events_committed
        .fetch_add(n as u64, Ordering::Relaxed);
    Ok(())
}

/// Applies one frame; `Ok(Ok(seq))` when it carried a sequence (applied or dropped, it is
/// behind the cursor either way), `Ok(Err(()))` when it had none.
fn apply_frame<S: Store>(
    applier: &mut Applier<'_, '_, S>,
    keyed: Keyed,
    chains: &mut Chains,
    line: &mut String,
) -> Result<Result<u64, ()>, IngestError> {
    let frame = match keyed.frame {
        Ok(frame) => frame,
        Err(err) => {
            reject(applier, "bad_frame", &err.to_string());
            return Ok(Err(()));
        }
    };
    let seq = frame.seq().ok_or(());
    match frame {
        Frame::Commit(commit) => apply_commit(applier, &commit, keyed.key, chains)?,
        Frame::Identity {
            seq,
            did,
            handle,
            time,
        } => {
            line.clear();
            events::write_identity(&did, time_us(&time), seq, handle.as_deref(), line);
            applier.push(line.as_bytes())?;
            count("identity");
        }
        Frame::Account {
            seq,
            did,
            active,
            status,
            time,
        } => {
            line.clear();
            events::write_account(&did, time_us(&time), seq, active, status.as_deref(), line);
            applier.push(line.as_bytes())?;
            count("account");
        }
        Frame::Sync { did, rev, .. } => {
            // The repository's history was reset: what it holds now is fetched again.
            debug!(did, rev, "relay #sync frame");
            count("sync");
            chains.forget(&did);
            chains.resync(did);
        }
        Frame::Info { name } => {
            info!(name, "relay #info frame");
            count("info");
        }
        Frame::Error { error } => {
            warn!(error, "relay error frame");
            count("error");
        }
        Frame::Unknown { kind } => {
            debug!(kind, "unknown relay frame");
            count("unknown");
        }
        _ => count("unknown"),
    }
    Ok(seq)
}

fn apply_commit<S: Store>(
    applier: &mut Applier<'_, '_, S>,
    commit: &CommitFrame,
    key: Option<Result<PublicKey, String>>,
    chains: &mut Chains,
) -> Result<(), IngestError> {
    if commit.too_big {
        // Its operations are not in the frame: the repository is fetched whole instead.
        reject(applier, "too_big", &commit.repo);
        chains.forget(&commit.repo);
        chains.resync(commit.repo.clone());
        return Ok(());
    }
    let key = match key {
        Some(Ok(key)) => key,
        Some(Err(err)) => {
            reject(applier, "no_key", &err);
            return Ok(());
        }
        None => {
            reject(applier, "no_key", &commit.repo);
            return Ok(());
        }
    };
    match commit.events(&key, time_us(&commit.time)) {
        Ok((lines, data)) => {
            for line in lines {
                applier.push(line.as_bytes())?;
            }
            count("commit");
            if !chains.follows(&commit.repo, commit.prev_data, data) {
                debug!(
                    did = commit.repo,
                    "relay commit breaks its repository's chain"
                );
                count("chain_break");
                chains.resync(commit.repo.clone());
            }
        }
        Err(err) => reject(applier, err.reason(), &err.to_string()),
    }
    Ok(())
}

/// Counts and drops a frame refused for `reason` (a `RepoError` label, or the relay client's
/// own: `bad_frame`, `too_big`, `no_key`).
fn reject<S: Store>(applier: &mut Applier<'_, '_, S>, reason: &'static str, detail: &str) {
    debug!(reason, detail, "dropping relay frame");
    count(reason);
    let drop_reason = if reason == "bad_signature" {
        DropReason::BadSignature
    } else {
        DropReason::BadRepo
    };
    applier.drop_event(drop_reason);
}

/// The MST root of the last commit seen of each repository (at most `max`; forgotten all at
/// once when full, after which a break shows from the second commit of a repository on), to
/// notice a commit whose `prevData` does not follow on; and where to send a repository whose
/// chain broke. A resync asked for is not durable: if the process stops before it is done, the
/// repository's next break asks again.
struct Chains {
    last_data: HashMap<String, Cid>,
    max: usize,
    resync: Option<mpsc::Sender<String>>,
}

impl Chains {
    fn new(max: usize, resync: Option<mpsc::Sender<String>>) -> Chains {
        Chains {
            last_data: HashMap::new(),
            max: max.max(1),
            resync,
        }
    }

    /// Records `did`'s commit whose MST root is `data`; false when its `prev_data` is not the
    /// root of the last commit seen of `did` (unknown is no break).
    fn follows(&mut self, did: &str, prev_data: Option<Cid>, data: Cid) -> bool {
        // One lookup, and the DID copied only for a repository not seen yet.
        if let Some(last) = self.last_data.get_mut(did) {
            let broken = prev_data.is_some_and(|prev| prev != *last);
            *last = data;
            return !broken;
        }
        if self.last_data.len() >= self.max {
            self.last_data.clear();
        }
        self.last_data.insert(did.to_owned(), data);
        true
    }

    /// Forgets `did`'s last commit: its history was reset.
    fn forget(&mut self, did: &str) {
        self.last_data.remove(did);
    }

    /// Asks for `did` to be fetched again; counted as `requested`, or `dropped` when the queue
    /// is full or there is none.
    fn resync(&self, did: String) {
        let outcome = match &self.resync {
            Some(tx) => match tx.try_send(did) {
                Ok(()) => "requested",
                Err(mpsc::error::TrySendError::Full(did)) => {
                    warn!(
                        did,
                        "the resync queue is full: the repository is not fetched again"
                    );
                    "dropped"
                }
                Err(mpsc::error::TrySendError::Closed(_)) => "dropped",
            },
            None => "off",
        };
        metrics::counter!("starling_ingest_relay_resyncs_total", "outcome" => outcome).increment(1);
    }
}

fn count(outcome: &'static str) {
    metrics::counter!("starling_ingest_relay_frames_total", "outcome" => outcome).increment(1);
}

/// A frame's `time` as Jetstream's `time_us`, or now when it does not parse.
fn time_us(time: &str) -> u64 {
    starling_core::syntax::parse_datetime_micros(time)
        .and_then(|us| u64::try_from(us).ok())
        .unwrap_or_else(now_us)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cid(n: u8) -> Cid {
        starling_repo::car::cid_of_cbor(&[n])
    }

    // A chain break is a `prev_data` that differs from the root last seen of that repository;
    // an unknown repository, or a commit without `prev_data`, is none; a full memory starts
    // over; a reset repository is unknown again.
    #[test]
    fn chains_notice_a_prev_data_that_does_not_follow_on() {
        let mut chains = Chains::new(2, None);
        assert!(
            chains.follows("did:a", Some(cid(9)), cid(1)),
            "unknown: no break"
        );
        assert!(chains.follows("did:a", Some(cid(1)), cid(2)));
        assert!(
            !chains.follows("did:a", Some(cid(1)), cid(3)),
            "1 is not the last root, 2"
        );
        assert!(
            chains.follows("did:a", None, cid(4)),
            "no prev_data: no break"
        );
        assert!(chains.follows("did:b", Some(cid(7)), cid(5)));
        // A third repository fills the memory: it starts over, and `did:a` is unknown.
        assert!(chains.follows("did:c", None, cid(6)));
        assert!(chains.follows("did:a", Some(cid(8)), cid(7)));
        chains.forget("did:a");
        assert!(
            chains.follows("did:a", Some(cid(8)), cid(9)),
            "forgotten: no break"
        );
    }

    #[test]
    fn a_resync_goes_to_the_queue_or_is_dropped_when_it_is_full() {
        let (tx, mut rx) = mpsc::channel(1);
        let chains = Chains::new(10, Some(tx));
        chains.resync("did:a".to_owned());
        chains.resync("did:b".to_owned());
        assert_eq!(rx.try_recv().unwrap(), "did:a");
        assert!(
            rx.try_recv().is_err(),
            "did:b was dropped: the queue held one"
        );
    }
}
