//! A plaintext listener that serves `grpc.health.v1` and nothing else, for
//! probes that cannot present the client certificate the main listener
//! requires (Kubernetes' native gRPC probes).

use std::net::SocketAddr;
use std::sync::Arc;
use tokio::{net::TcpListener, task::JoinHandle};
use tonic::transport::Server;
use tonic_health::server::HealthReporter;

/// A running health-only listener; it stops when dropped.
#[derive(Debug)]
pub struct HealthOnly {
    addr: SocketAddr,
    task: JoinHandle<Result<(), tonic::transport::Error>>,
}

impl HealthOnly {
    /// Binds `addr` and serves, in plaintext, the statuses `reporter` sets
    /// (the same ones the main listener answers with) — except per-tool
    /// names: probes need none, and an unauthenticated port must not tell
    /// which tools exist.
    pub async fn bind(addr: SocketAddr, reporter: HealthReporter) -> std::io::Result<Self> {
        let listener = TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let health = super::gated_health(
            reporter,
            Arc::new(|request| super::tool_of_health_service(&request.get_ref().service).is_none()),
        );
        let task = tokio::spawn(
            Server::builder()
                .add_service(health)
                .serve_with_incoming(super::incoming(listener)),
        );
        Ok(HealthOnly { addr, task })
    }

    /// Where it listens.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for HealthOnly {
    fn drop(&mut self) {
        self.task.abort();
    }
}
