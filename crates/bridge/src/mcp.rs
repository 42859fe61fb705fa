//! An MCP server as a [`ToolSource`]: lists its tools (every page), again on each `tools/list_changed` (free-standing, or on a `subscriptions/listen` stream on MCP 2026-07-28), probes the session with `ping`, and closes it (a stdio child ended) when it is no longer served.

use crate::call::{Link, UpstreamTool};
use crate::error::{BridgeError, NoPong};
use crate::mapping::{Mapped, OfferedTool, ServerIdentity, ToolSelection, UpstreamKind, map_tools};
use crate::supervisor::{Event, STABLE_AFTER, ToolSource, pause, reconnections};
use crate::upstream::{Session, Upstream};
use rmcp::Peer;
use rmcp::model::{ClientRequest, PingRequest, ServerNotification, SubscriptionFilter};
use rmcp::service::{
    PeerRequestOptions, QuitReason, RoleClient, RunningServiceCancellationToken, ServiceError,
};
use std::sync::Arc;
use std::time::Duration;
use tokio::task::{JoinError, JoinHandle};
use tokio::time::Instant;
use tokio_util::sync::{CancellationToken, DropGuard};
use toolmesh_executor::DynamicTool;
use tracing::{debug, error, warn};

/// How often the session is probed with `ping` (a stdio child that exits is
/// seen at once; an HTTP server that stops answering, by the probe).
const PROBE_EVERY: Duration = Duration::from_secs(2);
/// Longest a probe or a listing may take before the upstream counts as gone.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest the upstream gets to end its session when the bridge stops.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(5);

/// An upstream MCP server, its tools selected and called through `link`.
pub(crate) struct McpSource {
    pub(crate) upstream: Upstream,
    pub(crate) selection: ToolSelection,
    pub(crate) link: Arc<Link>,
}

/// One open session as the supervisor follows it.
pub(crate) struct McpConnection {
    peer: Peer<RoleClient>,
    /// Ends the session.
    cancel: RunningServiceCancellationToken,
    /// Resolves when the session ends.
    closed: JoinHandle<Result<QuitReason, JoinError>>,
    /// Holds the `subscriptions/listen` stream open while the session is
    /// served.
    _listening: DropGuard,
}

impl McpSource {
    /// Follows `session`: calls go through it from now on, and on
    /// 2026-07-28 a change is told only on a stream asked for, which lives
    /// as long as the session.
    pub(crate) fn open(&self, session: Session) -> McpConnection {
        let peer = session.peer().clone();
        self.link.peer.store(Some(Arc::new(peer.clone())));
        let cancel = session.cancellation_token();
        let closed = tokio::spawn(session.waiting());
        let listening = CancellationToken::new();
        if needs_listen(&peer) {
            tokio::spawn(listen(peer.clone(), self.link.clone(), listening.clone()));
        }
        McpConnection {
            peer,
            cancel,
            closed,
            _listening: listening.drop_guard(),
        }
    }
}

impl ToolSource for McpSource {
    type Connection = McpConnection;

    fn kind(&self) -> UpstreamKind {
        UpstreamKind::Mcp
    }

    fn describe(&self) -> String {
        format!("the MCP server {}", self.link.server)
    }

    fn again(&self) -> &'static str {
        if self.upstream.is_child() {
            "starting it again"
        } else {
            "reconnecting"
        }
    }

    async fn connect(&self) -> Result<McpConnection, BridgeError> {
        let session = self.upstream.connect(self.link.client.clone()).await?;
        Ok(self.open(session))
    }

    async fn tools(&self, connection: &McpConnection) -> Result<Vec<DynamicTool>, BridgeError> {
        let listing = list(&self.upstream, &connection.peer, &self.selection).await?;
        for problem in &listing.mapped.problems {
            error!(upstream = %self.link.server, "{problem}");
        }
        Ok(dynamic_tools(&self.link, &listing.mapped))
    }

    async fn watch(&self, connection: &mut McpConnection, stop: &CancellationToken) -> Event {
        loop {
            // A pause or a call's suspicion: probe the session.
            tokio::select! {
                () = stop.cancelled() => return Event::Stopped,
                quit = &mut connection.closed => {
                    let why = match quit {
                        Ok(Ok(reason)) => format!("the session ended ({reason:?})"),
                        Ok(Err(e)) | Err(e) => format!("the session failed ({e})"),
                    };
                    return Event::Gone(why);
                }
                () = self.link.client.list_changed() => return Event::Changed,
                () = tokio::time::sleep(PROBE_EVERY) => {}
                () = self.link.suspect.notified() => {}
            }
            if let Err(why) = probe(&connection.peer).await {
                return Event::Gone(why.to_string());
            }
        }
    }

    async fn close(&self, connection: McpConnection) {
        let McpConnection {
            cancel, mut closed, ..
        } = connection;
        self.link.peer.store(None);
        // Ends the session: a stdio child gets its stdin closed, then
        // SIGTERM, then SIGKILL.
        cancel.cancel();
        // A session that ended on its own was awaited already by `watch`.
        if !closed.is_finished()
            && tokio::time::timeout(CLOSE_TIMEOUT, &mut closed)
                .await
                .is_err()
        {
            closed.abort();
        }
    }
}

