//! Helpers the toolmesh tests share, so each test says only what it pins:
//! the `toolmesh` and `toolmesh-fixture` binaries, temporary directories that clean up, gRPC servers
//! on 127.0.0.1 port 0 (and a peer that answers late), bearer tokens, callers and policy files, test certificates, a local OpenID provider, and polling instead of sleeps.
#![forbid(unsafe_code)]

pub mod https;
pub mod oidc;
pub mod policy;
pub mod slow;

use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};
use tokio::net::TcpListener;
use tokio_stream::wrappers::TcpListenerStream;
use tonic::transport::server::Router;
pub use toolmesh_procs::TempDir;

/// The `toolmesh` binary beside the running test executable (or
/// `$TOOLMESH_BIN`), built once with cargo if it is not there yet.
pub fn toolmesh_bin() -> PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| workspace_bin("toolmesh", "toolmesh-cli", "TOOLMESH_BIN"))
        .clone()
}

/// The `toolmesh-fixture` binary (the test executors, such as
/// `acceptance`, served with the command line of `toolmesh example`), or
/// `$TOOLMESH_FIXTURE_BIN`, built once with cargo if it is not there yet.
pub fn fixture_bin() -> PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        workspace_bin(
            "toolmesh-fixture",
            "toolmesh-fixtures",
            "TOOLMESH_FIXTURE_BIN",
        )
    })
    .clone()
}

/// The executors `toolmesh-fixture` serves (those of crate
/// `toolmesh-fixtures`; the tests must not link it, or the crates under
/// test would be built twice).
pub const FIXTURES: [&str; 2] = ["acceptance", "mirror"];

/// The binary that serves `example NAME`: `toolmesh-fixture` for the
/// [`FIXTURES`], `toolmesh` for the user-facing examples.
pub fn example_bin(name: &str) -> PathBuf {
    if FIXTURES.contains(&name) {
        fixture_bin()
    } else {
        toolmesh_bin()
    }
}

/// Binary `name` of workspace package `package` beside the running test
/// executable (or the path in `$override_var`), built if missing. It is
/// not rebuilt when stale: `scripts/test` builds both binaries first.
fn workspace_bin(name: &str, package: &str, override_var: &str) -> PathBuf {
    if let Ok(path) = std::env::var(override_var) {
        return PathBuf::from(path);
    }
    let exe = std::env::current_exe().expect("test executable path");
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("target/<profile>");
    let bin = profile_dir.join(format!("{name}{}", std::env::consts::EXE_SUFFIX));
    if !bin.exists() {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let status = Command::new(cargo)
            .args(["build", "-p", package, "--bin", name])
            .status()
            .expect("run cargo build");
        assert!(status.success(), "building the {name} binary failed");
    }
    bin
}

/// A known (not anonymous) caller `name` of `tenant` with `roles` and no
/// token issuer: who a policy's `[[callers]]` entry makes of a bearer token.
pub fn principal(name: &str, tenant: &str, roles: &[&str]) -> toolmesh::Principal {
    toolmesh::Principal {
        name: name.to_owned(),
        tenant: tenant.to_owned(),
        roles: roles.iter().map(|r| (*r).to_owned()).collect(),
        anonymous: false,
        issued_by: None,
    }
}

/// A request with `authorization: Bearer TOKEN` when a token is given.
pub fn with_token<T>(message: T, token: Option<&str>) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    if let Some(token) = token {
        request.metadata_mut().insert(
            "authorization",
            format!("Bearer {token}")
                .parse()
                .expect("a token fits a header"),
        );
    }
    request
}

/// Serves `router` on 127.0.0.1 port 0 in the background; its address.
pub async fn serve_router(router: Router) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind loopback");
    let addr = listener.local_addr().expect("local address");
    tokio::spawn(router.serve_with_incoming(TcpListenerStream::new(listener)));
    addr
}

/// How many times longer than its stated limit a test waits for a
/// condition: `$TOOLMESH_TEST_PATIENCE`, 6 by default. Limits are written
/// for an idle machine; CI machines are shared and often loaded, and a
/// condition that holds returns at once whatever the limit.
pub fn patience() -> u32 {
    static FACTOR: OnceLock<u32> = OnceLock::new();
    *FACTOR.get_or_init(|| {
        std::env::var("TOOLMESH_TEST_PATIENCE")
            .ok()
            .and_then(|v| v.parse().ok())
            .filter(|f| *f > 0)
            .unwrap_or(6)
    })
}

/// `limit` stretched by [`patience`]: the longest a test waits for a
/// condition it states with that limit.
pub fn patient(limit: Duration) -> Duration {
    limit * patience()
}

/// Polls `check` every 10 ms until it returns `Some`; panics naming `what`
/// after `timeout` stretched by [`patience`].
pub async fn eventually<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let timeout = patient(timeout);
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// [`eventually`] for a plain condition: polls `holds` every 10 ms until it
/// is true; panics naming `what` after `timeout`.
pub async fn until(what: &str, timeout: Duration, mut holds: impl FnMut() -> bool) {
    eventually(what, timeout, || std::future::ready(holds().then_some(()))).await
}

