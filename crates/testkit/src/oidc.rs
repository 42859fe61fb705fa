//! A local OpenID provider for tests: signing keys made per test, tokens minted from them, and discovery plus JWKS served on 127.0.0.1 port 0, with key rotation, hit counts and failure modes.

use axum::{Router, extract::State, response::IntoResponse, routing::get};
use base64::Engine;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use ring::{
    rand::SystemRandom,
    signature::{self, KeyPair},
};
use serde_json::{Value, json};
use std::sync::{
    Arc, Mutex,
    atomic::{AtomicUsize, Ordering},
};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// A fixed 2048-bit RSA test key (PKCS#1 DER): ring cannot generate RSA keys.
const RSA_TEST_KEY: &[u8] = include_bytes!("../data/rsa-test-key.der");

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

/// A private signing key with its public JWK.
pub struct SigningKey {
    /// Its `kid`.
    pub kid: String,
    /// The algorithm it signs with.
    pub algorithm: Algorithm,
    encoding: EncodingKey,
    jwk: Value,
}

impl SigningKey {
    /// A fresh P-256 key (ES256).
    pub fn es256(kid: &str) -> SigningKey {
        let alg = &signature::ECDSA_P256_SHA256_FIXED_SIGNING;
        let pkcs8 = signature::EcdsaKeyPair::generate_pkcs8(alg, &SystemRandom::new()).unwrap();
        let pair =
            signature::EcdsaKeyPair::from_pkcs8(alg, pkcs8.as_ref(), &SystemRandom::new()).unwrap();
        // Uncompressed point: 0x04 || x || y.
        let point = pair.public_key().as_ref();
        SigningKey {
            kid: kid.into(),
            algorithm: Algorithm::ES256,
            encoding: EncodingKey::from_ec_der(pkcs8.as_ref()),
            jwk: json!({"kty": "EC", "crv": "P-256", "use": "sig", "alg": "ES256", "kid": kid,
                        "x": b64(&point[1..33]), "y": b64(&point[33..65])}),
        }
    }

    /// A fresh Ed25519 key (EdDSA).
    pub fn ed25519(kid: &str) -> SigningKey {
        let pkcs8 = signature::Ed25519KeyPair::generate_pkcs8(&SystemRandom::new()).unwrap();
        let pair = signature::Ed25519KeyPair::from_pkcs8(pkcs8.as_ref()).unwrap();
        SigningKey {
            kid: kid.into(),
            algorithm: Algorithm::EdDSA,
            encoding: EncodingKey::from_ed_der(pkcs8.as_ref()),
            jwk: json!({"kty": "OKP", "crv": "Ed25519", "use": "sig", "alg": "EdDSA", "kid": kid,
                        "x": b64(pair.public_key().as_ref())}),
        }
    }

    /// The fixed RSA test key (RS256) under `kid`.
    pub fn rs256(kid: &str) -> SigningKey {
        let pair = signature::RsaKeyPair::from_der(RSA_TEST_KEY).unwrap();
        let public = ring::rsa::PublicKeyComponents::<Vec<u8>>::from(pair.public());
        SigningKey {
            kid: kid.into(),
            algorithm: Algorithm::RS256,
            encoding: EncodingKey::from_rsa_der(RSA_TEST_KEY),
            jwk: json!({"kty": "RSA", "use": "sig", "alg": "RS256", "kid": kid,
                        "n": b64(&public.n), "e": b64(&public.e)}),
        }
    }

    /// Its public JWK.
    pub fn jwk(&self) -> Value {
        self.jwk.clone()
    }

    /// A token with `claims`, signed by this key, naming its `kid`.
    pub fn mint(&self, claims: &Value) -> String {
        self.mint_as(&self.kid, claims)
    }

    /// A token with `claims` signed by this key but naming `kid`.
    pub fn mint_as(&self, kid: &str, claims: &Value) -> String {
        let mut header = Header::new(self.algorithm);
        header.kid = Some(kid.into());
        jsonwebtoken::encode(&header, claims, &self.encoding).unwrap()
    }

    /// A token with `claims` whose header also holds the members of
    /// `extra` (e.g. `crit`, which the JWT library's header cannot carry).
    pub fn mint_with_header(&self, extra: &Value, claims: &Value) -> String {
        let mut header = serde_json::to_value(Header {
            kid: Some(self.kid.clone()),
            ..Header::new(self.algorithm)
        })
        .unwrap();
        if let (Some(header), Some(extra)) = (header.as_object_mut(), extra.as_object()) {
            header.extend(extra.clone());
        }
        let message = format!(
            "{}.{}",
            b64(header.to_string().as_bytes()),
            b64(claims.to_string().as_bytes())
        );
        let signature =
            jsonwebtoken::crypto::sign(message.as_bytes(), &self.encoding, self.algorithm).unwrap();
        format!("{message}.{signature}")
    }

    /// The public key's bytes as they appear in its JWK (`n` or `x`), the
    /// "secret" of an HS256 forgery.
    pub fn public_bytes(&self) -> Vec<u8> {
        let field = self.jwk.get("n").or_else(|| self.jwk.get("x")).unwrap();
        base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(field.as_str().unwrap())
            .unwrap()
    }
}

/// A JWKS document of `keys`.
pub fn jwks(keys: &[&SigningKey]) -> String {
    json!({"keys": keys.iter().map(|k| k.jwk()).collect::<Vec<_>>()}).to_string()
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
