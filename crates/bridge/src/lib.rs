//! An existing MCP server as a toolmesh executor (`toolmesh bridge mcp`).
//!
//! The bridge is an MCP client of one upstream server — a command it
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
//! The upstream sees the bridge's own identity and credentials (its
//! `--header` / `--bearer-env`, never a caller's token), and a stdio child
//! does not inherit the bridge's `TOOLMESH_*` environment.
#![forbid(unsafe_code)]

mod call;
mod client;
mod error;
mod http;
mod mapping;
mod supervisor;
mod upstream;

pub use error::BridgeError;
pub use http::{HttpsFiles, HttpsSettings};
pub use mapping::{ProblemKind, ServerIdentity, ToolProblem, ToolSelection};
pub use supervisor::{BACKOFF_INITIAL, BACKOFF_MAX};
pub use upstream::Upstream;

use call::Link;
use client::BridgeClient;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use supervisor::Supervisor;
use tokio_util::sync::CancellationToken;
use toolmesh_executor::{BoundExecutor, Executor, ServeOptions};
use tracing::warn;
use upstream::Session;

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

/// A bridge with its upstream session open and its listener bound, not yet
/// serving.
pub struct Bridge {
    bound: BoundExecutor,
    supervisor: Supervisor,
    session: Session,
    service: String,
    tools: Vec<String>,
}

impl std::fmt::Debug for Bridge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Bridge")
            .field("service", &self.service)
            .field("upstream", &self.supervisor.upstream)
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
        let listing = supervisor::list(&upstream, &peer, &selection).await?;
        if !listing.mapped.problems.is_empty() {
            return Err(BridgeError::Tools(listing.mapped.problems));
        }
        if listing.mapped.tools.is_empty() {
            return Err(no_tools(&upstream, &selection, &listing.offered));
        }
        let unmatched = selection.unmatched_overrides(&listing.offered);
        if !unmatched.is_empty() {
            warn!(
                names = ?unmatched,
                "--rename, --risk or --idempotent name tools the upstream does not offer (yet)"
            );
        }
        let identity = supervisor::identity(&peer);
        let service = name
            .filter(|n| !n.trim().is_empty())
            .unwrap_or(identity.name);
        let link = Arc::new(Link::new(upstream.describe(), client));
        // Calls may come as soon as the executor registers: the session is
        // theirs from now on.
        link.peer.store(Some(Arc::new(peer)));
        let tools = supervisor::dynamic_tools(&link, &listing);
        let names = tools.iter().map(|t| t.spec().name.clone()).collect();
        let executor = tools
            .into_iter()
            .fold(Executor::new(&service), Executor::dynamic_tool);
        let bound = executor.bind(serve).await?;
        let supervisor = Supervisor {
            upstream,
            selection,
            link,
            control: bound.control(),
        };
        Ok(Bridge {
            bound,
            supervisor,
            session,
            service,
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
    /// against the upstream) and ends the upstream session last.
    pub async fn run(self, shutdown: impl Future<Output = ()> + Send) -> Result<(), BridgeError> {
        let stop = CancellationToken::new();
        let mut supervising = tokio::spawn(self.supervisor.run(self.session, stop.clone()));
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

/// The error for an upstream with nothing to expose.
fn no_tools(
    upstream: &Upstream,
    selection: &ToolSelection,
    offered: &[rmcp::model::Tool],
) -> BridgeError {
    let selected = if selection.tools.is_empty() {
        String::new()
    } else {
        let globs: Vec<&str> = selection.tools.iter().map(|p| p.as_str()).collect();
        format!(" matching --tools {}", globs.join(","))
    };
    let offered = if offered.is_empty() {
        "nothing".to_owned()
    } else {
        offered
            .iter()
            .map(|t| t.name.to_string())
            .collect::<Vec<_>>()
            .join(", ")
    };
    BridgeError::NoTools {
        upstream: upstream.describe(),
        selected,
        offered,
    }
}
