//! HTTP/2 keepalive pings: how often the mesh's clients send them, by the
//! kind of server they talk to (gRFC A8).

use std::time::Duration;

/// How a client pings a server to notice a dead peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Keepalive {
    /// Ping after this long without a frame from the server.
    pub interval: Duration,
    /// Close the connection when a ping is not answered this soon.
    pub timeout: Duration,
    /// Ping a connection with no call open as well.
    pub while_idle: bool,
}

impl Keepalive {
    /// Toward the mesh's own servers (registry, dispatcher), which accept
    /// pings this often ([`server_builder`](crate::server_builder) polices
    /// none): a replica that stops answering is noticed within ~15 s.
    pub const MESH: Keepalive = Keepalive {
        interval: Duration::from_secs(10),
        timeout: Duration::from_secs(5),
        while_idle: true,
    };

    /// Toward executors, which may be written with any gRPC library. By
    /// default grpc-core (Python, C++, Ruby …), grpc-go and grpc-java
    /// servers answer GOAWAY `too_many_pings` to a client that pings more
    /// often than every 5 minutes while nothing is sent, or at all while no
    /// call is open (gRFC A8: `min_time`, `permit_without_calls`). A
    /// health watch sends nothing while the status holds, so faster pings
    /// broke it every ~40 s. A dead executor is noticed by its connection
    /// closing, its lease expiring and calls' deadlines, not by pings.
    pub const EXECUTOR: Keepalive = Keepalive {
        interval: Duration::from_secs(5 * 60),
        timeout: Duration::from_secs(20),
        while_idle: false,
    };
}

// The executor keepalive stays within what gRPC servers permit by
// default: no idle pings, none more often than every 5 minutes.
const _: () = assert!(Keepalive::EXECUTOR.interval.as_secs() >= 300);
const _: () = assert!(!Keepalive::EXECUTOR.while_idle);
// No client of the mesh pings more often than executors accept (the
// contract's limit, which the Python SDK's server permits).
const _: () = assert!(
    Keepalive::MESH.interval.as_millis() >= toolmesh_proto::Limit::MinPingIntervalMs as u128
);
