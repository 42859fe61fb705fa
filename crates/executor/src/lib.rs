//! The toolmesh executor SDK: write a typed [`Tool`], add it to an
//! [`Executor`], and [`serve`](Executor::serve) it. The SDK generates each
//! tool's input schema from its argument type, serves `toolmesh.v1.Executor`
//! with `grpc.health.v1` and reflection, registers with the registry and keeps
//! the lease alive, checks every call's arguments, enforces the deadline,
//! turns a panicking tool into `EXECUTOR_FAILED`, streams the progress of
//! tools that declare [`ToolInfo::streams_progress`] (`ExecuteStream`, see
//! [`CallCx::progress`]) and drains on shutdown.
//!
//! Tools known only at runtime (an MCP server's, say) are [`DynamicTool`]s:
//! a spec as data and a [`JsonTool`] handler; a running executor's whole
//! set is swapped, and registered again, through [`ExecutorControl`].
//!
//! ```
//! use schemars::JsonSchema;
//! use serde::Deserialize;
//! use toolmesh_executor::{
//!     CallCx, Executor, RiskLevel, ServeOptions, Tool, ToolFailure, ToolInfo, ToolOutput,
//! };
//!
//! /// Arguments of `greet`.
//! #[derive(Deserialize, JsonSchema)]
//! #[serde(deny_unknown_fields)]
//! struct GreetArgs {
//!     /// Who to greet.
//!     name: String,
//! }
//!
//! struct Greet;
//!
//! impl Tool for Greet {
//!     type Args = GreetArgs;
//!     fn info(&self) -> ToolInfo {
//!         ToolInfo::new("greet", "1.0.0", "Say hello to someone by name.")
//!             .risk(RiskLevel::Low)
//!             .idempotent(true)
//!     }
//!     async fn call(&self, args: GreetArgs, _cx: CallCx) -> Result<ToolOutput, ToolFailure> {
//!         if args.name.is_empty() {
//!             return Err(ToolFailure::new("name is empty; pass the person's name"));
//!         }
//!         Ok(ToolOutput::text(format!("hello, {}", args.name)))
//!     }
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), toolmesh_executor::ExecutorError> {
//! let executor = Executor::new("greeter").tool(Greet);
//!
//! // In process, the same path a served call takes.
//! let result = executor.call("greet", serde_json::json!({"name": "Ada"})).await;
//! assert_eq!(result.output, "hello, Ada");
//!
//! // Served: bind, register with the registry (empty = do not register),
//! // serve until the shutdown future resolves, then drain.
//! let opts = ServeOptions { registry: String::new(), ..ServeOptions::default() };
//! let bound = executor.bind(opts).await?;
//! println!("serving on {}", bound.local_addr());
//! bound.run(async { /* e.g. toolmesh_transport::shutdown_signal() */ }).await?;
//! # Ok(())
//! # }
//! ```
#![forbid(unsafe_code)]

mod backoff;
mod context;
mod control;
mod dispatcher_only;
mod dynamic;
mod erased;
mod error;
mod lease;
mod metrics;
mod progress;
mod server;
mod service;
mod stream;
mod tool;

pub use backoff::Backoff;
pub use context::CallCx;
pub use control::ExecutorControl;
pub use dynamic::{DynamicTool, JsonTool};
pub use erased::{schema_text, schema_value};
pub use error::ExecutorError;
pub use lease::{BACKOFF_INITIAL, BACKOFF_MAX};
pub use progress::ProgressHandle;
/// The JSON crate of [`ToolOutput::json`] and [`JsonTool`], so that an
/// executor needs no dependency of its own for it.
pub use serde_json;
pub use server::CANCEL_GRACE;
pub use tool::{Tool, ToolFailure, ToolInfo, ToolOutput};
pub use toolmesh::pb::{RetryPolicy, RiskLevel};
/// Resolves on SIGTERM or ctrl-c: the `shutdown` of [`Executor::serve`].
pub use toolmesh_transport::shutdown_signal;

use arc_swap::ArcSwap;
use server::{Core, ExecuteService, Slot, Tools};
use std::{future::Future, net::SocketAddr, sync::Arc, time::Duration};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tonic::{service::interceptor::InterceptedService, transport::Channel};
use tonic_health::{
    ServingStatus,
    pb::health_server::HealthServer,
    server::{HealthReporter, HealthService},
};
use toolmesh::pb::{self, executor_server::ExecutorServer};
use toolmesh_transport::{HealthOnly, MAX_CALL_MESSAGE_BYTES, Unroutable};
use tracing::{info, warn};

/// Longest the drain waits for the registry to confirm a Deregister.
pub const DEREGISTER_TIMEOUT: Duration = Duration::from_secs(1);

/// A set of tools owned by one service, ready to be bound and served.
pub struct Executor {
    service: String,
    tools: Arc<Tools>,
    problems: Vec<ExecutorError>,
    local_stop: CancellationToken,
}

impl std::fmt::Debug for Executor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Executor")
            .field("service", &self.service)
            .field("tools", &self.tools.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

impl Executor {
    /// An executor of `service` (the team or service name) with no tools yet.
    pub fn new(service: &str) -> Self {
        Executor {
            service: service.to_owned(),
            tools: Arc::new(Tools::new()),
            problems: Vec::new(),
            local_stop: CancellationToken::new(),
        }
    }

    /// Adds a tool. Its spec is built from [`Tool::info`] and the schema of
    /// its `Args`, and validated at once; a problem is reported by
    /// [`bind`](Executor::bind).
    pub fn tool<T: Tool>(self, tool: T) -> Self {
        let spec = tool.info().to_spec(schema_text::<T::Args>());
        self.with_slot(spec, Arc::new(erased::Typed(Arc::new(tool))))
    }

    /// Adds a tool whose spec is data (see [`DynamicTool`]); validated and
    /// reported as [`tool`](Executor::tool) does.
    pub fn dynamic_tool(self, tool: DynamicTool) -> Self {
        self.with_slot(tool.spec, tool.tool)
    }

    fn with_slot(mut self, spec: pb::ToolSpec, tool: Arc<dyn erased::ErasedTool>) -> Self {
        let name = spec.name.clone();
        if self.tools.contains_key(&name) {
            self.problems.push(ExecutorError::DuplicateTool(name));
            return self;
        }
        Arc::make_mut(&mut self.tools).insert(name, Slot::new(spec, tool));
        self
    }

    /// The service name.
    pub fn service(&self) -> &str {
        &self.service
    }

    /// The specs of every tool, sorted by name, as the SDK built them (the
    /// registry normalises defaults).
    pub fn specs(&self) -> Vec<pb::ToolSpec> {
        self.tools.values().map(|slot| slot.spec.clone()).collect()
    }

    /// Runs one call in process, exactly as a served call runs (argument
    /// checks, timeout, panic isolation), without a caller deadline.
    pub async fn execute(&self, request: pb::ExecuteRequest) -> pb::ToolResult {
        let core = Core {
            tools: ArcSwap::new(Arc::clone(&self.tools)),
            executor_id: format!("{}-local", self.service),
            stop: self.local_stop.clone(),
            // In-process calls are not served calls: counted nowhere.
            metrics: metrics::Metrics::new(&Default::default(), []),
        };
        core.execute(request, None, ProgressHandle::default()).await
    }

    /// [`execute`](Executor::execute) with a fresh call id, attempt 1, the
    /// served version and `arguments` as JSON.
    pub async fn call(&self, tool: &str, arguments: serde_json::Value) -> pb::ToolResult {
        self.execute(pb::ExecuteRequest {
            call_id: uuid::Uuid::new_v4().to_string(),
            tool: tool.to_owned(),
            version: String::new(),
            arguments: arguments.to_string(),
            attempt: 1,
            context: None,
        })
        .await
    }

    /// Checks every tool's spec (failing on the first problem, naming the
    /// tool and the reason) and binds the listener.
    pub async fn bind(self, opts: ServeOptions) -> Result<BoundExecutor, ExecutorError> {
        if self.service.trim().is_empty() {
            return Err(ExecutorError::EmptyService);
        }
        if let Some(problem) = self.problems.into_iter().next() {
            return Err(problem);
        }
        if self.tools.is_empty() {
            return Err(ExecutorError::NoTools(self.service));
        }
        let specs = control::valid_specs(&self.tools)?;
        let registry = if opts.registry.trim().is_empty() {
            None
        } else {
            Some(toolmesh_transport::channel(&opts.registry, &opts.tls)?)
        };
        if registry.is_some() {
            check_advertised(&opts)?;
        }
        let listener =
            TcpListener::bind(opts.listen)
                .await
                .map_err(|source| ExecutorError::Bind {
                    addr: opts.listen,
                    source,
                })?;
        let local_addr = listener
            .local_addr()
            .map_err(|source| ExecutorError::Bind {
                addr: opts.listen,
                source,
            })?;
        let endpoint = opts
            .advertise
            .clone()
            .unwrap_or_else(|| local_addr.to_string());
        let executor_id = opts.executor_id.clone().unwrap_or_else(|| {
            let id = uuid::Uuid::new_v4().simple().to_string();
            format!("{}-{}", self.service, &id[..8])
        });
        let registry_metrics = toolmesh_telemetry::MetricsRegistry::for_process("executor");
        let metrics = metrics::Metrics::new(
            &registry_metrics,
            specs.iter().map(|s| (s.name.as_str(), s.version.as_str())),
        );
        toolmesh_telemetry::trace::install_default(&self.service, opts.otlp_endpoint.as_deref())?;
        let admin = match &opts.admin_listen {
            Some(listen) => {
                // No policy here: /metrics names only this executor's own
                // tools and is served to whoever reaches the address.
                let options = toolmesh_telemetry::AdminOptions {
                    tls: toolmesh_telemetry::https::acceptor(opts.tls.files())?,
                    guard: toolmesh_telemetry::admin::guard(&opts.admin_allowed_hosts),
                };
                let routes = toolmesh_telemetry::metrics_routes(registry_metrics);
                Some(toolmesh_telemetry::AdminServer::start(listen, options, routes).await?)
            }
            None => None,
        };
        let health = HealthReporter::new();
        control::set_health(&health, ServingStatus::Serving).await;
        let health_only = match opts.health_listen {
            Some(addr) => Some(
                HealthOnly::bind(addr, health.clone())
                    .await
                    .map_err(|source| ExecutorError::HealthBind { addr, source })?,
            ),
            None => None,
        };
        let core = Arc::new(Core {
            tools: ArcSwap::new(self.tools),
            executor_id,
            stop: CancellationToken::new(),
            metrics,
        });
        Ok(BoundExecutor {
            control: ExecutorControl::new(Arc::clone(&core), specs.clone(), health.clone()),
            core,
            admin,
            service: self.service,
            specs,
            listener,
            local_addr,
            endpoint,
            registry: registry.map(|channel| (opts.registry.clone(), channel)),
            health,
            health_only,
            lease_ttl: opts.lease_ttl,
            grace: opts.grace,
            token: opts.token.clone(),
            tls: opts.tls.clone(),
        })
    }

    /// [`bind`](Executor::bind), then [`run`](BoundExecutor::run) until
    /// `shutdown` resolves.
    pub async fn serve(
        self,
        opts: ServeOptions,
        shutdown: impl Future<Output = ()> + Send,
    ) -> Result<(), ExecutorError> {
        self.bind(opts).await?.run(shutdown).await
    }
}

/// How and where to serve.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    /// The registry's `host:port`; empty means serve without registering.
    pub registry: String,
    /// Where to listen (`127.0.0.1:0` picks a free port).
    pub listen: SocketAddr,
    /// The endpoint to register (`host:port` dispatchers can dial, e.g. the
    /// pod IP); defaults to the bound address, which must then not be a
    /// wildcard such as `0.0.0.0`.
    pub advertise: Option<String>,
    /// Where to serve `grpc.health.v1` alone, in plaintext, for probes that
    /// cannot present a client certificate; `None` serves health only on
    /// the main listener.
    pub health_listen: Option<SocketAddr>,
    /// Unique id of this process; defaults to `{service}-{8 hex digits}`.
    pub executor_id: Option<String>,
    /// The lease to ask the registry for (it may grant another).
    pub lease_ttl: Duration,
    /// How long in-flight calls may take to finish once shutdown begins.
    pub grace: Duration,
    /// Registration token (sent as `authorization: Bearer …`), binding this
    /// executor to its owner: fixed, or a file read at each use; `None`
    /// registers without one.
    pub token: Option<toolmesh_transport::Credential>,
    /// TLS of this executor's server and of its channel to the registry.
    pub tls: toolmesh_transport::Tls,
    /// Serve `/metrics` on this `host:port` (`--admin-listen`), over HTTPS
    /// with `tls`' certificate; `None` serves none.
    pub admin_listen: Option<String>,
    /// `Host` values the admin listener accepts; empty is loopback only,
    /// `*` any.
    pub admin_allowed_hosts: Vec<String>,
    /// Export traces to this OTLP collector (`--otlp-endpoint`, else
    /// `OTEL_EXPORTER_OTLP_ENDPOINT`). When the process has no global
    /// tracing subscriber yet, the SDK installs one that exports; a host
    /// that installs its own adds [`toolmesh_telemetry::trace::layer`].
    pub otlp_endpoint: Option<String>,
}

impl Default for ServeOptions {
    fn default() -> Self {
        ServeOptions {
            registry: String::new(),
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            advertise: None,
            health_listen: None,
            executor_id: None,
            lease_ttl: Duration::from_secs(10),
            grace: Duration::from_secs(10),
            token: None,
            tls: toolmesh_transport::Tls::none(),
            admin_listen: None,
            admin_allowed_hosts: Vec::new(),
            otlp_endpoint: None,
        }
    }
}

impl ServeOptions {
    /// The defaults, registering with the registry at `registry` (`host:port`).
    pub fn new(registry: impl Into<String>) -> Self {
        ServeOptions {
            registry: registry.into(),
            ..ServeOptions::default()
        }
    }
}

/// An executor with its listener bound, not yet serving.
pub struct BoundExecutor {
    core: Arc<Core>,
    control: ExecutorControl,
    service: String,
    specs: Vec<pb::ToolSpec>,
    listener: TcpListener,
    local_addr: SocketAddr,
    /// The admin listener (`/metrics`), if asked for; stops with the executor.
    admin: Option<toolmesh_telemetry::AdminServer>,
    endpoint: String,
    registry: Option<(String, Channel)>,
    health: HealthReporter,
    health_only: Option<HealthOnly>,
    lease_ttl: Duration,
    grace: Duration,
    token: Option<toolmesh_transport::Credential>,
    tls: toolmesh_transport::Tls,
}

impl std::fmt::Debug for BoundExecutor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BoundExecutor")
            .field("executor_id", &self.core.executor_id)
            .field("local_addr", &self.local_addr)
            .field("endpoint", &self.endpoint)
            .finish_non_exhaustive()
    }
}

