//! The dispatcher: the gateway agent runtimes talk to. It lists the tools a
//! caller can use and runs each call through one pipeline (`call`) — typed
//! stages (resolve, authorize, validate, admit, attempts) inside layers
//! (cache, fallback, canary accounting, observation) — whichever front door
//! the call came in by.
#![forbid(unsafe_code)]

mod call;
mod canary;
mod config;
mod embeddings;
mod endpoints;
mod error;
mod executor_connection;
mod follow;
mod governance_service;
mod list;
mod metrics;
mod page;
mod projection;
mod recent;
mod refusal;
mod request;
mod result_cache;
mod route;
mod search;
mod search_tool;
mod service;
mod tool_health;
mod tools_watch;
mod window;

pub use call::session as session_of;
pub use canary::RolloutControl;
pub use config::DispatcherConfig;
pub use embeddings::{EMBEDDINGS_BATCH, EMBEDDINGS_WAIT, EmbeddingsConfig};
pub use error::{AbortError, CallError};
pub use follow::{EPOCH_GRACE, follow_registry, follow_registry_sharing};
pub use governance_service::GovernanceService;
pub use page::MAX_LIST_PAGE;
pub use recent::{RECENT_WINDOW, RecentCalls};
pub use refusal::Refusal;
pub use request::{CallRequest, Reply, Streamed, Unary};
pub use search_tool::{SEARCH_TOOL_DESCRIPTION, search_tool_request, search_tool_schema};
pub use service::DispatcherService;
pub use tools_watch::{ToolsWatch, WATCH_CHUNK};

use call::{Attempts, Pipeline, Relay};
use endpoints::{EjectionPolicy, Endpoints};
use metrics::Metrics;
use result_cache::ResultCache;
use std::collections::HashSet;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore, mpsc, watch};
use tokio::time::Instant;
use tokio_util::sync::{CancellationToken, DropGuard};
use tonic_health::pb::health_server::HealthServer;
use tonic_health::server::HealthReporter;
use toolmesh::Principal;
use toolmesh::pb::shared::dispatcher_server::DispatcherServer;
use toolmesh::pb::{
    InvokeEvent, InvokeRequest, InvokeResponse, ListToolsRequest, ListToolsResponse, ToolFormat,
    governance_server::GovernanceServer, invoke_event,
};
use toolmesh::{Snapshot, SnapshotHistory};
use toolmesh_governance::Governance;
use toolmesh_telemetry::trace::Context as TraceContext;
use toolmesh_transport::MAX_CALL_MESSAGE_BYTES;
use toolmesh_transport::{HealthGate, gated_health};
use tower::retry::budget::TpsBudget;

/// Runs `f` when dropped (counts a call out of flight however it ends).
fn scopeguard(f: impl FnOnce()) -> impl Drop {
    struct Guard<F: FnOnce()>(Option<F>);
    impl<F: FnOnce()> Drop for Guard<F> {
        fn drop(&mut self) {
            if let Some(f) = self.0.take() {
                f();
            }
        }
    }
    Guard(Some(f))
}

/// How often channels to endpoints no snapshot names are closed.
const POOL_SWEEP: Duration = Duration::from_secs(10);

/// Events of one `InvokeStream` that may wait for a slow caller before the
/// executor's stream is held back.
const STREAM_BUFFER: usize = 16;

/// A call the dispatcher accepted, before the pipeline's checks admit it
/// ([`call::Pipeline`]): its slot under `max_in_flight` (freed when the
/// call ends) and the snapshot it runs against.
struct Accepted {
    _slot: OwnedSemaphorePermit,
    snapshot: Arc<Snapshot>,
}

/// A running dispatcher; cheap to clone. Its background tasks stop when
/// the last clone is dropped.
#[derive(Clone)]
pub struct Dispatcher {
    pipeline: Arc<Pipeline>,
    /// Each caller view's tools, per snapshot (ListTools, SearchTools).
    projections: Arc<projection::ProjectionCache>,
    /// ListTools pages rendered from them.
    pages: Arc<page::PageCache>,
    /// The search index of the installed snapshot (SearchTools).
    search: Arc<search::SearchIndexes>,
    admission: Arc<Semaphore>,
    max_in_flight: usize,
    /// The version of the snapshot calls and listings use now.
    installed: watch::Receiver<u64>,
    /// Cancelled when the server stops: callers' watches of their tools
    /// end then, rather than holding its drain open.
    watches_ended: CancellationToken,
    _tasks: Arc<DropGuard>,
}

