//! `grpc.health.v1` with some names hidden: a name the gate does not show
//! the caller answers exactly as an unknown one (NOT_FOUND), so a health
//! check cannot reveal that a tool the caller may not see exists.

use std::sync::Arc;
use tonic::{Request, Response, Status};
use tonic_health::pb::health_server::{Health, HealthServer};
use tonic_health::pb::{HealthCheckRequest, HealthCheckResponse};
use tonic_health::server::{HealthReporter, HealthService, WatchStream};

/// Whether a request may see the service it names.
pub type Visible = Arc<dyn Fn(&Request<HealthCheckRequest>) -> bool + Send + Sync>;

/// The health service behind a visibility gate.
pub struct HealthGate {
    inner: HealthService,
    visible: Visible,
}

/// The statuses `reporter` sets, served through `visible`.
pub fn gated_health(reporter: HealthReporter, visible: Visible) -> HealthServer<HealthGate> {
    HealthServer::new(HealthGate {
        inner: HealthService::from_health_reporter(reporter),
        visible,
    })
}

impl HealthGate {
    fn admit(&self, request: &Request<HealthCheckRequest>) -> Result<(), Status> {
        if (self.visible)(request) {
            Ok(())
        } else {
            // The very answer tonic-health gives for a name never set.
            Err(Status::not_found("service not registered"))
        }
    }
}

#[tonic::async_trait]
impl Health for HealthGate {
    async fn check(
        &self,
        request: Request<HealthCheckRequest>,
    ) -> Result<Response<HealthCheckResponse>, Status> {
        self.admit(&request)?;
        self.inner.check(request).await
    }

    type WatchStream = WatchStream;

    async fn watch(
        &self,
        request: Request<HealthCheckRequest>,
    ) -> Result<Response<Self::WatchStream>, Status> {
        self.admit(&request)?;
        self.inner.watch(request).await
    }
}
