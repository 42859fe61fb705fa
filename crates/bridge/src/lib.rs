//! Existing services as toolmesh executors: an MCP server (`toolmesh bridge mcp`), a gRPC service with server reflection (`toolmesh bridge grpc`) or an HTTP API described by an OpenAPI document (`toolmesh bridge openapi`).
//!
//! The MCP bridge is an MCP client of one upstream server — a command it
//! starts and speaks to over stdio, or a Streamable HTTP URL; of the
//! stateless 2026-07-28 revision or of the `initialize` era, as the
//! upstream answers — and an
//! ordinary executor of the mesh, built on the executor SDK: it lists the
//! upstream's tools (every page), maps each to a spec ([`ToolSelection`]:
//! which tools, under which name, with what risk), registers them, and
//! runs each call as `tools/call` with the call's cancellation and
//! progress. `tools/list_changed` lists and registers them again; an
//! upstream that goes away takes the bridge NOT_SERVING at once, and it
//! reconnects (starting a stdio child again) with backoff.
//!
//! The gRPC bridge reads a service's descriptors by server reflection and
//! registers each selected unary method as a tool whose schemas follow the
//! proto3 JSON mapping; a call is transcoded to protobuf and back. The
//! OpenAPI bridge registers each selected operation of the document as a
//! tool and turns a call into the HTTP request. All three share the
//! supervisor ([`supervisor::ToolSource`]), the selection and naming, the
//! health they report, and the refresh: on SIGHUP (and, for descriptors
//! and documents, every `--refresh-secs`) the upstream is read again and
//! its tools registered again if they changed.
//!
//! The upstream sees the bridge's own identity and credentials (its
//! `--header` / `--bearer-env` / `--bearer-file` / `--header-env`, never a
//! caller's token), and a stdio child
//! does not inherit the bridge's `TOOLMESH_*` environment.
#![forbid(unsafe_code)]

mod call;
mod client;
mod error;
mod grpc;
mod http;
mod mapping;
mod mcp;
mod openapi;
mod outbound;
mod refresh;
mod supervisor;
mod upstream;

pub use error::BridgeError;
pub use grpc::{GrpcBridgeOptions, GrpcTarget};
pub use http::{HttpsFiles, HttpsSettings};
pub use mapping::{ProblemKind, ServerIdentity, ToolProblem, ToolSelection, UpstreamKind};
pub use openapi::{OpenApiBridgeOptions, SpecLocation};
pub use outbound::OutboundAuth;
pub use refresh::DEFAULT_REFRESH;
pub use supervisor::{BACKOFF_INITIAL, BACKOFF_MAX};
pub use upstream::Upstream;

use call::Link;
use client::BridgeClient;
use mapping::{Mapped, OfferedTool};
use mcp::McpSource;
use refresh::Refresh;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;
use supervisor::ToolSource;
use tokio_util::sync::CancellationToken;
use toolmesh_executor::{BoundExecutor, DynamicTool, Executor, ServeOptions};
use tracing::warn;

/// What to bridge and how to serve it.
#[derive(Debug, Clone)]
pub struct BridgeOptions {
    /// The upstream MCP server.
    pub upstream: Upstream,
    /// The executor's service name; default the upstream's `serverInfo.name`.
    pub name: Option<String>,
    /// Which tools, under which names, with what risk.
    pub selection: ToolSelection,
    /// Registry, listen address, token… as for any executor.
    pub serve: ServeOptions,
}

/// The supervisor of a started bridge, waiting for the token that stops it.
type Supervising =
    Box<dyn FnOnce(CancellationToken) -> Pin<Box<dyn Future<Output = ()> + Send>> + Send>;

/// A bridge with its upstream connection open and its listener bound, not
/// yet serving.
pub struct Bridge {
    bound: BoundExecutor,
    supervising: Supervising,
    upstream: String,
    service: String,
    tools: Vec<String>,
}

impl std::fmt::Debug for Bridge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Bridge")
            .field("service", &self.service)
            .field("upstream", &self.upstream)
            .field("tools", &self.tools)
            .finish_non_exhaustive()
    }
}

impl Bridge {
    /// Opens a session with the upstream, lists and maps its tools, and
    /// binds the executor. Fails, naming each, when a selected tool cannot
    /// join the mesh (a name that breaks the rule: `--rename`), or when no
    /// tool is left to expose.
    pub async fn start(options: BridgeOptions) -> Result<Bridge, BridgeError> {
        let BridgeOptions {
            upstream,
            name,
            selection,
            serve,
        } = options;
        let client = BridgeClient::default();
        let session = upstream.connect(client.clone()).await?;
        let peer = session.peer().clone();
        let listing = mcp::list(&upstream, &peer, &selection).await?;
        let link = Arc::new(Link::new(upstream.describe(), client));
        let source = McpSource {
            upstream,
            selection,
            link,
        };
        let mapped = admit(&source, listing.mapped, &listing.offered, &source.selection)?;
        let identity = mcp::identity(&peer);
        let service = name
            .filter(|n| !n.trim().is_empty())
            .unwrap_or(identity.name);
        // Calls may come as soon as the executor registers: the session is
        // theirs from now on.
        let connection = source.open(session);
        let tools = mcp::dynamic_tools(&source.link, &mapped);
        // `tools/list_changed` says when to list again; SIGHUP too.
        Bridge::assemble(source, connection, &service, tools, serve, None).await
    }

