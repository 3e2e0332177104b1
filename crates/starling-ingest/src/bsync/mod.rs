//! The bsync consumer: each user's private state (mutes, notification settings, bookmarks,
//! activity subscriptions, drafts) from a bsync service into the store, as the reference
//! dataplane's `bsync-subscription` does.
//!
//! bsync serves three long-polled scans (`ScanMuteOperations`, `ScanNotifOperations`,
//! `ScanOperations`), each with its own cursor. One task per scan asks for the page after its
//! stored cursor (`Connect` protocol, JSON, over HTTP/1.1: bsync's Node server speaks it, and
//! Starling needs no protobuf code outside its API crate), decodes it (`decode.rs`: a
//! malformed operation is counted and skipped), and applies the page and its new cursor in one
//! atomic store write, so a crash replays at most that page, whose operations are idempotent.
//! bsync unreachable or answering errors is retried with exponential backoff (250 ms doubling
//! to 30 s) and shows in `starling_ingest_bsync_up{stream}`; nothing is skipped. A store error
//! stops the consumer, like ingest.

mod decode;

use std::sync::Arc;
use std::time::Duration;

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::{Request, StatusCode, header};
use hyper_util::rt::TokioIo;
use starling_store::{BsyncStream, Store};
use tokio::sync::watch;
use tracing::{debug, info, warn};

pub use decode::AnswerError;

use crate::IngestError;

/// Operations asked for per scan request (bsync's own default page).
pub const BSYNC_OPS_PER_SCAN: u32 = 1_000;
/// How long one scan request may take: bsync holds an empty scan open for its long-poll
/// timeout (10 s by default) before answering.
const SCAN_TIMEOUT: Duration = Duration::from_secs(30);
/// Bytes of one scan answer at most (1,000 operations of drafts or preferences, base64).
const ANSWER_BYTES_MAX: usize = 64 * 1024 * 1024;
/// The first retry delay after a failed scan; it doubles up to [`BACKOFF_MAX`].
const BACKOFF_MIN: Duration = Duration::from_millis(250);
/// The longest retry delay.
const BACKOFF_MAX: Duration = Duration::from_secs(30);

/// Where bsync is and how to authenticate.
#[derive(Clone, Debug)]
pub struct BsyncOptions {
    /// `http://host:port`, optionally with a path prefix.
    pub url: String,
    /// Sent as `Authorization: Bearer KEY` (bsync refuses scans without one of its keys).
    pub api_key: Option<String>,
}

/// A bsync URL taken apart.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Endpoint {
    /// `host:port`, for the connection and the `Host` header.
    authority: String,
    /// The path prefix, without a trailing slash.
    prefix: String,
}

/// Why a bsync URL cannot be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BsyncUrlError {
    /// Not `http://host[:port][/prefix]`.
    #[error(
        "bsync url `{0}` is not `http://host[:port][/path]` (bsync is reached over plain HTTP on a private network)"
    )]
    Url(String),
}

fn endpoint(url: &str) -> Result<Endpoint, BsyncUrlError> {
    let bad = || BsyncUrlError::Url(url.to_owned());
    let rest = url.strip_prefix("http://").ok_or_else(bad)?;
    let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
    if authority.is_empty() || authority.contains(['@', ' ', '?', '#']) {
        return Err(bad());
    }
    let authority = if authority
        .rsplit_once(':')
        .is_some_and(|(_, port)| !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit()))
    {
        authority.to_owned()
    } else if authority.ends_with(']') || !authority.contains(':') {
        format!("{authority}:80")
    } else {
        return Err(bad());
    };
    let prefix = path.trim_end_matches('/');
    let prefix = if prefix.is_empty() {
        String::new()
    } else {
        format!("/{prefix}")
    };
    Ok(Endpoint { authority, prefix })
}

/// Checks a bsync URL, for configuration errors before anything starts.
pub fn check_bsync_url(url: &str) -> Result<(), BsyncUrlError> {
    endpoint(url).map(|_| ())
}

