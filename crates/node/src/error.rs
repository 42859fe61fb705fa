//! Why a node could not start or stop cleanly.

use std::path::PathBuf;

/// Why a node could not start, or failed while serving.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    /// The registry address a dispatcher follows is not `host:port`.
    #[error(transparent)]
    Address(#[from] toolmesh_transport::BadAddress),
    /// The listener could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        /// The address asked for.
        addr: std::net::SocketAddr,
        /// What the OS said.
        source: std::io::Error,
    },
    /// A serve thread (`--serve-threads`) could not start.
    #[error("cannot start serve thread {lane}: {source}")]
    Lane {
        /// Which thread, from 1.
        lane: usize,
        /// What the OS said.
        source: std::io::Error,
    },
    /// A serve thread ended without saying how (it panicked).
    #[error("serve thread {lane} ended abnormally; see the log above")]
    LaneGone {
        /// Which thread, from 1.
        lane: usize,
    },
    /// The health-only listener could not be bound.
    #[error("cannot listen for health checks on {addr} (--health-listen): {source}")]
    HealthListen {
        /// The address asked for.
        addr: std::net::SocketAddr,
        /// What the OS said.
        source: std::io::Error,
    },
    /// The policy file could not be loaded.
    #[error("policy file {}: {source}", path.display())]
    Policy {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        source: toolmesh_policy::PolicyError,
    },
    /// The built-in development policy did not load.
    #[error(transparent)]
    DevPolicy(toolmesh_policy::PolicyError),
    /// The audit file could not be opened.
    #[error("cannot open audit file {path}: {source}")]
    Audit {
        /// The file.
        path: String,
        /// What the OS said.
        source: std::io::Error,
    },
    /// The registry could not open its state.
    #[error(transparent)]
    Registry(#[from] toolmesh_registry::RegistryError),
    /// `--etcd-*` settings without an etcd store to use them for.
    #[error(
        "the --etcd-* settings are for the etcd store: give --store etcd://host:port too, or drop them"
    )]
    EtcdWithoutStore,
    /// The TLS settings could not be applied to the server.
    #[error("TLS settings: {0}")]
    Tls(tonic::transport::Error),
    /// The TLS files cannot serve HTTPS (`/mcp`, the admin listener).
    #[error(transparent)]
    Https(#[from] toolmesh_telemetry::HttpsError),
    /// The server failed while serving.
    #[error("server failed: {0}")]
    Serve(tonic::transport::Error),
    /// The admin listener could not start.
    #[error(transparent)]
    Admin(#[from] toolmesh_telemetry::AdminError),
    /// Traces could not be exported as asked.
    #[error(transparent)]
    Trace(#[from] toolmesh_telemetry::trace::TraceError),
    /// The server task panicked or was cancelled.
    #[error("server task failed: {0}")]
    Task(#[from] tokio::task::JoinError),
}

impl NodeError {
    /// Whether the node could not start because of a setting it was given
    /// (an address, a file, a flag's value), as opposed to failing while
    /// it served.
    pub fn is_setting(&self) -> bool {
        !matches!(
            self,
            NodeError::Serve(_)
                | NodeError::Task(_)
                | NodeError::LaneGone { .. }
                | NodeError::Registry(_)
        )
    }
}