impl std::fmt::Debug for Dispatcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dispatcher")
            .field("snapshot", &self.current_snapshot().version())
            .field("max_in_flight", &self.max_in_flight)
            .finish_non_exhaustive()
    }
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
        mut updates: watch::Receiver<Arc<Snapshot>>,
        health: HealthReporter,
        governance: Governance,
    ) -> Self {
        let first = updates.borrow_and_update().clone();
        let snapshots = Arc::new(SnapshotHistory::new(first, config.snapshot_history));
        let pool = Arc::new(
            Endpoints::new(EjectionPolicy {
                after_failures: config.eject_after_failures.max(1),
                base: config.base_ejection,
                max: config.max_ejection,
            })
            .with_tls(config.tls.clone()),
        );
        let metrics = Arc::new(Metrics::new(&config.metrics, pool.clone()));
        metrics.snapshot_installed(snapshots.current().version());
        let changed = Arc::new(Notify::new());
        let ejections = watch::Sender::new(0);
        let stop = CancellationToken::new();
        tokio::spawn(tool_health::run(
            snapshots.clone(),
            pool.clone(),
            health,
            changed.clone(),
            ejections.subscribe(),
            stop.clone(),
        ));
        let cache = Arc::new(ResultCache::default());
        let (now_installed, installed) = watch::channel(snapshots.current().version());
        let embeddings = config.search_embeddings.clone().map(|embeddings| {
            // Follows the snapshots the follower installs, on a task of
            // its own: embedding never holds an install back.
            embeddings::Embeddings::start(
                embeddings,
                updates.clone(),
                metrics.clone(),
                stop.clone(),
            )
        });
        let search = Arc::new(search::SearchIndexes::new(snapshots.current(), embeddings));
        let follower = Follower {
            updates,
            installed: now_installed,
            snapshots: snapshots.clone(),
            pool: pool.clone(),
            cache: cache.clone(),
            changed,
            metrics: metrics.clone(),
            search: search.clone(),
        };
        tokio::spawn(follower.run(stop.clone()));
        let pipeline = Pipeline {
            snapshots,
            governance,
            attempts: Attempts {
                pool,
                budget: TpsBudget::new(
                    config.retry_budget_window,
                    config.retry_budget_min_per_sec,
                    config.retry_budget_ratio,
                ),
                ejections,
                metrics: metrics.clone(),
                max_in_flight_per_instance: config.max_in_flight_per_instance,
                min_attempt: config.min_attempt_budget,
            },
            max_argument_bytes: config.max_argument_bytes,
            metrics,
            cache,
            pairings: Default::default(),
            canaries: canary::CanaryWatch::new(config.rollout_control.clone()),
        };
        Dispatcher {
            pipeline: Arc::new(pipeline),
            projections: Arc::default(),
            pages: Arc::default(),
            search,
            admission: Arc::new(Semaphore::new(config.max_in_flight)),
            max_in_flight: config.max_in_flight,
            installed,
            watches_ended: CancellationToken::new(),
            _tasks: Arc::new(stop.drop_guard()),
        }
    }

    /// Returns once calls and listings use a snapshot of `version` or later
    /// (the one an operator's decision was answered with), or after
    /// `limit`; whether they do.
    pub async fn caught_up(&self, version: u64, limit: Duration) -> bool {
        let mut installed = self.installed.clone();
        let reached = tokio::time::timeout(limit, installed.wait_for(|now| *now >= version));
        matches!(reached.await, Ok(Ok(_)))
    }

    /// The page of the tools `who` can call now (or in a pinned snapshot)
    /// that `request` asks for, sorted by name; its `next_page_token`
    /// continues the walk in the same snapshot. Pages are cached per
    /// caller view: the same `Arc` comes back while the page stays the same.
    pub fn list_tools_for(
        &self,
        who: &Principal,
        request: &ListToolsRequest,
    ) -> Result<Arc<ListToolsResponse>, Refusal> {
        let format = ToolFormat::try_from(request.format)
            .map_err(|_| Refusal::UnknownFormat(request.format))?;
        let (snapshot, after) = self.page_start(request)?;
        let session = call::session(&request.context);
        let projection = self.projection(who, session, &snapshot)?;
        let size = page::size(request.page_size);
        let deferred = request.defer_loading;
        let shape = (format, after.as_str(), size, deferred);
        Ok(self.pages.get_or_render(&projection, shape, || {
            let policy = self.governance().policy();
            let entries = &projection.entries;
            let start = projection.start_after(&after);
            let wanted = start..(start + size).min(entries.len());
            // A deferred listing's first page leads with `search_tools`.
            let search = (deferred && after.is_empty()).then(search_tool::entry);
            let (mut page, end) = page::fitted(wanted, |range| {
                let listed: Vec<Arc<toolmesh::ToolEntry>> =
                    search.iter().chain(&entries[range]).cloned().collect();
                list::render(
                    projection.snapshot_version,
                    &listed,
                    (format, deferred),
                    |e| list::narrowed(&policy, who, e),
                )
            });
            if end < entries.len() {
                page.next_page_token = page::Resume {
                    snapshot_version: projection.snapshot_version,
                    epoch: projection.epoch.clone(),
                    after: entries[end - 1].def.name().to_owned(),
                }
                .token();
            }
            page
        }))
    }

    /// [`list_tools_for`](Self::list_tools_for) the anonymous caller.
    pub fn list_tools(
        &self,
        request: &ListToolsRequest,
    ) -> Result<Arc<ListToolsResponse>, Refusal> {
        self.list_tools_for(&self.anonymous()?, request)
    }

    /// The snapshot a ListTools page lists and the name its tools follow
    /// ("" for the first page): the one its `page_token` continues, else
    /// the one it pins (or the newest).
    fn page_start(&self, request: &ListToolsRequest) -> Result<(Arc<Snapshot>, String), Refusal> {
        if request.page_token.is_empty() {
            let snapshot = self.pipeline.snapshots.get(request.snapshot_version)?;
            return Ok((snapshot, String::new()));
        }
        let resume = page::Resume::parse(&request.page_token)?;
        if request.snapshot_version != 0 && request.snapshot_version != resume.snapshot_version {
            return Err(Refusal::BadPageToken {
                token: request.page_token.chars().take(64).collect(),
                why: format!(
                    "it continues snapshot {}, not snapshot_version {}",
                    resume.snapshot_version, request.snapshot_version
                ),
            });
        }
        let gone = || Refusal::PageGone {
            version: resume.snapshot_version,
            epoch: resume.epoch.clone(),
        };
        let snapshot = self
            .pipeline
            .snapshots
            .get(resume.snapshot_version)
            .map_err(|_| gone())?;
        if snapshot.epoch() != resume.epoch {
            return Err(gone());
        }
        Ok((snapshot, resume.after))
    }

    /// What `who` (in agent session `session`: an anonymous caller's
    /// rollout assignment is its session's) may list in `snapshot`, each
    /// tool in the version its calls get: found through the names its
    /// grants reach ([`toolmesh_policy::Policy::candidates`]), each then
    /// decided; one projection per caller view and snapshot, reused.
    pub(crate) fn projection(
        &self,
        who: &Principal,
        session: &str,
        snapshot: &Arc<Snapshot>,
    ) -> Result<Arc<projection::Projection>, Refusal> {
        if let Some(scope) = who.missing_list_scope() {
            return Err(Refusal::MissingListScope(scope.to_owned()));
        }
        let current = self.pipeline.snapshots.current();
        let pinned = !Arc::ptr_eq(snapshot, &current);
        let governance = &self.pipeline.governance;
        let policy = governance.policy();
        let caller = call::resolve::caller(who, session);
        let key = projection::view_key(
            (snapshot.version(), current.version()),
            governance.policy.generation(),
            who,
            &call::resolve::rollout_view(snapshot, &caller),
        );
        Ok(self.projections.get_or_build(key, || {
            let candidates = policy.candidates(who);
            let names = projection::reached(snapshot, &candidates);
            let pinned = pinned.then_some(&*current);
            let keep = self.listable(who, &policy, pinned);
            let entries = projection::callable(snapshot, &current, &caller, names, keep);
            projection::Projection {
                snapshot_version: snapshot.version(),
                epoch: snapshot.epoch().to_owned(),
                entries,
            }
        }))
    }

    /// Whether a resolved entry is listed for `who` under `policy`: in
    /// rotation here and granted. A listing `pinned` to an older snapshot
    /// takes the switches and instances of the current one (a pin fixes
    /// the specs listed, never those).
    fn listable<'a>(
        &'a self,
        who: &'a Principal,
        policy: &'a toolmesh_policy::Policy,
        pinned: Option<&'a Snapshot>,
    ) -> impl Fn(&Arc<toolmesh::ToolEntry>) -> bool + 'a {
        let pool = &self.pipeline.attempts.pool;
        move |entry| {
            let in_rotation = match pinned {
                Some(current) => route::in_rotation(&entry.as_of(current), pool),
                None => route::in_rotation(entry, pool),
            };
            in_rotation && policy.decide(who, entry.def.spec()).is_allowed()
        }
    }

    /// `who`'s view of the tools in agent `session` (as
    /// [`list_tools_for`](Self::list_tools_for) shows it, in `format`),
    /// sent whole and then as each change of it: what `WatchTools` streams
    /// and the MCP door's `list_changed` waits on.
    pub fn watch_tools(
        &self,
        who: &Principal,
        session: &str,
        format: ToolFormat,
    ) -> Result<ToolsWatch, Refusal> {
        if let Some(scope) = who.missing_list_scope() {
            return Err(Refusal::MissingListScope(scope.to_owned()));
        }
        Ok(ToolsWatch::new(self.clone(), who.clone(), session, format))
    }

    /// Ends every watch of the tools ([`watch_tools`](Self::watch_tools),
    /// WatchTools streams, the MCP door's `list_changed`): a stopping
    /// server drains calls, and a watch never ends by itself. Their
    /// callers open them again elsewhere.
    pub fn end_watches(&self) {
        self.watches_ended.cancel();
    }

    /// Runs one call through the pipeline, answered as `call` asks: by
    /// the response ([`Unary`]) or by a stream of events ending with it
    /// ([`Streamed`]). Tool failures come back inside the response; a
    /// [`Refusal`] means the dispatcher itself would not take the call (over
    /// `max_in_flight`, an expired pin).
    pub fn call<'a, R: Reply + 'a>(
        &'a self,
        call: CallRequest<R>,
    ) -> impl Future<Output = Result<R::Answer, Refusal>> + Send + 'a {
        R::answer(self, call, request::sealed::Token(()))
    }

    /// Takes a unary call on and runs it in this task, relaying what the
    /// tool reports to the caller's progress, if it shows it.
    pub(crate) async fn answer_unary(
        &self,
        call: CallRequest<Unary<'_>>,
    ) -> Result<InvokeResponse, Refusal> {
        let accepted = self.accept(&call.request)?;
        let Unary { who, relay } = &call.reply;
        Ok(self
            .run(
                accepted,
                who,
                call.request,
                call.timeout,
                call.parent,
                relay,
            )
            .await)
    }

    /// Takes a streamed call on and runs it in a task of its own, sending
    /// what the tool reports and then the response to the receiver.
    pub(crate) fn answer_streamed(
        &self,
        call: CallRequest<Streamed>,
    ) -> Result<mpsc::Receiver<InvokeEvent>, Refusal> {
        let accepted = self.accept(&call.request)?;
        let (events, received) = mpsc::channel(STREAM_BUFFER);
        let dispatcher = self.clone();
        tokio::spawn(async move {
            let relay = Relay::to(events.clone());
            let CallRequest {
                request,
                timeout,
                parent,
                reply: Streamed { who },
            } = call;
            let run = dispatcher.run(accepted, &who, request, timeout, parent, &relay);
            let response = tokio::select! {
                response = run => response,
                // The caller went away: dropping the call cancels it.
                () = events.closed() => return,
            };
            let done = invoke_event::Event::Done(response);
            let _ = events.send(InvokeEvent { event: Some(done) }).await;
        });
        Ok(received)
    }

    /// The anonymous caller, where the policy admits one.
    pub fn anonymous(&self) -> Result<Principal, Refusal> {
        Ok(self.governance().authenticate(None, None)?)
    }

    /// Takes a call on, or refuses it: a slot under `max_in_flight` and
    /// the snapshot it names.
    fn accept(&self, request: &InvokeRequest) -> Result<Accepted, Refusal> {
        let Ok(permit) = self.admission.clone().try_acquire_owned() else {
            self.pipeline.metrics.shed.inc();
            return Err(Refusal::Overloaded {
                limit: self.max_in_flight,
            });
        };
        let snapshot = self.pipeline.snapshots.get(request.snapshot_version)?;
        Ok(Accepted {
            _slot: permit,
            snapshot,
        })
    }

    /// Runs an accepted call through the pipeline, counted in flight.
    async fn run(
        &self,
        accepted: Accepted,
        who: &Principal,
        request: InvokeRequest,
        caller_timeout: Option<Duration>,
        parent: TraceContext,
        relay: &Relay,
    ) -> InvokeResponse {
        let metrics = &self.pipeline.metrics;
        metrics.in_flight.inc();
        let _in_flight = scopeguard(|| {
            metrics.in_flight.dec();
        });
        // The slot is held until the call ends.
        let Accepted { _slot, snapshot } = accepted;
        if search_tool::is_named(&request.tool) {
            // The dispatcher's own tool: no executor, no pipeline stage;
            // the snapshot a pin names is searched.
            let pinned = (request.snapshot_version != 0).then_some(snapshot);
            return self
                .invoke_search_tool(who, &request, pinned, caller_timeout)
                .await;
        }
        self.pipeline
            .run(snapshot, who, request, caller_timeout, parent, relay)
            .await
    }

    /// Approves (`deny` = None) or denies an approval as `approver`: the
    /// same check and audit as the CLI's `approve`/`deny`, counted.
    pub async fn decide_approval(
        &self,
        approver: &Principal,
        id: &str,
        deny: Option<&str>,
    ) -> Result<toolmesh_governance::ApprovalTicket, toolmesh_governance::ApprovalError> {
        let ticket = self
            .governance()
            .decide_approval(approver, id, deny)
            .await?;
        self.pipeline.metrics.decided(deny.is_some());
        Ok(ticket)
    }

    /// Calls in flight to the executor at `address`, and how long it stays
    /// ejected for `tool` (None: in rotation).
    pub fn instance_state(&self, address: &str, tool: &str) -> (u32, Option<Duration>) {
        let pool = &self.pipeline.attempts.pool;
        (pool.in_flight(address), pool.ejection_left(address, tool))
    }

    /// What the calls of `tool@version` did over the last
    /// [`RECENT_WINDOW`] on this dispatcher (zero when it was not called).
    pub fn recent_calls(&self, tool: &str, version: &str) -> RecentCalls {
        self.pipeline.metrics.recent(tool, version)
    }

    /// The governance this dispatcher runs with.
    pub fn governance(&self) -> &Governance {
        &self.pipeline.governance
    }

    /// The caller of a gRPC request: bearer token, else verified client
    /// certificate, else the anonymous caller where the policy admits one.
    pub fn caller<T>(&self, request: &tonic::Request<T>) -> Result<Principal, Refusal> {
        let bearer = toolmesh_transport::bearer(request.metadata());
        // The certificate (a copy of its DER) only when there is no token.
        let certificate = bearer
            .is_none()
            .then(|| toolmesh_transport::peer_certificate(request))
            .flatten();
        Ok(self
            .governance()
            .authenticate(bearer, certificate.as_ref())?)
    }

    /// The `toolmesh.v1.Governance` gRPC service (explain, approvals).
    pub fn governance_service(&self) -> GovernanceServer<GovernanceService> {
        GovernanceServer::new(GovernanceService {
            dispatcher: self.clone(),
        })
    }

    /// Whether `entry` is callable here now: exposed and not all ejected.
    pub fn is_callable(&self, entry: &toolmesh::ToolEntry) -> bool {
        route::in_rotation(entry, &self.pipeline.attempts.pool)
    }

    /// The newest snapshot this dispatcher holds.
    pub fn current_snapshot(&self) -> Arc<Snapshot> {
        self.pipeline.snapshots.current()
    }

    /// `grpc.health.v1` over `reporter`'s statuses, where a per-tool name
    /// (`toolmesh.tool.<name>`) answers only for callers the policy lets
    /// see that tool: for anyone else a hidden tool is as unknown as a
    /// name that never existed (NOT_FOUND).
    pub fn health_service(&self, reporter: HealthReporter) -> HealthServer<HealthGate> {
        let dispatcher = self.clone();
        gated_health(
            reporter,
            Arc::new(move |request| {
                match toolmesh_transport::tool_of_health_service(&request.get_ref().service) {
                    None => true,
                    Some(tool) => dispatcher.may_see(request, tool),
                }
            }),
        )
    }

    /// Whether the caller of `request` may see some version of `tool`.
    fn may_see<T>(&self, request: &tonic::Request<T>, tool: &str) -> bool {
        let Ok(who) = self.caller(request) else {
            return false;
        };
        let policy = self.governance().policy();
        self.current_snapshot()
            .versions(tool)
            .iter()
            .any(|entry| policy.decide(&who, entry.def.spec()).is_allowed())
    }

    /// The gRPC service, with message size limits set.
    pub fn grpc_service(&self) -> DispatcherServer<DispatcherService> {
        DispatcherServer::new(DispatcherService {
            dispatcher: self.clone(),
        })
        .max_decoding_message_size(MAX_CALL_MESSAGE_BYTES)
        .max_encoding_message_size(MAX_CALL_MESSAGE_BYTES)
    }
}

