//! What a node runs and with which settings: plain values, no flag parsing.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// Which halves this process runs.
#[derive(Debug, Clone)]
pub enum Role {
    /// Registry and dispatcher in one process.
    Serve {
        /// Default executor lease.
        default_ttl: Duration,
    },
    /// Only the registry.
    Registry {
        /// Default executor lease.
        default_ttl: Duration,
    },
    /// Only a dispatcher, following the registry at these addresses.
    Dispatcher {
        /// host:port of the registry, or of several replicas separated by
        /// commas (followed one at a time, failing over).
        registry: String,
        /// Bearer token to follow it with (a caller with the dispatcher
        /// role): fixed, or a file read at each use.
        token: Option<toolmesh_transport::Credential>,
    },
}

impl Role {
    /// How the process names itself in its `listening on` line and logs.
    pub fn label(&self) -> &'static str {
        match self {
            Role::Serve { .. } => "registry+dispatcher",
            Role::Registry { .. } => "registry",
            Role::Dispatcher { .. } => "dispatcher",
        }
    }
}

/// Settings of one node (the CLI's server flags).
#[derive(Debug, Clone)]
pub struct NodeConfig {
    /// Address to listen on (port 0 picks a free port).
    pub listen: SocketAddr,
    /// Where to serve `grpc.health.v1` alone, in plaintext, for probes that
    /// cannot present a client certificate; `None` serves health only on
    /// `listen`.
    pub health_listen: Option<SocketAddr>,
    /// How long in-flight calls may take to finish on shutdown.
    pub grace: Duration,
    /// Calls a dispatcher keeps in flight before it sheds load.
    pub max_in_flight: usize,
    /// Serve gRPC on this many threads of their own (thread per core): each
    /// runs a current-thread runtime serving the connections handed to it in
    /// turn, and a dispatcher keeps one connection per executor per thread,
    /// so a call never changes threads. 0 serves on the process' shared
    /// runtime.
    pub serve_threads: usize,
    /// Recent snapshots a dispatcher keeps so callers can pin a version.
    pub snapshot_history: usize,
    /// Policy file (TOML) reloaded on SIGHUP and change; `None` runs the
    /// development policy.
    pub policy: Option<PathBuf>,
    /// Audit sink: a file path, or `-` for stdout; `None` writes no audit.
    pub audit: Option<String>,
    /// Where state that survives restarts is kept; `None` keeps it in memory.
    pub data_dir: Option<PathBuf>,
    /// Under the development policy, a token admitted as an executor's
    /// (`toolmesh up` generates one per run for its examples).
    pub dev_executor_token: Option<String>,
    /// Under the development policy, the token a separate dispatcher
    /// follows this registry with (`--dev-dispatcher-token`; replicas of one
    /// registry share it); `None` makes one for the run.
    pub dev_dispatcher_token: Option<String>,
    /// Where a registry keeps its state: `None` in this process (the
    /// default), `Some("etcd://host:port[,host:port…]")` in etcd, shared
    /// by every replica pointed at the same cluster.
    pub store: Option<String>,
    /// How the registry reaches the etcd of `store`: TLS files and the
    /// etcd user and password (`--etcd-*`).
    pub etcd: toolmesh_registry::EtcdAccess,
    /// TLS of the node's server and of its channels (to executors, and to
    /// the registry a dispatcher follows).
    pub tls: toolmesh_transport::Tls,
    /// Serve `/metrics` and the admin page on this `host:port`
    /// (`--admin-listen`); `None` serves neither. Over HTTPS with `tls`'
    /// certificate (and client CA).
    pub admin_listen: Option<String>,
    /// `Host` values the admin listener accepts (`--admin-allowed-hosts`);
    /// empty is loopback only, `*` any.
    pub admin_allowed_hosts: Vec<String>,
    /// Serve `/metrics` without a credential (`--public-metrics`); its
    /// labels name tools, hidden ones included. Otherwise it needs what the
    /// admin page needs: a token (or session) of an admin or operator.
    pub public_metrics: bool,
    /// Export traces to this OTLP collector (`--otlp-endpoint`, else
    /// `OTEL_EXPORTER_OTLP_ENDPOINT`); `None` exports none.
    pub otlp_endpoint: Option<String>,
    /// Where a dispatcher also serves MCP over Streamable HTTP (`/mcp`);
    /// `None` serves no MCP.
    pub mcp_listen: Option<SocketAddr>,
    /// `Host` values the MCP endpoint accepts; empty is loopback only, `*`
    /// any (behind a Kubernetes Service or load balancer).
    pub mcp_allowed_hosts: Vec<String>,
    /// `Origin` values the MCP endpoint accepts from browser pages
    /// (`--mcp-allowed-origins`); empty accepts origins on an allowed host.
    pub mcp_allowed_origins: Vec<String>,
    /// When the MCP endpoint's `tools/list` answers in search mode
    /// (`--mcp-tool-search`, `--mcp-tool-search-threshold`).
    pub mcp_tool_search: toolmesh_mcp::ToolSearch,
    /// The embeddings endpoint that ranks tool search semantically too
    /// (`--search-embeddings-*`); `None` ranks lexically only.
    pub search_embeddings: Option<toolmesh_dispatcher::EmbeddingsConfig>,
}

impl Default for NodeConfig {
    fn default() -> Self {
        NodeConfig {
            listen: SocketAddr::from(([127, 0, 0, 1], 7070)),
            health_listen: None,
            grace: Duration::from_secs(10),
            max_in_flight: 4096,
            serve_threads: 0,
            snapshot_history: 64,
            policy: None,
            audit: None,
            data_dir: None,
            dev_executor_token: None,
            dev_dispatcher_token: None,
            store: None,
            etcd: toolmesh_registry::EtcdAccess::default(),
            tls: toolmesh_transport::Tls::none(),
            admin_listen: None,
            admin_allowed_hosts: Vec::new(),
            public_metrics: false,
            otlp_endpoint: None,
            mcp_listen: None,
            mcp_allowed_hosts: Vec::new(),
            mcp_allowed_origins: Vec::new(),
            mcp_tool_search: toolmesh_mcp::ToolSearch::default(),
            search_embeddings: None,
        }
    }
}
