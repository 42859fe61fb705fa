//! Callers by JWT beside a caller by static token: the same call through `toolmesh serve` with a `[[callers]]` token, one as long as the RS256 JWT, an RS256 and an ES256 JWT of a local issuer whose JWKS this process serves over loopback HTTP; and each identified in this process.

use crate::error::BenchError;
use crate::load::{self, Client, Throughput, Workload};
use crate::procs::TempDir;
use crate::stand::{Setup, Stand};
use crate::stats::Latency;
use crate::{Binaries, Plan, turns};
use serde::Serialize;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::time::Instant;
use toolmesh_governance::{Identity, PolicyHandle};
use toolmesh_identity::signing::{self, SigningKey};
use toolmesh_transport::Tls;

/// Calls kept in flight for the row's throughput.
pub(crate) const JWT_IN_FLIGHT: usize = 32;
/// The share of a static-token caller's calls/s a JWT caller may lose
/// (the target: no more than 5 % slower at [`JWT_IN_FLIGHT`] in flight).
pub(crate) const MAX_JWT_SLOWDOWN: f64 = 0.05;
/// The static token of the `[[callers]]` entry measured.
const STATIC_TOKEN: &str = "bench-static-caller";
/// The audience the issuer entry accepts and the tokens name.
const AUDIENCE: &str = "toolmesh-bench";
/// How long the minted tokens are valid: longer than any run.
const TOKEN_LIFETIME: Duration = Duration::from_secs(24 * 60 * 60);

/// One figure per credential of the same caller.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct ByCredential<T> {
    /// A `[[callers]]` static bearer token.
    pub static_token: T,
    /// A `[[callers]]` static token as long as the RS256 JWT: what the
    /// header's length costs on the wire, without verification.
    pub long_token: T,
    /// A JWT signed with RS256 (2048-bit RSA).
    pub rs256: T,
    /// A JWT signed with ES256 (P-256).
    pub es256: T,
}

impl<T: Default> ByCredential<T> {
    /// From values in the order static token, long token, RS256, ES256.
    fn from_vec(values: Vec<T>) -> ByCredential<T> {
        let mut values = values.into_iter();
        let mut next = || values.next().unwrap_or_default();
        ByCredential {
            static_token: next(),
            long_token: next(),
            rs256: next(),
            es256: next(),
        }
    }
}

/// The same call through `toolmesh serve` by one caller presenting a
/// static token, an RS256 JWT and an ES256 JWT, taking turns.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct JwtRow {
    /// Size of the JSON arguments.
    pub argument_bytes: usize,
    /// Latency at concurrency 1.
    pub latency: ByCredential<Latency>,
    /// Throughput at [`JWT_IN_FLIGHT`] calls in flight; CPU per call of
    /// `toolmesh serve`, then of the executor.
    pub throughput: ByCredential<Throughput>,
    /// Identifying the caller from its `authorization` header in this
    /// process, by the same policy, µs per call (median of batches; each
    /// JWT verified once before, so answered as every later call is).
    pub identify_us: ByCredential<f64>,
}

impl<T> ByCredential<T> {
    /// Each figure mapped by `f`.
    pub fn map<U>(&self, f: impl Fn(&T) -> U) -> ByCredential<U> {
        ByCredential {
            static_token: f(&self.static_token),
            long_token: f(&self.long_token),
            rs256: f(&self.rs256),
            es256: f(&self.es256),
        }
    }
}

/// `toolmesh serve`'s policy: the bench's dispatcher token, anonymous
/// callers that may register the example, the static-token callers
/// (`long_token` the second), the issuer at `issuer` (its JWKS at
/// `/jwks`) whose callers get the same role, and one grant for everyone.
fn policy(issuer: &str, long_token: &str) -> String {
    format!(
        r#"
[auth]
allow_anonymous = true
anonymous = {{ principal = "anonymous", tenant = "bench", roles = ["agent", "executor"] }}

# mesh::DISPATCHER_TOKEN, with which the bench reads the execute token
[[callers]]
token = "{dispatcher}"
principal = "bench-dispatcher"
roles = ["dispatcher"]

[[callers]]
token = "{STATIC_TOKEN}"
principal = "bench-agent"
tenant = "bench"
roles = ["agent"]

[[callers]]
token = "{long_token}"
principal = "bench-agent"
tenant = "bench"
roles = ["agent"]

[[issuers]]
issuer = "{issuer}"
audiences = ["{AUDIENCE}"]
jwks_uri = "{issuer}/jwks"
algorithms = ["RS256", "ES256"]
tenant = "bench"
roles = ["agent"]

[[grants]]
name = "everything"
tools = ["*"]
"#,
        dispatcher = crate::mesh::DISPATCHER_TOKEN,
    )
}

/// A JWKS served on 127.0.0.1 over plain HTTP/1.1 (the issuer's keys may
/// come over http:// from this machine): every request, whatever its path,
/// gets the document and the connection closes.
struct JwksServer {
    /// `http://127.0.0.1:PORT`, the issuer its tokens name.
    issuer: String,
    task: tokio::task::JoinHandle<()>,
}

