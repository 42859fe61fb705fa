//! Fetching an issuer's JWKS: from its URL, through OIDC discovery, or from a local file; bounded in time and size.

use super::{FetchAuth, KeySource, keys::MAX_JWKS_BYTES};
use crate::IssuerError;
use std::{path::Path, sync::OnceLock, time::Duration};

/// How long one HTTP request for discovery or keys may take.
pub(crate) const FETCH_TIMEOUT: Duration = Duration::from_secs(5);

/// The HTTP client settings: rustls on ring (the mesh's provider), short
/// timeouts, few redirects.
fn builder() -> reqwest::ClientBuilder {
    let _ = tokio_rustls::rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder()
        .timeout(FETCH_TIMEOUT)
        .connect_timeout(FETCH_TIMEOUT)
        .redirect(reqwest::redirect::Policy::limited(3))
}

/// The client for `auth`: one shared client trusting the system's roots,
/// or (rarely: a fetch every few minutes) one that also trusts `ca_file`.
fn client(auth: &FetchAuth) -> Result<reqwest::Client, IssuerError> {
    static SHARED: OnceLock<reqwest::Client> = OnceLock::new();
    let Some(ca_file) = &auth.ca_file else {
        if let Some(client) = SHARED.get() {
            return Ok(client.clone());
        }
        let client = builder()
            .build()
            .map_err(|e| IssuerError::NoClient(e.to_string()))?;
        return Ok(SHARED.get_or_init(|| client).clone());
    };
    let pem = std::fs::read(ca_file).map_err(|e| IssuerError::UnreadableCaFile {
        path: ca_file.clone(),
        why: e.to_string(),
    })?;
    let certificates =
        reqwest::Certificate::from_pem_bundle(&pem).map_err(|e| IssuerError::NoCertificate {
            path: ca_file.clone(),
            why: e.to_string(),
        })?;
    certificates
        .into_iter()
        .fold(builder(), reqwest::ClientBuilder::add_root_certificate)
        .build()
        .map_err(|e| IssuerError::NoClientWithCa {
            path: ca_file.clone(),
            why: e.to_string(),
        })
}

/// The JWKS document in the local file `path` (`jwks_file`), read at once.
pub(crate) fn read_key_file(path: &Path) -> Result<Vec<u8>, IssuerError> {
    std::fs::read(path).map_err(|e| IssuerError::unreadable_key_file(path, &e))
}

/// The JWKS document of `issuer` from `source`, fetched as `auth` says.
pub(crate) async fn jwks(
    issuer: &str,
    source: &KeySource,
    auth: &FetchAuth,
) -> Result<Vec<u8>, IssuerError> {
    let fetch = Fetch {
        client: match source {
            KeySource::File(_) => None,
            _ => Some(client(auth)?),
        },
        bearer: match &auth.bearer_file {
            Some(path) => Some(
                tokio::fs::read_to_string(path)
                    .await
                    .map_err(|e| IssuerError::UnreadableBearerFile {
                        path: path.clone(),
                        why: e.to_string(),
                    })?
                    .trim()
                    .to_owned(),
            ),
            None => None,
        },
    };
    match source {
        KeySource::File(path) => tokio::fs::read(path)
            .await
            .map_err(|e| IssuerError::unreadable_key_file(path, &e)),
        KeySource::Uri(uri) => fetch.get(uri).await,
        KeySource::Discovery => {
            let url = format!(
                "{}/.well-known/openid-configuration",
                issuer.trim_end_matches('/')
            );
            let document = fetch.get(&url).await?;
            let jwks_uri = jwks_uri_of(issuer, &document)?;
            if super::plain_http_elsewhere(&jwks_uri) {
                return Err(IssuerError::PlainHttpKeys(jwks_uri));
            }
            fetch.get(&jwks_uri).await
        }
    }
}

/// The `jwks_uri` of a discovery document, which must name `issuer` as its own.
fn jwks_uri_of(issuer: &str, document: &[u8]) -> Result<String, IssuerError> {
    #[derive(serde::Deserialize)]
    struct Discovery {
        issuer: String,
        jwks_uri: String,
    }
    let found: Discovery =
        serde_json::from_slice(document).map_err(|e| IssuerError::NotDiscovery(e.to_string()))?;
    if found.issuer != issuer {
        return Err(IssuerError::OtherIssuer {
            found: found.issuer,
            expected: issuer.to_owned(),
        });
    }
    Ok(found.jwks_uri)
}

/// One fetch of keys: its client and the bearer token it presents.
struct Fetch {
    client: Option<reqwest::Client>,
    bearer: Option<String>,
}

impl Fetch {
    /// The body of a successful GET of `url`, at most [`MAX_JWKS_BYTES`].
    async fn get(&self, url: &str) -> Result<Vec<u8>, IssuerError> {
        let client = self.client.as_ref().ok_or(IssuerError::NotFetched)?;
        let failed = |why: String| IssuerError::Http {
            url: url.to_owned(),
            why,
        };
        let mut request = client.get(url).header("accept", "application/json");
        if let Some(token) = &self.bearer {
            request = request.bearer_auth(token);
        }
        let mut response = request
            .send()
            .await
            .map_err(|e| failed(toolmesh::error_chain(&e)))?;
        if !response.status().is_success() {
            return Err(failed(format!("HTTP {}", response.status())));
        }
        let mut body = Vec::new();
        while let Some(chunk) = response
            .chunk()
            .await
            .map_err(|e| failed(toolmesh::error_chain(&e)))?
        {
            if body.len() + chunk.len() > MAX_JWKS_BYTES {
                return Err(IssuerError::TooLarge {
                    url: url.to_owned(),
                    max: MAX_JWKS_BYTES,
                });
            }
            body.extend_from_slice(&chunk);
        }
        Ok(body)
    }
}
