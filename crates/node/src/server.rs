//! Running a node: registry, dispatcher or both on one port, each with
//! grpc.health.v1 and reflection, drained within a grace period.

use crate::config::{NodeConfig, Role};
use crate::error::NodeError;
use crate::governance::{PolicyGate, PolicySetup, audit_sink, load_policy};
use crate::lanes;
use crate::readiness::Readiness;
use crate::registry_records::RegistryRecords;
use crate::rollouts;
use std::future::Future;
use std::{net::SocketAddr, sync::Arc, time::Duration};
use tokio::{net::TcpListener, sync::watch, task::JoinHandle};
use tokio_util::sync::CancellationToken;
use tonic::transport::server::Router;
use tonic_health::{ServingStatus, server::HealthReporter};
use toolmesh::Snapshot;
use toolmesh_audit::AuditSink;
use toolmesh_dispatcher::{Dispatcher, DispatcherConfig, RolloutControl, follow_registry};
use toolmesh_governance::{Governance, Identity, MemoryRecords, RecordStore, RemoteRecords};
use toolmesh_registry::{
    DecisionJournal, Registry, RegistryConfig, RegistryService, RolloutDesk, SharedRecordsService,
};
use toolmesh_telemetry::{AdminOptions, AdminServer, MetricsRegistry};
use toolmesh_transport::{HealthOnly, REGISTRY_HEALTH_SERVICE};

/// A node that is up.
pub struct Running {
    /// Where it listens.
    pub addr: SocketAddr,
    /// The dispatcher half, if this process runs one.
    pub dispatcher: Option<Dispatcher>,
    /// The admin listener (`/metrics`, admin page), if asked for.
    pub admin: Option<AdminServer>,
    /// Stops the admin page's background task.
    _admin_task: tokio_util::sync::DropGuard,
    /// Where MCP is served (see [`mcp_url`](Running::mcp_url)), if it is.
    pub mcp_addr: Option<SocketAddr>,
    mcp: Option<Mcp>,
    health: HealthReporter,
    readiness: Option<Readiness>,
    health_only: Option<HealthOnly>,
    policy: PolicySetup,
    stop: CancellationToken,
    task: JoinHandle<Result<(), NodeError>>,
}

impl Running {
    /// Under the development policy, the token a separate dispatcher
    /// follows this node's registry with (`--registry-token`).
    pub fn dev_dispatcher_token(&self) -> Option<&str> {
        self.policy.dev_dispatcher_token.as_deref()
    }

    /// `http(s)://ADDR/mcp`, when this node serves MCP.
    pub fn mcp_url(&self) -> Option<String> {
        let (addr, mcp) = (self.mcp_addr?, self.mcp.as_ref()?);
        Some(format!("{}://{addr}/mcp", mcp.scheme))
    }

    /// Where the plaintext health-only listener is bound, if one was asked for.
    pub fn health_addr(&self) -> Option<SocketAddr> {
        self.health_only.as_ref().map(HealthOnly::local_addr)
    }

