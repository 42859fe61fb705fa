//! An HTTP/2 peer on loopback that answers each request only after the
//! client has reset it, as a busy server's answer crosses the client's
//! cancel on the wire (etcd under load, an executor past a deadline), and
//! counts the connections its clients opened.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// HTTP/2 frame types this peer reads or writes (RFC 9113 §6).
const HEADERS: u8 = 0x1;
const RST_STREAM: u8 = 0x3;
const SETTINGS: u8 = 0x4;
const PING: u8 = 0x6;
/// Flags: END_HEADERS on HEADERS, ACK on SETTINGS and PING.
const END_HEADERS: u8 = 0x4;
const ACK: u8 = 0x1;
/// `:status: 200`, HPACK's static table entry 8.
const STATUS_200: u8 = 0x88;

/// The peer: every request is left unanswered until the client resets
/// it, then answered with a `200` head for the stream the client gave up.
#[derive(Clone)]
pub struct LateServer {
    /// Where it listens (127.0.0.1, a free port).
    pub addr: std::net::SocketAddr,
    counts: Arc<Counts>,
}

/// What the peer saw.
#[derive(Default)]
struct Counts {
    connections: AtomicUsize,
    requests: AtomicUsize,
    late_answers: AtomicUsize,
}

impl LateServer {
    /// Starts one on 127.0.0.1 port 0.
    pub async fn start() -> LateServer {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind 127.0.0.1:0");
        let addr = listener.local_addr().expect("local address");
        let counts = Arc::new(Counts::default());
        let seen = counts.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                seen.connections.fetch_add(1, Ordering::SeqCst);
                tokio::spawn(serve(stream, seen.clone()));
            }
        });
        LateServer { addr, counts }
    }

    /// How many connections clients opened to it.
    pub fn connections(&self) -> usize {
        self.counts.connections.load(Ordering::SeqCst)
    }

    /// Makes `calls` calls with `call`, `at_once` at a time, gives up on
    /// each wave once the peer has received all of it, and returns when
    /// the peer has answered, late, every call it received, or as soon as
    /// the client opened another connection (the first was closed).
    pub async fn abandon_calls<F, Fut>(&self, calls: usize, at_once: usize, call: F)
    where
        F: Fn() -> Fut,
        Fut: std::future::Future,
    {
        let limit = Duration::from_secs(30);
        let counts = &self.counts;
        let connections = self.connections();
        let reconnected = || self.connections() > connections.max(1);
        let mut made = 0;
        while made < calls && !reconnected() {
            let wave = (calls - made).min(at_once);
            let before = counts.requests.load(Ordering::SeqCst);
            made += wave;
            let calls = futures_util::future::join_all((0..wave).map(|_| call()));
            let arrived = crate::until("the peer received the wave", limit, || {
                counts.requests.load(Ordering::SeqCst) >= before + wave || reconnected()
            });
            tokio::select! {
                _ = calls => {}
                () = arrived => {}
            }
        }
        crate::until("the peer answered every call it received", limit, || {
            counts.late_answers.load(Ordering::SeqCst) >= counts.requests.load(Ordering::SeqCst)
                || reconnected()
        })
        .await;
    }
}

/// One connection: settings exchanged, pings answered, each reset
/// request answered with a head.
async fn serve(mut stream: TcpStream, counts: Arc<Counts>) -> std::io::Result<()> {
    let mut preface = [0; 24];
    stream.read_exact(&mut preface).await?;
    write_frame(&mut stream, SETTINGS, 0, 0, &[]).await?;
    loop {
        let mut head = [0; 9];
        stream.read_exact(&mut head).await?;
        let len = usize::from(head[0]) << 16 | usize::from(head[1]) << 8 | usize::from(head[2]);
        let (kind, flags) = (head[3], head[4]);
        let id = u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & 0x7fff_ffff;
        let mut payload = vec![0; len];
        stream.read_exact(&mut payload).await?;
        match kind {
            HEADERS => {
                counts.requests.fetch_add(1, Ordering::SeqCst);
            }
            RST_STREAM => {
                write_frame(&mut stream, HEADERS, END_HEADERS, id, &[STATUS_200]).await?;
                counts.late_answers.fetch_add(1, Ordering::SeqCst);
            }
            SETTINGS if flags & ACK == 0 => write_frame(&mut stream, SETTINGS, ACK, 0, &[]).await?,
            PING if flags & ACK == 0 => write_frame(&mut stream, PING, ACK, 0, &payload).await?,
            _ => {}
        }
    }
}

/// Writes one frame.
async fn write_frame(
    stream: &mut TcpStream,
    kind: u8,
    flags: u8,
    id: u32,
    payload: &[u8],
) -> std::io::Result<()> {
    let len = u32::try_from(payload.len()).expect("a small frame");
    let mut frame = Vec::with_capacity(9 + payload.len());
    frame.extend_from_slice(&len.to_be_bytes()[1..]);
    frame.extend_from_slice(&[kind, flags]);
    frame.extend_from_slice(&id.to_be_bytes());
    frame.extend_from_slice(payload);
    stream.write_all(&frame).await
}
