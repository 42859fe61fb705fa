//! Thread per core for the gRPC listener: each lane is a thread running a current-thread runtime that accepts on its own `SO_REUSEPORT` listener and serves its connections start to end, its connections to executors included, so a call never changes threads.

use crate::error::NodeError;
use std::net::SocketAddr;
use tokio::net::{TcpListener, TcpSocket};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tonic::transport::server::Router;

/// Connections a lane's listener queues before accepting.
const BACKLOG: u32 = 1024;

/// A listener on `addr` that other lanes can bind too: the kernel spreads
/// new connections across them.
pub(crate) fn shared_listener(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let socket = if addr.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket.set_reuseport(true)?;
    socket.bind(addr)?;
    socket.listen(BACKLOG)
}

/// Serves `router` until `stop`: on this runtime with `threads` 0, else on
/// `threads` lanes, the first taking `listener` (bound by
/// [`shared_listener`]) and the others binding its address again. Returns
/// once every lane listens; the handle ends when all have stopped.
pub(crate) async fn serve(
    router: Router,
    (addr, listener): (SocketAddr, TcpListener),
    threads: usize,
    stop: CancellationToken,
) -> Result<JoinHandle<Result<(), NodeError>>, NodeError> {
    if threads == 0 {
        return Ok(tokio::spawn(serve_on(router, listener, stop)));
    }
    let first = listener
        .into_std()
        .map_err(|source| NodeError::Listen { addr, source })?;
    let lanes = match start_lanes(router, first, addr, threads, &stop).await {
        Ok(lanes) => lanes,
        Err(e) => {
            // The lanes already up stop too: no half-started server.
            stop.cancel();
            return Err(e);
        }
    };
    Ok(tokio::spawn(async move {
        for (lane, ended) in (1..).zip(lanes) {
            ended.await.unwrap_or(Err(NodeError::LaneGone { lane }))?;
        }
        Ok(())
    }))
}

/// What a lane's thread sends when it ends.
type Ended = oneshot::Receiver<Result<(), NodeError>>;

/// Starts `threads` lanes one after the other, each once the previous one
/// listens; the first takes `first`. Fails at the first lane that cannot.
async fn start_lanes(
    router: Router,
    first: std::net::TcpListener,
    addr: SocketAddr,
    threads: usize,
    stop: &CancellationToken,
) -> Result<Vec<Ended>, NodeError> {
    let mut first = Some(first);
    let mut lanes = Vec::new();
    for lane in 1..=threads {
        let (ready, listening) = oneshot::channel();
        let (done, ended) = oneshot::channel();
        let (router, stop, listener) = (router.clone(), stop.clone(), first.take());
        std::thread::Builder::new()
            .name(format!("serve-lane-{lane}"))
            .spawn(move || {
                let _ = done.send(run_lane(lane, router, listener, addr, stop, ready));
            })
            .map_err(|source| NodeError::Lane { lane, source })?;
        listening
            .await
            .unwrap_or(Err(NodeError::LaneGone { lane }))?;
        lanes.push(ended);
    }
    Ok(lanes)
}

/// One lane: its runtime, its listener (`listener`, or `addr` bound again),
/// then serving until `stop`. `ready` says whether it listens.
fn run_lane(
    lane: usize,
    router: Router,
    listener: Option<std::net::TcpListener>,
    addr: SocketAddr,
    stop: CancellationToken,
    ready: oneshot::Sender<Result<(), NodeError>>,
) -> Result<(), NodeError> {
    toolmesh_dispatcher::lane::enter(lane);
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(source) => {
            let _ = ready.send(Err(NodeError::Lane { lane, source }));
            return Ok(());
        }
    };
    runtime.block_on(async move {
        let listener = match listener {
            Some(listener) => TcpListener::from_std(listener),
            None => shared_listener(addr),
        };
        let listener = match listener {
            Ok(listener) => listener,
            Err(source) => {
                let _ = ready.send(Err(NodeError::Listen { addr, source }));
                return Ok(());
            }
        };
        let _ = ready.send(Ok(()));
        serve_on(router, listener, stop).await
    })
}

/// Serves `router` on the connections `listener` accepts until `stop`.
async fn serve_on(
    router: Router,
    listener: TcpListener,
    stop: CancellationToken,
) -> Result<(), NodeError> {
    router
        .serve_with_incoming_shutdown(toolmesh::grpc::incoming(listener), stop.cancelled_owned())
        .await
        .map_err(NodeError::Serve)
}
