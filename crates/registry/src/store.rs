//! The Store seam: what the gRPC edge asks of a registry. [`Registry`]
//! implements it over either key-value backend; the seam lets the edge be
//! tested and served without naming the backend.

use crate::error::RegistryError;
use crate::gate::Gate;
use crate::rollouts::RolloutRequest;
use crate::shared::SharedRecord;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use toolmesh::pb;
use toolmesh::{Rollout, Snapshot};

/// What the gRPC edge needs from a registry, whichever store backs it.
#[tonic::async_trait]
pub trait Store: Send + Sync + 'static {
    /// Who callers are and what they may do.
    fn gate(&self) -> &dyn Gate;
    /// The newest published snapshot.
    fn current(&self) -> Arc<Snapshot>;
    /// A receiver of the newest snapshot, notified of each new one.
    fn subscribe(&self) -> watch::Receiver<Arc<Snapshot>>;
    /// Snapshot `version` if still held (0: the newest).
    fn snapshot(&self, version: u64) -> Result<Arc<Snapshot>, RegistryError>;
    /// Whether the store can take writes (false while etcd has no quorum).
    fn writable(&self) -> watch::Receiver<bool>;
    /// Registers (or replaces) an executor for `owner`.
    async fn register(
        &self,
        request: pb::RegisterRequest,
        owner: String,
    ) -> Result<pb::RegisterResponse, RegistryError>;
    /// Renews a lease `owner` holds; the newest snapshot version.
    async fn heartbeat(&self, lease_id: &str, owner: &str) -> Result<u64, RegistryError>;
    /// Removes the registration `owner` holds under `lease_id`.
    async fn deregister(&self, lease_id: &str, owner: &str) -> Result<u64, RegistryError>;
    /// Disables (`Some(reason)`) or enables every version of `tool`.
    async fn set_disabled(&self, tool: &str, reason: Option<String>) -> Result<u64, RegistryError>;
    /// Applies a rollout request (the rules of [`crate::rollouts`]) and
    /// keeps the result; the snapshot version that holds it, and it.
    async fn update_rollout(
        &self,
        request: &RolloutRequest,
    ) -> Result<(u64, Rollout), RegistryError>;
    /// Every live shared record under `prefix` (shared approval tickets).
    async fn shared_records(&self, prefix: &str) -> Result<Vec<SharedRecord>, RegistryError>;
    /// The keys and revisions of every live shared record under `prefix`
    /// (their values left empty): cheaper when only counting or ordering.
    async fn shared_keys(&self, prefix: &str) -> Result<Vec<SharedRecord>, RegistryError>;
    /// Writes a shared record if its revision is still `revision` (0: it
    /// must not exist), expiring after `ttl`; false when another writer
    /// changed it first.
    async fn put_shared(
        &self,
        key: &str,
        value: Vec<u8>,
        revision: i64,
        ttl: Duration,
    ) -> Result<bool, RegistryError>;
    /// Removes a shared record.
    async fn delete_shared(&self, key: &str) -> Result<(), RegistryError>;
}

#[cfg(test)]
mod tests;
