//! Serving: listen addresses, the server builder, accepted connections and reflection.

use super::{BadAddress, Coalesced, Keepalive, Tls};
use std::net::SocketAddr;
use tokio::net::TcpStream;
use tokio_stream::{Stream, StreamExt};
use tonic::transport::Server;

/// Parses a listen address such as `127.0.0.1:0`.
pub fn listen_address(text: &str) -> Result<SocketAddr, BadAddress> {
    text.parse().map_err(|_| BadAddress(text.to_owned()))
}

/// The connections a server accepts on `listener`, each made ready by
/// [`accepted`].
pub fn incoming(
    listener: tokio::net::TcpListener,
) -> impl Stream<Item = std::io::Result<Coalesced<TcpStream>>> + Send + 'static {
    tonic::transport::server::TcpIncoming::from(listener).map(|a| a.and_then(accepted))
}

/// A connection a server accepted, as the mesh serves it: TCP_NODELAY
/// (tonic ignores `Server::tcp_nodelay` for `serve_with_incoming*`; without
/// it a small answer waits ~40 ms for Nagle's algorithm and a delayed ACK),
/// and [`Coalesced`] so that an answer's frames leave in one write.
pub fn accepted(stream: TcpStream) -> std::io::Result<Coalesced<TcpStream>> {
    stream.set_nodelay(true)?;
    Ok(Coalesced::new(stream))
}

/// A server builder with `tls` (if it has a certificate) and the mesh's
/// keepalive settings; serve it with [`incoming`].
pub fn server_builder(tls: &Tls) -> Result<Server, tonic::transport::Error> {
    let builder = Server::builder()
        .http2_keepalive_interval(Some(Keepalive::MESH.interval))
        .http2_keepalive_timeout(Some(Keepalive::MESH.timeout))
        .http2_max_header_list_size(super::MAX_HEADER_LIST_BYTES);
    match tls.server().cloned() {
        Some(tls) => builder.tls_config(tls),
        None => Ok(builder),
    }
}

/// gRPC reflection over every toolmesh.v1 service and grpc.health.v1, so
/// grpcurl works without the proto files.
pub fn reflection_service() -> tonic_reflection::server::v1::ServerReflectionServer<
    impl tonic_reflection::server::v1::ServerReflection,
> {
    tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(toolmesh_proto::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .build_v1()
        .expect("the embedded descriptor sets are valid")
}
