//! The HTTP client a Streamable HTTP upstream is reached with: kept-alive connections, TLS by rustls on ring (the system's roots, plus any `--url-ca`), and redirects followed only where they keep the request and its credentials on the same origin.

use crate::error::BridgeError;
use reqwest::redirect::{Attempt, Policy};
use rmcp::transport::streamable_http_client::StreamableHttpError;
use std::path::Path;

/// Redirects one request may follow.
const MAX_REDIRECTS: usize = 10;

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

/// A client for one upstream, trusting `roots` besides the system's.
pub(crate) fn client(roots: &[reqwest::Certificate]) -> Result<reqwest::Client, reqwest::Error> {
    // reqwest's rustls runs on the process's provider: ring, which the rest
    // of the mesh's TLS uses too. Installed once; a second call finds it.
    let _ = tokio_rustls::rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder()
        .redirect(Policy::custom(same_origin))
        .tcp_nodelay(true)
        .tls_certs_merge(roots.iter().cloned())
        .build()
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
        Some(StreamableHttpError::Client(client)) => error_chain(client),
        _ => error_chain(error),
    }
}

/// An error with its causes.
pub(crate) fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let line = cause.to_string();
        if !text.contains(&line) {
            text.push_str(": ");
            text.push_str(&line);
        }
        source = cause.source();
    }
    text
}
