//! The domain types every component shares: validated tool definitions,
//! immutable snapshots, tool references, argument checking, callers and
//! argument digests, and the error vocabulary a model reads; the generated
//! toolmesh.v1 contract as [`pb`].
#![forbid(unsafe_code)]

pub mod access;
pub mod content;
pub mod digest;
pub mod error;
pub mod history;
pub mod listing;
pub mod principal;
pub mod reference;
pub mod rollout;
pub mod schema;
pub mod snapshot;
pub mod spec;
pub mod suggest;
pub mod tool_pattern;

pub use access::AccessError;
pub use error::{ErrorCodeExt, ToolErrorExt, ToolResultExt, error_chain, find_cause};
pub use history::{NotHeld, SnapshotHistory};
pub use principal::{IssuedBy, MissingScopes, Principal};
pub use reference::ToolRef;
pub use rollout::Rollout;
pub use snapshot::{Instance, Snapshot, ToolEntry};
pub use spec::{SpecError, ToolDef};
pub use tool_pattern::{PatternError, Reach, ToolPattern};

/// The toolmesh.v1 contract: the code generated from
/// `proto/toolmesh/v1/*.proto` (the `toolmesh-proto` crate).
pub use toolmesh_proto as pb;
