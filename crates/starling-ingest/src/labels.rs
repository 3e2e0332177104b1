//! Labels from labelers: one task per configured `com.atproto.label.subscribeLabels` stream.
//!
//! Each task connects with the cursor stored for its labeler (its URL), decodes every binary
//! message (`starling_core::labels`), checks each label's signature against the `#atproto_label`
//! key of its source's DID document (resolved through `starling-identity`, re-resolved once
//! when a signature fails, for key rotation), and applies a frame's labels with the frame's
//! `seq` as the new cursor in one store write. A frame at or below the stored cursor is a
//! replay and changes nothing. Malformed frames and labels with a bad signature (or no key) are
//! counted (`starling_ingest_labels_total{outcome}`) and dropped; they never stop the stream.
//! Disconnects are retried with backoff (250 ms doubling to 30 s); a store error ends the task.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use rustc_hash::FxHashMap;
use starling_core::labels::{Frame, SignedLabel, decode_frame};
use starling_identity::Resolver;
use starling_identity::signature::{PublicKey, label_key};
use starling_store::{Label, PrivateOp, Store};
use tokio::sync::watch;
use tokio_tungstenite::tungstenite::Message;
use tracing::{debug, info, warn};

use crate::IngestError;

/// Reconnect backoff bounds.
const BACKOFF_MIN: Duration = Duration::from_millis(250);
const BACKOFF_MAX: Duration = Duration::from_secs(30);
/// Silence on a labeler's stream before it is reconnected (a ping every third of it).
const READ_TIMEOUT: Duration = Duration::from_secs(60);

/// Counts of what a labeler stream brought, for tests and the status of a task (the same
/// counts go to `starling_ingest_labels_total`).
#[derive(Debug, Default)]
pub struct LabelerStats {
    /// Frames applied (with their labels and cursor).
    pub frames: AtomicU64,
    /// Labels stored.
    pub applied: AtomicU64,
    /// Negations applied.
    pub negated: AtomicU64,
    /// Frames that did not decode.
    pub malformed: AtomicU64,
    /// Labels whose signature did not verify, or whose source has no label key.
    pub bad_signature: AtomicU64,
    /// Frames at or below the stored cursor (replays), skipped.
    pub replayed: AtomicU64,
    /// Connections made.
    pub connections: AtomicU64,
}

impl LabelerStats {
    fn count(&self, field: &AtomicU64, outcome: &'static str, n: u64) {
        field.fetch_add(n, Ordering::Relaxed);
        metrics::counter!("starling_ingest_labels_total", "outcome" => outcome).increment(n);
    }
}

/// The `subscribeLabels` URL of a labeler given as a service URL (`https://host`,
/// `wss://host`) or as the full endpoint.
pub fn subscribe_url(labeler: &str, cursor: Option<i64>) -> String {
    let base = labeler.trim_end_matches('/');
    let base = match base.split_once("://") {
        Some(("https", rest)) => format!("wss://{rest}"),
        Some(("http", rest)) => format!("ws://{rest}"),
        _ => base.to_owned(),
    };
    let mut url = if base.contains("/xrpc/") {
        base
    } else {
        format!("{base}/xrpc/com.atproto.label.subscribeLabels")
    };
    if let Some(cursor) = cursor {
        url.push_str(if url.contains('?') { "&" } else { "?" });
        url.push_str(&format!("cursor={cursor}"));
    }
    url
}

/// The label keys of sources, resolved once and kept; re-resolved after a failed check.
struct Keys {
    resolver: Resolver,
    keys: FxHashMap<String, Option<PublicKey>>,
}

impl Keys {
    async fn key(&mut self, did: &str, fresh: bool) -> Option<PublicKey> {
        if !fresh && let Some(key) = self.keys.get(did) {
            return key.clone();
        }
        if fresh {
            self.resolver.invalidate(did);
        }
        let key = match self.resolver.resolve(did).await {
            Ok(Some(identity)) => label_key(&identity.keys_json)
                .and_then(|multibase| PublicKey::from_multikey(&multibase).ok()),
            Ok(None) => None,
            Err(err) => {
                debug!(did, error = %err, "resolving a labeler's key");
                None
            }
        };
        self.keys.insert(did.to_owned(), key.clone());
        key
    }