/// The upstream's tools as listed once, mapped.
pub(crate) struct Listing {
    pub(crate) offered: Vec<OfferedTool>,
    pub(crate) mapped: Mapped,
}

/// Lists every tool of the session (all pages).
pub(crate) async fn list(
    upstream: &Upstream,
    peer: &Peer<RoleClient>,
    selection: &ToolSelection,
) -> Result<Listing, BridgeError> {
    let listed = tokio::time::timeout(REQUEST_TIMEOUT, peer.list_all_tools()).await;
    let tools = match listed {
        Ok(Ok(tools)) => tools,
        Ok(Err(e)) => {
            return Err(BridgeError::List {
                upstream: upstream.describe(),
                reason: e.to_string(),
            });
        }
        Err(_) => {
            return Err(BridgeError::List {
                upstream: upstream.describe(),
                reason: format!("it did not answer tools/list within {REQUEST_TIMEOUT:?}"),
            });
        }
    };
    let server = identity(peer);
    let offered: Vec<OfferedTool> = tools
        .iter()
        .map(|tool| OfferedTool::from_mcp(tool, &server))
        .collect();
    let mapped = map_tools(
        UpstreamKind::Mcp,
        &offered,
        selection,
        &server.tool_version(),
    );
    Ok(Listing { offered, mapped })
}

/// The server's name and version from its `initialize` answer.
pub(crate) fn identity(peer: &Peer<RoleClient>) -> ServerIdentity {
    let info = peer.peer_info().and_then(|info| info.server_info.clone());
    ServerIdentity {
        name: info
            .as_ref()
            .map(|i| i.name.clone())
            .filter(|n| !n.trim().is_empty())
            .unwrap_or_else(|| "mcp-server".to_owned()),
        version: info.map(|i| i.version).unwrap_or_default(),
    }
}

/// The tools of `mapped` as the executor serves them, each calling the
/// upstream through `link`.
pub(crate) fn dynamic_tools(link: &Arc<Link>, mapped: &Mapped) -> Vec<DynamicTool> {
    mapped
        .tools
        .iter()
        .map(|tool| {
            let handler = Arc::new(UpstreamTool {
                name: tool.upstream.clone(),
                link: Arc::clone(link),
            });
            DynamicTool::new(tool.spec.clone(), handler)
        })
        .collect()
}

/// Whether the session speaks a revision without `initialize` (2026-07-28
/// on), whose servers tell of changes only on a `subscriptions/listen`
/// stream, and the upstream says its tool list can change.
fn needs_listen(peer: &Peer<RoleClient>) -> bool {
    peer.peer_info().is_some_and(|info| {
        !info.protocol_version.has_initialize()
            && info
                .capabilities
                .tools
                .as_ref()
                .is_some_and(|tools| tools.list_changed == Some(true))
    })
}

/// Holds a `subscriptions/listen` stream for tool list changes open on the
/// upstream until `stop`, each change raising the signal the supervisor
/// lists again on. A stream that ends is opened again after a pause, and
/// the tools are listed again then (changes are not replayed); an upstream
/// that refuses to listen is followed by its session alone.
async fn listen(peer: Peer<RoleClient>, link: Arc<Link>, stop: CancellationToken) {
    let filter = SubscriptionFilter::builder().tools_list_changed().build();
    let mut backoff = reconnections();
    let mut reopened = false;
    loop {
        let opened = tokio::select! {
            () = stop.cancelled() => return,
            opened = peer.listen(filter.clone()) => opened,
        };
        match opened {
            Ok(mut subscription) => {
                debug!(upstream = %link.server, "listening for tool list changes");
                if reopened {
                    link.client.tools_changed();
                }
                let began = Instant::now();
                loop {
                    let next = tokio::select! {
                        () = stop.cancelled() => {
                            let _ = subscription.cancel().await;
                            return;
                        }
                        next = subscription.next() => next,
                    };
                    match next {
                        Ok(Some(ServerNotification::ToolListChangedNotification(_))) => {
                            link.client.tools_changed();
                        }
                        Ok(Some(_)) => {}
                        Ok(None) | Err(_) => break,
                    }
                }
                if began.elapsed() > STABLE_AFTER {
                    backoff.reset();
                }
            }
            Err(ServiceError::McpError(error)) => {
                warn!(upstream = %link.server, code = error.code.0, message = %error.message, "the upstream refused subscriptions/listen; its tool list is read again only when it reconnects");
                return;
            }
            // The session is going: the supervisor sees it.
            Err(_) => {}
        }
        reopened = true;
        if !pause(&stop, backoff.next_wait()).await {
            return;
        }
    }
}

/// Asks the upstream for a `ping`; why it is gone if it does not answer.
async fn probe(peer: &Peer<RoleClient>) -> Result<(), NoPong> {
    let request = ClientRequest::PingRequest(PingRequest::default());
    let sent = peer
        .send_request_with_option(request, PeerRequestOptions::with_timeout(REQUEST_TIMEOUT))
        .await;
    let answered = match sent {
        Ok(handle) => handle.await_response().await,
        Err(e) => Err(e),
    };
    match answered {
        Ok(_) => Ok(()),
        // A server that has no `ping` still answered.
        Err(rmcp::service::ServiceError::McpError(_)) => Ok(()),
        Err(e) => Err(NoPong(e)),
    }
}
