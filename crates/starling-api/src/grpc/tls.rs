//! gRPC over TLS: the certificate and key, checked when loaded.

use tonic::transport::{Identity, Server, ServerTlsConfig};

/// A certificate chain and its private key, PEM-encoded, for serving gRPC over TLS; checked
/// when made, so a bad file is refused before the server starts.
#[derive(Clone)]
pub struct GrpcTls {
    pub(super) config: ServerTlsConfig,
    cert_chain_bytes: usize,
}

impl GrpcTls {
    /// The server's certificate first, then any intermediates, and the private key of the
    /// first (PKCS#8, PKCS#1 or SEC1). Fails, naming the problem, when either does not parse
    /// or they do not match.
    pub fn new(cert_chain_pem: &[u8], key_pem: &[u8]) -> Result<GrpcTls, String> {
        let identity = Identity::from_pem(cert_chain_pem, key_pem);
        let config = ServerTlsConfig::new().identity(identity);
        Server::builder()
            .tls_config(config.clone())
            .map_err(tls_error)?;
        Ok(GrpcTls {
            config,
            cert_chain_bytes: cert_chain_pem.len(),
        })
    }
}

pub(super) fn tls_error(err: tonic::transport::Error) -> String {
    // tonic's top-level message is generic; the cause says what was wrong.
    let cause = std::error::Error::source(&err).map_or(String::new(), |c| format!(": {c}"));
    format!("gRPC TLS certificate or key: {err}{cause}")
}

// Never prints the key.
impl std::fmt::Debug for GrpcTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GrpcTls")
            .field("cert_chain_pem_bytes", &self.cert_chain_bytes)
            .finish_non_exhaustive()
    }
}