    /// Whether `label`'s signature verifies against its source's current key.
    async fn verified(&mut self, label: &SignedLabel) -> bool {
        for fresh in [false, true] {
            if let Some(key) = self.key(&label.src, fresh).await
                && key.verify(&label.signed_bytes, &label.sig)
            {
                return true;
            }
        }
        false
    }
}

/// Follows every labeler in `labelers` until `shutdown` turns true; returns early only on a
/// store error.
pub async fn run_labelers<S: Store + 'static>(
    store: Arc<S>,
    labelers: Vec<String>,
    resolver: Resolver,
    shutdown: watch::Receiver<bool>,
) -> Result<(), IngestError> {
    let mut tasks = tokio::task::JoinSet::new();
    for labeler in labelers {
        info!(labeler, "consuming labels");
        tasks.spawn(run_labeler(
            store.clone(),
            labeler,
            resolver.clone(),
            Arc::new(LabelerStats::default()),
            shutdown.clone(),
        ));
    }
    while let Some(res) = tasks.join_next().await {
        match res {
            Ok(Ok(())) => {}
            Ok(Err(err)) => return Err(err),
            Err(err) => return Err(IngestError::Labels(format!("labeler task: {err}"))),
        }
    }
    Ok(())
}

/// Follows one labeler: connection after connection, from the stored cursor.
pub async fn run_labeler<S: Store + 'static>(
    store: Arc<S>,
    labeler: String,
    resolver: Resolver,
    stats: Arc<LabelerStats>,
    mut shutdown: watch::Receiver<bool>,
) -> Result<(), IngestError> {
    let mut keys = Keys {
        resolver,
        keys: FxHashMap::default(),
    };
    let mut backoff = BACKOFF_MIN;
    loop {
        if *shutdown.borrow() {
            return Ok(());
        }
        let read_store = store.clone();
        let name = labeler.clone();
        let cursor = blocking(move || read_store.labeler_cursor(&name)).await?;
        let url = subscribe_url(&labeler, cursor);
        let connection = follow(
            &store,
            &labeler,
            &url,
            cursor,
            &mut keys,
            &stats,
            &mut shutdown,
        );
        match connection.await {
            Ok(Connection::Stopped) => return Ok(()),
            Ok(Connection::Ended { applied }) if applied => backoff = BACKOFF_MIN,
            Ok(Connection::Ended { .. }) => {}
            Err(Failure::Store(err)) => return Err(err),
            Err(Failure::Socket(err)) => {
                warn!(labeler, error = %err, retry_ms = backoff.as_millis() as u64, "labeler stream failed");
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(backoff) => {}
            _ = shutdown.wait_for(|stop| *stop) => return Ok(()),
        }
        backoff = (backoff * 2).min(BACKOFF_MAX);
    }
}

enum Connection {
    /// Shutdown asked.
    Stopped,
    /// The labeler closed the stream; `applied` when a frame was applied on it.
    Ended { applied: bool },
}

enum Failure {
    Store(IngestError),
    Socket(String),
}

async fn follow<S: Store + 'static>(
    store: &Arc<S>,
    labeler: &str,
    url: &str,
    mut cursor: Option<i64>,
    keys: &mut Keys,
    stats: &LabelerStats,
    shutdown: &mut watch::Receiver<bool>,
) -> Result<Connection, Failure> {
    let connect = tokio_tungstenite::connect_async(url);
    let (mut socket, _) = tokio::time::timeout(READ_TIMEOUT, connect)
        .await
        .map_err(|_| Failure::Socket("no handshake".into()))?
        .map_err(|err| Failure::Socket(err.to_string()))?;
    stats.connections.fetch_add(1, Ordering::Relaxed);
    info!(labeler, ?cursor, "labeler connected");
    let mut applied = false;
    let mut pings = tokio::time::interval(READ_TIMEOUT / 3);
    loop {
        let message = tokio::select! {
            message = tokio::time::timeout(READ_TIMEOUT, socket.next()) => message
                .map_err(|_| Failure::Socket("silent".into()))?,
            _ = pings.tick() => {
                socket.send(Message::Ping(Default::default())).await
                    .map_err(|err| Failure::Socket(err.to_string()))?;
                continue;
            }
            _ = shutdown.changed() => return Ok(Connection::Stopped),
        };
        let bytes = match message {
            None | Some(Ok(Message::Close(_))) => return Ok(Connection::Ended { applied }),
            Some(Err(err)) => return Err(Failure::Socket(err.to_string())),
            Some(Ok(Message::Binary(bytes))) => bytes,
            Some(Ok(_)) => continue,
        };
        let frame = match decode_frame(&bytes) {
            Ok(frame) => frame,
            Err(err) => {
                debug!(labeler, error = %err, "dropping a malformed label frame");
                stats.count(&stats.malformed, "malformed", 1);
                continue;
            }
        };
        let (seq, labels) = match frame {
            Frame::Labels { seq, labels } => (seq, labels),
            Frame::Info { name } => {
                info!(labeler, name, "labeler info");
                continue;
            }
            Frame::Error { error } => {
                return Err(Failure::Socket(format!("labeler error {error}")));
            }
            Frame::Unknown => continue,
        };
        if cursor.is_some_and(|cursor| seq <= cursor) {
            stats.count(&stats.replayed, "replayed", 1);
            continue;
        }
        let ops = checked_ops(labeler, seq, labels, keys, stats).await;
        let apply_store = store.clone();
        blocking(move || apply_store.apply_private(&ops, now_us(), None))
            .await
            .map_err(Failure::Store)?;
        stats.frames.fetch_add(1, Ordering::Relaxed);
        cursor = Some(seq);
        applied = true;
    }
}

