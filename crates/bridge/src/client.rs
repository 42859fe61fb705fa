//! The bridge's side of an MCP session: who it says it is, where each call's `notifications/progress` go (routed as the transport reads them, so they keep their order and come before the call's answer), and the tools-changed signal the supervisor waits on.

use rmcp::ClientHandler;
use rmcp::model::{
    ClientCapabilities, ClientConfig, Implementation, JsonRpcMessage, ProgressNotificationParam,
    ProgressToken, ProtocolVersion, ServerNotification,
};
use rmcp::service::{NotificationContext, RoleClient, RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use tokio::sync::{Notify, mpsc};

/// One progress report of a running call.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Report {
    pub(crate) progress: f64,
    pub(crate) total: Option<f64>,
    pub(crate) message: String,
}

/// The client handler every session of one bridge shares (cheap to clone).
#[derive(Clone, Default)]
pub(crate) struct BridgeClient {
    inner: Arc<Shared>,
}

#[derive(Default)]
struct Shared {
    /// Where each running call's progress goes, by the token its request
    /// carried.
    routes: Mutex<HashMap<ProgressToken, mpsc::Sender<Report>>>,
    /// Raised by `notifications/tools/list_changed` (a permit waits when
    /// nobody does: changes are never missed, and coalesce).
    list_changed: Notify,
}

impl BridgeClient {
    /// Sends the progress reported under `token` to `reports` until the
    /// returned guard drops.
    pub(crate) fn route(&self, token: ProgressToken, reports: mpsc::Sender<Report>) -> Route {
        self.routes().insert(token.clone(), reports);
        Route {
            client: self.clone(),
            token,
        }
    }

    /// Says the upstream's tools changed: `notifications/tools/list_changed`
    /// on its own (revisions with `initialize`) or on a
    /// `subscriptions/listen` stream (2026-07-28).
    pub(crate) fn tools_changed(&self) {
        self.inner.list_changed.notify_one();
    }

    /// Resolves at the next `tools/list_changed` (or at once, if one came
    /// since the last wait).
    pub(crate) async fn list_changed(&self) {
        self.inner.list_changed.notified().await;
    }

    fn routes(&self) -> std::sync::MutexGuard<'_, HashMap<ProgressToken, mpsc::Sender<Report>>> {
        self.inner
            .routes
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

/// Keeps one call's progress route; removes it when dropped.
pub(crate) struct Route {
    client: BridgeClient,
    token: ProgressToken,
}

impl Drop for Route {
    fn drop(&mut self) {
        self.client.routes().remove(&self.token);
    }
}

impl BridgeClient {
    /// Passes `params` to the call that asked for them, if it still runs.
    fn relay(&self, params: &ProgressNotificationParam) {
        let route = self.routes().get(&params.progress_token).cloned();
        if let Some(reports) = route {
            // Reports are a preview: one a slow caller has no room for is
            // dropped rather than holding up the session.
            let _ = reports.try_send(Report {
                progress: params.progress,
                total: params.total,
                message: params.message.clone().unwrap_or_default(),
            });
        }
    }
}

/// A transport whose incoming progress notifications are routed as they are
/// read. rmcp hands notifications to the handler on tasks of their own,
/// which may run after the answer that followed them (the last report lost)
/// or out of order; read here, a call's reports are queued, in order, before
/// its answer is.
pub(crate) struct Observed<T> {
    inner: T,
    client: BridgeClient,
}

impl<T> Observed<T> {
    pub(crate) fn new(inner: T, client: BridgeClient) -> Self {
        Observed { inner, client }
    }
}

impl<T: Transport<RoleClient>> Transport<RoleClient> for Observed<T> {
    type Error = T::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleClient>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        self.inner.send(item)
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleClient>> {
        let message = self.inner.receive().await;
        if let Some(JsonRpcMessage::Notification(notification)) = &message
            && let ServerNotification::ProgressNotification(progress) = &notification.notification
        {
            self.client.relay(&progress.params);
        }
        message
    }

    fn close(&mut self) -> impl Future<Output = Result<(), Self::Error>> + Send {
        self.inner.close()
    }
}

impl ClientHandler for BridgeClient {
    fn get_info(&self) -> ClientConfig {
        let mut config = ClientConfig::new(
            ClientCapabilities::default(),
            Implementation::new("toolmesh-bridge", env!("CARGO_PKG_VERSION")),
        );
        // The handshake of an upstream that does not know `server/discover`
        // (the 2026-07-28 revision, tried first, has none).
        config.protocol_version = ProtocolVersion::LATEST_WITH_INITIALIZE;
        config
    }

    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.tools_changed();
    }
}