/// Why one scan failed (it is retried).
#[derive(Debug, thiserror::Error)]
enum ScanError {
    #[error("connecting to bsync at {authority}: {message}")]
    Connect { authority: String, message: String },
    #[error("bsync request: {0}")]
    Http(String),
    #[error("bsync answered HTTP {status}: {body}")]
    Status { status: u16, body: String },
    #[error("bsync answer over {ANSWER_BYTES_MAX} bytes")]
    TooLarge,
    #[error("bsync did not answer within {SCAN_TIMEOUT:?}")]
    Timeout,
    #[error(transparent)]
    Answer(#[from] AnswerError),
}

fn method(stream: BsyncStream) -> &'static str {
    match stream {
        BsyncStream::Mutes => "ScanMuteOperations",
        BsyncStream::Notifications => "ScanNotifOperations",
        BsyncStream::Operations => "ScanOperations",
    }
}

/// One scan request: POSTs `{"cursor", "limit"}` and returns the answer's body.
async fn scan(
    endpoint: &Endpoint,
    api_key: Option<&str>,
    stream: BsyncStream,
    cursor: &str,
) -> Result<Vec<u8>, ScanError> {
    let tcp = tokio::net::TcpStream::connect(&endpoint.authority)
        .await
        .map_err(|err| ScanError::Connect {
            authority: endpoint.authority.clone(),
            message: err.to_string(),
        })?;
    let _ = tcp.set_nodelay(true);
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake::<_, Full<Bytes>>(TokioIo::new(tcp))
            .await
            .map_err(|err| ScanError::Http(err.to_string()))?;
    let body = serde_json::json!({ "cursor": cursor, "limit": BSYNC_OPS_PER_SCAN }).to_string();
    let path = format!("{}/bsync.Service/{}", endpoint.prefix, method(stream));
    let mut request = Request::post(path)
        .header(header::HOST, &endpoint.authority)
        .header(header::CONTENT_TYPE, "application/json")
        .header("connect-protocol-version", "1")
        .header(header::CONNECTION, "close");
    if let Some(key) = api_key {
        request = request.header(header::AUTHORIZATION, format!("Bearer {key}"));
    }
    let request = request
        .body(Full::new(Bytes::from(body)))
        .map_err(|err| ScanError::Http(err.to_string()))?;
    let exchange = async move {
        let response = sender
            .send_request(request)
            .await
            .map_err(|err| ScanError::Http(err.to_string()))?;
        let status = response.status();
        let body = http_body_util::Limited::new(response.into_body(), ANSWER_BYTES_MAX)
            .collect()
            .await
            .map_err(|_| ScanError::TooLarge)?
            .to_bytes();
        if status != StatusCode::OK {
            return Err(ScanError::Status {
                status: status.as_u16(),
                body: String::from_utf8_lossy(&body).chars().take(256).collect(),
            });
        }
        Ok(body.to_vec())
    };
    tokio::pin!(connection);
    tokio::pin!(exchange);
    let answer = async {
        tokio::select! {
            res = &mut exchange => res,
            closed = &mut connection => {
                closed.map_err(|err| ScanError::Http(err.to_string()))?;
                exchange.await
            }
        }
    };
    tokio::time::timeout(SCAN_TIMEOUT, answer)
        .await
        .map_err(|_| ScanError::Timeout)?
}

fn decode(stream: BsyncStream, body: &[u8]) -> Result<decode::Decoded, AnswerError> {
    match stream {
        BsyncStream::Mutes => decode::mute_page(body),
        BsyncStream::Notifications => decode::notif_page(body),
        BsyncStream::Operations => decode::operation_page(body),
    }
}

fn now_us() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
}

/// Runs the three scans until `shutdown` turns true; returns early only on a store error.
pub async fn run_bsync<S: Store + 'static>(
    store: Arc<S>,
    options: BsyncOptions,
    shutdown: watch::Receiver<bool>,
) -> Result<(), IngestError> {
    let endpoint = endpoint(&options.url).map_err(|err| IngestError::Bsync(err.to_string()))?;
    info!(url = %options.url, "consuming private state from bsync");
    let mut tasks = tokio::task::JoinSet::new();
    for stream in BsyncStream::ALL {
        tasks.spawn(run_stream(
            store.clone(),
            endpoint.clone(),
            options.api_key.clone(),
            stream,
            shutdown.clone(),
        ));
    }
    while let Some(res) = tasks.join_next().await {
        match res {
            Ok(Ok(())) => {}
            Ok(Err(err)) => return Err(err),
            Err(err) => return Err(IngestError::Bsync(format!("bsync task: {err}"))),
        }
    }
    Ok(())
}

