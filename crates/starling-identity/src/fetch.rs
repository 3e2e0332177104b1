//! One HTTP/1.1 GET per document: DNS, TCP, optional TLS (rustls with ring and the webpki
//! roots), request, and a body read up to a size limit, all under one timeout.
//!
//! Each fetch opens its own connection and sends `Connection: close`. Fetches happen only on
//! cache misses (at most one per DID per TTL), so a connection pool would save a TLS handshake
//! on a path that is already rare, at the cost of idle sockets and pool bookkeeping.

use std::sync::Arc;
use std::time::Duration;

use http_body_util::{BodyExt, Empty};
use hyper::body::Bytes;
use hyper::{Request, StatusCode, header};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

use crate::error::error_chain;
use crate::locate::{Scheme, Target};
use crate::{ConfigError, IdentityError};

/// What a document URL answered.
#[derive(Debug)]
pub(crate) enum Fetched {
    /// HTTP 200 and the body, at most `document_bytes_max` bytes.
    Document(Vec<u8>),
    /// HTTP 404 (PLC: never registered) or 410 (PLC: tombstoned).
    NotFound,
}

/// Makes the GETs. Cheap to share: the TLS config is behind an `Arc`.
pub(crate) struct Fetcher {
    tls: tokio_rustls::TlsConnector,
    timeout: Duration,
    document_bytes_max: usize,
}

impl Fetcher {
    pub(crate) fn new(
        timeout: Duration,
        document_bytes_max: usize,
    ) -> Result<Fetcher, ConfigError> {
        let roots = rustls::RootCertStore {
            roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
        };
        // The provider is named here rather than taken from the process default, so the
        // resolver works whether or not the binary installed one.
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|err| ConfigError::Tls {
                message: err.to_string().into_boxed_str(),
            })?
            .with_root_certificates(roots)
            .with_no_client_auth();
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        let res = Fetcher {
            tls: tokio_rustls::TlsConnector::from(Arc::new(config)),
            timeout,
            document_bytes_max,
        };
        Ok(res)
    }

    /// GETs `target`, the document location of `did`.
    pub(crate) async fn fetch(&self, did: &str, target: &Target) -> Result<Fetched, IdentityError> {
        match tokio::time::timeout(self.timeout, self.fetch_untimed(did, target)).await {
            Ok(res) => res,
            Err(_elapsed) => Err(IdentityError::Timeout {
                did: did.into(),
                url: target.url(),
                timeout_ms: u64::try_from(self.timeout.as_millis()).unwrap_or(u64::MAX),
            }),
        }
    }

    async fn fetch_untimed(&self, did: &str, target: &Target) -> Result<Fetched, IdentityError> {
        let fetch_error = |err: &(dyn std::error::Error + 'static)| IdentityError::Fetch {
            did: did.into(),
            url: target.url(),
            message: error_chain(err),
        };
        let tcp = connect(did, target).await?;
        match target.scheme {
            Scheme::Http => exchange(did, target, self.document_bytes_max, TokioIo::new(tcp)).await,
            Scheme::Https => {
                let server_name =
                    rustls::pki_types::ServerName::try_from(target.connect_host().to_owned())
                        .map_err(|err| fetch_error(&err))?;
                let tls = self
                    .tls
                    .connect(server_name, tcp)
                    .await
                    .map_err(|err| fetch_error(&err))?;
                exchange(did, target, self.document_bytes_max, TokioIo::new(tls)).await
            }
        }
    }
}

