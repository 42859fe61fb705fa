//! The client connection to one server on the call path, in plaintext and
//! in TLS alike: HTTP/2 written from the caller's task, one connection per
//! [`Lane`], its writes [`Coalesced`], TLS a layer between the two.
//!
//! A call writes its request through hyper's HTTP/2 `SendRequest` from its
//! own task — no `tower::Buffer` task between the call and the connection,
//! as tonic's `Channel` has — and reconnects when the connection is gone.

use super::{BadAddress, CONNECT_TIMEOUT, Coalesced, Keepalive, LATE_ANSWERS_REFUSED, Tls};
use arc_swap::ArcSwap;
use hyper::client::conn::http2::{self, SendRequest};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use rustls_pki_types::ServerName;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio::runtime::{Handle, RuntimeFlavor};
use tokio_rustls::rustls;
use tonic::body::Body;

/// What a call through the connector fails with.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// How long a server may take to finish the TLS handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// The runtime a call runs on, and so the connection it goes by: a
/// connection is driven by the runtime that made it, and a call on a serve
/// lane (a thread running a current-thread runtime) that used another
/// runtime's connection would wake that runtime's thread twice per call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lane {
    /// A multi-thread runtime (or none): its workers share one connection.
    Shared,
    /// The current-thread runtime running on this thread.
    Thread(std::thread::ThreadId),
}

impl Lane {
    /// The lane of the calling task.
    pub fn current() -> Lane {
        match Handle::try_current() {
            Ok(handle) if handle.runtime_flavor() == RuntimeFlavor::CurrentThread => {
                Lane::Thread(std::thread::current().id())
            }
            _ => Lane::Shared,
        }
    }
}

/// HTTP/2 connections to one server, one per [`Lane`], each made at its
/// lane's first call and again after it closes; TLS when the process'
/// [`Tls`] has a CA. Cheap to clone.
#[derive(Clone)]
pub struct Connector(Arc<Inner>);

struct Inner {
    /// `host:port`.
    address: String,
    /// `http://` or `https://` and the address.
    origin: http::Uri,
    /// The TLS layer and the name the server's certificate must hold.
    tls: Option<(tokio_rustls::TlsConnector, ServerName<'static>)>,
    /// The open connections by lane (a handful: the serve lanes and the
    /// shared runtime); replaced whole when one is made.
    lanes: ArcSwap<Vec<(Lane, SendRequest<Body>)>>,
    /// Held while a connection is made, so that a lane makes one.
    connecting: tokio::sync::Mutex<()>,
}

impl std::fmt::Debug for Connector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connector")
            .field("origin", &self.0.origin)
            .field("lanes", &self.0.lanes.load().len())
            .finish_non_exhaustive()
    }
}

impl Connector {
    /// The connector to `address` (`host:port`, an `http://` or
    /// `https://` prefix ignored: `tls` decides), in TLS when `tls` has a
    /// CA. Connects lazily.
    pub fn new(address: &str, tls: &Tls) -> Result<Self, BadAddress> {
        Connector::with_client_config(address, tls.connector().cloned())
    }

    /// The connector to `address` (as for [`new`](Self::new)) in TLS by
    /// `config` when given — a server outside the mesh, trusted and
    /// presented to as `config` says (its ALPN offering `h2`), its
    /// certificate holding the address's host — else in plaintext.
    pub fn with_client_config(
        address: &str,
        config: Option<Arc<rustls::ClientConfig>>,
    ) -> Result<Self, BadAddress> {
        let bad = || BadAddress(address.to_owned());
        let bare = address
            .strip_prefix("http://")
            .or_else(|| address.strip_prefix("https://"))
            .unwrap_or(address)
            .trim_end_matches('/');
        if bare.contains(',') || bare.contains('/') {
            return Err(bad());
        }
        let scheme = if config.is_some() { "https" } else { "http" };
        let origin = format!("{scheme}://{bare}")
            .parse()
            .unwrap_or_else(|_| http::Uri::from_static("http://localhost"));
        let tls = match config {
            Some(config) => {
                let host = bare.rsplit_once(':').map_or(bare, |(host, _)| host);
                let host = host
                    .strip_prefix('[')
                    .and_then(|h| h.strip_suffix(']'))
                    .unwrap_or(host);
                let name = ServerName::try_from(host.to_owned()).map_err(|_| bad())?;
                Some((tokio_rustls::TlsConnector::from(config), name))
            }
            None => None,
        };
        Ok(Connector(Arc::new(Inner {
            address: bare.to_owned(),
            origin,
            tls,
            lanes: ArcSwap::default(),
            connecting: tokio::sync::Mutex::new(()),
        })))
    }

    /// The origin requests are addressed to.
    pub fn origin(&self) -> http::Uri {
        self.0.origin.clone()
    }

