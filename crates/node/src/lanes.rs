//! Thread per core for the gRPC listener and the plaintext MCP door: an accept loop per listener hands each new connection in turn to a lane, a thread running a current-thread runtime that serves it start to end, its connections to executors included (the connector keeps one per runtime), so a call never changes threads.
//!
//! The port is bound once, as without lanes: a second process asking for
//! it is refused ("address in use") instead of quietly sharing it, as
//! `SO_REUSEPORT` listeners would.

use crate::error::NodeError;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio::runtime::Handle;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio_stream::{Stream, StreamExt, wrappers::ReceiverStream};
use tokio_util::sync::CancellationToken;
use tonic::transport::server::Router;

/// Accepted connections a lane may have waiting before accepting waits.
const QUEUED: usize = 1024;
/// The pause after a failed accept (out of file descriptors, say).
const ACCEPT_BACKOFF: Duration = Duration::from_millis(10);

/// The runtimes connections are served on: the lanes', or this one's.
/// Tasks spawned on a lane run while its gRPC server does (until `stop`
/// and the drain after it).
#[derive(Clone)]
pub(crate) struct Lanes(Vec<Handle>);

/// GRPC serving on lanes: the handle ends when every lane has stopped.
pub(crate) struct Serving {
    pub(crate) task: JoinHandle<Result<(), NodeError>>,
    pub(crate) lanes: Lanes,
}

/// Serves `router` on the connections `listener` accepts until `stop`: on
/// this runtime with `threads` 0, else on `threads` lanes. Returns once
/// every lane is running.
pub(crate) async fn serve(
    router: Router,
    listener: TcpListener,
    threads: usize,
    stop: CancellationToken,
) -> Result<Serving, NodeError> {
    if threads == 0 {
        let incoming = toolmesh_transport::incoming(listener);
        return Ok(Serving {
            task: tokio::spawn(serve_on(router, incoming, stop)),
            lanes: Lanes(vec![Handle::current()]),
        });
    }
    let mut feeds = Vec::new();
    let mut lanes = Vec::new();
    let mut handles = Vec::new();
    for lane in 1..=threads {
        let (feed, accepted) = mpsc::channel(QUEUED);
        let started = match start_lane(lane, router.clone(), accepted, stop.clone()) {
            Ok((running, ended, handle)) => {
                feeds.push(feed);
                lanes.push(ended);
                handles.push(handle);
                // A lane counts once its thread runs (named, runtime entered).
                running.await.map_err(|_| NodeError::LaneGone { lane })
            }
            Err(e) => Err(e),
        };
        if let Err(e) = started {
            // The lanes already up stop too: no half-started server.
            stop.cancel();
            return Err(e);
        }
    }
    tokio::spawn(accept(listener, feeds, stop));
    let task = tokio::spawn(async move {
        for (lane, ended) in (1..).zip(lanes) {
            ended.await.unwrap_or(Err(NodeError::LaneGone { lane }))?;
        }
        Ok(())
    });
    Ok(Serving {
        task,
        lanes: Lanes(handles),
    })
}

/// What a lane's thread sends when it ends.
type Ended = oneshot::Receiver<Result<(), NodeError>>;

/// Starts lane `lane`: a thread with a runtime of its own serving the
/// connections that arrive on `accepted`. The first receiver hears once the
/// thread runs, the second when it ends; the handle spawns on its runtime.
fn start_lane(
    lane: usize,
    router: Router,
    accepted: mpsc::Receiver<std::net::TcpStream>,
    stop: CancellationToken,
) -> Result<(oneshot::Receiver<()>, Ended, Handle), NodeError> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|source| NodeError::Lane { lane, source })?;
    let handle = runtime.handle().clone();
    let (done, ended) = oneshot::channel();
    let (running, started) = oneshot::channel();
    std::thread::Builder::new()
        .name(format!("serve-lane-{lane}"))
        .spawn(move || {
            let _ = running.send(());
            // Registered with this lane's runtime, which polls the stream.
            let incoming = ReceiverStream::new(accepted)
                .map(|stream| TcpStream::from_std(stream).and_then(toolmesh_transport::accepted));
            let _ = done.send(runtime.block_on(serve_on(router, incoming, stop)));
        })
        .map_err(|source| NodeError::Lane { lane, source })?;
    Ok((started, ended, handle))
}

/// Accepts connections until `stop`, handing them to `lanes` in turn.
async fn accept(
    listener: TcpListener,
    lanes: Vec<mpsc::Sender<std::net::TcpStream>>,
    stop: CancellationToken,
) {
    for lane in lanes.iter().cycle() {
        let accepted = tokio::select! {
            () = stop.cancelled() => return,
            accepted = listener.accept() => accepted,
        };
        match accepted.and_then(|(stream, _)| stream.into_std()) {
            Ok(stream) => {
                if lane.send(stream).await.is_err() {
                    // That lane has ended; what ended it is its to say.
                    return;
                }
            }
            Err(error) => {
                tracing::warn!(%error, "accepting a connection failed");
                tokio::time::sleep(ACCEPT_BACKOFF).await;
            }
        }
    }
}

/// Serves `router` (HTTP/1.1 and HTTP/2) on the connections `listener`
/// accepts until `stop`, each connection on the next of `lanes` and its
/// writes [`Coalesced`](toolmesh_transport::Coalesced) there as the gRPC
/// lanes' are; then tells every open connection to finish its requests
/// and waits for them. (`axum::serve` would serve every connection on the
/// shared runtime, whose calls wake other workers.)
pub(crate) async fn serve_http(
    listener: TcpListener,
    router: axum::Router,
    lanes: Lanes,
    stop: CancellationToken,
) {
    let graceful = GracefulShutdown::new();
    let mut builder = auto::Builder::new(TokioExecutor::new());
    // As axum::serve: the CONNECT protocol for HTTP/2 WebSockets.
    builder.http2().enable_connect_protocol();
    for lane in lanes.0.iter().cycle() {
        let accepted = tokio::select! {
            () = stop.cancelled() => break,
            accepted = listener.accept() => accepted,
        };
        let stream = match accepted.and_then(|(stream, _)| stream.into_std()) {
            Ok(stream) => stream,
            Err(error) => {
                tracing::warn!(%error, "accepting a connection failed");
                tokio::time::sleep(ACCEPT_BACKOFF).await;
                continue;
            }
        };
        let service = TowerToHyperService::new(router.clone());
        let (builder, watcher) = (builder.clone(), graceful.watcher());
        lane.spawn(async move {
            // Registered with the lane's reactor, where it is polled.
            let io = match TcpStream::from_std(stream).and_then(toolmesh_transport::accepted) {
                Ok(io) => io,
                Err(error) => {
                    tracing::warn!(%error, "taking an accepted connection failed");
                    return;
                }
            };
            let connection = builder.serve_connection_with_upgrades(TokioIo::new(io), service);
            if let Err(error) = watcher.watch(connection.into_owned()).await {
                tracing::debug!(%error, "an HTTP connection ended with an error");
            }
        });
    }
    graceful.shutdown().await;
}

/// Serves `router` on `incoming` connections until `stop`.
async fn serve_on<S, IO>(
    router: Router,
    incoming: S,
    stop: CancellationToken,
) -> Result<(), NodeError>
where
    S: Stream<Item = std::io::Result<IO>>,
    IO: tokio::io::AsyncRead
        + tokio::io::AsyncWrite
        + tonic::transport::server::Connected
        + Unpin
        + Send
        + 'static,
{
    router
        .serve_with_incoming_shutdown(incoming, stop.cancelled_owned())
        .await
        .map_err(NodeError::Serve)
}
