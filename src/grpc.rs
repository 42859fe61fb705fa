//! What every gRPC server and client of the mesh shares: addresses, pooled
//! channels with connect timeouts, TLS, message limits, reflection, the
//! health service names of tools, and the shutdown signal.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::{net::SocketAddr, time::Duration};
use tonic::transport::{
    Certificate, Channel, ClientTlsConfig, Endpoint, Identity, Server, ServerTlsConfig,
};

/// Largest message on a call path (Invoke, Execute, Register).
pub const MAX_CALL_MESSAGE_BYTES: usize = 8 * 1024 * 1024;
/// Largest snapshot message (GetSnapshot, WatchSnapshots).
pub const MAX_SNAPSHOT_MESSAGE_BYTES: usize = 256 * 1024 * 1024;
/// How long a client waits for a TCP connection to an endpoint.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// The health service name of the whole executor service.
pub const EXECUTOR_HEALTH_SERVICE: &str = "toolmesh.v1.Executor";

/// The `grpc.health.v1` service name that tracks whether a tool is exposed.
pub fn tool_health_service(tool: &str) -> String {
    format!("toolmesh.tool.{tool}")
}

/// The deadline a caller sent in its `grpc-timeout` header, if any.
///
/// The header is an ASCII integer of at most 8 digits followed by a unit:
/// `H`ours, `M`inutes, `S`econds, `m`illiseconds, `u`/microseconds or
/// `n`anoseconds. Anything else reads as "no deadline".
pub fn request_timeout(metadata: &tonic::metadata::MetadataMap) -> Option<Duration> {
    parse_grpc_timeout(metadata.get("grpc-timeout")?.to_str().ok()?)
}

/// Parses one `grpc-timeout` value (see [`request_timeout`]).
pub fn parse_grpc_timeout(value: &str) -> Option<Duration> {
    if !value.is_ascii() || value.len() < 2 || value.len() > 9 {
        return None;
    }
    let (digits, unit) = value.split_at(value.len() - 1);
    if !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(n.checked_mul(3600)?),
        "M" => Duration::from_secs(n.checked_mul(60)?),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        _ => return None,
    })
}

/// The most a caller's deadline is answered early.
const ANSWER_EARLY_MAX: Duration = Duration::from_millis(20);

/// Which limit bounds a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bound {
    /// The caller's deadline is the tighter one.
    Caller,
    /// The tool's own timeout is the tighter one.
    ToolTimeout,
}

/// How long a call may run: the smaller of the caller's `grpc-timeout` and
/// the tool's timeout. The caller's deadline is answered a little early (a
/// tenth of it, at most 20 ms) so the DEADLINE_EXCEEDED result travels back
/// before the caller's own timer fires — tonic enforces `grpc-timeout` on
/// the client and on the server, and either would otherwise turn the answer
/// into a bare "Timeout expired" status. The dispatcher and the executor
/// SDK both budget with this.
pub fn call_budget(caller: Option<Duration>, tool_timeout: Duration) -> (Duration, Bound) {
    match caller {
        Some(caller) => {
            let caller = caller.saturating_sub((caller / 10).min(ANSWER_EARLY_MAX));
            if caller < tool_timeout {
                (caller, Bound::Caller)
            } else {
                (tool_timeout, Bound::ToolTimeout)
            }
        }
        None => (tool_timeout, Bound::ToolTimeout),
    }
}

/// The bearer token of a request (`authorization: Bearer TOKEN`, the
/// prefix in any case, or a bare token), if any.
pub fn bearer(metadata: &tonic::metadata::MetadataMap) -> Option<&str> {
    let value = metadata.get("authorization")?.to_str().ok()?.trim();
    let token = match value.get(..7) {
        Some(prefix) if prefix.eq_ignore_ascii_case("bearer ") => value[7..].trim(),
        // "Bearer" with nothing after it (the header's spaces trimmed).
        _ if value.eq_ignore_ascii_case("bearer") => "",
        _ => value,
    };
    (!token.is_empty()).then_some(token)
}

/// Sends `token` as `authorization: Bearer TOKEN`; false (and nothing
/// set) when the token has characters a header cannot carry.
pub fn set_bearer(metadata: &mut tonic::metadata::MetadataMap, token: &str) -> bool {
    match format!("Bearer {token}").parse() {
        Ok(value) => {
            metadata.insert("authorization", value);
            true
        }
        Err(_) => false,
    }
}

/// A bad `host:port`.
#[derive(Debug, thiserror::Error)]
#[error("address {0:?} is not host:port (for example 127.0.0.1:7070)")]
pub struct BadAddress(pub String);