    /// Sends `request` on `lane`'s connection, connecting first when it
    /// has none. A failure to connect is a [`tonic::ConnectError`]: the
    /// request never left.
    pub async fn send(
        &self,
        lane: Lane,
        request: http::Request<Body>,
    ) -> Result<http::Response<Body>, BoxError> {
        let mut sender = self.sender(lane).await?;
        sender.ready().await?;
        let response = sender.send_request(request).await?;
        Ok(response.map(Body::new))
    }

    /// Connects `lane` now unless it holds a live connection: a server
    /// that cannot be reached (or whose TLS refuses) is found at once, not
    /// at the first call. The failure is a [`tonic::ConnectError`].
    pub async fn connect_lane(&self, lane: Lane) -> Result<(), BoxError> {
        self.sender(lane).await.map(drop)
    }

    /// The open connection of `lane`, if there is one.
    fn live(&self, lane: Lane) -> Option<SendRequest<Body>> {
        self.0
            .lanes
            .load()
            .iter()
            .find(|(l, sender)| *l == lane && !sender.is_closed())
            .map(|(_, sender)| sender.clone())
    }

    /// A sender on a live connection of `lane`, connecting first when
    /// there is none.
    async fn sender(&self, lane: Lane) -> Result<SendRequest<Body>, BoxError> {
        if let Some(sender) = self.live(lane) {
            return Ok(sender);
        }
        let _connecting = self.0.connecting.lock().await;
        if let Some(sender) = self.live(lane) {
            return Ok(sender);
        }
        // Boxed: a rare path whose TLS handshake state would otherwise
        // make every call's future (boxed per call) kilobytes larger.
        let sender = Box::pin(self.connect())
            .await
            .map_err(|e| -> BoxError { Box::new(tonic::ConnectError(e)) })?;
        // Closed connections go (those of lanes whose runtime has ended).
        let mut lanes: Vec<_> = self
            .0
            .lanes
            .load()
            .iter()
            .filter(|(l, sender)| *l != lane && !sender.is_closed())
            .cloned()
            .collect();
        lanes.push((lane, sender.clone()));
        self.0.lanes.store(Arc::new(lanes));
        Ok(sender)
    }

    /// A new connection with the mesh's settings: TCP_NODELAY, a connect
    /// timeout, writes [`Coalesced`] so that a request's HEADERS and body
    /// leave together (in TLS, their records), TLS when configured.
    async fn connect(&self) -> Result<SendRequest<Body>, BoxError> {
        let address = &self.0.address;
        let stream = tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(address))
            .await
            .map_err(|_| -> BoxError { format!("connecting to {address} timed out").into() })??;
        stream.set_nodelay(true)?;
        let stream = Coalesced::new(stream);
        let Some((tls, name)) = &self.0.tls else {
            return handshake(stream).await;
        };
        let stream = tokio::time::timeout(HANDSHAKE_TIMEOUT, tls.connect(name.clone(), stream))
            .await
            .map_err(|_| -> BoxError {
                format!("the TLS handshake with {address} timed out").into()
            })??;
        handshake(stream).await
    }
}

/// HTTP/2 over `io`, with the keepalives executors permit
/// ([`Keepalive::EXECUTOR`]); the connection is driven by a task on the
/// calling runtime.
async fn handshake<IO>(io: IO) -> Result<SendRequest<Body>, BoxError>
where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (sender, connection) = http2::Builder::new(TokioExecutor::new())
        .timer(TokioTimer::new())
        .keep_alive_interval(Keepalive::EXECUTOR.interval)
        .keep_alive_timeout(Keepalive::EXECUTOR.timeout)
        .keep_alive_while_idle(Keepalive::EXECUTOR.while_idle)
        .max_local_error_reset_streams(LATE_ANSWERS_REFUSED)
        .handshake(TokioIo::new(io))
        .await?;
    tokio::spawn(async move {
        if let Err(error) = connection.await {
            tracing::debug!(%error, "upstream connection ended");
        }
    });
    Ok(sender)
}