/// Connects to the first address of `target` that its policy allows and that accepts.
async fn connect(did: &str, target: &Target) -> Result<TcpStream, IdentityError> {
    let fetch_error = |message: Box<str>| IdentityError::Fetch {
        did: did.into(),
        url: target.url(),
        message,
    };
    let addresses = tokio::net::lookup_host((target.connect_host(), target.port))
        .await
        .map_err(|err| {
            fetch_error(format!("resolving `{}`: {err}", target.connect_host()).into())
        })?;
    let mut refused = None;
    let mut last_error = None;
    // DNS answers are short lists; the timeout around the whole fetch bounds the attempts.
    for address in addresses {
        if !target.policy.allows(address.ip()) {
            refused.get_or_insert(address.ip());
            continue;
        }
        match TcpStream::connect(address).await {
            Ok(stream) => {
                // One small request and one response; Nagle would only add delay.
                stream
                    .set_nodelay(true)
                    .map_err(|err| fetch_error(err.to_string().into()))?;
                return Ok(stream);
            }
            Err(err) => last_error = Some(format!("connecting to {address}: {err}")),
        }
    }
    match (last_error, refused) {
        (Some(message), _) => Err(fetch_error(message.into())),
        (None, Some(address)) => Err(IdentityError::ForbiddenAddress {
            did: did.into(),
            host: target.host.as_str().into(),
            address,
        }),
        (None, None) => Err(fetch_error(
            format!("`{}` has no addresses", target.connect_host()).into(),
        )),
    }
}

/// Sends the GET over `io` and reads the answer.
async fn exchange<T>(
    did: &str,
    target: &Target,
    document_bytes_max: usize,
    io: T,
) -> Result<Fetched, IdentityError>
where
    T: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let fetch_error = |err: &(dyn std::error::Error + 'static)| IdentityError::Fetch {
        did: did.into(),
        url: target.url(),
        message: error_chain(err),
    };
    let (mut sender, connection) = hyper::client::conn::http1::handshake::<_, Empty<Bytes>>(io)
        .await
        .map_err(|err| fetch_error(&err))?;
    let request = Request::get(target.path.as_str())
        .header(header::HOST, target.authority())
        .header(header::ACCEPT, "application/did+ld+json, application/json")
        .header(header::USER_AGENT, "starling-identity")
        .header(header::CONNECTION, "close")
        .body(Empty::<Bytes>::new())
        .map_err(|err| fetch_error(&err))?;
    let response = async move {
        let response = sender
            .send_request(request)
            .await
            .map_err(|err| fetch_error(&err))?;
        read_response(did, target, document_bytes_max, response).await
    };
    // The connection future does the socket I/O; it must be polled while the response is read.
    // If it finishes first (the server closed after answering), the answer is already
    // buffered, and the response future completes on its own.
    tokio::pin!(connection);
    tokio::pin!(response);
    tokio::select! {
        res = &mut response => res,
        closed = &mut connection => {
            closed.map_err(|err| fetch_error(&err))?;
            response.await
        }
    }
}

async fn read_response(
    did: &str,
    target: &Target,
    document_bytes_max: usize,
    response: hyper::Response<hyper::body::Incoming>,
) -> Result<Fetched, IdentityError> {
    match response.status() {
        StatusCode::OK => {}
        StatusCode::NOT_FOUND | StatusCode::GONE => return Ok(Fetched::NotFound),
        status => {
            return Err(IdentityError::Status {
                did: did.into(),
                url: target.url(),
                status: status.as_u16(),
            });
        }
    }
    let too_large = || IdentityError::TooLarge {
        did: did.into(),
        max: document_bytes_max,
    };
    let content_length = response
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.parse::<u64>().ok());
    if content_length.is_some_and(|len| len > document_bytes_max as u64) {
        return Err(too_large());
    }
    let mut body = response.into_body();
    let mut res = Vec::new();
    // Each frame is appended only if it fits, so memory stays within the limit whatever the
    // server sends; the timeout bounds the number of frames.
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|err| IdentityError::Fetch {
            did: did.into(),
            url: target.url(),
            message: error_chain(&err),
        })?;
        if let Ok(data) = frame.into_data() {
            if res.len() + data.len() > document_bytes_max {
                return Err(too_large());
            }
            res.extend_from_slice(&data);
        }
    }
    Ok(Fetched::Document(res))
}
