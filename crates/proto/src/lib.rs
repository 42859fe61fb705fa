//! The toolmesh.v1 gRPC contract as Rust: messages, clients and servers generated from `proto/toolmesh/v1/*.proto`, the encoded descriptor set for reflection, and the registry's stored records ([`store`]).
#![forbid(unsafe_code)]
#![allow(missing_docs, unreachable_pub, clippy::all)]

tonic::include_proto!("toolmesh.v1");

pub mod shared;

/// The encoded `FileDescriptorSet` of every toolmesh.v1 proto, for reflection.
pub const FILE_DESCRIPTOR_SET: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/toolmesh_descriptor.bin"));

/// The records the registry keeps in its key-value store
/// (`proto/toolmesh/store/v1`, package `toolmesh.store.v1`): not part of
/// the contract, no service sends them.
pub mod store {
    tonic::include_proto!("toolmesh.store.v1");
}
