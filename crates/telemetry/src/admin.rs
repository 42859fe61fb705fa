//! The admin HTTP listener: `/metrics` plus whatever routes the process adds
//! (the node adds its admin page), plain HTTP/1.1 with axum.

use crate::metrics::MetricsRegistry;
use axum::Router;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;
use std::future::Future;
use std::net::SocketAddr;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// The OpenMetrics content type Prometheus negotiates.
const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Why the admin listener could not start.
#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    /// The address does not parse.
    #[error("--admin-listen {0:?} is not host:port")]
    Address(String),
    /// The address could not be bound.
    #[error("cannot listen on {addr} (admin): {source}")]
    Listen {
        /// The address asked for.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
}

/// A running admin listener; stops when dropped or [`stop`](Self::stop)ped.
#[derive(Debug)]
pub struct AdminServer {
    /// Where it listens.
    pub addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<()>,
}

impl AdminServer {
    /// Binds `listen` and serves `/metrics` from `metrics` and `routes`.
    pub async fn start(
        listen: &str,
        metrics: MetricsRegistry,
        routes: Router,
    ) -> Result<AdminServer, AdminError> {
        let addr: SocketAddr = tokio::net::lookup_host(listen)
            .await
            .ok()
            .and_then(|mut addrs| addrs.next())
            .ok_or_else(|| AdminError::Address(listen.to_owned()))?;
        let listener = TcpListener::bind(addr)
            .await
            .map_err(|source| AdminError::Listen { addr, source })?;
        let addr = listener
            .local_addr()
            .map_err(|source| AdminError::Listen { addr, source })?;
        let app = routes.route(
            "/metrics",
            get(move || {
                let body = metrics.encode();
                async move { ([(header::CONTENT_TYPE, OPENMETRICS)], body).into_response() }
            }),
        );
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(serve(listener, app, async {
            let _ = stopped.await;
        }));
        tracing::info!(%addr, "admin listening");
        Ok(AdminServer {
            addr,
            stop: Some(stop),
            task,
        })
    }

    /// Stops accepting and waits for the listener to close.
    pub async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let _ = (&mut self.task).await;
    }
}

impl Drop for AdminServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn serve(
    listener: TcpListener,
    app: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) {
    if let Err(e) = axum::serve(listener, app)
        .with_graceful_shutdown(shutdown)
        .await
    {
        tracing::warn!(error = %e, "admin listener failed");
    }
}