impl JwksServer {
    /// Serves `jwks` from now on.
    async fn start(jwks: &str) -> Result<JwksServer, BenchError> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .map_err(|e| BenchError::io("listen for the JWKS server", e))?;
        let addr = listener
            .local_addr()
            .map_err(|e| BenchError::io("read the JWKS server's address", e))?;
        let answer = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{jwks}",
            jwks.len()
        );
        let answer: std::sync::Arc<[u8]> = answer.into_bytes().into();
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                };
                tokio::spawn(answer_once(stream, answer.clone()));
            }
        });
        Ok(JwksServer {
            issuer: format!("http://{addr}"),
            task,
        })
    }
}

impl Drop for JwksServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Reads a request's head (at most 16 KiB) and writes `answer`.
async fn answer_once(mut stream: tokio::net::TcpStream, answer: std::sync::Arc<[u8]>) {
    let mut head = Vec::new();
    let mut buffer = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 16 * 1024 {
        match stream.read(&mut buffer).await {
            Ok(0) | Err(_) => return,
            Ok(n) => head.extend_from_slice(&buffer[..n]),
        }
    }
    let _ = stream.write_all(&answer).await;
    let _ = stream.shutdown().await;
}

/// A first call by `client` that works: the issuer's keys are fetched
/// when `toolmesh serve` starts, and a JWT is refused as unavailable until
/// they are.
async fn first_call(client: &Client, work: &Workload, what: &str) -> Result<(), BenchError> {
    let deadline = Instant::now() + Duration::from_secs(15);
    while client.clone().call(work).await.is_err() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    load::check_works(client, work, what).await
}

/// The JWT row for `work`, on a stand of its own (no nginx, no TLS).
pub(crate) async fn measure(
    plan: &Plan,
    bins: &Binaries,
    logs: &Path,
    work: &Workload,
) -> Result<JwtRow, BenchError> {
    let rs256 = SigningKey::rs256("bench-rs256");
    let es256 = SigningKey::es256("bench-es256");
    let jwks = JwksServer::start(&signing::jwks(&[&rs256, &es256])).await?;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs();
    let claims = serde_json::json!({
        "iss": jwks.issuer, "aud": AUDIENCE, "sub": "bench-agent",
        "iat": now, "exp": now + TOKEN_LIFETIME.as_secs(),
    });
    let rs256 = rs256.mint(&claims);
    let tokens = ByCredential {
        static_token: STATIC_TOKEN.to_owned(),
        long_token: "t".repeat(rs256.len()),
        rs256,
        es256: es256.mint(&claims),
    };
    let policy_text = policy(&jwks.issuer, &tokens.long_token);
    let identify_us = identify_us(&policy_text, &tokens).await?;
    let dir = TempDir::new("bench-jwt").map_err(|e| BenchError::io("create a temp dir", e))?;
    let policy_file = dir.join("policy.toml");
    std::fs::write(&policy_file, policy_text)
        .map_err(|e| BenchError::io(format!("write {}", policy_file.display()), e))?;
    let setup = Setup {
        policy: Some(&policy_file),
        ..Setup::default()
    };
    let mut stand = Stand::start(bins, logs, setup).await?;
    stand.check_works(work).await?;
    let serve = &stand.serve_addr;
    let client = |token: &str| Client::dispatcher_as(serve, &Tls::none(), token);
    let clients = ByCredential {
        static_token: client(&tokens.static_token)?,
        long_token: client(&tokens.long_token)?,
        rs256: client(&tokens.rs256)?,
        es256: client(&tokens.es256)?,
    };
    first_call(&clients.static_token, work, "a static-token caller").await?;
    first_call(&clients.long_token, work, "a long static-token caller").await?;
    first_call(&clients.rs256, work, "an RS256 JWT caller").await?;
    first_call(&clients.es256, work, "an ES256 JWT caller").await?;
    let targets = [
        (&clients.static_token, work),
        (&clients.long_token, work),
        (&clients.rs256, work),
        (&clients.es256, work),
    ];
    let meters = vec![stand.toolmesh_meter(); targets.len()];
    let (latency, mut throughput) = turns::measure(plan, &targets, &meters, &[JWT_IN_FLIGHT]).await;
    stand.stop().await;
    Ok(JwtRow {
        argument_bytes: work.arguments.len(),
        latency: ByCredential::from_vec(latency),
        throughput: ByCredential::from_vec(throughput.pop().unwrap_or_default()),
        identify_us,
    })
}

/// Identifying each caller of `tokens` in this process by `policy_text`
/// (the policy `toolmesh serve` runs), µs per call: its issuer's keys are
/// fetched from the bench's JWKS server and each JWT verified once first.
async fn identify_us(
    policy_text: &str,
    tokens: &ByCredential<String>,
) -> Result<ByCredential<f64>, BenchError> {
    let policy = toolmesh_policy::Policy::from_toml(policy_text)
        .map_err(|e| BenchError::failed("read the JWT row's policy", e.to_string()))?;
    let identity = Identity::new(Arc::new(PolicyHandle::new(policy)));
    let headers = tokens.map(|token| format!("Bearer {token}"));
    let deadline = Instant::now() + Duration::from_secs(15);
    for header in [&headers.rs256, &headers.es256] {
        while let Err(refused) = identity.authenticate(Some(header), None) {
            if Instant::now() >= deadline {
                return Err(BenchError::failed(
                    "identify a JWT caller in process",
                    refused.to_string(),
                ));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    let identify = |header: &str| identity.authenticate(Some(header), None).is_ok();
    Ok(headers.map(|header| crate::stats::per_call_us(header, identify)))
}
