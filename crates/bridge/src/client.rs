//! The bridge's side of an MCP session: who it says it is, where each call's `notifications/progress` go, and the `tools/list_changed` signal the supervisor waits on.

use rmcp::ClientHandler;
use rmcp::model::{
    ClientCapabilities, ClientConfig, Implementation, ProgressNotificationParam, ProgressToken,
    ProtocolVersion,
};
use rmcp::service::{NotificationContext, RoleClient};
use std::collections::HashMap;
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

impl ClientHandler for BridgeClient {
    fn get_info(&self) -> ClientConfig {
        let mut config = ClientConfig::new(
            ClientCapabilities::default(),
            Implementation::new("toolmesh-bridge", env!("CARGO_PKG_VERSION")),
        );
        // The handshake every server still speaks (the newest revision has
        // none; its servers answer this one too).
        config.protocol_version = ProtocolVersion::LATEST_WITH_INITIALIZE;
        config
    }

    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        let route = self.routes().get(&params.progress_token).cloned();
        if let Some(reports) = route {
            // Reports are a preview: one a slow caller has no room for is
            // dropped rather than holding up the session.
            let _ = reports.try_send(Report {
                progress: params.progress,
                total: params.total,
                message: params.message.unwrap_or_default(),
            });
        }
    }

    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.inner.list_changed.notify_one();
    }
}
