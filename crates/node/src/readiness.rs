//! A dispatcher's readiness: not ready until it holds a snapshot its registry let it read.

use std::sync::Arc;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tonic_health::{ServingStatus, server::HealthReporter};
use toolmesh::Snapshot;
use toolmesh_transport::{DISPATCHER_HEALTH_SERVICE, DISPATCHER_LIVENESS_SERVICE};

/// Turns a dispatcher ready once it holds a snapshot; stop it with
/// [`Readiness::stop`] before reporting the drain.
pub(crate) struct Readiness {
    task: Option<JoinHandle<()>>,
}

impl Readiness {
    /// Reports the dispatcher alive (`DISPATCHER_LIVENESS_SERVICE`) and
    /// ready (`""`, `DISPATCHER_HEALTH_SERVICE`) on `health` — at once when
    /// `follows` is false (its registry runs in this process), else only
    /// once `snapshots` holds one from the registry it follows (a snapshot
    /// with an epoch; the placeholder it starts with has none).
    pub(crate) async fn report(
        health: &HealthReporter,
        snapshots: &watch::Receiver<Arc<Snapshot>>,
        follows: bool,
    ) -> Readiness {
        health
            .set_service_status(DISPATCHER_LIVENESS_SERVICE, ServingStatus::Serving)
            .await;
        if !follows {
            set_ready(health, ServingStatus::Serving).await;
            return Readiness { task: None };
        }
        set_ready(health, ServingStatus::NotServing).await;
        let (health, mut snapshots) = (health.clone(), snapshots.clone());
        let task = tokio::spawn(async move {
            if snapshots
                .wait_for(|snapshot| !snapshot.epoch().is_empty())
                .await
                .is_ok()
            {
                tracing::info!("holding the registry's snapshot: ready");
                set_ready(&health, ServingStatus::Serving).await;
            }
        });
        Readiness { task: Some(task) }
    }

    /// Ends the wait, so that nothing turns the dispatcher ready again
    /// once the drain has reported it not ready.
    pub(crate) async fn stop(self) {
        if let Some(task) = self.task {
            task.abort();
            let _ = task.await;
        }
    }
}

async fn set_ready(health: &HealthReporter, status: ServingStatus) {
    health.set_service_status("", status).await;
    health
        .set_service_status(DISPATCHER_HEALTH_SERVICE, status)
        .await;
}
