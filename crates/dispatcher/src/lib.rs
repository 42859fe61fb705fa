//! The dispatcher: the gateway agent runtimes talk to. It lists the tools a
//! caller can use and invokes them by name — arguments checked against the
//! compiled schema, one deadline for the whole call, retries only where safe,
//! power-of-two-choices balancing and outlier ejection.
#![forbid(unsafe_code)]

mod balance;
mod config;
mod endpoints;
mod error;
mod follow;
mod governance;
mod governance_service;
mod invoke;
mod list;
mod retry;
mod service;
mod tool_health;
mod view;

pub use config::DispatcherConfig;
pub use error::InvokeError;
pub use follow::{EPOCH_GRACE, follow_registry};
pub use governance::Governance;
pub use governance_service::GovernanceService;
pub use service::DispatcherService;
pub use view::PinExpired;

use endpoints::{EjectionPolicy, Endpoints};
use invoke::Invoker;
use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{Notify, Semaphore, watch};
use tokio::time::Instant;
use tonic::Status;
use tonic_health::server::HealthReporter;
use toolmesh::Snapshot;
use toolmesh::grpc::MAX_CALL_MESSAGE_BYTES;
use toolmesh::pb::{
    InvokeRequest, InvokeResponse, ListToolsResponse, ToolFormat,
    dispatcher_server::DispatcherServer, governance_server::GovernanceServer,
};
pub use toolmesh_governance::Principal;
use tower::retry::budget::TpsBudget;
use view::SnapshotView;

/// How often channels to endpoints no snapshot names are closed.
const POOL_SWEEP: Duration = Duration::from_secs(10);

/// A running dispatcher; cheap to clone.
#[derive(Clone)]
pub struct Dispatcher {
    invoker: Arc<Invoker>,
    listings: Arc<list::ListCache>,
    admission: Arc<Semaphore>,
    max_in_flight: usize,
}

impl Dispatcher {
    /// Starts a dispatcher that follows `snapshots` (from an in-process
    /// registry or [`follow_registry`]) and publishes tool health on
    /// `health`. Must be called inside a tokio runtime.
    pub fn new(
        config: DispatcherConfig,
        snapshots: watch::Receiver<Arc<Snapshot>>,
        health: HealthReporter,
    ) -> Self {
        Dispatcher::with_governance(config, snapshots, health, Governance::dev())
    }

    /// Like [`new`](Self::new), under `governance`: who callers are, what
    /// they may see and call, approvals, rate limits and audit.
    pub fn with_governance(
        config: DispatcherConfig,
        mut snapshots: watch::Receiver<Arc<Snapshot>>,
        health: HealthReporter,
        governance: Governance,
    ) -> Self {
        let first = snapshots.borrow_and_update().clone();
        let view = Arc::new(SnapshotView::new(first, config.snapshot_history));
        let pool = Arc::new(
            Endpoints::new(EjectionPolicy {
                after_failures: config.eject_after_failures.max(1),
                base: config.base_ejection,
                max: config.max_ejection,
            })
            .with_tls(config.tls.clone()),
        );
        let changed = Arc::new(Notify::new());
        let ejections = Arc::new(Notify::new());
        let invoker = Arc::new(Invoker {
            view: view.clone(),
            pool: pool.clone(),
            budget: TpsBudget::new(
                config.retry_budget_window,
                config.retry_budget_min_per_sec,
                config.retry_budget_ratio,
            ),
            ejections: ejections.clone(),
            config: config.clone(),
            governance,
        });
        tokio::spawn(tool_health::run(
            view.clone(),
            pool.clone(),
            health,
            changed.clone(),
            ejections,
        ));
        tokio::spawn(async move {
            let mut swept = Instant::now();
            while snapshots.changed().await.is_ok() {
                let snapshot = snapshots.borrow_and_update().clone();
                view.install(snapshot.clone());
                changed.notify_one();
                // Forgetting departed endpoints walks every instance: do it
                // now and then, not on every change.
                if swept.elapsed() >= POOL_SWEEP {
                    swept = Instant::now();
                    let endpoints: HashSet<&str> = snapshot
                        .entries()
                        .flat_map(|e| e.instances.iter().map(|i| &*i.endpoint))
                        .collect();
                    pool.retain(|address| endpoints.contains(address));
                }
            }
        });
        Dispatcher {
            invoker,
            listings: Arc::default(),
            admission: Arc::new(Semaphore::new(config.max_in_flight)),
            max_in_flight: config.max_in_flight,
        }
    }

