//! The HTTP client a Streamable HTTP upstream is reached with: kept-alive connections, TLS by rustls on ring (the system's roots, plus any `--url-ca`; a client certificate from `--url-cert`/`--url-key`), and redirects followed only where they keep the request and its credentials on the same origin.

use crate::error::BridgeError;
use reqwest::redirect::{Attempt, Policy};
use rmcp::transport::streamable_http_client::StreamableHttpError;
use std::path::{Path, PathBuf};

/// Redirects one request may follow.
const MAX_REDIRECTS: usize = 10;

/// The PEM files an `https://` upstream is reached with (`--url-ca`,
/// `--url-cert`, `--url-key`); none given: the system's roots alone, no
/// client certificate.
#[derive(Debug, Clone, Default)]
pub struct HttpsFiles {
    /// CA certificates to trust besides the system's roots.
    pub ca: Option<PathBuf>,
    /// The bridge's client certificate (and any intermediates), for a
    /// server that asks for one.
    pub cert: Option<PathBuf>,
    /// The private key of `cert`.
    pub key: Option<PathBuf>,
}

/// What [`HttpsFiles`] hold, read and checked once at start.
#[derive(Clone, Default)]
pub struct HttpsSettings {
    /// Trusted besides the system's roots.
    pub(crate) roots: Vec<reqwest::Certificate>,
    /// Presented when the server asks for a client certificate.
    pub(crate) identity: Option<reqwest::Identity>,
}

impl HttpsFiles {
    /// Reads the files, naming the flag and what to give when one is
    /// unusable; a certificate without its key (or a key alone) is refused.
    pub(crate) fn load(&self) -> Result<HttpsSettings, BridgeError> {
        let roots = match &self.ca {
            Some(path) => trusted_roots(path)?,
            None => Vec::new(),
        };
        let identity = match (&self.cert, &self.key) {
            (None, None) => None,
            (Some(cert), Some(key)) => Some(client_identity(cert, key)?),
            (Some(_), None) => return Err(BridgeError::HalfIdentity("--url-cert", "--url-key")),
            (None, Some(_)) => return Err(BridgeError::HalfIdentity("--url-key", "--url-cert")),
        };
        Ok(HttpsSettings { roots, identity })
    }
}

/// The client certificate chain in `cert` with the private key in `key`.
fn client_identity(cert: &Path, key: &Path) -> Result<reqwest::Identity, BridgeError> {
    let bad = |flag: &'static str, path: &Path, reason: String| BridgeError::BadIdentity {
        flag,
        path: path.display().to_string(),
        reason,
    };
    let chain = std::fs::read(cert).map_err(|e| bad("--url-cert", cert, e.to_string()))?;
    let secret = std::fs::read(key).map_err(|e| bad("--url-key", key, e.to_string()))?;
    let certificates = reqwest::Certificate::from_pem_bundle(&chain)
        .map_err(|e| bad("--url-cert", cert, toolmesh::error_chain(&e)))?;
    if certificates.is_empty() {
        return Err(bad(
            "--url-cert",
            cert,
            "it holds no PEM certificate".to_owned(),
        ));
    }
    // reqwest takes the key and the chain as one PEM buffer.
    let mut pem = secret;
    pem.push(b'\n');
    pem.extend_from_slice(&chain);
    reqwest::Identity::from_pem(&pem).map_err(|e| bad("--url-key", key, toolmesh::error_chain(&e)))
}

/// The certificates in the PEM file at `path`, to trust besides the
/// system's roots.
pub(crate) fn trusted_roots(path: &Path) -> Result<Vec<reqwest::Certificate>, BridgeError> {
    let bad = |reason: String| BridgeError::BadCa {
        path: path.display().to_string(),
        reason,
    };
    let pem = std::fs::read(path).map_err(|e| bad(e.to_string()))?;
    let roots = reqwest::Certificate::from_pem_bundle(&pem).map_err(|e| bad(e.to_string()))?;
    if roots.is_empty() {
        return Err(bad("it holds no PEM certificate".to_owned()));
    }
    Ok(roots)
}

/// A client for one upstream, trusting `tls.roots` besides the system's
/// and presenting `tls.identity` to a server that asks for a certificate.
pub(crate) fn client(tls: &HttpsSettings) -> Result<reqwest::Client, reqwest::Error> {
    // reqwest's rustls runs on the process's provider: ring, which the rest
    // of the mesh's TLS uses too. Installed once; a second call finds it.
    let _ = tokio_rustls::rustls::crypto::ring::default_provider().install_default();
    let mut builder = reqwest::Client::builder()
        .redirect(Policy::custom(same_origin))
        .tcp_nodelay(true)
        .tls_certs_merge(tls.roots.iter().cloned());
    if let Some(identity) = &tls.identity {
        builder = builder.identity(identity.clone());
    }
    builder.build()
}

/// Follows a 307 or 308 (which keep the method and the body) to the same
/// origin; anything else is answered as it is. A 301-303 would turn the
/// POST into a GET without its message, and another origin would be sent
/// the session and the bridge's own credentials.
fn same_origin(attempt: Attempt<'_>) -> reqwest::redirect::Action {
    let keeps_request = matches!(attempt.status().as_u16(), 307 | 308);
    let same = attempt
        .previous()
        .first()
        .is_some_and(|first| first.origin() == attempt.url().origin());
    if keeps_request && same && attempt.previous().len() <= MAX_REDIRECTS {
        attempt.follow()
    } else {
        attempt.stop()
    }
}

/// What the Streamable HTTP transport met, with its causes: rmcp wraps
/// reqwest's error without chaining to it, and its causes are where the
/// connection or TLS says what it refused.
pub(crate) fn transport_error(error: &(dyn std::error::Error + Send + Sync + 'static)) -> String {
    match error.downcast_ref::<StreamableHttpError<reqwest::Error>>() {
        Some(StreamableHttpError::Client(client)) => toolmesh::error_chain(client),
        _ => toolmesh::error_chain(error),
    }
}
