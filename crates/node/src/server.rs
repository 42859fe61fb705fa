//! Running a node: registry, dispatcher or both on one port, each with
//! grpc.health.v1 and reflection, drained within a grace period.

use crate::config::{NodeConfig, Role};
use crate::error::NodeError;
use crate::governance::{PolicyGate, PolicySetup, audit_sink, load_policy};
use crate::shared_approvals::SharedApprovals;
use std::future::Future;
use std::{net::SocketAddr, sync::Arc, time::Duration};
use tokio::{net::TcpListener, sync::oneshot, task::JoinHandle};
use tonic_health::{ServingStatus, server::HealthReporter};
use toolmesh::Snapshot;
use toolmesh_dispatcher::{Dispatcher, DispatcherConfig, Governance, follow_registry};
use toolmesh_governance::approvals::ApprovalRelay;
use toolmesh_registry::{ApprovalDesk, EtcdStore, Registry, RegistryConfig, Store, grpc_service};

/// A node that is up.
pub struct Running {
    /// Where it listens.
    pub addr: SocketAddr,
    /// The dispatcher half, if this process runs one.
    pub dispatcher: Option<Dispatcher>,
    health: HealthReporter,
    _policy: PolicySetup,
    stop: oneshot::Sender<()>,
    task: JoinHandle<Result<(), tonic::transport::Error>>,
}

impl Running {
    /// Stops accepting, reports NOT_SERVING, and lets in-flight calls finish
    /// within `grace`.
    pub async fn stop(self, grace: Duration) -> Result<(), NodeError> {
        self.health
            .set_service_status("", ServingStatus::NotServing)
            .await;
        let _ = self.stop.send(());
        match tokio::time::timeout(grace, self.task).await {
            Ok(joined) => joined?.map_err(NodeError::Serve),
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

/// Binds and starts the servers for `role`.
pub async fn start(role: Role, config: &NodeConfig) -> Result<Running, NodeError> {
    let policy = load_policy(config)?;
    let addr = toolmesh::grpc::listen_address(&config.listen)?;
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|source| NodeError::Listen { addr, source })?;
    let addr = listener
        .local_addr()
        .map_err(|source| NodeError::Listen { addr, source })?;
    let (health, health_service) = tonic_health::server::health_reporter();
    let registry: Option<Arc<dyn Store>> = match &role {
        Role::Serve { default_ttl } | Role::Registry { default_ttl } => {
            let registry_config = RegistryConfig {
                default_ttl: *default_ttl,
                data_dir: config.data_dir.clone(),
                tls: config.tls.clone(),
                ..RegistryConfig::default()
            };
            let gate = Arc::new(PolicyGate(policy.handle.clone()));
            Some(match &config.store {
                Some(url) => Arc::new(EtcdStore::connect(url, registry_config, gate).await?),
                None => {
                    if registry_config.data_dir.is_none() {
                        tracing::info!(
                            "no --data-dir: disabled tools and tool owners live in memory only"
                        );
                    }
                    Arc::new(Registry::open(registry_config, gate)?)
                }
            })
        }
        Role::Dispatcher { .. } => None,
    };
    let snapshots: Option<tokio::sync::watch::Receiver<Arc<Snapshot>>> = match (&role, &registry) {
        (Role::Serve { .. }, Some(registry)) => Some(registry.subscribe()),
        (Role::Dispatcher { registry, token }, _) => {
            Some(follow_registry(registry, &config.tls, token.as_deref())?)
        }
        _ => None,
    };
    // One approval book per mesh: the registry's, shared by its own
    // dispatcher (serve) and by every dispatcher following it.
    let shared = registry
        .clone()
        .map(|store| Arc::new(SharedApprovals { store }));
    let dispatcher = match snapshots {
        Some(snapshots) => Some(Dispatcher::with_governance(
            DispatcherConfig {
                max_in_flight: config.max_in_flight,
                snapshot_history: config.snapshot_history,
                tls: config.tls.clone(),
                ..DispatcherConfig::default()
            },
            snapshots,
            health.clone(),
            governance(&role, config, &policy, shared.clone()).await?,
        )),
        None => None,
    };
    if let Some(registry) = &registry {
        tokio::spawn(report_writable(registry.writable(), health.clone()));
    }
    if dispatcher.is_some() {
        health
            .set_service_status("toolmesh.v1.Dispatcher", ServingStatus::Serving)
            .await;
    }
    let router = toolmesh::grpc::server_builder(&config.tls)
        .map_err(NodeError::Tls)?
        .add_service(health_service)
        .add_service(toolmesh::grpc::reflection_service())
        .add_optional_service(registry.clone().map(|store| {
            let desk = shared.clone().map(|s| s as Arc<dyn ApprovalDesk>);
            grpc_service(store, desk)
        }))
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

/// The dispatcher's governance: under the policy, with its approvals in
/// the registry's shared book when it follows a registry elsewhere.
async fn governance(
    role: &Role,
    config: &NodeConfig,
    policy: &PolicySetup,
    shared: Option<Arc<SharedApprovals>>,
) -> Result<Governance, NodeError> {
    let governance = Governance::new(policy.handle.clone(), audit_sink(config).await?);
    Ok(match role {
        Role::Dispatcher { registry, token } => {
            governance.with_approval_backend(Arc::new(ApprovalRelay::new(
                toolmesh::grpc::channel(registry, &config.tls)?,
                token.clone(),
            )))
        }
        _ => match shared {
            Some(shared) => governance.with_approval_backend(shared),
            None => governance,
        },
    })
}

/// Reports the registry SERVING while its store takes writes and
/// NOT_SERVING while it does not (etcd without a quorum), so that
/// dispatchers following several replicas prefer another.
async fn report_writable(mut writable: tokio::sync::watch::Receiver<bool>, health: HealthReporter) {
    loop {
        let status = if *writable.borrow_and_update() {
            ServingStatus::Serving
        } else {
            ServingStatus::NotServing
        };
        health
            .set_service_status("toolmesh.v1.Registry", status)
            .await;
        if writable.changed().await.is_err() {
            return;
        }
    }
}

/// Starts, announces the address on stdout, waits for `shutdown`, drains.
pub async fn run(
    role: Role,
    config: &NodeConfig,
    shutdown: impl Future<Output = ()>,
) -> Result<(), NodeError> {
    let label = role.label();
    let running = start(role, config).await?;
    // Scripts and tests read this line to learn the port.
    println!("toolmesh {label} listening on {}", running.addr);
    shutdown.await;
    tracing::info!("shutting down: draining in-flight calls");
    running.stop(config.grace).await
}
