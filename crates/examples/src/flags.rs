//! The flags of every executor process (`toolmesh example`,
//! `toolmesh-fixture example`) and the [`ServeOptions`] they make.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;
use toolmesh_executor::ServeOptions;
use toolmesh_transport::{Tls, dial_address, listen_address};

/// Where an executor listens, what it advertises, and how it registers.
#[derive(Debug, Clone, clap::Args)]
pub struct ServeFlags {
    /// The registry to register with (host:port).
    #[arg(long, env = "TOOLMESH_REGISTRY", default_value = "127.0.0.1:7070", value_parser = dial_address)]
    pub registry: String,
    /// Address for the executor's own server.
    #[arg(long, default_value = "127.0.0.1:0", value_parser = listen_address)]
    pub listen: SocketAddr,
    /// The host:port to register, which dispatchers dial (for example the
    /// pod IP); required when --listen is a wildcard such as 0.0.0.0.
    #[arg(long, env = "TOOLMESH_ADVERTISE")]
    pub advertise: Option<String>,
    /// Also serve grpc.health.v1 alone, in plaintext, on this address (for
    /// probes that cannot present a client certificate).
    #[arg(long, env = "TOOLMESH_HEALTH_LISTEN", value_parser = listen_address)]
    pub health_listen: Option<SocketAddr>,
    /// Lease to ask for, in milliseconds.
    #[arg(long, default_value_t = 10_000)]
    pub ttl_ms: u64,
    /// Executor id (default: service name plus a random suffix).
    #[arg(long)]
    pub executor_id: Option<String>,
    /// How long in-flight calls may take to finish on SIGTERM, in milliseconds.
    #[arg(long, default_value_t = 10_000)]
    pub grace_ms: u64,
    /// Registration token (binds the executor to its owner).
    #[arg(long, env = "TOOLMESH_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// A file holding the registration token, read again at each use (a
    /// projected service-account token the kubelet rotates); wins over
    /// --token.
    #[arg(long, env = "TOOLMESH_TOKEN_FILE")]
    pub token_file: Option<PathBuf>,
    /// Metrics and traces.
    #[command(flatten)]
    pub ops: OpsFlags,
}

/// Operations flags of every process, server or executor: metrics, the
/// admin page, traces.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct OpsFlags {
    /// Serve /metrics (Prometheus) and the admin page on this address
    /// (HTTPS with --tls-cert/--tls-key, client certificates with
    /// --tls-client-ca).
    #[arg(long, env = "TOOLMESH_ADMIN_LISTEN")]
    pub admin_listen: Option<String>,
    /// Host header values the admin listener accepts (comma-separated;
    /// `*` for any, as when Prometheus scrapes a pod IP); default loopback
    /// only, against DNS rebinding.
    #[arg(long, env = "TOOLMESH_ADMIN_ALLOWED_HOSTS", value_delimiter = ',')]
    pub admin_allowed_hosts: Vec<String>,
    /// Export traces to this OTLP collector (gRPC), e.g. http://127.0.0.1:4317.
    #[arg(long, env = "OTEL_EXPORTER_OTLP_ENDPOINT")]
    pub otlp_endpoint: Option<String>,
}

impl ServeFlags {
    /// The serve options these flags ask for, with `tls` (the addresses
    /// were checked as the flags were read).
    pub fn serve_options(&self, tls: Tls) -> ServeOptions {
        ServeOptions {
            registry: self.registry.clone(),
            listen: self.listen,
            advertise: self.advertise.clone(),
            health_listen: self.health_listen,
            executor_id: self.executor_id.clone(),
            lease_ttl: Duration::from_millis(self.ttl_ms),
            grace: Duration::from_millis(self.grace_ms),
            token: toolmesh_transport::Credential::from_flags(
                self.token.clone(),
                self.token_file.clone(),
            ),
            tls,
            admin_listen: self.ops.admin_listen.clone(),
            admin_allowed_hosts: self.ops.admin_allowed_hosts.clone(),
            otlp_endpoint: self.ops.otlp_endpoint.clone(),
        }
    }
}

/// TLS files (PEM). A CA makes every outgoing connection TLS; a
/// certificate and key make every server TLS; a client CA makes servers
/// require client certificates (mTLS).
#[derive(Debug, Clone, clap::Args)]
pub struct TlsFlags {
    /// CA certificate that signs the servers' certificates.
    #[arg(long, global = true, env = "TOOLMESH_TLS_CA")]
    pub tls_ca: Option<PathBuf>,
    /// This process' certificate (servers present it; clients too, for mTLS).
    #[arg(long, global = true, env = "TOOLMESH_TLS_CERT")]
    pub tls_cert: Option<PathBuf>,
    /// The key of --tls-cert.
    #[arg(long, global = true, env = "TOOLMESH_TLS_KEY")]
    pub tls_key: Option<PathBuf>,
    /// Servers accept only clients with a certificate signed by this CA.
    #[arg(long, global = true, env = "TOOLMESH_TLS_CLIENT_CA")]
    pub tls_client_ca: Option<PathBuf>,
}

impl TlsFlags {
    /// The files these flags name.
    pub fn files(&self) -> toolmesh_transport::TlsFiles {
        toolmesh_transport::TlsFiles {
            ca: self.tls_ca.clone(),
            cert: self.tls_cert.clone(),
            key: self.tls_key.clone(),
            client_ca: self.tls_client_ca.clone(),
        }
    }
}
