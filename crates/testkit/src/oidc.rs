//! A local OpenID provider for tests: signing keys made per test, tokens minted from them, and discovery plus JWKS served on 127.0.0.1 port 0, with key rotation, hit counts and failure modes.

use axum::{Router, extract::State, response::IntoResponse, routing::get};
use base64::Engine;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::{Value, json};
use std::sync::{
    Arc, Mutex,
    atomic::{AtomicUsize, Ordering},
};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
pub use toolmesh_identity::signing::{SigningKey, jwks};

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

/// Seconds since the Unix epoch.
pub fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// `alg: none` with `claims`: an unsigned token.
pub fn unsigned(claims: &Value) -> String {
    let header = b64(br#"{"alg":"none","typ":"JWT"}"#);
    format!("{header}.{}.", b64(claims.to_string().as_bytes()))
}

/// An HS256 token whose HMAC secret is `secret` (a public key's bytes:
/// the key-confusion attack).
pub fn hs256(secret: &[u8], kid: &str, claims: &Value) -> String {
    let mut header = Header::new(Algorithm::HS256);
    header.kid = Some(kid.into());
    jsonwebtoken::encode(&header, claims, &EncodingKey::from_secret(secret)).unwrap()
}

/// How the provider answers for its JWKS.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// The published keys.
    Serve,
    /// Never answers.
    Hang,
    /// 200 with a body that is no JWKS.
    Garbage,
}

struct Shared {
    issuer: String,
    /// A bearer token every request must present (an API server's rule).
    bearer: Option<String>,
    keys: Mutex<String>,
    mode: Mutex<Mode>,
    jwks_hits: AtomicUsize,
    discovery_hits: AtomicUsize,
}

/// The provider: `/.well-known/openid-configuration` and `/jwks` on 127.0.0.1.
pub struct Provider {
    /// Its issuer URL (`http://127.0.0.1:PORT`).
    pub issuer: String,
    shared: Arc<Shared>,
    server: tokio::task::JoinHandle<()>,
}

/// How a cluster's API server serves its service-account keys: HTTPS
/// under its own certificate, to callers presenting a bearer token.
pub struct ApiServer<'a> {
    /// Its certificate (PEM).
    pub cert: &'a std::path::Path,
    /// Its key (PEM).
    pub key: &'a std::path::Path,
    /// The token every request must carry as `Authorization: Bearer`.
    pub bearer: &'a str,
}

impl Provider {
    /// Starts a provider publishing `keys`.
    pub async fn start(keys: &[&SigningKey]) -> Provider {
        Provider::serve(keys, None).await
    }

    /// Starts a provider publishing `keys` as a cluster's API server does
    /// (`https://127.0.0.1:PORT`); a request without its bearer gets 401.
    pub async fn start_api_server(keys: &[&SigningKey], api: ApiServer<'_>) -> Provider {
        Provider::serve(keys, Some(api)).await
    }

    async fn serve(keys: &[&SigningKey], api: Option<ApiServer<'_>>) -> Provider {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let scheme = if api.is_some() { "https" } else { "http" };
        let issuer = format!("{scheme}://{}", listener.local_addr().unwrap());
        let acceptor = api.as_ref().map(|api| {
            toolmesh_telemetry::https::acceptor(&toolmesh_transport::TlsFiles {
                cert: Some(api.cert.to_owned()),
                key: Some(api.key.to_owned()),
                ..Default::default()
            })
            .expect("the API server's certificate")
            .expect("an acceptor")
        });
        let shared = Arc::new(Shared {
            bearer: api.map(|api| api.bearer.to_owned()),
            issuer: issuer.clone(),
            keys: Mutex::new(jwks(keys)),
            mode: Mutex::new(Mode::Serve),
            jwks_hits: AtomicUsize::new(0),
            discovery_hits: AtomicUsize::new(0),
        });
        let router = Router::new()
            .route("/.well-known/openid-configuration", get(discovery))
            .route("/jwks", get(keyset))
            .route("/openid/v1/jwks", get(keyset))
            .layer(axum::middleware::from_fn_with_state(
                shared.clone(),
                require_bearer,
            ))
            .with_state(shared.clone());
        let server = tokio::spawn(async move {
            toolmesh_telemetry::https::serve(listener, acceptor, router, std::future::pending())
                .await
                .unwrap();
        });
        Provider {
            issuer,
            shared,
            server,
        }
    }

    /// Publishes `keys` instead (a rotation).
    pub fn publish(&self, keys: &[&SigningKey]) {
        *self.shared.keys.lock().unwrap() = jwks(keys);
    }

    /// Answers JWKS requests as `mode` says from now on.
    pub fn set_mode(&self, mode: Mode) {
        *self.shared.mode.lock().unwrap() = mode;
    }

    /// JWKS requests received so far.
    pub fn jwks_hits(&self) -> usize {
        self.shared.jwks_hits.load(Ordering::SeqCst)
    }

    /// Discovery requests received so far.
    pub fn discovery_hits(&self) -> usize {
        self.shared.discovery_hits.load(Ordering::SeqCst)
    }

    /// Its JWKS URL.
    pub fn jwks_uri(&self) -> String {
        format!("{}/jwks", self.issuer)
    }

    /// Claims of a token from this provider for `audience` and `subject`,
    /// valid from a minute ago for `ttl`.
    pub fn claims(&self, audience: &str, subject: &str, ttl: Duration) -> Value {
        let now = now();
        json!({"iss": self.issuer, "aud": audience, "sub": subject,
               "iat": now, "nbf": now - 60, "exp": now + ttl.as_secs()})
    }
}

impl Drop for Provider {
    fn drop(&mut self) {
        self.server.abort();
    }
}

/// 401 for a request without the provider's bearer token, when it has one.
async fn require_bearer(
    State(shared): State<Arc<Shared>>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    if let Some(bearer) = &shared.bearer {
        let sent = request
            .headers()
            .get("authorization")
            .and_then(|v| v.to_str().ok());
        if sent != Some(&format!("Bearer {bearer}")) {
            return (axum::http::StatusCode::UNAUTHORIZED, "no bearer token").into_response();
        }
    }
    next.run(request).await
}

async fn discovery(State(shared): State<Arc<Shared>>) -> impl IntoResponse {
    shared.discovery_hits.fetch_add(1, Ordering::SeqCst);
    axum::Json(json!({
        "issuer": shared.issuer,
        "jwks_uri": format!("{}/jwks", shared.issuer),
        "id_token_signing_alg_values_supported": ["RS256", "ES256", "EdDSA"],
    }))
}

async fn keyset(State(shared): State<Arc<Shared>>) -> axum::response::Response {
    shared.jwks_hits.fetch_add(1, Ordering::SeqCst);
    let mode = *shared.mode.lock().unwrap();
    match mode {
        Mode::Serve => {
            let body = shared.keys.lock().unwrap().clone();
            ([("content-type", "application/json")], body).into_response()
        }
        Mode::Garbage => (
            [("content-type", "application/json")],
            "{\"keys\": 42, <html>",
        )
            .into_response(),
        Mode::Hang => {
            std::future::pending::<()>().await;
            unreachable!()
        }
    }
}
