//! The errors of resolution and of configuration. Every resolution error names the DID it was
//! about, so a log line or a gRPC status says which identity failed.

/// A DID that could not be resolved. "The DID has no document" is not an error: `resolve`
/// answers `Ok(None)` for it.
///
/// The error is `Clone` because one fetch answers every caller that asked for the same DID
/// while it was running; underlying I/O and TLS errors are therefore kept as their messages.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum IdentityError {
    /// The input is not a DID at all (checked before any request).
    #[error("`{did}` is not a DID (expected `did:plc:…` or `did:web:…`)")]
    BadDid {
        /// The rejected input.
        did: Box<str>,
    },
    /// A syntactically valid DID of a method Starling does not resolve (`did:key`, …).
    #[error("{did}: the DID method is not supported (only did:plc and did:web resolve)")]
    UnsupportedMethod {
        /// The DID.
        did: Box<str>,
    },
    /// A `did:plc` or `did:web` identifier that cannot name a document: a did:web with a path,
    /// a host that is not a DNS name, a bad port, a did:plc with characters PLC never issues.
    #[error("{did}: {reason}")]
    BadIdentifier {
        /// The DID.
        did: Box<str>,
        /// What is wrong with it, and the fix if there is one.
        reason: Box<str>,
    },
    /// A did:web host resolved only to addresses Starling refuses to contact (loopback,
    /// private, link-local, …), so that a JWT issuer cannot make Starling probe its own network.
    #[error("{did}: host `{host}` resolves only to non-public addresses (first: {address})")]
    ForbiddenAddress {
        /// The DID.
        did: Box<str>,
        /// The did:web host.
        host: Box<str>,
        /// The first refused address.
        address: std::net::IpAddr,
    },
    /// Every outbound fetch slot stayed busy for the whole timeout.
    #[error(
        "{did}: no fetch slot came free within {timeout_ms} ms ({slots} fetches already running; raise `identity.fetches_concurrent_max`)"
    )]
    Busy {
        /// The DID.
        did: Box<str>,
        /// How long the caller waited.
        timeout_ms: u64,
        /// The number of slots.
        slots: usize,
    },
    /// The document request did not finish in time (connect, TLS, response and body together).
    #[error("{did}: fetching {url} timed out after {timeout_ms} ms")]
    Timeout {
        /// The DID.
        did: Box<str>,
        /// The URL fetched.
        url: Box<str>,
        /// The timeout.
        timeout_ms: u64,
    },
    /// DNS, TCP, TLS or HTTP failed.
    #[error("{did}: fetching {url}: {message}")]
    Fetch {
        /// The DID.
        did: Box<str>,
        /// The URL fetched.
        url: Box<str>,
        /// The underlying error and its causes.
        message: Box<str>,
    },
    /// The server answered with a status other than 200, 404 or 410.
    #[error("{did}: {url} answered HTTP {status}")]
    Status {
        /// The DID.
        did: Box<str>,
        /// The URL fetched.
        url: Box<str>,
        /// The HTTP status code.
        status: u16,
    },
    /// The document is bigger than `document_bytes_max`.
    #[error(
        "{did}: the DID document is over the {max}-byte limit (raise `identity.document_bytes_max`)"
    )]
    TooLarge {
        /// The DID.
        did: Box<str>,
        /// The limit.
        max: usize,
    },
    /// The body is not JSON, or not a DID document (a required field is missing or has the wrong
    /// type). The checks are those of `@atproto/identity`'s `didDocument` schema.
    #[error("{did}: malformed DID document: {message}")]
    BadDocument {
        /// The DID.
        did: Box<str>,
        /// What the parser said.
        message: Box<str>,
    },
    /// The document's `id` is another DID.
    #[error("{did}: the DID document served for it has `id` `{id}`")]
    WrongId {
        /// The DID asked for.
        did: Box<str>,
        /// The `id` the document has.
        id: Box<str>,
    },
}

impl IdentityError {
    /// Whether asking again later may succeed: the upstream was slow, unreachable or failing.
    /// A gRPC handler maps these to `UNAVAILABLE`, and the others (the DID or its document is
    /// bad) to `NOT_FOUND` or `INTERNAL`.
    pub fn is_transient(&self) -> bool {
        match self {
            IdentityError::Busy { .. }
            | IdentityError::Timeout { .. }
            | IdentityError::Fetch { .. } => true,
            IdentityError::Status { status, .. } => *status >= 500 || *status == 429,
            IdentityError::BadDid { .. }
            | IdentityError::UnsupportedMethod { .. }
            | IdentityError::BadIdentifier { .. }
            | IdentityError::ForbiddenAddress { .. }
            | IdentityError::TooLarge { .. }
            | IdentityError::BadDocument { .. }
            | IdentityError::WrongId { .. } => false,
        }
    }
}

/// A `ResolverConfig` that cannot be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The PLC directory URL is not an absolute `http://` or `https://` URL.
    #[error("identity.plc_url `{url}`: {reason}")]
    BadPlcUrl {
        /// The URL as given.
        url: Box<str>,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A limit that must be positive is zero, or one that is too big for its use.
    #[error("identity.{key} = {value}: {reason}")]
    BadLimit {
        /// The config key.
        key: &'static str,
        /// The value given.
        value: u64,
        /// The accepted range.
        reason: &'static str,
    },
    /// The TLS client could not be built (no usable protocol versions in the crypto provider).
    #[error("building the TLS client: {message}")]
    Tls {
        /// What rustls said.
        message: Box<str>,
    },
}

/// A fixture of DID documents that could not be read (`stand_in::load_documents`).
#[derive(Debug, thiserror::Error)]
#[error("reading DID documents from {path}: {message}")]
pub struct LoadError {
    /// The file.
    pub path: std::path::PathBuf,
    /// What went wrong.
    pub message: Box<str>,
}

/// An error and its chain of causes on one line, `outer: inner: innermost`. hyper's and rustls'
/// top-level messages ("connection error") say little without their sources.
pub(crate) fn error_chain(err: &(dyn std::error::Error + 'static)) -> Box<str> {
    let mut res = err.to_string();
    let mut source = err.source();
    // The chain is short in practice; the bound keeps a cyclic `source` from looping forever.
    let mut n_sources = 0;
    while let Some(cause) = source {
        if n_sources == 8 {
            break;
        }
        let text = cause.to_string();
        if !res.ends_with(&text) {
            res.push_str(": ");
            res.push_str(&text);
        }
        source = cause.source();
        n_sources += 1;
    }
    res.into_boxed_str()
}
