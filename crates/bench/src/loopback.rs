//! Loopback servers the benchmarks start: a listener on a free port of 127.0.0.1, and a gRPC server with only a health service.

use crate::error::BenchError;
use crate::procs::AbortOnDrop;
use tokio::net::TcpListener;
use tonic::transport::Server;

/// A listener on 127.0.0.1:0 and its address.
pub(crate) async fn bind() -> Result<(TcpListener, String), BenchError> {
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|e| BenchError::io("bind 127.0.0.1:0", e))?;
    let addr = listener
        .local_addr()
        .map_err(|e| BenchError::io("read a listener's address", e))?
        .to_string();
    Ok((listener, addr))
}

/// A gRPC server with only a health service, SERVING for every watch: the
/// endpoint fake executors share (here and in the stores' comparison).
pub(crate) struct HealthServer {
    pub(crate) addr: String,
    _server: AbortOnDrop<Result<(), tonic::transport::Error>>,
    _reporter: tonic_health::server::HealthReporter,
}

impl HealthServer {
    /// Serves on a free port of 127.0.0.1 until dropped.
    pub(crate) async fn start() -> Result<HealthServer, BenchError> {
        let (listener, addr) = bind().await?;
        let (reporter, health) = tonic_health::server::health_reporter();
        let server = AbortOnDrop(tokio::spawn(
            Server::builder()
                .add_service(health)
                .serve_with_incoming(toolmesh_transport::incoming(listener)),
        ));
        Ok(HealthServer {
            addr,
            _server: server,
            _reporter: reporter,
        })
    }
}