    /// Binds an executor serving `tools` as `service`, to be kept in step
    /// with `source` (already open as `connection`) once it runs, and read
    /// again on SIGHUP (listened for from now on) and every `refresh_every`.
    pub(crate) async fn assemble<S: ToolSource>(
        source: S,
        connection: S::Connection,
        service: &str,
        tools: Vec<DynamicTool>,
        serve: ServeOptions,
        refresh_every: Option<Duration>,
    ) -> Result<Bridge, BridgeError> {
        let refresh = Refresh::new(refresh_every);
        let names = tools.iter().map(|t| t.spec().name.clone()).collect();
        let executor = tools
            .into_iter()
            .fold(Executor::new(service), Executor::dynamic_tool);
        let bound = executor.bind(serve).await?;
        let control = bound.control();
        let upstream = source.describe();
        let supervising: Supervising = Box::new(move |stop| {
            Box::pin(supervisor::supervise(
                source, control, connection, refresh, stop,
            ))
        });
        Ok(Bridge {
            bound,
            supervising,
            upstream,
            service: service.to_owned(),
            tools: names,
        })
    }

    /// The executor's service name.
    pub fn service(&self) -> &str {
        &self.service
    }

    /// The names the upstream's tools have in the mesh, at start.
    pub fn tools(&self) -> &[String] {
        &self.tools
    }

    /// This executor's id, as registered.
    pub fn executor_id(&self) -> &str {
        self.bound.executor_id()
    }

    /// The address the executor listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.bound.local_addr()
    }

    /// Where the plaintext health-only listener is, if asked for.
    pub fn health_addr(&self) -> Option<SocketAddr> {
        self.bound.health_addr()
    }

    /// `scheme://host:port` of the admin listener (`/metrics`), if asked for.
    pub fn admin_url(&self) -> Option<String> {
        self.bound.admin_url()
    }

    /// Serves until `shutdown` resolves, keeping the upstream and the mesh
    /// in step; then drains as any executor does (calls in flight finish
    /// against the upstream) and ends the upstream connection last.
    pub async fn run(self, shutdown: impl Future<Output = ()> + Send) -> Result<(), BridgeError> {
        let stop = CancellationToken::new();
        let mut supervising = tokio::spawn((self.supervising)(stop.clone()));
        // The supervisor ends only when told to; if it ends on its own the
        // bridge can no longer follow the upstream, so it drains and fails.
        let mut broke = None;
        let served = self
            .bound
            .run(async {
                tokio::select! {
                    () = shutdown => {}
                    ended = &mut supervising => broke = Some(ended),
                }
            })
            .await;
        stop.cancel();
        match broke {
            Some(ended) => {
                let why = match ended {
                    Ok(()) => "it returned".to_owned(),
                    Err(e) => e.to_string(),
                };
                return Err(BridgeError::Supervisor(why));
            }
            None => {
                if let Err(e) = supervising.await {
                    warn!(error = %e, "the upstream supervisor ended abnormally while stopping");
                }
            }
        }
        Ok(served?)
    }
}

/// The tools of `mapped` if they may start a bridge: none that cannot join
/// (each named), and at least one to expose; overrides that name no tool
/// are warned of.
pub(crate) fn admit<S: ToolSource>(
    source: &S,
    mapped: Mapped,
    offered: &[OfferedTool],
    selection: &ToolSelection,
) -> Result<Mapped, BridgeError> {
    let select_flag = source.kind().select_flag();
    if !mapped.problems.is_empty() {
        return Err(BridgeError::Tools(mapped.problems));
    }
    if mapped.tools.is_empty() {
        let selected = if selection.tools.is_empty() {
            String::new()
        } else {
            let globs: Vec<&str> = selection.tools.iter().map(|p| p.as_str()).collect();
            format!(" matching {select_flag} {}", globs.join(","))
        };
        let offered = if offered.is_empty() {
            "nothing".to_owned()
        } else {
            offered
                .iter()
                .map(|t| t.upstream.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        };
        return Err(BridgeError::NoTools {
            upstream: source.describe(),
            selected,
            offered,
        });
    }
    let unmatched = selection.unmatched_overrides(offered);
    if !unmatched.is_empty() {
        warn!(
            names = ?unmatched,
            "--rename, --risk or --idempotent name tools the upstream does not offer (yet)"
        );
    }
    Ok(mapped)
}