/// The store operations of a frame: its labels whose signature verifies, then the cursor.
async fn checked_ops(
    labeler: &str,
    seq: i64,
    labels: Vec<SignedLabel>,
    keys: &mut Keys,
    stats: &LabelerStats,
) -> Vec<PrivateOp> {
    let mut ops = Vec::with_capacity(labels.len() + 1);
    for label in labels {
        if !keys.verified(&label).await {
            debug!(
                labeler,
                src = label.src,
                uri = label.uri,
                "dropping a label with a bad signature"
            );
            stats.count(&stats.bad_signature, "bad_signature", 1);
            continue;
        }
        match label.neg {
            true => stats.count(&stats.negated, "negated", 1),
            false => stats.count(&stats.applied, "applied", 1),
        }
        ops.push(PrivateOp::Label(Label {
            src: label.src,
            uri: label.uri,
            cid: label.cid,
            val: label.val,
            neg: label.neg,
            cts: label.cts,
            exp: label.exp,
            exp_us: label.exp_us,
        }));
    }
    ops.push(PrivateOp::LabelerCursor {
        labeler: labeler.to_owned(),
        seq,
    });
    ops
}

fn now_us() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
}

async fn blocking<T: Send + 'static>(
    call: impl FnOnce() -> Result<T, starling_store::StoreError> + Send + 'static,
) -> Result<T, IngestError> {
    tokio::task::spawn_blocking(call)
        .await
        .map_err(|err| IngestError::Labels(format!("store task: {err}")))?
        .map_err(IngestError::from)
}

#[cfg(test)]
mod tests {
    use super::*;

    // Checks the endpoint built from each form of labeler URL, with and without a cursor.
    #[test]
    fn subscribe_urls() {
        let path = "/xrpc/com.atproto.label.subscribeLabels";
        assert_eq!(
            subscribe_url("https://mod.example/", None),
            format!("wss://mod.example{path}")
        );
        assert_eq!(
            subscribe_url("http://127.0.0.1:9/", Some(7)),
            format!("ws://127.0.0.1:9{path}?cursor=7")
        );
        assert_eq!(
            subscribe_url(&format!("wss://m.example{path}"), Some(0)),
            format!("wss://m.example{path}?cursor=0")
        );
    }
}
