//! The toolmesh registry: executors register their tools and hold leases,
//! the registry watches their health and publishes every change as a new
//! immutable, versioned snapshot.
#![forbid(unsafe_code)]

#[cfg(test)]
mod backends;
mod codec;
mod config;
mod durable;
mod error;
mod gate;
mod health_watch;
mod keys;
mod kv;
mod metrics;
mod owners;
mod published;
mod registry;
mod request;
mod rollouts;
mod rules;
mod service;
mod shared_records;
mod switches;

pub use config::RegistryConfig;
pub use durable::STATE_FILE;
pub use error::RegistryError;
pub use gate::{AccessError, Gate, OpenGate, SnapshotReader};
pub use registry::{EtcdAccess, EtcdAccessError, Registry};
pub use rollouts::{DecisionJournal, RolloutChange, RolloutDesk, RolloutError, RolloutRequest};
pub use service::{RegistryRoutes, RegistryService, SnapshotStream, grpc_service};
pub use shared_records::{SharedRecord, SharedRecordsService};