/// Follows one scan: page after page, each applied with its cursor, retrying failures.
async fn run_stream<S: Store + 'static>(
    store: Arc<S>,
    endpoint: Endpoint,
    api_key: Option<String>,
    stream: BsyncStream,
    mut shutdown: watch::Receiver<bool>,
) -> Result<(), IngestError> {
    let name = stream.as_str();
    let read_store = store.clone();
    let mut cursor = blocking(move || read_store.bsync_cursor(stream))
        .await?
        .unwrap_or_default();
    let up = metrics::gauge!("starling_ingest_bsync_up", "stream" => name);
    let mut backoff = BACKOFF_MIN;
    loop {
        if *shutdown.borrow() {
            return Ok(());
        }
        let answer = tokio::select! {
            answer = scan(&endpoint, api_key.as_deref(), stream, &cursor) => answer,
            _ = shutdown.wait_for(|stop| *stop) => return Ok(()),
        };
        let decoded = match answer.and_then(|body| Ok(decode(stream, &body)?)) {
            Ok(decoded) => decoded,
            Err(err) => {
                up.set(0.0);
                metrics::counter!("starling_ingest_bsync_failures_total", "stream" => name)
                    .increment(1);
                warn!(stream = name, error = %err, retry_ms = backoff.as_millis() as u64, "bsync scan failed");
                tokio::select! {
                    _ = tokio::time::sleep(backoff) => {}
                    _ = shutdown.wait_for(|stop| *stop) => return Ok(()),
                }
                backoff = (backoff * 2).min(BACKOFF_MAX);
                continue;
            }
        };
        up.set(1.0);
        backoff = BACKOFF_MIN;
        count(name, &decoded);
        if decoded.ops.is_empty() && (decoded.cursor == cursor || decoded.cursor.is_empty()) {
            continue;
        }
        let apply_store = store.clone();
        let new_cursor = decoded.cursor.clone();
        blocking(move || {
            apply_store.apply_private(
                &decoded.ops,
                now_us(),
                Some((stream, decoded.cursor.as_str())),
            )
        })
        .await?;
        debug!(stream = name, cursor = %new_cursor, "applied a bsync page");
        cursor = new_cursor;
    }
}

fn count(name: &'static str, decoded: &decode::Decoded) {
    for (outcome, n) in [
        ("applied", decoded.ops.len() as u64),
        ("malformed", decoded.n_malformed),
        ("ignored", decoded.n_ignored),
    ] {
        if n > 0 {
            metrics::counter!("starling_ingest_bsync_operations_total", "stream" => name, "outcome" => outcome)
                .increment(n);
        }
    }
    if decoded.n_malformed > 0 {
        debug!(stream = name, n = decoded.n_malformed, cursor = %decoded.cursor, "skipping malformed bsync operations");
    }
}

/// Runs a store call on a blocking thread.
async fn blocking<T: Send + 'static>(
    call: impl FnOnce() -> Result<T, starling_store::StoreError> + Send + 'static,
) -> Result<T, IngestError> {
    tokio::task::spawn_blocking(call)
        .await
        .map_err(|err| IngestError::Bsync(format!("store task: {err}")))?
        .map_err(IngestError::from)
}

#[cfg(test)]
mod tests {
    use super::*;

    // URLs: a port is added when missing, a path prefix is kept, anything but http:// fails.
    #[test]
    fn bsync_urls_are_checked() {
        let ok = |url: &str| endpoint(url).unwrap();
        assert_eq!(
            ok("http://127.0.0.1:2585"),
            Endpoint {
                authority: "127.0.0.1:2585".into(),
                prefix: String::new()
            }
        );
        assert_eq!(
            ok("http://bsync.internal/api/"),
            Endpoint {
                authority: "bsync.internal:80".into(),
                prefix: "/api".into()
            }
        );
        for bad in [
            "https://x",
            "bsync:2585",
            "http://",
            "http://a:b:c",
            "http://u@h:1",
        ] {
            assert!(endpoint(bad).is_err(), "{bad}");
        }
    }
}