/// A lazily connecting channel to `host:port` (or a full URI): TCP_NODELAY,
/// a connect timeout and HTTP/2 keepalives so a dead peer is noticed; TLS
/// when this process was configured with a CA ([`configure_tls`]).
pub fn channel(address: &str) -> Result<Channel, BadAddress> {
    let tls = TLS.get().and_then(|t| t.client.clone());
    let scheme = if tls.is_some() { "https" } else { "http" };
    let uri = if address.contains("://") {
        address.to_owned()
    } else {
        format!("{scheme}://{address}")
    };
    let mut endpoint = Endpoint::from_shared(uri).map_err(|_| BadAddress(address.to_owned()))?;
    if let Some(tls) = tls {
        endpoint = endpoint
            .tls_config(tls)
            .map_err(|_| BadAddress(address.to_owned()))?;
    }
    Ok(endpoint
        .connect_timeout(CONNECT_TIMEOUT)
        .tcp_nodelay(true)
        .http2_keep_alive_interval(Duration::from_secs(10))
        .keep_alive_timeout(Duration::from_secs(5))
        .keep_alive_while_idle(true)
        .connect_lazy())
}

/// PEM files that configure TLS for this process: every server it runs
/// and every channel it opens.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TlsFiles {
    /// CA that signs the servers' certificates; clients verify against it.
    /// Setting it makes every client connection TLS.
    pub ca: Option<PathBuf>,
    /// This process' certificate chain: servers present it, and clients
    /// present it too when a server asks (mTLS).
    pub cert: Option<PathBuf>,
    /// The key of `cert`.
    pub key: Option<PathBuf>,
    /// Servers require client certificates signed by this CA (mTLS).
    pub client_ca: Option<PathBuf>,
}

impl TlsFiles {
    /// Whether any TLS setting is given.
    pub fn is_set(&self) -> bool {
        *self != TlsFiles::default()
    }
}

/// TLS settings that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file could not be read.
    #[error("TLS file {path}: {error}")]
    Read {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        error: std::io::Error,
    },
    /// A certificate without its key, or the other way round.
    #[error("TLS needs both a certificate and its key: give --tls-cert and --tls-key together")]
    Incomplete,
    /// Already configured differently.
    #[error("TLS was already configured for this process")]
    AlreadySet,
}

struct TlsConfig {
    server: Option<ServerTlsConfig>,
    client: Option<ClientTlsConfig>,
}

static TLS: OnceLock<TlsConfig> = OnceLock::new();

fn read(path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|error| TlsError::Read {
        path: path.to_owned(),
        error,
    })
}

/// Configures TLS for the whole process, once, before any server or
/// channel is made.
pub fn configure_tls(files: &TlsFiles) -> Result<(), TlsError> {
    let identity = match (&files.cert, &files.key) {
        (Some(cert), Some(key)) => Some(Identity::from_pem(read(cert)?, read(key)?)),
        (None, None) => None,
        _ => return Err(TlsError::Incomplete),
    };
    let server = match &identity {
        Some(identity) => {
            let mut config = ServerTlsConfig::new().identity(identity.clone());
            if let Some(ca) = &files.client_ca {
                config = config.client_ca_root(Certificate::from_pem(read(ca)?));
            }
            Some(config)
        }
        None => None,
    };
    let client = match &files.ca {
        Some(ca) => {
            let mut config =
                ClientTlsConfig::new().ca_certificate(Certificate::from_pem(read(ca)?));
            if let Some(identity) = identity {
                config = config.identity(identity);
            }
            Some(config)
        }
        None => None,
    };
    TLS.set(TlsConfig { server, client })
        .map_err(|_| TlsError::AlreadySet)
}

/// The connections a server accepts on `listener`, with TCP_NODELAY (tonic
/// ignores `Server::tcp_nodelay` for `serve_with_incoming*`; without it a
/// small answer waits ~40 ms for Nagle's algorithm and a delayed ACK).
pub fn incoming(listener: tokio::net::TcpListener) -> tonic::transport::server::TcpIncoming {
    tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true))
}

/// A server builder with this process' TLS (if configured) and the mesh's
/// keepalive settings; serve it with [`incoming`].
pub fn server_builder() -> Result<Server, tonic::transport::Error> {
    let builder = Server::builder()
        .http2_keepalive_interval(Some(Duration::from_secs(10)))
        .http2_keepalive_timeout(Some(Duration::from_secs(5)));
    match TLS.get().and_then(|t| t.server.clone()) {
        Some(tls) => builder.tls_config(tls),
        None => Ok(builder),
    }
}