/// One plain HTTP/1.1 request to `addr` (`host:port`): `method path` with
/// `headers` and `body`; the status code and body. Enough for the admin
/// listener and a WebDriver; no client library needed. Panics when `addr`
/// cannot be reached (see [`try_http`]).
pub fn http(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (u16, String) {
    try_http(addr, method, path, headers, body).unwrap_or_else(|e| panic!("{e}"))
}

/// [`http`], or why the exchange failed (connection refused, no HTTP
/// answer), for polling a server that may not listen yet. The `Host`
/// header is `addr` unless `headers` name one (a client that reached
/// `addr` under another name).
pub fn try_http(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> std::io::Result<(u16, String)> {
    try_http_with_head(addr, method, path, headers, body).map(|(status, _, body)| (status, body))
}

/// [`http`], with the response's head too (status line and headers, as
/// sent; header names in any case).
pub fn http_with_head(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (u16, String, String) {
    try_http_with_head(addr, method, path, headers, body).unwrap_or_else(|e| panic!("{e}"))
}

/// [`try_http`], with the response's head too.
pub fn try_http_with_head(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> std::io::Result<(u16, String, String)> {
    use std::io::{Error, Read, Write};
    let failed = |what: &str, e: Error| Error::new(e.kind(), format!("cannot {what} {addr}: {e}"));
    let mut stream = std::net::TcpStream::connect(addr).map_err(|e| failed("connect to", e))?;
    stream
        .set_read_timeout(Some(Duration::from_secs(60)))
        .map_err(|e| failed("set a read timeout on", e))?;
    let mut request = format!("{method} {path} HTTP/1.1\r\n");
    if !headers
        .iter()
        .any(|(name, _)| name.eq_ignore_ascii_case("host"))
    {
        request.push_str(&format!("host: {addr}\r\n"));
    }
    request.push_str(&format!(
        "connection: close\r\ncontent-length: {}\r\n",
        body.len()
    ));
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("\r\n");
    request.push_str(body);
    stream
        .write_all(request.as_bytes())
        .map_err(|e| failed("send to", e))?;
    // Read to the end of the message, not of the connection: some
    // servers (chromedriver) keep it open despite `connection: close`.
    let mut raw = Vec::new();
    let mut buf = [0u8; 16 * 1024];
    while !message_complete(&raw) {
        match stream.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => raw.extend_from_slice(&buf[..n]),
            // A signal for another thread of the test (a child exiting).
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(failed("read from", e)),
        }
    }
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or(raw.len());
    let head = String::from_utf8_lossy(&raw[..split]).to_string();
    let body = raw.get(split + 4..).unwrap_or_default();
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| {
            Error::new(
                std::io::ErrorKind::InvalidData,
                format!("no HTTP status from {addr}: {head}"),
            )
        })?;
    let chunked = head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked");
    let body = if chunked {
        dechunk(body)
    } else {
        body.to_vec()
    };
    Ok((status, head, String::from_utf8_lossy(&body).into_owned()))
}

/// Whether `raw` holds a whole HTTP/1.1 response (by content-length, or the
/// last chunk); a response with neither ends with the connection.
fn message_complete(raw: &[u8]) -> bool {
    let Some(split) = raw.windows(4).position(|w| w == b"\r\n\r\n") else {
        return false;
    };
    let head = String::from_utf8_lossy(&raw[..split]).to_ascii_lowercase();
    let body = raw.len() - split - 4;
    if let Some(length) = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse::<usize>().ok())
    {
        return body >= length;
    }
    head.contains("transfer-encoding: chunked") && raw.ends_with(b"0\r\n\r\n")
}

/// The payload of a chunked HTTP/1.1 body.
fn dechunk(mut body: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(line_end) = body.windows(2).position(|w| w == b"\r\n") {
        let size = std::str::from_utf8(&body[..line_end])
            .ok()
            .and_then(|s| usize::from_str_radix(s.trim(), 16).ok());
        let rest = &body[line_end + 2..];
        match size {
            Some(size) if size > 0 && rest.len() >= size => {
                out.extend_from_slice(&rest[..size]);
                body = rest[size..].strip_prefix(b"\r\n").unwrap_or(&rest[size..]);
            }
            _ => break,
        }
    }
    out
}

/// Writes a CA and a certificate it signs (for localhost and 127.0.0.1)
/// under `dir/name-*.pem`; returns (ca, cert, key).
pub fn pki(dir: &TempDir, name: &str) -> (PathBuf, PathBuf, PathBuf) {
    pki_with_uri(dir, name, None)
}

/// As [`pki`], the certificate also naming `uri` (a SPIFFE ID such as
/// `spiffe://example.org/ns/tools/sa/kb`) as a URI subject alternative name.
pub fn pki_with_uri(dir: &TempDir, name: &str, uri: Option<&str>) -> (PathBuf, PathBuf, PathBuf) {
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, SanType};
    let ca_key = KeyPair::generate().expect("a CA key");
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    // Distinct names: a certificate whose subject is its issuer's reads as
    // self-signed to OpenSSL (nginx) and BoringSSL (Python's grpc), which refuse it.
    ca_params
        .distinguished_name
        .push(DnType::CommonName, format!("{name} test CA"));
    let ca_cert = ca_params.self_signed(&ca_key).expect("a CA certificate");
    let issuer = Issuer::new(ca_params, ca_key);
    let node_key = KeyPair::generate().expect("a key");
    let mut node_params =
        CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()])
            .expect("certificate params");
    node_params
        .distinguished_name
        .push(DnType::CommonName, name.to_owned());
    if let Some(uri) = uri {
        let uri = uri.try_into().expect("a URI an IA5 string holds");
        node_params.subject_alt_names.push(SanType::URI(uri));
    }
    let node = node_params
        .signed_by(&node_key, &issuer)
        .expect("a certificate");
    let paths = (
        dir.join(format!("{name}-ca.pem")),
        dir.join(format!("{name}-cert.pem")),
        dir.join(format!("{name}-key.pem")),
    );
    std::fs::write(&paths.0, ca_cert.pem()).expect("write the CA");
    std::fs::write(&paths.1, node.pem()).expect("write the certificate");
    std::fs::write(&paths.2, node_key.serialize_pem()).expect("write the key");
    paths
}
