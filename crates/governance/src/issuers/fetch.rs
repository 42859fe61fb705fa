//! Fetching an issuer's JWKS: from its URL, through OIDC discovery, or from a local file; bounded in time and size.

use super::{KeySource, keys::MAX_JWKS_BYTES};
use std::{sync::OnceLock, time::Duration};

/// How long one HTTP request for discovery or keys may take.
pub(crate) const FETCH_TIMEOUT: Duration = Duration::from_secs(5);

/// The shared HTTP client: rustls on ring (the mesh's provider), short
/// timeouts, few redirects.
fn client() -> Result<&'static reqwest::Client, String> {
    static CLIENT: OnceLock<reqwest::Client> = OnceLock::new();
    if let Some(client) = CLIENT.get() {
        return Ok(client);
    }
    let _ = tokio_rustls::rustls::crypto::ring::default_provider().install_default();
    let client = reqwest::Client::builder()
        .timeout(FETCH_TIMEOUT)
        .connect_timeout(FETCH_TIMEOUT)
        .redirect(reqwest::redirect::Policy::limited(3))
        .build()
        .map_err(|e| format!("no HTTP client: {e}"))?;
    Ok(CLIENT.get_or_init(|| client))
}

/// The JWKS document of `issuer` from `source`.
pub(crate) async fn jwks(issuer: &str, source: &KeySource) -> Result<Vec<u8>, String> {
    match source {
        KeySource::File(path) => tokio::fs::read(path)
            .await
            .map_err(|e| format!("cannot read {}: {e}", path.display())),
        KeySource::Uri(uri) => get(uri).await,
        KeySource::Discovery => {
            let url = format!(
                "{}/.well-known/openid-configuration",
                issuer.trim_end_matches('/')
            );
            let document = get(&url).await?;
            let jwks_uri = jwks_uri_of(issuer, &document)?;
            if super::plain_http_elsewhere(&jwks_uri) {
                return Err(format!(
                    "the discovery document names {jwks_uri}, plain http:// to another host: keys are fetched only over https://"
                ));
            }
            get(&jwks_uri).await
        }
    }
}

/// The `jwks_uri` of a discovery document, which must name `issuer` as its own.
fn jwks_uri_of(issuer: &str, document: &[u8]) -> Result<String, String> {
    #[derive(serde::Deserialize)]
    struct Discovery {
        issuer: String,
        jwks_uri: String,
    }
    let found: Discovery = serde_json::from_slice(document)
        .map_err(|e| format!("the discovery document is not OpenID provider metadata ({e})"))?;
    if found.issuer != issuer {
        return Err(format!(
            "the discovery document names the issuer {:?}, not {issuer:?}",
            found.issuer
        ));
    }
    Ok(found.jwks_uri)
}

/// The body of a successful GET of `url`, at most [`MAX_JWKS_BYTES`].
async fn get(url: &str) -> Result<Vec<u8>, String> {
    let mut response = client()?
        .get(url)
        .header("accept", "application/json")
        .send()
        .await
        .map_err(|e| format!("GET {url}: {}", chain(&e)))?;
    if !response.status().is_success() {
        return Err(format!("GET {url}: HTTP {}", response.status()));
    }
    let mut body = Vec::new();
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|e| format!("GET {url}: {}", chain(&e)))?
    {
        if body.len() + chunk.len() > MAX_JWKS_BYTES {
            return Err(format!(
                "GET {url}: the answer is larger than {MAX_JWKS_BYTES} bytes"
            ));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// An error with its causes, which say what the connection refused.
fn chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}
