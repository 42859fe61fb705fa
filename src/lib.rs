//! The toolmesh.v1 gRPC contract and the domain types every component shares:
//! validated tool definitions, immutable snapshots, tool references, argument
//! checking and the error vocabulary a model reads.
#![forbid(unsafe_code)]

pub mod error;
pub mod history;
pub mod reference;
pub mod rollout;
pub mod schema;
pub mod snapshot;
pub mod spec;
pub mod suggest;

pub use error::{ErrorCodeExt, ToolErrorExt, ToolResultExt};
pub use history::{NotHeld, SnapshotHistory};
pub use reference::ToolRef;
pub use rollout::Rollout;
pub use snapshot::{Instance, Snapshot, ToolEntry};
pub use spec::{SpecError, ToolDef};

/// Code generated from `proto/toolmesh/v1/*.proto`.
#[allow(missing_docs, unreachable_pub, clippy::all)]
pub mod pb {
    tonic::include_proto!("toolmesh.v1");

    /// The encoded `FileDescriptorSet` of every toolmesh.v1 proto, for reflection.
    pub const FILE_DESCRIPTOR_SET: &[u8] =
        include_bytes!(concat!(env!("OUT_DIR"), "/toolmesh_descriptor.bin"));
}
