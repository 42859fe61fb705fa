//! Publishes `toolmesh.tool.<name>` on grpc.health.v1: SERVING while some
//! version of the tool is callable here, NOT_SERVING while it is known but
//! not callable, unknown (NOT_FOUND) once no snapshot names it.

use crate::endpoints::Endpoints;
use crate::route;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{Notify, watch};
use tokio_util::sync::CancellationToken;
use tonic_health::{ServingStatus, server::HealthReporter};
use toolmesh::Snapshot;
use toolmesh::SnapshotHistory;
use toolmesh_transport::tool_health_service;

/// Ejections expire on their own: look at every tool again this often.
const RECHECK: Duration = Duration::from_secs(1);

/// Runs until `stop` is cancelled. A new snapshot updates only the names it
/// changed (a diff over shared structure); an ejection, and the periodic
/// recheck while ejections are in force or just ended, look at every name.
pub(crate) async fn run(
    view: Arc<SnapshotHistory>,
    pool: Arc<Endpoints>,
    mut reporter: HealthReporter,
    snapshots: Arc<Notify>,
    mut ejections: watch::Receiver<u64>,
    stop: CancellationToken,
) {
    let mut published: HashMap<Arc<str>, bool> = HashMap::new();
    let mut last = view.current();
    let names: Vec<Arc<str>> = last.names().map(Arc::from).collect();
    publish(&last, &pool, &mut reporter, &mut published, names).await;
    loop {
        let full = tokio::select! {
            _ = stop.cancelled() => return,
            _ = snapshots.notified() => false,
            Ok(()) = ejections.changed() => true,
            // Ejections end on their own; with none in force or just ended,
            // nothing can have changed without a snapshot.
            _ = tokio::time::sleep(RECHECK) => {
                if !pool.ejections_recent(RECHECK * 2) {
                    continue;
                }
                true
            }
        };
        let snapshot = view.current();
        let names = if full {
            let mut names: Vec<Arc<str>> = snapshot.names().map(Arc::from).collect();
            names.extend(published.keys().cloned());
            names
        } else {
            snapshot.changed_names(&last)
        };
        publish(&snapshot, &pool, &mut reporter, &mut published, names).await;
        last = snapshot;
    }
}

/// Sets the status of each of `names` that changed since it was published.
async fn publish(
    snapshot: &Snapshot,
    pool: &Endpoints,
    reporter: &mut HealthReporter,
    published: &mut HashMap<Arc<str>, bool>,
    names: Vec<Arc<str>>,
) {
    for name in names {
        let versions = snapshot.versions(&name);
        if versions.is_empty() {
            if published.remove(&name).is_some() {
                reporter
                    .clear_service_status(&tool_health_service(&name))
                    .await;
            }
            continue;
        }
        let up = versions.iter().any(|e| route::in_rotation(e, pool));
        if published.get(&name) != Some(&up) {
            let status = if up {
                ServingStatus::Serving
            } else {
                ServingStatus::NotServing
            };
            reporter
                .set_service_status(tool_health_service(&name), status)
                .await;
            published.insert(name, up);
        }
    }
}
