//! Publishes `toolmesh.tool.<name>` on grpc.health.v1: SERVING while some
//! version of the tool is callable here, NOT_SERVING while it is known but
//! not callable, unknown (NOT_FOUND) once no snapshot names it.

use crate::balance;
use crate::endpoints::Endpoints;
use crate::view::SnapshotView;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Notify;
use tonic_health::{ServingStatus, server::HealthReporter};
use toolmesh::grpc::tool_health_service;

/// Ejections expire on their own; look again this often.
const RECHECK: Duration = Duration::from_millis(500);

/// Runs until the process ends: waits for a change, then updates only the
/// statuses that changed.
pub(crate) async fn run(
    view: Arc<SnapshotView>,
    pool: Arc<Endpoints>,
    mut reporter: HealthReporter,
    changed: Arc<Notify>,
) {
    let mut published: HashMap<String, bool> = HashMap::new();
    loop {
        let snapshot = view.current();
        let mut seen: HashMap<String, bool> = HashMap::with_capacity(published.len());
        for name in snapshot.names() {
            let up = snapshot
                .versions(name)
                .iter()
                .any(|e| balance::in_rotation(e, &pool));
            seen.insert(name.to_owned(), up);
        }
        for (name, up) in &seen {
            if published.get(name) != Some(up) {
                let status = if *up {
                    ServingStatus::Serving
                } else {
                    ServingStatus::NotServing
                };
                reporter
                    .set_service_status(tool_health_service(name), status)
                    .await;
            }
        }
        for gone in published.keys().filter(|name| !seen.contains_key(*name)) {
            reporter
                .clear_service_status(&tool_health_service(gone))
                .await;
        }
        published = seen;
        tokio::select! {
            _ = changed.notified() => {}
            _ = tokio::time::sleep(RECHECK) => {}
        }
    }
}
