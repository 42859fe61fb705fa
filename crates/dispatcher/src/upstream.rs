//! The connection a dispatcher keeps to one executor. In plaintext, a call
//! writes its request through hyper's HTTP/2 `SendRequest` from its own
//! task — no `tower::Buffer` task between the call and the connection, as
//! tonic's `Channel` has — reconnecting when the connection is gone, one
//! connection per [`lane`](crate::lane) so that a call never wakes another
//! thread; with TLS it is tonic's `Channel`.

use arc_swap::ArcSwapOption;
use hyper::client::conn::http2::{self, SendRequest};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::net::TcpStream;
use tonic::body::Body;
use tonic::transport::Channel;

type BoxError = Box<dyn std::error::Error + Send + Sync>;
type Answer = Result<http::Response<Body>, BoxError>;

/// A client connection to one executor, cheap to clone.
#[derive(Clone, Debug)]
pub(crate) enum Upstream {
    /// Plaintext HTTP/2, written from the caller's task.
    Direct(Arc<Direct>),
    /// tonic's channel (TLS).
    Channel(Channel),
}

/// Plaintext HTTP/2 connections to `address`, one per lane, each made on
/// the lane's first call and again after it closes.
#[derive(Debug)]
pub(crate) struct Direct {
    address: String,
    /// By lane; a connection is driven by the runtime of the lane that made it.
    senders: Box<[ArcSwapOption<SendRequest<Body>>]>,
    connecting: tokio::sync::Mutex<()>,
}

impl Upstream {
    /// The connection to `address` (`host:port`): direct in plaintext (one
    /// connection for the shared runtime and one for each of `lanes`),
    /// tonic's channel with TLS.
    pub(crate) fn new(
        address: &str,
        tls: &toolmesh::grpc::Tls,
        lanes: usize,
    ) -> Result<Self, toolmesh::grpc::BadAddress> {
        if tls.client().is_some() || address.contains("://") || address.contains(',') {
            return toolmesh::grpc::channel(address, tls).map(Upstream::Channel);
        }
        Ok(Upstream::Direct(Arc::new(Direct {
            address: address.to_owned(),
            senders: (0..=lanes.min(crate::lane::SLOTS - 1))
                .map(|_| ArcSwapOption::empty())
                .collect(),
            connecting: tokio::sync::Mutex::new(()),
        })))
    }

    /// The origin requests are addressed to.
    pub(crate) fn origin(&self) -> http::Uri {
        match self {
            Upstream::Direct(direct) => format!("http://{}", direct.address)
                .parse()
                .unwrap_or_else(|_| http::Uri::from_static("http://localhost")),
            Upstream::Channel(_) => http::Uri::default(),
        }
    }
}

impl Direct {
    /// A sender on a live connection, connecting first when there is none.
    async fn sender(&self) -> Result<SendRequest<Body>, BoxError> {
        // A lane past the last slot (more threads than configured) shares it.
        let slot = &self.senders[crate::lane::slot().min(self.senders.len() - 1)];
        if let Some(sender) = live(slot) {
            return Ok(sender);
        }
        let _connecting = self.connecting.lock().await;
        if let Some(sender) = live(slot) {
            return Ok(sender);
        }
        let sender = self
            .connect()
            .await
            .map_err(|e| -> BoxError { Box::new(tonic::ConnectError(e)) })?;
        slot.store(Some(Arc::new(sender.clone())));
        Ok(sender)
    }

    /// A new connection with the mesh's settings: TCP_NODELAY, a connect
    /// timeout, HTTP/2 keepalives so a dead peer is noticed, and writes
    /// [`Coalesced`](toolmesh::grpc::Coalesced) so that a request's HEADERS
    /// and body leave together.
    async fn connect(&self) -> Result<SendRequest<Body>, BoxError> {
        let stream = tokio::time::timeout(
            toolmesh::grpc::CONNECT_TIMEOUT,
            TcpStream::connect(&self.address),
        )
        .await
        .map_err(|_| -> BoxError {
            format!("connecting to {} timed out", self.address).into()
        })??;
        stream.set_nodelay(true)?;
        let (sender, connection) = http2::Builder::new(TokioExecutor::new())
            .timer(TokioTimer::new())
            .keep_alive_interval(Duration::from_secs(10))
            .keep_alive_timeout(Duration::from_secs(5))
            .keep_alive_while_idle(true)
            .handshake(TokioIo::new(toolmesh::grpc::Coalesced::new(stream)))
            .await?;
        tokio::spawn(async move {
            if let Err(error) = connection.await {
                tracing::debug!(%error, "executor connection ended");
            }
        });
        Ok(sender)
    }
}

/// The open connection in `slot`, if there is one.
fn live(slot: &ArcSwapOption<SendRequest<Body>>) -> Option<SendRequest<Body>> {
    slot.load().as_deref().filter(|s| !s.is_closed()).cloned()
}

impl tower::Service<http::Request<Body>> for Upstream {
    type Response = http::Response<Body>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Answer> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        match self {
            Upstream::Direct(_) => Poll::Ready(Ok(())),
            Upstream::Channel(channel) => {
                tower::Service::poll_ready(channel, cx).map_err(Into::into)
            }
        }
    }

    fn call(&mut self, request: http::Request<Body>) -> Self::Future {
        match self {
            Upstream::Direct(direct) => {
                let direct = direct.clone();
                Box::pin(async move {
                    let mut sender = direct.sender().await?;
                    sender.ready().await?;
                    let response = sender.send_request(request).await?;
                    Ok(response.map(Body::new))
                })
            }
            Upstream::Channel(channel) => {
                let answer = tower::Service::call(channel, request);
                Box::pin(async move { answer.await.map_err(Into::into) })
            }
        }
    }
}
