//! The session facts of a `serve` node's own dispatcher: kept in its
//! registry's store, shared with every dispatcher following that registry,
//! without a gRPC hop.

use std::sync::Arc;
use toolmesh::pb;
use toolmesh_governance::sessions::SessionBackend;
use toolmesh_registry::Store;

/// Session facts in a registry's store, in this process.
pub(crate) struct StoreSessions {
    pub(crate) store: Arc<dyn Store>,
}

#[tonic::async_trait]
impl SessionBackend for StoreSessions {
    async fn exchange(
        &self,
        request: pb::SessionFactsRequest,
    ) -> Result<pb::SessionFactsResponse, String> {
        toolmesh_registry::session_facts(&*self.store, request)
            .await
            .map_err(|e| e.to_string())
    }
}
