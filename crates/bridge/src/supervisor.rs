//! Keeps the upstream and the mesh in step: lists the upstream's tools (every page) and registers them, again on each `tools/list_changed` (free-standing, or on a `subscriptions/listen` stream on MCP 2026-07-28); when the upstream goes away, NOT_SERVING at once, then reconnect (a stdio child started again) with backoff, and SERVING once it is back.

use crate::call::{Link, UpstreamTool};
use crate::error::{BridgeError, NoPong};
use crate::mapping::{Mapped, ServerIdentity, ToolSelection, map_tools};
use crate::upstream::{Session, Upstream};
use rmcp::Peer;
use rmcp::model::{ClientRequest, PingRequest, ServerNotification, SubscriptionFilter, Tool};
use rmcp::service::{PeerRequestOptions, RoleClient, ServiceError};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use toolmesh_executor::{DynamicTool, ExecutorControl};
use tracing::{debug, error, info, warn};

/// First wait before reconnecting to an upstream that went away.
pub const BACKOFF_INITIAL: Duration = Duration::from_millis(200);
/// Longest wait between reconnection attempts.
pub const BACKOFF_MAX: Duration = Duration::from_secs(10);
/// A session that lived this long was healthy: the next failure starts the
/// backoff over.
const STABLE_AFTER: Duration = Duration::from_secs(30);
/// How often the session is probed with `ping` (a stdio child that exits is
/// seen at once; an HTTP server that stops answering, by the probe).
const PROBE_EVERY: Duration = Duration::from_secs(2);
/// Longest a probe or a listing may take before the upstream counts as gone.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest the upstream gets to end its session when the bridge stops.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(5);

/// Doubling waits between reconnections, from [`BACKOFF_INITIAL`] to
/// [`BACKOFF_MAX`].
#[derive(Debug)]
pub(crate) struct Backoff {
    next: Duration,
}

impl Backoff {
    pub(crate) fn new() -> Self {
        Backoff {
            next: BACKOFF_INITIAL,
        }
    }

    /// The wait before the next attempt.
    pub(crate) fn next_wait(&mut self) -> Duration {
        let wait = self.next;
        self.next = (self.next * 2).min(BACKOFF_MAX);
        wait
    }

    pub(crate) fn reset(&mut self) {
        self.next = BACKOFF_INITIAL;
    }
}

/// Everything the supervisor needs.
pub(crate) struct Supervisor {
    pub(crate) upstream: Upstream,
    pub(crate) selection: ToolSelection,
    pub(crate) link: Arc<Link>,
    pub(crate) control: ExecutorControl,
}

/// The upstream's tools as listed once, mapped.
pub(crate) struct Listing {
    pub(crate) offered: Vec<Tool>,
    pub(crate) mapped: Mapped,
}