/// The verified client certificate of a request, as a test: is it valid
/// for this DNS name? `None` without mTLS.
pub fn peer_certificate<T>(request: &tonic::Request<T>) -> Option<PeerCertificate> {
    let certs = request.peer_certs()?;
    let leaf = certs.first()?.clone();
    Some(PeerCertificate(leaf))
}

/// A client certificate the TLS handshake verified against the client CA.
#[derive(Debug, Clone)]
pub struct PeerCertificate(rustls_pki_types::CertificateDer<'static>);

impl PeerCertificate {
    /// Whether the certificate is issued for `dns_name`.
    pub fn is_valid_for(&self, dns_name: &str) -> bool {
        let Ok(cert) = webpki::EndEntityCert::try_from(&self.0) else {
            return false;
        };
        rustls_pki_types::ServerName::try_from(dns_name)
            .is_ok_and(|name| cert.verify_is_valid_for_subject_name(&name).is_ok())
    }
}

/// Parses a listen address such as `127.0.0.1:0`.
pub fn listen_address(text: &str) -> Result<SocketAddr, BadAddress> {
    text.parse().map_err(|_| BadAddress(text.to_owned()))
}

/// gRPC reflection over every toolmesh.v1 service and grpc.health.v1, so
/// grpcurl works without the proto files.
pub fn reflection_service() -> tonic_reflection::server::v1::ServerReflectionServer<
    impl tonic_reflection::server::v1::ServerReflection,
> {
    tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(crate::pb::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .build_v1()
        .expect("the embedded descriptor sets are valid")
}

/// Resolves on SIGTERM or ctrl-c (SIGINT).
pub async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .expect("a SIGTERM handler can be installed");
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bearer tokens round-trip through metadata, with or without the prefix.
    #[test]
    fn bearer_tokens() {
        let mut metadata = tonic::metadata::MetadataMap::new();
        assert_eq!(bearer(&metadata), None);
        assert!(set_bearer(&mut metadata, "tok-1"));
        assert_eq!(bearer(&metadata), Some("tok-1"));
        metadata.insert("authorization", "BEARER  tok-2 ".parse().unwrap());
        assert_eq!(bearer(&metadata), Some("tok-2"));
        metadata.insert("authorization", "tok-3".parse().unwrap());
        assert_eq!(bearer(&metadata), Some("tok-3"));
        metadata.insert("authorization", "Bearer ".parse().unwrap());
        assert_eq!(bearer(&metadata), None);
        assert!(!set_bearer(&mut metadata, "bad\ntoken"));
    }

    /// Every unit of the grpc-timeout header parses; malformed values do not.
    #[test]
    fn grpc_timeout_table() {
        let ok = [
            ("1H", Duration::from_secs(3600)),
            ("2M", Duration::from_secs(120)),
            ("3S", Duration::from_secs(3)),
            ("250m", Duration::from_millis(250)),
            ("7u", Duration::from_micros(7)),
            ("99999999n", Duration::from_nanos(99_999_999)),
        ];
        for (text, expected) in ok {
            assert_eq!(parse_grpc_timeout(text), Some(expected), "{text}");
        }
        assert_eq!(
            parse_grpc_timeout("00000010S"),
            Some(Duration::from_secs(10))
        );
        for text in [
            "",
            "m",
            "10",
            "10x",
            "10s",
            "-5m",
            "+1S",
            "1Sm",
            "123456789m",
            "1.5S",
            "1é",
        ] {
            assert_eq!(parse_grpc_timeout(text), None, "{text}");
        }
        let mut metadata = tonic::metadata::MetadataMap::new();
        assert_eq!(request_timeout(&metadata), None);
        metadata.insert("grpc-timeout", "250m".parse().unwrap());
        assert_eq!(request_timeout(&metadata), Some(Duration::from_millis(250)));
    }

    /// The caller's timeout wins only when it is tighter, and is answered early.
    #[test]
    fn budget_takes_the_smaller() {
        let tool = Duration::from_secs(1);
        assert_eq!(call_budget(None, tool), (tool, Bound::ToolTimeout));
        assert_eq!(
            call_budget(Some(Duration::from_secs(5)), tool),
            (tool, Bound::ToolTimeout)
        );
        assert_eq!(
            call_budget(Some(Duration::from_millis(500)), tool),
            (Duration::from_millis(480), Bound::Caller)
        );
        assert_eq!(
            call_budget(Some(Duration::from_millis(100)), tool),
            (Duration::from_millis(90), Bound::Caller)
        );
        assert_eq!(
            call_budget(Some(Duration::ZERO), tool),
            (Duration::ZERO, Bound::Caller)
        );
    }
}
