//! The toolmesh.v1 gRPC contract as Rust: messages, clients and servers generated from `proto/toolmesh/v1/*.proto`, and the encoded descriptor set for reflection.
#![forbid(unsafe_code)]
#![allow(missing_docs, unreachable_pub, clippy::all)]

tonic::include_proto!("toolmesh.v1");

/// The encoded `FileDescriptorSet` of every toolmesh.v1 proto, for reflection.
pub const FILE_DESCRIPTOR_SET: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/toolmesh_descriptor.bin"));