/// Lists every tool of the session (all pages).
pub(crate) async fn list(
    upstream: &Upstream,
    peer: &Peer<RoleClient>,
    selection: &ToolSelection,
) -> Result<Listing, BridgeError> {
    let listed = tokio::time::timeout(REQUEST_TIMEOUT, peer.list_all_tools()).await;
    let offered = match listed {
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
    let mapped = map_tools(&offered, selection, &identity(peer));
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

/// How one session ended.
enum Ended {
    /// The bridge is stopping.
    Stopped,
    /// The upstream went away.
    Gone(String),
}

/// The tools of `listing` as the executor serves them, each calling
/// the upstream through `link`.
pub(crate) fn dynamic_tools(link: &Arc<Link>, listing: &Listing) -> Vec<DynamicTool> {
    listing
        .mapped
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

impl Supervisor {
    /// Runs until `stop`: serves `first` (the session `start` opened), then
    /// every session after it.
    pub(crate) async fn run(self, first: Session, stop: CancellationToken) {
        let mut backoff = Backoff::new();
        let mut session = Some(first);
        // Failed attempts since the upstream went away: the first is a
        // warning, the others are not news until it is back.
        let mut failures = 0u32;
        loop {
            let current = match session.take() {
                Some(current) => current,
                None => match self.upstream.connect(self.link.client.clone()).await {
                    Ok(current) => {
                        if failures > 0 {
                            info!(upstream = %self.link.server, attempts = failures + 1, "reached the upstream MCP server again");
                        }
                        failures = 0;
                        current
                    }
                    Err(e) => {
                        let wait = backoff.next_wait();
                        if failures == 0 {
                            warn!(error = %e, wait_ms = wait.as_millis() as u64, "cannot reach the upstream MCP server; trying again with backoff");
                        } else {
                            debug!(error = %e, wait_ms = wait.as_millis() as u64, "cannot reach the upstream MCP server yet");
                        }
                        failures += 1;
                        if !pause(&stop, wait).await {
                            return;
                        }
                        continue;
                    }
                },
            };
            let began = Instant::now();
            match self.serve(current, &stop).await {
                Ended::Stopped => return,
                Ended::Gone(why) => {
                    if began.elapsed() > STABLE_AFTER {
                        backoff.reset();
                    }
                    let wait = backoff.next_wait();
                    let again = if self.upstream.is_child() {
                        "starting it again"
                    } else {
                        "reconnecting"
                    };
                    warn!(upstream = %self.link.server, why, wait_ms = wait.as_millis() as u64, "the upstream MCP server went away; its tools are out of rotation, {again} after the wait");
                    if !pause(&stop, wait).await {
                        return;
                    }
                }
            }
        }
    }

    /// Serves one session: register its tools, SERVING, follow
    /// `list_changed`, probe it; NOT_SERVING as soon as it ends.
    async fn serve(&self, session: Session, stop: &CancellationToken) -> Ended {
        let peer = session.peer().clone();
        let cancel = session.cancellation_token();
        let mut closed = tokio::spawn(session.waiting());
        let ended = self.follow(&peer, &mut closed, stop).await;
        self.link.peer.store(None);
        self.control.set_serving(false).await;
        // Ends the session: a stdio child gets its stdin closed, then
        // SIGTERM, then SIGKILL.
        cancel.cancel();
        // A session that ended on its own was awaited already by `follow`.
        if !closed.is_finished()
            && tokio::time::timeout(CLOSE_TIMEOUT, &mut closed)
                .await
                .is_err()
        {
            closed.abort();
        }
        ended
    }

    async fn follow(
        &self,
        peer: &Peer<RoleClient>,
        closed: &mut tokio::task::JoinHandle<
            Result<rmcp::service::QuitReason, tokio::task::JoinError>,
        >,
        stop: &CancellationToken,
    ) -> Ended {
        self.link.peer.store(Some(Arc::new(peer.clone())));
        if let Err(e) = self.refresh(peer).await {
            return Ended::Gone(e.to_string());
        }
        self.control.set_serving(true).await;
        info!(upstream = %self.link.server, tools = self.control.specs().len(), "serving the upstream's tools");
        // On 2026-07-28 a change is told only on a stream asked for; it
        // lives as long as this session is served.
        let listening = stop.child_token();
        let _listening = listening.clone().drop_guard();
        if needs_listen(peer) {
            tokio::spawn(listen(peer.clone(), self.link.clone(), listening));
        }
        loop {
            tokio::select! {
                () = stop.cancelled() => return Ended::Stopped,
                quit = &mut *closed => {
                    let why = match quit {
                        Ok(Ok(reason)) => format!("the session ended ({reason:?})"),
                        Ok(Err(e)) | Err(e) => format!("the session failed ({e})"),
                    };
                    return Ended::Gone(why);
                }
                () = self.link.client.list_changed() => {
                    info!(upstream = %self.link.server, "the upstream's tools changed; listing them again");
                    if let Err(e) = self.refresh(peer).await {
                        return Ended::Gone(e.to_string());
                    }
                }
                () = tokio::time::sleep(PROBE_EVERY) => {
                    if let Err(why) = probe(peer).await {
                        return Ended::Gone(why.to_string());
                    }
                }
                () = self.link.suspect.notified() => {
                    if let Err(why) = probe(peer).await {
                        return Ended::Gone(why.to_string());
                    }
                }
            }
        }
    }

    /// Lists the upstream's tools and serves them in place of the current
    /// set (registered again only if something changed). A tool that
    /// cannot join is left out with an error in the log.
    async fn refresh(&self, peer: &Peer<RoleClient>) -> Result<(), BridgeError> {
        let listing = list(&self.upstream, peer, &self.selection).await?;
        for problem in &listing.mapped.problems {
            error!(upstream = %self.link.server, "{problem}");
        }
        let tools = dynamic_tools(&self.link, &listing);
        if let Err(e) = self.control.replace_tools(tools) {
            // Mapped specs are validated: this is a bridge defect.
            error!(upstream = %self.link.server, error = %e, "the upstream's tools could not be served");
        }
        Ok(())
    }
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
    let mut backoff = Backoff::new();
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

/// Waits `wait` unless `stop` comes first (then false).
async fn pause(stop: &CancellationToken, wait: Duration) -> bool {
    tokio::select! {
        () = tokio::time::sleep(wait) => true,
        () = stop.cancelled() => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Waits double from 200 ms up to 10 s and start over after a reset.
    #[test]
    fn backoff_doubles_up_to_its_cap() {
        let mut backoff = Backoff::new();
        let waits: Vec<u128> = (0..8).map(|_| backoff.next_wait().as_millis()).collect();
        assert_eq!(waits, [200, 400, 800, 1600, 3200, 6400, 10_000, 10_000]);
        backoff.reset();
        assert_eq!(backoff.next_wait(), BACKOFF_INITIAL);
    }
}