impl BoundExecutor {
    /// The address the listener is bound to.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// This executor's id, as registered.
    pub fn executor_id(&self) -> &str {
        &self.core.executor_id
    }

    /// Where the admin listener (`/metrics`) listens, if asked for.
    pub fn admin_addr(&self) -> Option<SocketAddr> {
        self.admin.as_ref().map(|a| a.addr)
    }

    /// `scheme://host:port` of the admin listener, if asked for.
    pub fn admin_url(&self) -> Option<String> {
        self.admin
            .as_ref()
            .map(toolmesh_telemetry::AdminServer::url)
    }

    /// The endpoint registered with the registry.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// Where the plaintext health-only listener is bound, if one was asked for.
    pub fn health_addr(&self) -> Option<SocketAddr> {
        self.health_only.as_ref().map(HealthOnly::local_addr)
    }

    /// What the host may change while the executor runs: the tool set
    /// and whether it serves (cheap to clone; keep it across `run`).
    pub fn control(&self) -> ExecutorControl {
        self.control.clone()
    }

    /// Serves until `shutdown` resolves, then drains: health goes
    /// NOT_SERVING, the lease is deregistered (best effort, at most
    /// [`DEREGISTER_TIMEOUT`]), the listener closes, and in-flight calls get
    /// up to `grace` to finish before they are cancelled.
    pub async fn run(self, shutdown: impl Future<Output = ()> + Send) -> Result<(), ExecutorError> {
        let BoundExecutor {
            core,
            control,
            service,
            specs,
            listener,
            local_addr,
            admin: _admin,
            endpoint,
            registry,
            health,
            health_only,
            lease_ttl,
            grace,
            token,
            tls,
        } = self;
        let executor_id = core.executor_id.clone();
        let stop_calls = core.stop.clone();
        let tool_count = specs.len();
        // With a registry, Execute is for dispatchers only (they get the
        // token through the registry).
        let dispatcher_only = registry
            .as_ref()
            .map(|_| Arc::new(dispatcher_only::DispatcherOnly::new()));
        let router = toolmesh_transport::server_builder(&tls)?
            .add_service(InterceptedService::new(
                ExecutorServer::new(ExecuteService {
                    core,
                    dispatcher_only: dispatcher_only.clone(),
                })
                .max_decoding_message_size(MAX_CALL_MESSAGE_BYTES)
                .max_encoding_message_size(MAX_CALL_MESSAGE_BYTES),
                server::stamp_arrival,
            ))
            .add_service(HealthServer::new(HealthService::from_health_reporter(
                health.clone(),
            )))
            .add_service(toolmesh_transport::reflection_service());
        let incoming = toolmesh_transport::incoming(listener);
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let mut server = tokio::spawn(router.serve_with_incoming_shutdown(incoming, async {
            let _ = stop_rx.await;
        }));
        info!(service, executor_id, %local_addr, endpoint, tools = tool_count, "executor serving");

        let lease = registry.map(|(address, channel)| {
            lease::LeaseTask::spawn(
                channel,
                address,
                pb::RegisterRequest {
                    executor_id: executor_id.clone(),
                    service: service.clone(),
                    endpoint: endpoint.clone(),
                    tools: specs,
                    lease_ttl_ms: tool::duration_ms_ceil(lease_ttl),
                    execute_token: dispatcher_only
                        .as_ref()
                        .map(|d| d.token().to_owned())
                        .unwrap_or_default(),
                },
                control.watch_specs(),
                token.clone(),
                dispatcher_only.clone(),
            )
        });

        let shutdown = std::pin::pin!(shutdown);
        let ended = tokio::select! {
            ended = &mut server => Some(ended),
            () = shutdown => None,
        };
        if let Some(ended) = ended {
            // The server stopped on its own: nothing to drain.
            if let Some(lease) = lease {
                lease.stop(DEREGISTER_TIMEOUT).await;
            }
            stop_calls.cancel();
            return server_outcome(ended);
        }

        info!(executor_id, grace_ms = grace.as_millis() as u64, "draining");
        control.drain().await;
        if let Some(lease) = lease {
            lease.stop(DEREGISTER_TIMEOUT).await;
        }
        let _ = stop_tx.send(());
        let result = match tokio::time::timeout(grace, &mut server).await {
            Ok(ended) => {
                info!(executor_id, "drained");
                server_outcome(ended)
            }
            Err(_) => {
                warn!(
                    executor_id,
                    grace_ms = grace.as_millis() as u64,
                    "grace period ran out with calls still in flight; cancelling them"
                );
                server.abort();
                Ok(())
            }
        };
        stop_calls.cancel();
        // Probes see NOT_SERVING until the very end of the drain.
        drop(health_only);
        result
    }
}

/// Refuses to register an endpoint no dispatcher can dial: the advertised
/// one, or else the listen address when it is a wildcard (its port may be 0
/// here: the bound port replaces it).
fn check_advertised(opts: &ServeOptions) -> Result<(), ExecutorError> {
    let unroutable = |endpoint: String, reason| ExecutorError::Unroutable { endpoint, reason };
    match &opts.advertise {
        Some(advertised) => toolmesh_transport::check_advertised(advertised)
            .map_err(|reason| unroutable(advertised.clone(), reason)),
        None if opts.listen.ip().is_unspecified() => Err(unroutable(
            opts.listen.to_string(),
            Unroutable::Wildcard(opts.listen.ip()),
        )),
        None => Ok(()),
    }
}

fn server_outcome(
    ended: Result<Result<(), tonic::transport::Error>, tokio::task::JoinError>,
) -> Result<(), ExecutorError> {
    match ended {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(ExecutorError::Serve(e)),
        Err(e) => Err(ExecutorError::ServerTask(e.to_string())),
    }
}

/// README.md's `rust` blocks are doctests of this crate: its executor
/// example compiles as printed (fragments are marked `ignore`).
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
struct Readme;
