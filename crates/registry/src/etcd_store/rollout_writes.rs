//! Rollout changes on etcd: decided against this replica's view of the
//! rollout, written only if its key is still at the revision seen.

use super::keys::Slot;
use super::{Inner, put_op, unchanged};
use crate::error::RegistryError;
use crate::rollouts::{self, RolloutRecord, RolloutRequest};
use toolmesh::Rollout;
use toolmesh_etcd::pb::TxnRequest;

impl Inner {
    /// One try at a rollout change: catch up, decide against the rollout
    /// this replica holds, write it if its key is still at that revision
    /// (`None` when it is not).
    pub(super) async fn try_rollout(
        &self,
        request: &RolloutRequest,
    ) -> Result<Option<(u64, Rollout)>, RegistryError> {
        self.catch_up().await?;
        let (current, revision) = match self.model().rollouts.get(&request.tool) {
            Some((rollout, revision)) => (Some(rollout.clone()), *revision),
            None => (None, 0),
        };
        let base = self.published.current();
        let rollout = rollouts::apply(current.as_ref(), request, &base, rollouts::now_ms())?;
        let value = serde_json::to_vec(&RolloutRecord::from(&rollout))
            .map_err(|e| RegistryError::Internal(format!("rollout not encoded ({e})")))?;
        let key = Slot::Rollout(&request.tool).key();
        let response = self
            .client
            .txn(TxnRequest {
                compare: vec![unchanged(key.clone(), revision)],
                success: vec![put_op(key, value, 0)],
                failure: vec![],
            })
            .await?;
        if !response.succeeded {
            return Ok(None);
        }
        let written = response.header.map_or(0, |h| h.revision);
        self.reflect(written).await?;
        Ok(Some((u64::try_from(written).unwrap_or(0), rollout)))
    }
}
