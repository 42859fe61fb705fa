//! The transport runtime every gRPC server and client of the mesh shares:
//! message limits and health service names here, the rest one concern per
//! module (TLS, the upstream connector, channels, serving, deadlines, auth).
#![forbid(unsafe_code)]

mod advertise;
mod auth;
mod channel;
mod coalesce;
mod connector;
mod credential;
mod deadline;
mod health_gate;
mod health_only;
mod keepalive;
mod server;
mod shutdown;
mod tls;

pub use advertise::{ADVERTISE_HINT, Unroutable, check_advertised};
pub use auth::{
    PeerCertificate, bearer, bearer_token, ends_when_token_expires, has_whitespace, is_spiffe_id,
    peer_certificate, set_bearer,
};
pub use channel::{BadAddress, channel, dial_address, executor_channel};
pub use coalesce::Coalesced;
pub use connector::{BoxError, Connector, Lane};
pub use credential::{Credential, CredentialError, attach_credential};
pub use deadline::{Bound, call_budget, parse_grpc_timeout, request_timeout};
pub use health_gate::{HealthGate, Visible, gated_health};
pub use health_only::HealthOnly;
pub use keepalive::Keepalive;
pub use server::{accepted, incoming, listen_address, reflection_service, server_builder};
pub use shutdown::shutdown_signal;
pub use tls::{Tls, TlsError, TlsFiles};

use std::time::Duration;

/// Largest message on a call path (Invoke, Execute, Register).
pub const MAX_CALL_MESSAGE_BYTES: usize = toolmesh_proto::Limit::MaxCallMessageBytes as usize;
/// Largest snapshot message (GetSnapshot, WatchSnapshots).
pub const MAX_SNAPSHOT_MESSAGE_BYTES: usize = 256 * 1024 * 1024;
/// Largest header list a server reads (HTTP/2 `SETTINGS_MAX_HEADER_LIST_SIZE`):
/// room for the longest bearer token accepted (16 KiB) and the other
/// headers. hyper's default, 16 KiB, answered a valid token near that size
/// with HTTP 431 before its reader saw it. A header list that needs more
/// HTTP/2 frames than this allows (a 1 MiB token) still ends the whole
/// connection: h2's guard against CONTINUATION floods cannot be told to
/// refuse only the stream.
pub const MAX_HEADER_LIST_BYTES: u32 = 64 * 1024;
/// How long a client waits for a TCP connection to an endpoint.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// How many answers to calls it gave up on a client connection refuses
/// before closing itself: no limit. HTTP/2 refuses (RST_STREAM) each
/// answer that arrives for a stream it reset and no longer remembers, and
/// by default closes the connection (`GOAWAY ENHANCE_YOUR_CALM`) at the
/// 1,024th refusal over the connection's life, failing every call on it:
/// a peer under load answering calls past their deadline, as etcd did to
/// the registries at 10,000 executors, would cut it again and again. The
/// guard is for a server's clients; these connections go to servers of
/// the mesh.
pub const LATE_ANSWERS_REFUSED: Option<usize> = None;
/// The health service name of the whole executor service.
pub const EXECUTOR_HEALTH_SERVICE: &str = "toolmesh.v1.Executor";
/// The health service name a registry reports (besides `""`).
pub const REGISTRY_HEALTH_SERVICE: &str = "toolmesh.v1.Registry";
/// The health service name a dispatcher reports (besides `""`): like `""`,
/// NOT_SERVING until a separate dispatcher holds a snapshot from its registry.
pub const DISPATCHER_HEALTH_SERVICE: &str = "toolmesh.v1.Dispatcher";
/// The name a dispatcher's liveness probe asks: SERVING while the process
/// runs (draining included), whether or not it holds a snapshot yet.
pub const DISPATCHER_LIVENESS_SERVICE: &str = "toolmesh.v1.Dispatcher.Liveness";
/// The health service name that says whether every `[[issuers]]` entry of
/// the policy holds verification keys: NOT_SERVING while one has none (its
/// callers' tokens are refused); stale keys still serve.
pub const ISSUERS_HEALTH_SERVICE: &str = "toolmesh.v1.Issuers";

/// The `grpc.health.v1` service name that tracks whether a tool is exposed.
pub fn tool_health_service(tool: &str) -> String {
    format!("{TOOL_HEALTH_PREFIX}{tool}")
}

/// The tool a `grpc.health.v1` service name tracks, if it names one.
pub fn tool_of_health_service(service: &str) -> Option<&str> {
    service.strip_prefix(TOOL_HEALTH_PREFIX)
}

/// What every per-tool health service name starts with.
const TOOL_HEALTH_PREFIX: &str = "toolmesh.tool.";
