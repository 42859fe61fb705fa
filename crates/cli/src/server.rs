//! Running the servers: registry, dispatcher or both on one port, each with
//! grpc.health.v1 and reflection, drained on SIGTERM within a grace period.

use crate::args::ServerArgs;
use crate::governance::{PolicyGate, PolicySetup, governance, load_policy};
use anyhow::Context;
use std::{net::SocketAddr, sync::Arc, time::Duration};
use tokio::{net::TcpListener, sync::oneshot, task::JoinHandle};
use tonic_health::{ServingStatus, server::HealthReporter};
use toolmesh::Snapshot;
use toolmesh_dispatcher::{Dispatcher, DispatcherConfig, follow_registry};
use toolmesh_registry::{Registry, RegistryConfig};

/// Which halves this process runs.
#[derive(Debug, Clone)]
pub(crate) enum Role {
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
    /// Only a dispatcher, following the registry at this address.
    Dispatcher {
        /// host:port of the registry.
        registry: String,
    },
}

impl Role {
    fn label(&self) -> &'static str {
        match self {
            Role::Serve { .. } => "registry+dispatcher",
            Role::Registry { .. } => "registry",
            Role::Dispatcher { .. } => "dispatcher",
        }
    }
}

/// A server that is up.
pub(crate) struct Running {
    /// Where it listens.
    pub(crate) addr: SocketAddr,
    /// The dispatcher half, if this process runs one.
    pub(crate) dispatcher: Option<Dispatcher>,
    health: HealthReporter,
    _policy: PolicySetup,
    stop: oneshot::Sender<()>,
    task: JoinHandle<Result<(), tonic::transport::Error>>,
}

impl Running {
    /// Stops accepting, reports NOT_SERVING, and lets in-flight calls finish
    /// within `grace`.
    pub(crate) async fn stop(self, grace: Duration) -> anyhow::Result<()> {
        self.health
            .set_service_status("", ServingStatus::NotServing)
            .await;
        let _ = self.stop.send(());
        match tokio::time::timeout(grace, self.task).await {
            Ok(joined) => joined
                .context("server task failed")?
                .context("server failed"),
            Err(_) => {
                tracing::warn!(
                    grace_ms = grace.as_millis() as u64,
                    "grace period over; closing remaining connections"
                );
                Ok(())
            }
        }
    }
}

/// Binds and starts the servers for `role`. `dev_executor_token` (for
/// `up`) is admitted as an executor token under the development policy.
pub(crate) async fn start(
    role: Role,
    args: &ServerArgs,
    dev_executor_token: Option<&str>,
) -> anyhow::Result<Running> {
    let policy = load_policy(args, dev_executor_token)?;
    let addr = toolmesh::grpc::listen_address(&args.listen)?;
    let listener = TcpListener::bind(addr)
        .await
        .with_context(|| format!("cannot listen on {addr}"))?;
    let addr = listener.local_addr()?;
    let (health, health_service) = tonic_health::server::health_reporter();
    let registry = match &role {
        Role::Serve { default_ttl } | Role::Registry { default_ttl } => {
            let config = RegistryConfig {
                default_ttl: *default_ttl,
                data_dir: args.data_dir.clone(),
                ..RegistryConfig::default()
            };
            if config.data_dir.is_none() {
                tracing::info!("no --data-dir: disabled tools and tool owners live in memory only");
            }
            Some(
                Registry::open(config, Arc::new(PolicyGate(policy.handle.clone())))
                    .map_err(|e| anyhow::anyhow!("{e}"))?,
            )
        }
        Role::Dispatcher { .. } => None,
    };
    let snapshots: Option<tokio::sync::watch::Receiver<Arc<Snapshot>>> = match (&role, &registry) {
        (Role::Serve { .. }, Some(registry)) => Some(registry.subscribe()),
        (Role::Dispatcher { registry }, _) => Some(follow_registry(registry)?),
        _ => None,
    };
    let dispatcher = match snapshots {
        Some(snapshots) => Some(Dispatcher::with_governance(
            DispatcherConfig {
                max_in_flight: args.max_in_flight,
                snapshot_history: args.snapshot_history,
                ..DispatcherConfig::default()
            },
            snapshots,
            health.clone(),
            governance(args, &policy).await?,
        )),
        None => None,
    };
    if registry.is_some() {
        health
            .set_service_status("toolmesh.v1.Registry", ServingStatus::Serving)
            .await;
    }
    if dispatcher.is_some() {
        health
            .set_service_status("toolmesh.v1.Dispatcher", ServingStatus::Serving)
            .await;
    }
    let router = toolmesh::grpc::server_builder()
        .context("TLS settings")?
        .add_service(health_service)
        .add_service(toolmesh::grpc::reflection_service())
        .add_optional_service(registry.as_ref().map(Registry::grpc_service))
        .add_optional_service(dispatcher.as_ref().map(Dispatcher::grpc_service))
        .add_optional_service(dispatcher.as_ref().map(Dispatcher::governance_service));
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(router.serve_with_incoming_shutdown(
        toolmesh::grpc::incoming(listener),
        async {
            let _ = stopped.await;
        },
    ));
    tracing::info!(%addr, role = role.label(), "listening");
    Ok(Running {
        addr,
        dispatcher,
        health,
        _policy: policy,
        stop,
        task,
    })
}

/// `toolmesh serve|registry|dispatcher`: start, announce, wait for
/// SIGTERM/ctrl-c, drain.
pub(crate) async fn run(role: Role, args: &ServerArgs) -> anyhow::Result<()> {
    let label = role.label();
    let running = start(role, args, None).await?;
    // Scripts and tests read this line to learn the port.
    println!("toolmesh {label} listening on {}", running.addr);
    toolmesh::grpc::shutdown_signal().await;
    tracing::info!("shutting down: draining in-flight calls");
    running.stop(Duration::from_millis(args.grace_ms)).await
}
