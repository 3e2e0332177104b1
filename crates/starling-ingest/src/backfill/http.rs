//! One HTTP/1.1 GET per call (`Connection: close`), over TCP or TLS (rustls, webpki roots),
//! with a timeout on the whole exchange and a cap on the body: enough for `listRepos` and
//! `getRepo`, which answer one large body per request.

use std::sync::Arc;
use std::time::Duration;

use http_body_util::{BodyExt, Empty, Limited};
use hyper::body::Bytes;
use hyper::{Request, header};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

/// What a GET answered.
#[derive(Debug)]
pub(crate) struct Answer {
    /// The HTTP status.
    pub status: u16,
    /// `Retry-After` in seconds, when given as a number.
    pub retry_after: Option<Duration>,
    /// The body, at most the cap.
    pub body: Bytes,
}

/// Why a GET failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum GetError {
    /// The URL is not `http://` or `https://` with a host.
    BadUrl(String),
    /// No answer within the timeout.
    Timeout,
    /// The body is over the cap.
    TooLarge,
    /// Connecting, TLS or the exchange failed.
    Failed(String),
}

impl std::fmt::Display for GetError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            GetError::BadUrl(url) => write!(f, "`{url}` is not an http:// or https:// URL"),
            GetError::Timeout => f.write_str("timed out"),
            GetError::TooLarge => f.write_str("the body is over the size cap"),
            GetError::Failed(message) => f.write_str(message),
        }
    }
}

/// Makes GETs; cheap to clone.
#[derive(Clone)]
pub(crate) struct HttpClient {
    tls: tokio_rustls::TlsConnector,
}

struct Url<'a> {
    https: bool,
    host: &'a str,
    port: u16,
    authority: &'a str,
    path: &'a str,
}

fn parse_url(url: &str) -> Result<Url<'_>, GetError> {
    let bad = || GetError::BadUrl(url.to_owned());
    let (https, rest) = match (url.strip_prefix("https://"), url.strip_prefix("http://")) {
        (Some(rest), _) => (true, rest),
        (None, Some(rest)) => (false, rest),
        _ => return Err(bad()),
    };
    let (authority, path) = rest.find('/').map_or((rest, "/"), |idx| rest.split_at(idx));
    let (host, port) = match authority.rsplit_once(':') {
        Some((host, port)) if !host.ends_with(']') || host.starts_with('[') => {
            (host, port.parse().map_err(|_| bad())?)
        }
        _ => (authority, if https { 443 } else { 80 }),
    };
    if host.is_empty() {
        return Err(bad());
    }
    Ok(Url {
        https,
        host: host.trim_start_matches('[').trim_end_matches(']'),
        port,
        authority,
        path,
    })
}

impl HttpClient {
    pub(crate) fn new() -> Result<HttpClient, GetError> {
        let roots = rustls::RootCertStore {
            roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
        };
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|err| GetError::Failed(err.to_string()))?
            .with_root_certificates(roots)
            .with_no_client_auth();
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(HttpClient {
            tls: tokio_rustls::TlsConnector::from(Arc::new(config)),
        })
    }

    /// GETs `url`, reading at most `body_bytes_max` bytes, all within `timeout`.
    pub(crate) async fn get(
        &self,
        url: &str,
        timeout: Duration,
        body_bytes_max: usize,
    ) -> Result<Answer, GetError> {
        let parsed = parse_url(url)?;
        tokio::time::timeout(timeout, self.get_untimed(&parsed, body_bytes_max))
            .await
            .map_err(|_| GetError::Timeout)?
    }

    async fn get_untimed(&self, url: &Url<'_>, body_bytes_max: usize) -> Result<Answer, GetError> {
        let failed =
            |err: &dyn std::fmt::Display| GetError::Failed(format!("{}: {err}", url.authority));
        let tcp = TcpStream::connect((url.host, url.port))
            .await
            .map_err(|err| failed(&err))?;
        if url.https {
            let name = rustls::pki_types::ServerName::try_from(url.host.to_owned())
                .map_err(|err| failed(&err))?;
            let tls = self
                .tls
                .connect(name, tcp)
                .await
                .map_err(|err| failed(&err))?;
            exchange(url, body_bytes_max, TokioIo::new(tls)).await
        } else {
            exchange(url, body_bytes_max, TokioIo::new(tcp)).await
        }
    }
}

async fn exchange<T>(url: &Url<'_>, body_bytes_max: usize, io: T) -> Result<Answer, GetError>
where
    T: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let failed =
        |err: &dyn std::fmt::Display| GetError::Failed(format!("{}: {err}", url.authority));
    let (mut sender, connection) = hyper::client::conn::http1::handshake::<_, Empty<Bytes>>(io)
        .await
        .map_err(|err| failed(&err))?;
    let connection = tokio::spawn(connection);
    let request = Request::get(url.path)
        .header(header::HOST, url.authority)
        .header(header::USER_AGENT, "starling-backfill")
        .header(header::CONNECTION, "close")
        .body(Empty::<Bytes>::new())
        .map_err(|err| failed(&err))?;
    let response = sender
        .send_request(request)
        .await
        .map_err(|err| failed(&err))?;
    let status = response.status().as_u16();
    let retry_after = response
        .headers()
        .get(header::RETRY_AFTER)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.trim().parse::<u64>().ok())
        .map(Duration::from_secs);
    let body = Limited::new(response.into_body(), body_bytes_max)
        .collect()
        .await
        .map_err(|err| {
            if err
                .downcast_ref::<http_body_util::LengthLimitError>()
                .is_some()
            {
                GetError::TooLarge
            } else {
                failed(&err)
            }
        })?
        .to_bytes();
    connection.abort();
    Ok(Answer {
        status,
        retry_after,
        body,
    })
}
