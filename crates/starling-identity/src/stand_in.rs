//! A PLC directory (and did:web host) stand-in for tests and demos: a loopback HTTP/1.1 server
//! that serves DID documents from memory, counts the requests it receives, and can hold them
//! unanswered so tests can observe concurrency and timeouts.
//!
//! - `GET /{did}` answers the document stored under `did` (the DID may be percent-encoded, as
//!   `@atproto/identity` sends it), or 404 with plc.directory's message.
//! - `GET /.well-known/did.json` answers the document stored under `did:web:{Host}`, the `:`
//!   before a port written `%3A` (so with `did_web_insecure_loopback`,
//!   `did:web:127.0.0.1%3A{port}` resolves here).

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::Path;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response, StatusCode, header};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::LoadError;

/// The zstd frame magic number, little-endian.
const ZSTD_MAGIC: [u8; 4] = [0x28, 0xb5, 0x2f, 0xfd];

/// The running stand-in. Dropping it stops the server and closes its connections.
pub struct PlcStandIn {
    address: SocketAddr,
    shared: Arc<Shared>,
    server: tokio::task::JoinHandle<()>,
}

struct Shared {
    /// DID → the exact body to serve.
    documents: Mutex<HashMap<String, Vec<u8>>>,
    n_requests: AtomicU64,
    n_in_flight: AtomicUsize,
    n_in_flight_max: AtomicUsize,
    /// `true` while requests are held: handlers wait for `false` before answering.
    is_held: watch::Sender<bool>,
}

impl Shared {
    fn documents(&self) -> MutexGuard<'_, HashMap<String, Vec<u8>>> {
        self.documents
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

impl PlcStandIn {
    /// Binds `127.0.0.1:0` and serves `documents` (DID → document) until dropped. Must be
    /// called inside a tokio runtime.
    pub async fn start(
        documents: HashMap<String, serde_json::Value>,
    ) -> std::io::Result<PlcStandIn> {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await?;
        let address = listener.local_addr()?;
        let documents = documents
            .into_iter()
            .map(|(did, document)| (did, document.to_string().into_bytes()))
            .collect();
        let (is_held, _) = watch::channel(false);
        let shared = Arc::new(Shared {
            documents: Mutex::new(documents),
            n_requests: AtomicU64::new(0),
            n_in_flight: AtomicUsize::new(0),
            n_in_flight_max: AtomicUsize::new(0),
            is_held,
        });
        let server = tokio::spawn(serve(listener, Arc::clone(&shared)));
        Ok(PlcStandIn {
            address,
            shared,
            server,
        })
    }

    /// The base URL, `http://127.0.0.1:{port}`, for `ResolverConfig::plc_url`.
    pub fn url(&self) -> String {
        format!("http://{}", self.address)
    }

    /// The bound address.
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// The DID under which `/.well-known/did.json` of this server is served:
    /// `did:web:127.0.0.1%3A{port}`.
    pub fn did_web(&self) -> String {
        format!("did:web:{}%3A{}", self.address.ip(), self.address.port())
    }

    /// Serves `document` for `did` from now on, replacing any previous one.
    pub fn insert(&self, did: &str, document: serde_json::Value) {
        self.insert_raw(did, document.to_string().into_bytes());
    }

    /// Serves `body` verbatim for `did`: for malformed or oversized documents.
    pub fn insert_raw(&self, did: &str, body: Vec<u8>) {
        self.shared.documents().insert(did.to_owned(), body);
    }

    /// Answers 404 for `did` from now on.
    pub fn remove(&self, did: &str) {
        self.shared.documents().remove(did);
    }

    /// Requests received so far, counted on arrival (answered, held or abandoned).
    pub fn requests_served(&self) -> u64 {
        self.shared.n_requests.load(Ordering::SeqCst)
    }

    /// Requests received and not yet answered.
    pub fn requests_in_flight(&self) -> usize {
        self.shared.n_in_flight.load(Ordering::SeqCst)
    }