/// Each call goes on the lane it runs on ([`Lane::current`]).
impl tower::Service<http::Request<Body>> for Connector {
    type Response = http::Response<Body>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<Body>) -> Self::Future {
        let connector = self.clone();
        let lane = Lane::current();
        Box::pin(async move { connector.send(lane, request).await })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::TlsFiles;
    use tonic_health::ServingStatus;
    use tonic_health::pb::{HealthCheckRequest, health_client::HealthClient};

    /// A health server on 127.0.0.1:0 speaking `tls`, as the mesh serves;
    /// its address.
    async fn health_server(tls: &Tls) -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (reporter, service) = tonic_health::server::health_reporter();
        reporter
            .set_service_status("probe", ServingStatus::Serving)
            .await;
        let router = crate::server_builder(tls).unwrap().add_service(service);
        tokio::spawn(router.serve_with_incoming(crate::incoming(listener)));
        addr.to_string()
    }

    /// One health check through `connector`.
    async fn check(connector: &Connector) -> Result<i32, tonic::Status> {
        let mut client = HealthClient::with_origin(connector.clone(), connector.origin());
        let request = HealthCheckRequest {
            service: "probe".into(),
        };
        Ok(client.check(request).await?.into_inner().status)
    }

    /// The lanes holding a connection.
    fn lanes(connector: &Connector) -> Vec<Lane> {
        connector.0.lanes.load().iter().map(|(l, _)| *l).collect()
    }

    /// Calls given up on after they reached the server (a deadline, a
    /// caller gone) leave the connection up when the server answers them
    /// later: their answers are ignored, not refused one by one until
    /// HTTP/2's guard closes the connection (`ENHANCE_YOUR_CALM` after
    /// 1,024 such refusals by default), failing every call on it.
    #[tokio::test]
    async fn abandoned_calls_keep_the_connection() {
        let server = toolmesh_testkit::slow::LateServer::start().await;
        let connector = Connector::new(&server.addr.to_string(), &Tls::none()).unwrap();
        server.abandon_calls(3_000, 250, || check(&connector)).await;
        assert_eq!(server.connections(), 1, "every call on one connection");
    }

    /// Plaintext and mutual TLS calls go through the same connector; a
    /// server nobody listens on fails as a connect error (the request never
    /// left).
    #[tokio::test]
    async fn plaintext_and_mutual_tls() {
        let dir = toolmesh_testkit::TempDir::new("connector").unwrap();
        let (ca, cert, key) = toolmesh_testkit::pki(&dir, "mesh");
        let mutual = Tls::from_files(&TlsFiles {
            ca: Some(ca.clone()),
            cert: Some(cert),
            key: Some(key),
            client_ca: Some(ca),
        })
        .unwrap();
        for tls in [Tls::none(), mutual] {
            let addr = health_server(&tls).await;
            let connector = Connector::new(&addr, &tls).unwrap();
            let scheme = if tls.connector().is_some() {
                "https"
            } else {
                "http"
            };
            assert_eq!(connector.origin().scheme_str(), Some(scheme));
            for _ in 0..3 {
                assert_eq!(
                    check(&connector).await.unwrap(),
                    ServingStatus::Serving as i32
                );
            }
            assert_eq!(lanes(&connector), [Lane::current()], "one connection");
        }
        let gone = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = gone.local_addr().unwrap().to_string();
        drop(gone);
        let refused = check(&Connector::new(&addr, &Tls::none()).unwrap())
            .await
            .unwrap_err();
        let mut source = std::error::Error::source(&refused);
        while let Some(error) = source {
            if error.is::<tonic::ConnectError>() {
                return;
            }
            source = error.source();
        }
        panic!("not a connect error: {refused:?}");
    }

    /// Each current-thread runtime (a serve lane) calls on a connection of
    /// its own, made once; a multi-thread runtime's workers share one; the
    /// connection of a lane whose runtime has ended goes at the next connect.
    #[test]
    fn each_lane_has_its_connection() {
        let shared = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let addr = shared.block_on(health_server(&Tls::none()));
        let connector = Connector::new(&addr, &Tls::none()).unwrap();
        shared.block_on(check(&connector)).unwrap();
        // Lanes at once: each calls twice, then holds its runtime until
        // the connections have been looked at.
        let lanes_at_once = |n: usize| {
            let called = Arc::new(std::sync::Barrier::new(n + 1));
            let looked = Arc::new(std::sync::Barrier::new(n + 1));
            let threads: Vec<_> = (0..n)
                .map(|_| {
                    let (connector, called, looked) =
                        (connector.clone(), called.clone(), looked.clone());
                    std::thread::spawn(move || {
                        let runtime = tokio::runtime::Builder::new_current_thread()
                            .enable_all()
                            .build()
                            .unwrap();
                        let lane = runtime.block_on(async {
                            check(&connector).await.unwrap();
                            check(&connector).await.unwrap();
                            Lane::current()
                        });
                        called.wait();
                        looked.wait();
                        lane
                    })
                })
                .collect();
            called.wait();
            let held = lanes(&connector);
            looked.wait();
            let lanes: Vec<Lane> = threads.into_iter().map(|t| t.join().unwrap()).collect();
            (lanes, held)
        };
        let (two, held) = lanes_at_once(2);
        assert!(matches!(two[0], Lane::Thread(_)));
        assert_ne!(two[0], two[1]);
        assert_eq!(held.len(), 3, "{held:?}");
        assert!(
            [Lane::Shared, two[0], two[1]]
                .iter()
                .all(|l| held.contains(l))
        );
        let (third, held) = lanes_at_once(1);
        assert_eq!(held, [Lane::Shared, third[0]]);
    }
}
