//! kube-proxy for one ClusterIP Service port: a loopback listener that
//! hands each connection to the next pod accepting one.

use super::POD_IP;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use tokio::net::{TcpListener, TcpStream};

/// A loopback listener forwarding each connection to the next pod that
/// accepts it, as kube-proxy spreads a ClusterIP's connections.
pub(super) struct Proxy {
    pub(super) port: u16,
    /// (pod index, loopback port, open connections).
    pub(super) backends: Arc<Vec<(usize, u16, AtomicUsize)>>,
}

impl Proxy {
    pub(super) async fn start(backends: Vec<(usize, u16, AtomicUsize)>) -> Proxy {
        let listener = TcpListener::bind((POD_IP, 0)).await.expect("bind a proxy");
        let port = listener.local_addr().expect("proxy address").port();
        let backends = Arc::new(backends);
        let shared = backends.clone();
        tokio::spawn(async move {
            let next = AtomicUsize::new(0);
            while let Ok((inbound, _)) = listener.accept().await {
                let start = next.fetch_add(1, Ordering::Relaxed);
                tokio::spawn(forward(inbound, shared.clone(), start));
            }
        });
        Proxy { port, backends }
    }
}

/// Copies `inbound` to and from the first backend from `start` on that
/// accepts a connection (a pod that is gone refuses it).
async fn forward(
    mut inbound: TcpStream,
    backends: Arc<Vec<(usize, u16, AtomicUsize)>>,
    start: usize,
) {
    for i in 0..backends.len() {
        let (_, port, open) = &backends[(start + i) % backends.len()];
        if let Ok(mut outbound) = TcpStream::connect((POD_IP, *port)).await {
            let _ = outbound.set_nodelay(true);
            let _ = inbound.set_nodelay(true);
            open.fetch_add(1, Ordering::Relaxed);
            let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
            open.fetch_sub(1, Ordering::Relaxed);
            return;
        }
    }
}
