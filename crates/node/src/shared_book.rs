//! The shared records of a `serve` node's own dispatcher: its registry's, without a gRPC hop (governance's rules run in the dispatcher either way).

use std::time::Duration;
use toolmesh::pb;
use toolmesh_governance::{SharedBook, SharedError};
use toolmesh_registry::{RegistryError, SharedRecordsService};

/// The registry's shared records, in this process.
pub(crate) struct StoreBook(pub(crate) SharedRecordsService);

/// A store error as the dispatcher reads it: the status the registry's
/// gRPC edge would answer with, so both paths say the same.
fn refused(error: RegistryError) -> SharedError {
    tonic::Status::from(error).into()
}

#[tonic::async_trait]
impl SharedBook for StoreBook {
    async fn list(
        &self,
        prefix: &str,
        keys_only: bool,
    ) -> Result<Vec<pb::SharedRecord>, SharedError> {
        self.0.list(prefix, keys_only).await.map_err(refused)
    }

    async fn compare_and_put(
        &self,
        record: pb::SharedRecord,
        ttl: Duration,
    ) -> Result<bool, SharedError> {
        self.0.compare_and_put(record, ttl).await.map_err(refused)
    }

    async fn delete(&self, key: &str) -> Result<(), SharedError> {
        self.0.delete(key).await.map_err(refused)
    }
}
