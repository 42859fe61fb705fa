//! What every gRPC server and client of the mesh shares: addresses, pooled
//! channels with connect timeouts, message limits, reflection, the health
//! service names of tools, and the shutdown signal.

use std::{net::SocketAddr, time::Duration};
use tonic::transport::{Channel, Endpoint};

/// Largest message on a call path (Invoke, Execute, Register).
pub const MAX_CALL_MESSAGE_BYTES: usize = 8 * 1024 * 1024;
/// Largest snapshot message (GetSnapshot, WatchSnapshots).
pub const MAX_SNAPSHOT_MESSAGE_BYTES: usize = 256 * 1024 * 1024;
/// How long a client waits for a TCP connection to an endpoint.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// The health service name of the whole executor service.
pub const EXECUTOR_HEALTH_SERVICE: &str = "toolmesh.v1.Executor";

/// The `grpc.health.v1` service name that tracks whether a tool is exposed.
pub fn tool_health_service(tool: &str) -> String {
    format!("toolmesh.tool.{tool}")
}

/// The deadline a caller sent in its `grpc-timeout` header, if any.
///
/// The header is an ASCII integer of at most 8 digits followed by a unit:
/// `H`ours, `M`inutes, `S`econds, `m`illiseconds, `u`/microseconds or
/// `n`anoseconds. Anything else reads as "no deadline".
pub fn request_timeout(metadata: &tonic::metadata::MetadataMap) -> Option<Duration> {
    parse_grpc_timeout(metadata.get("grpc-timeout")?.to_str().ok()?)
}

/// Parses one `grpc-timeout` value (see [`request_timeout`]).
pub fn parse_grpc_timeout(value: &str) -> Option<Duration> {
    if !value.is_ascii() || value.len() < 2 || value.len() > 9 {
        return None;
    }
    let (digits, unit) = value.split_at(value.len() - 1);
    if !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(n.checked_mul(3600)?),
        "M" => Duration::from_secs(n.checked_mul(60)?),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        _ => return None,
    })
}

/// A bad `host:port`.
#[derive(Debug, thiserror::Error)]
#[error("address {0:?} is not host:port (for example 127.0.0.1:7070)")]
pub struct BadAddress(pub String);

/// A lazily connecting channel to `host:port` (or a full `http://` URI):
/// TCP_NODELAY, a connect timeout and HTTP/2 keepalives so a dead peer is
/// noticed.
pub fn channel(address: &str) -> Result<Channel, BadAddress> {
    let uri = if address.contains("://") {
        address.to_owned()
    } else {
        format!("http://{address}")
    };
    let endpoint = Endpoint::from_shared(uri).map_err(|_| BadAddress(address.to_owned()))?;
    Ok(endpoint
        .connect_timeout(CONNECT_TIMEOUT)
        .tcp_nodelay(true)
        .http2_keep_alive_interval(Duration::from_secs(10))
        .keep_alive_timeout(Duration::from_secs(5))
        .keep_alive_while_idle(true)
        .connect_lazy())
}

/// Parses a listen address such as `127.0.0.1:0`.
pub fn listen_address(text: &str) -> Result<SocketAddr, BadAddress> {
    text.parse().map_err(|_| BadAddress(text.to_owned()))
}

/// gRPC reflection over every toolmesh.v1 service and grpc.health.v1, so
/// grpcurl works without the proto files.
pub fn reflection_service() -> tonic_reflection::server::v1::ServerReflectionServer<
    impl tonic_reflection::server::v1::ServerReflection,
> {
    tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(crate::pb::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .build_v1()
        .expect("the embedded descriptor sets are valid")
}

/// Resolves on SIGTERM or ctrl-c (SIGINT).
pub async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .expect("a SIGTERM handler can be installed");
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every unit of the grpc-timeout header parses; malformed values do not.
    #[test]
    fn grpc_timeout_table() {
        let ok = [
            ("1H", Duration::from_secs(3600)),
            ("2M", Duration::from_secs(120)),
            ("3S", Duration::from_secs(3)),
            ("250m", Duration::from_millis(250)),
            ("7u", Duration::from_micros(7)),
            ("99999999n", Duration::from_nanos(99_999_999)),
        ];
        for (text, expected) in ok {
            assert_eq!(parse_grpc_timeout(text), Some(expected), "{text}");
        }
        for text in ["", "m", "10", "10x", "-5m", "123456789m", "1.5S", "1é"] {
            assert_eq!(parse_grpc_timeout(text), None, "{text}");
        }
    }
}