    /// Stops accepting, reports NOT_SERVING, and lets in-flight calls finish
    /// within `grace`.
    pub async fn stop(self, grace: Duration) -> Result<(), NodeError> {
        if let Some(readiness) = self.readiness {
            readiness.stop().await;
        }
        self.health
            .set_service_status("", ServingStatus::NotServing)
            .await;
        if let Some(admin) = self.admin {
            admin.stop().await;
        }
        if let Some(dispatcher) = &self.dispatcher {
            // Watches of the tools never end by themselves: the drain
            // would wait the whole grace period for them.
            dispatcher.end_watches();
        }
        if let Some(mcp) = self.mcp {
            mcp.drain(grace).await;
        }
        self.stop.cancel();
        // The health-only listener (dropped last) keeps answering NOT_SERVING
        // to probes while the calls drain.
        let _health_only = self.health_only;
        match tokio::time::timeout(grace, self.task).await {
            Ok(joined) => joined?,
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

/// A listener on `addr` (port 0 picks one) and where it is.
async fn bind(addr: SocketAddr) -> Result<(SocketAddr, TcpListener), NodeError> {
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|source| NodeError::Listen { addr, source })?;
    let addr = listener
        .local_addr()
        .map_err(|source| NodeError::Listen { addr, source })?;
    Ok((addr, listener))
}

/// The MCP endpoint of a node.
struct Mcp {
    /// `http` or `https`.
    scheme: &'static str,
    /// Stops accepting connections, and asks open ones to close once
    /// their requests are answered.
    accept: CancellationToken,
    drain: toolmesh_mcp::Drain,
    task: JoinHandle<std::io::Result<()>>,
}

impl Mcp {
    /// Stops accepting, lets every call in flight be answered, then ends
    /// the open streams (subscriptions) and waits for the connections to
    /// close, all within `grace`.
    async fn drain(self, grace: Duration) {
        let deadline = tokio::time::Instant::now() + grace;
        self.accept.cancel();
        if tokio::time::timeout_at(deadline, self.drain.answered())
            .await
            .is_err()
        {
            tracing::warn!(
                in_flight = self.drain.in_flight(),
                "grace period over with MCP calls in flight; ending them"
            );
        }
        self.drain.end_streams();
        if let Ok(Ok(Err(e))) = tokio::time::timeout_at(deadline, self.task).await {
            tracing::warn!(error = %e, "MCP server failed while draining");
        }
    }
}

/// Binds `/mcp` for `dispatcher` on `listen`: in plaintext on `lanes`, as
/// gRPC is served; over HTTPS on the shared runtime.
async fn start_mcp(
    listen: SocketAddr,
    config: &NodeConfig,
    dispatcher: &Dispatcher,
    lanes: lanes::Lanes,
) -> Result<(SocketAddr, Mcp), NodeError> {
    let tls = toolmesh_telemetry::https::acceptor(config.tls.files())?;
    let (addr, listener) = bind(listen).await?;
    let accept = CancellationToken::new();
    let drain = toolmesh_mcp::Drain::default();
    let http = toolmesh_mcp::McpHttpConfig {
        allowed_hosts: config.mcp_allowed_hosts.clone(),
        allowed_origins: config.mcp_allowed_origins.clone(),
        https: tls.is_some(),
    };
    let router = toolmesh_mcp::router(
        toolmesh_mcp::McpHandler::new(dispatcher.clone()).with_tool_search(config.mcp_tool_search),
        dispatcher.clone(),
        &http,
        &drain,
    );
    let scheme = if tls.is_some() { "https" } else { "http" };
    let task = match tls {
        Some(tls) => {
            let stopped = accept.clone();
            tokio::spawn(toolmesh_telemetry::https::serve(
                listener,
                Some(tls),
                router,
                async move {
                    stopped.cancelled().await;
                },
            ))
        }
        None => {
            let serving = lanes::serve_http(listener, router, lanes, accept.clone());
            tokio::spawn(async move {
                serving.await;
                Ok(())
            })
        }
    };
    tracing::info!(%addr, "MCP listening at {scheme}://{addr}/mcp");
    Ok((
        addr,
        Mcp {
            scheme,
            accept,
            drain,
            task,
        },
    ))
}

/// Binds and starts the servers for `role`.
pub async fn start(role: Role, config: &NodeConfig) -> Result<Running, NodeError> {
    let policy = load_policy(config)?;
    toolmesh_telemetry::trace::install_default(role.label(), config.otlp_endpoint.as_deref())?;
    let metrics = MetricsRegistry::for_process(role.label());
    let (addr, listener) = bind(config.listen).await?;
    let health = tonic_health::server::HealthReporter::new();
    let registry = open_registry(&role, config, &policy, &metrics).await?;
    let snapshots = dispatcher_snapshots(&role, config, registry.as_ref())?;
    let page_snapshots = page_snapshots(registry.as_ref(), snapshots.as_ref());
    // One set of shared records (approvals, session facts) per mesh: the
    // registry's, used by its own dispatcher (serve) and by every
    // dispatcher following it.
    let shared = registry.clone().map(SharedRecordsService::new);
    // One audit sink per process: calls and rollout decisions alike.
    let audit = audit_sink(config).await?;
    let journal = rollouts::journal(audit.as_ref());
    if let Some(registry) = &registry {
        report_registry_writable(registry, &health).await;
    }
    report_issuers(&policy, &metrics, &health);
    let readiness = readiness(&role, &health, snapshots.as_ref()).await;
    let dispatcher = match snapshots {
        Some(snapshots) => {
            let rollout_control = rollout_control(&role, config, registry.as_ref(), &journal)?;
            let governance = governance(&role, config, &policy, shared.clone(), audit).await?;
            Some(Dispatcher::with_governance(
                dispatcher_config(config, &metrics, rollout_control),
                snapshots,
                health.clone(),
                governance,
            ))
        }
        None => None,
    };
    // The admin page's change feed hears who switched tools from the
    // registry's journal.
    let feed = config
        .admin_listen
        .is_some()
        .then(|| Arc::new(crate::admin::Feed::default()));
    let registry_service = registry
        .clone()
        .map(|registry| registry_service(registry, &journal, feed.as_ref(), dispatcher.as_ref()));
    let side = SideListeners::start(
        config,
        &health,
        AdminParts {
            snapshots: page_snapshots,
            dispatcher: dispatcher.as_ref(),
            registry: registry_service.as_ref(),
            feed,
            metrics: metrics.clone(),
            identity: &policy.identity,
        },
    )
    .await?;
    if let (Some(shared), Some(_)) = (&shared, &side.admin) {
        // Scraped only there: counted only then, until the node stops.
        crate::approval_backlog::export(shared.clone(), &metrics, side.admin_stop.child_token());
    }
    let router = grpc_router(
        config,
        &health,
        dispatcher.as_ref(),
        registry_service,
        shared,
    )?;
    let stop = CancellationToken::new();
    let serving = lanes::serve(router, listener, config.serve_threads, stop.clone()).await?;
    tracing::info!(%addr, role = role.label(), threads = config.serve_threads, "listening");
    let mcp = match (config.mcp_listen, &dispatcher) {
        (Some(listen), Some(dispatcher)) => {
            Some(start_mcp(listen, config, dispatcher, serving.lanes).await?)
        }
        _ => None,
    };
    if let (Some(_), Some(token)) = (&registry, &policy.dev_dispatcher_token) {
        tracing::info!(
            "development policy: a separate dispatcher follows this registry with --registry {addr} --registry-token {token}"
        );
    }
    Ok(Running {
        addr,
        dispatcher,
        admin: side.admin,
        _admin_task: side.admin_stop.drop_guard(),
        mcp_addr: mcp.as_ref().map(|(addr, _)| *addr),
        mcp: mcp.map(|(_, mcp)| mcp),
        health,
        readiness,
        health_only: side.health_only,
        policy,
        stop,
        task: serving.task,
    })
}

/// The snapshots the dispatcher of `role` serves: its own registry's
/// (`serve`), the followed registry's (`dispatcher`), or none.
fn dispatcher_snapshots(
    role: &Role,
    config: &NodeConfig,
    registry: Option<&Registry>,
) -> Result<Option<watch::Receiver<Arc<Snapshot>>>, NodeError> {
    Ok(match (role, registry) {
        (Role::Serve { .. }, Some(registry)) => Some(registry.subscribe()),
        (Role::Dispatcher { registry, token }, _) => {
            Some(follow_registry(registry, &config.tls, token.clone())?)
        }
        _ => None,
    })
}

/// The snapshots the admin page shows: the dispatcher's, else the
/// registry's, else an empty one.
fn page_snapshots(
    registry: Option<&Registry>,
    snapshots: Option<&watch::Receiver<Arc<Snapshot>>>,
) -> watch::Receiver<Arc<Snapshot>> {
    match (registry, snapshots) {
        (_, Some(snapshots)) => snapshots.clone(),
        (Some(registry), None) => registry.subscribe(),
        (None, None) => watch::channel(Arc::new(Snapshot::empty(""))).1,
    }
}

/// The dispatcher's readiness in health, when this node runs one: ready
/// at once beside its registry, once it holds a snapshot when it follows
/// one elsewhere.
async fn readiness(
    role: &Role,
    health: &HealthReporter,
    snapshots: Option<&watch::Receiver<Arc<Snapshot>>>,
) -> Option<Readiness> {
    let snapshots = snapshots?;
    let follows = matches!(role, Role::Dispatcher { .. });
    Some(Readiness::report(health, snapshots, follows).await)
}

/// Sets the registry's health by whether its store takes writes, then
/// follows the changes. The first status is set before the node answers
/// anything.
async fn report_registry_writable(registry: &Registry, health: &HealthReporter) {
    let writable = registry.writable();
    set_writable(health, *writable.borrow()).await;
    tokio::spawn(report_writable(writable, health.clone()));
}

/// Every role verifies the issuers' tokens: their keys in health and
/// metrics.
fn report_issuers(policy: &PolicySetup, metrics: &MetricsRegistry, health: &HealthReporter) {
    metrics.register_collector(crate::issuer_metrics::IssuerMetrics(
        policy.identity.clone(),
    ));
    tokio::spawn(crate::issuer_health::report(
        policy.identity.clone(),
        health.clone(),
    ));
}

/// The dispatcher's settings from the node's.
fn dispatcher_config(
    config: &NodeConfig,
    metrics: &MetricsRegistry,
    rollout_control: Option<Arc<dyn RolloutControl>>,
) -> DispatcherConfig {
    DispatcherConfig {
        max_in_flight: config.max_in_flight,
        snapshot_history: config.snapshot_history,
        tls: config.tls.clone(),
        metrics: metrics.clone(),
        rollout_control,
        search_embeddings: config.search_embeddings.clone(),
        ..DispatcherConfig::default()
    }
}

/// The registry's gRPC service, whose decisions go to the audit journal
/// and the admin page's feed.
fn registry_service(
    registry: Registry,
    journal: &Option<Arc<dyn DecisionJournal>>,
    feed: Option<&Arc<crate::admin::Feed>>,
    dispatcher: Option<&Dispatcher>,
) -> RegistryService {
    let journal = rollouts::NodeJournal {
        audit: journal.clone(),
        feed: feed.cloned(),
        // With its own dispatcher, a decision is answered once in force there.
        dispatcher: dispatcher.cloned(),
    };
    RegistryService::new(registry, Some(Arc::new(journal)))
}

/// The services of the main listener: health and reflection always, the
/// registry, the shared records, the dispatcher and governance when this
/// node runs them.
fn grpc_router(
    config: &NodeConfig,
    health: &HealthReporter,
    dispatcher: Option<&Dispatcher>,
    registry_service: Option<RegistryService>,
    shared: Option<SharedRecordsService>,
) -> Result<Router, NodeError> {
    Ok(toolmesh_transport::server_builder(&config.tls)
        .map_err(NodeError::Tls)?
        .add_service(match dispatcher {
            // A dispatcher answers per-tool names only to callers that may see the tool.
            Some(dispatcher) => dispatcher.health_service(health.clone()),
            None => toolmesh_transport::gated_health(health.clone(), Arc::new(|_| true)),
        })
        .add_service(toolmesh_transport::reflection_service())
        .add_optional_service(registry_service.map(RegistryService::into_server))
        .add_optional_service(shared.map(SharedRecordsService::into_server))
        .add_optional_service(dispatcher.map(Dispatcher::grpc_service))
        .add_optional_service(dispatcher.map(Dispatcher::governance_service)))
}

/// The registry half of `role`, on the embedded store or on etcd.
async fn open_registry(
    role: &Role,
    config: &NodeConfig,
    policy: &PolicySetup,
    metrics: &MetricsRegistry,
) -> Result<Option<Registry>, NodeError> {
    let (Role::Serve { default_ttl } | Role::Registry { default_ttl }) = role else {
        return Ok(None);
    };
    let registry_config = RegistryConfig {
        default_ttl: *default_ttl,
        data_dir: config.data_dir.clone(),
        tls: config.tls.clone(),
        metrics: metrics.clone(),
        ..RegistryConfig::default()
    };
    let gate = Arc::new(PolicyGate(policy.identity.clone()));
    Ok(Some(match &config.store {
        Some(url) => Registry::connect(url, &config.etcd, registry_config, gate).await?,
        None if config.etcd.is_set() => return Err(NodeError::EtcdWithoutStore),
        None => {
            if registry_config.data_dir.is_none() {
                tracing::info!("no --data-dir: disabled tools and tool owners live in memory only");
            }
            Registry::open(registry_config, gate)?
        }
    }))
}

/// What the admin page of a node is made of.
struct AdminParts<'a> {
    snapshots: watch::Receiver<Arc<Snapshot>>,
    dispatcher: Option<&'a Dispatcher>,
    registry: Option<&'a RegistryService>,
    /// Present when the page is asked for.
    feed: Option<Arc<crate::admin::Feed>>,
    metrics: MetricsRegistry,
    identity: &'a Identity,
}

/// The listeners beside the main one, each when asked for: health only
/// (for probes), admin (metrics and the page), MCP.
struct SideListeners {
    health_only: Option<HealthOnly>,
    admin: Option<AdminServer>,
    admin_stop: CancellationToken,
}

impl SideListeners {
    async fn start(
        config: &NodeConfig,
        health: &HealthReporter,
        page: AdminParts<'_>,
    ) -> Result<SideListeners, NodeError> {
        let dispatcher = page.dispatcher;
        let health_only = match config.health_listen {
            Some(addr) => {
                let bound = HealthOnly::bind(addr, health.clone())
                    .await
                    .map_err(|source| NodeError::HealthListen { addr, source })?;
                tracing::info!(addr = %bound.local_addr(), "serving grpc.health.v1 alone, in plaintext, for probes");
                Some(bound)
            }
            None => None,
        };
        let admin_stop = CancellationToken::new();
        let admin = match &config.admin_listen {
            Some(listen) => {
                let tls = toolmesh_telemetry::https::acceptor(config.tls.files())?;
                let routes = crate::admin::routes(
                    crate::admin::AdminPage {
                        snapshots: page.snapshots,
                        dispatcher: dispatcher.cloned(),
                        registry: page.registry.cloned(),
                        feed: page.feed.unwrap_or_default(),
                        identity: page.identity.clone(),
                        metrics: page.metrics,
                        public_metrics: config.public_metrics,
                        https: tls.is_some(),
                    },
                    admin_stop.clone(),
                );
                let options = AdminOptions {
                    tls,
                    guard: toolmesh_telemetry::admin::guard(&config.admin_allowed_hosts),
                };
                Some(AdminServer::start(listen, options, routes).await?)
            }
            None => None,
        };
        Ok(SideListeners {
            health_only,
            admin,
            admin_stop,
        })
    }
}

/// The dispatcher's governance: under the policy, with its approvals and
/// session facts in the registry's store (its own, or over gRPC when it
/// follows a registry elsewhere), shared by every dispatcher of the mesh.
async fn governance(
    role: &Role,
    config: &NodeConfig,
    policy: &PolicySetup,
    shared: Option<SharedRecordsService>,
    audit: Option<AuditSink>,
) -> Result<Governance, NodeError> {
    let book: Arc<dyn RecordStore> = match (role, shared) {
        (Role::Dispatcher { registry, token }, _) => {
            let channel = toolmesh_transport::channel(registry, &config.tls)?;
            Arc::new(RemoteRecords::new(channel, token.clone()))
        }
        (_, Some(shared)) => Arc::new(RegistryRecords(shared)),
        // Every role with a dispatcher has a registry to share with;
        // without one, the records are this process' alone.
        (_, None) => Arc::new(MemoryRecords::new()),
    };
    Ok(Governance::sharing(policy.identity.clone(), audit, book))
}

/// Who the dispatcher of `role` asks to abort a failing canary: the
/// registry in this process (`serve`, through the same journal as the gRPC
/// edge), or the one it follows, by gRPC with its registry token.
fn rollout_control(
    role: &Role,
    config: &NodeConfig,
    registry: Option<&Registry>,
    journal: &Option<Arc<dyn DecisionJournal>>,
) -> Result<Option<Arc<dyn RolloutControl>>, NodeError> {
    Ok(match (role, registry) {
        (Role::Dispatcher { registry, token }, _) => Some(Arc::new(rollouts::RemoteAbort {
            channel: toolmesh_transport::channel(registry, &config.tls)?,
            token: token.clone(),
        })),
        (_, Some(registry)) => Some(Arc::new(rollouts::LocalAbort(RolloutDesk::new(
            registry.clone(),
            journal.clone(),
        )))),
        _ => None,
    })
}

/// Reports the registry SERVING while its store takes writes and
/// NOT_SERVING while it does not (etcd without a quorum), so that
/// dispatchers following several replicas prefer another.
async fn report_writable(mut writable: watch::Receiver<bool>, health: HealthReporter) {
    loop {
        let now = *writable.borrow_and_update();
        set_writable(&health, now).await;
        if writable.changed().await.is_err() {
            return;
        }
    }
}

/// The registry's health: `SERVING` while it can take writes.
async fn set_writable(health: &HealthReporter, writable: bool) {
    let status = if writable {
        ServingStatus::Serving
    } else {
        ServingStatus::NotServing
    };
    health
        .set_service_status(REGISTRY_HEALTH_SERVICE, status)
        .await;
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
    if let Some(addr) = running.health_addr() {
        println!("toolmesh {label} health checks on {addr}");
    }
    if let Some(admin) = &running.admin {
        println!("toolmesh admin listening on {}", admin.url());
    }
    if let Some(url) = running.mcp_url() {
        println!("toolmesh MCP listening on {url}");
    }
    shutdown.await;
    tracing::info!("shutting down: draining in-flight calls");
    let stopped = running.stop(config.grace).await;
    toolmesh_telemetry::trace::flush();
    stopped
}