    /// The tools `who` can call now (or in a pinned snapshot), sorted by name.
    pub fn list_tools_for(
        &self,
        who: &Principal,
        snapshot_version: u64,
        format: ToolFormat,
    ) -> Result<ListToolsResponse, Status> {
        let snapshot = self.pinned(snapshot_version)?;
        let pool = &self.invoker.pool;
        let governance = &self.invoker.governance;
        let policy = governance.policy();
        let key = list::cache_key(
            snapshot.version(),
            governance.policy.generation(),
            who,
            format,
        );
        Ok(self.listings.get_or_render(key, || {
            let entries = list::callable(&snapshot, |e| {
                balance::in_rotation(e, pool) && policy.decide(who, e.def.spec()).is_allowed()
            });
            list::render(snapshot.version(), &entries, format)
        }))
    }

    /// [`list_tools_for`](Self::list_tools_for) the anonymous caller.
    pub fn list_tools(
        &self,
        snapshot_version: u64,
        format: ToolFormat,
    ) -> Result<ListToolsResponse, Status> {
        let who = self.invoker.governance.anonymous()?;
        self.list_tools_for(&who, snapshot_version, format)
    }

    /// Invokes a tool. Tool failures come back inside the response; an
    /// `Err` means the dispatcher itself could not take the call
    /// (RESOURCE_EXHAUSTED when over `max_in_flight`, FAILED_PRECONDITION
    /// for an expired pin).
    pub async fn invoke_as(
        &self,
        who: &Principal,
        request: InvokeRequest,
        caller_timeout: Option<Duration>,
    ) -> Result<InvokeResponse, Status> {
        let Ok(_permit) = self.admission.try_acquire() else {
            return Err(Status::resource_exhausted(format!(
                "the dispatcher is at its limit of {} calls in flight; retry with backoff",
                self.max_in_flight
            )));
        };
        let snapshot = self.pinned(request.snapshot_version)?;
        Ok(self
            .invoker
            .invoke(snapshot, who, request, caller_timeout)
            .await)
    }

    /// [`invoke_as`](Self::invoke_as) the anonymous caller.
    pub async fn invoke(
        &self,
        request: InvokeRequest,
        caller_timeout: Option<Duration>,
    ) -> Result<InvokeResponse, Status> {
        let who = self.invoker.governance.anonymous()?;
        self.invoke_as(&who, request, caller_timeout).await
    }

    /// The governance this dispatcher runs with.
    pub fn governance(&self) -> &Governance {
        &self.invoker.governance
    }

    /// The `toolmesh.v1.Governance` gRPC service (explain, approvals).
    pub fn governance_service(&self) -> GovernanceServer<GovernanceService> {
        GovernanceServer::new(GovernanceService {
            dispatcher: self.clone(),
        })
    }

    /// Whether `entry` is callable here now: exposed and not all ejected.
    pub fn is_callable(&self, entry: &toolmesh::ToolEntry) -> bool {
        balance::in_rotation(entry, &self.invoker.pool)
    }

    /// The newest snapshot this dispatcher holds.
    pub fn current_snapshot(&self) -> Arc<Snapshot> {
        self.invoker.view.current()
    }

    /// The gRPC service, with message size limits set.
    pub fn grpc_service(&self) -> DispatcherServer<DispatcherService> {
        DispatcherServer::new(DispatcherService {
            dispatcher: self.clone(),
        })
        .max_decoding_message_size(MAX_CALL_MESSAGE_BYTES)
        .max_encoding_message_size(MAX_CALL_MESSAGE_BYTES)
    }

    fn pinned(&self, version: u64) -> Result<Arc<Snapshot>, Status> {
        self.invoker
            .view
            .get(version)
            .map_err(|e| Status::failed_precondition(e.to_string()))
    }
}