    /// The most requests that were ever in flight at once.
    pub fn requests_in_flight_max(&self) -> usize {
        self.shared.n_in_flight_max.load(Ordering::SeqCst)
    }

    /// Holds every request, current and future, unanswered until `release`.
    pub fn hold(&self) {
        self.shared.is_held.send_replace(true);
    }

    /// Answers the held requests and stops holding.
    pub fn release(&self) {
        self.shared.is_held.send_replace(false);
    }
}

impl Drop for PlcStandIn {
    fn drop(&mut self) {
        // The server task owns the connection tasks (a `JoinSet`), so they stop with it.
        self.server.abort();
    }
}

/// Reads a JSON object of DID → DID document, zstd-compressed or plain: the format of
/// `shared/data/jetstream/did_docs.json.zst`.
pub fn load_documents(path: &Path) -> Result<HashMap<String, serde_json::Value>, LoadError> {
    let error = |message: String| LoadError {
        path: path.to_path_buf(),
        message: message.into_boxed_str(),
    };
    let bytes = std::fs::read(path).map_err(|err| error(err.to_string()))?;
    let json = if bytes.starts_with(&ZSTD_MAGIC) {
        zstd::decode_all(bytes.as_slice()).map_err(|err| error(format!("zstd: {err}")))?
    } else {
        bytes
    };
    serde_json::from_slice(&json).map_err(|err| error(err.to_string()))
}

async fn serve(listener: TcpListener, shared: Arc<Shared>) {
    let mut connections = tokio::task::JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                // A failed accept (the peer reset first) affects only that connection.
                let Ok((stream, _peer)) = accepted else {
                    continue;
                };
                let shared = Arc::clone(&shared);
                connections.spawn(async move {
                    let service = hyper::service::service_fn(move |request| {
                        answer(Arc::clone(&shared), request)
                    });
                    // A connection error (the client gave up) ends only this connection.
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
}

async fn answer(
    shared: Arc<Shared>,
    request: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    shared.n_requests.fetch_add(1, Ordering::SeqCst);
    let _in_flight = InFlight::new(&shared);
    let mut is_held = shared.is_held.subscribe();
    // The sender lives in `shared`, which this handler holds, so the wait cannot fail.
    let _ = is_held.wait_for(|is_held| !*is_held).await;
    let did = document_key(&request);
    let body = shared.documents().get(&did).cloned();
    let res = match body {
        Some(body) => {
            let mut response = Response::new(Full::new(Bytes::from(body)));
            response.headers_mut().insert(
                header::CONTENT_TYPE,
                header::HeaderValue::from_static("application/did+ld+json; charset=utf-8"),
            );
            response
        }
        None => {
            let message = serde_json::json!({ "message": format!("DID not registered: {did}") });
            let mut response = Response::new(Full::new(Bytes::from(message.to_string())));
            *response.status_mut() = StatusCode::NOT_FOUND;
            response
        }
    };
    Ok(res)
}

/// The DID whose document `request` asks for.
fn document_key(request: &Request<Incoming>) -> String {
    let path = request.uri().path();
    if path == "/.well-known/did.json" {
        let host = request
            .headers()
            .get(header::HOST)
            .and_then(|host| host.to_str().ok())
            .unwrap_or_default();
        return format!("did:web:{}", host.replace(':', "%3A"));
    }
    path.trim_start_matches('/')
        .replace("%3A", ":")
        .replace("%3a", ":")
}

/// Counts a request being answered, and keeps the maximum.
struct InFlight<'a>(&'a Shared);

impl<'a> InFlight<'a> {
    fn new(shared: &'a Shared) -> InFlight<'a> {
        let n_in_flight = shared.n_in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        shared
            .n_in_flight_max
            .fetch_max(n_in_flight, Ordering::SeqCst);
        InFlight(shared)
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.n_in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}