/// What installs each snapshot the registry publishes.
struct Follower {
    /// The registry's snapshots.
    updates: watch::Receiver<Arc<Snapshot>>,
    /// Hears the version of each snapshot installed.
    installed: watch::Sender<u64>,
    snapshots: Arc<SnapshotHistory>,
    pool: Arc<Endpoints>,
    cache: Arc<ResultCache>,
    /// Tells tool health that the snapshot changed.
    changed: Arc<Notify>,
    metrics: Arc<Metrics>,
    /// Follows each snapshot installed, after it is.
    search: Arc<search::SearchIndexes>,
}

impl Follower {
    /// Installs each snapshot `updates` delivers, until `stop`, dropping
    /// the cached answers of every tool it holds under a new definition;
    /// now and then forgets the channels of endpoints no snapshot names any
    /// more, and the figures of tool versions it no longer holds (that
    /// walks every instance, so not on every change).
    async fn run(mut self, stop: CancellationToken) {
        let mut swept = Instant::now();
        while let Some(Ok(())) = stop.run_until_cancelled(self.updates.changed()).await {
            let snapshot = self.updates.borrow_and_update().clone();
            self.snapshots.install(snapshot.clone());
            self.installed.send_replace(snapshot.version());
            self.search.follow(snapshot.clone());
            self.cache.forget_replaced(&snapshot);
            self.metrics.snapshot_installed(snapshot.version());
            self.changed.notify_one();
            if swept.elapsed() >= POOL_SWEEP {
                swept = Instant::now();
                let endpoints: HashSet<&str> = snapshot
                    .entries()
                    .flat_map(|e| e.instances.iter().map(|i| &*i.endpoint))
                    .collect();
                self.pool.retain(|address| endpoints.contains(address));
                self.metrics.forget_gone(&snapshot);
            }
        }
    }
}
