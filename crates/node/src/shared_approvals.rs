//! The registry's side of shared approvals: the `Registry.Approvals` RPC
//! applies governance's approval rules to the tickets in the registry's
//! store and writes back what changed, comparing revisions so that two
//! dispatchers racing on one ticket cannot both use it.

use std::sync::Arc;
use std::time::Duration;
use tonic::Status;
use toolmesh::pb;
use toolmesh_governance::approvals::{
    ApprovalBackend, ApprovalFields, ApprovalOp, StoredTicket, encode_response,
};
use toolmesh_governance::{ApprovalError, ApprovalSettings, ApprovalTicket, Approvals, Principal};
use toolmesh_registry::{ApprovalDesk, SharedRecord, Store};

/// Where tickets live among the shared records.
pub(crate) const PREFIX: &str = "approval/";
/// How long a ticket's record outlives the ticket.
const KEEP_AFTER_EXPIRY: Duration = Duration::from_secs(60);
/// How often an operation is tried again after losing a race.
const MAX_RACES: usize = 8;

/// Approvals kept in a registry's store.
pub(crate) struct SharedApprovals {
    pub(crate) store: Arc<dyn Store>,
}

fn bad(what: &str, error: impl std::fmt::Display) -> Status {
    Status::invalid_argument(format!(
        "{what} is not valid ({error}); send what toolmesh_governance::ApprovalRelay sends"
    ))
}

#[tonic::async_trait]
impl ApprovalDesk for SharedApprovals {
    async fn approvals(
        &self,
        request: pb::ApprovalsRequest,
    ) -> Result<pb::ApprovalsResponse, Status> {
        let op = ApprovalOp::parse(&request.op).ok_or_else(|| bad("op", &request.op))?;
        let who: Principal =
            serde_json::from_str(&request.principal_json).map_err(|e| bad("principal_json", e))?;
        let settings: ApprovalSettings =
            serde_json::from_str(&request.settings_json).map_err(|e| bad("settings_json", e))?;
        let fields = ApprovalFields {
            id: &request.id,
            tool: &request.tool,
            version: &request.version,
            args_sha256: &request.arguments_sha256,
            summary: &request.summary,
            reason: &request.reason,
        };
        Ok(encode_response(
            self.run(op, &who, &settings, fields).await?,
        ))
    }
}

/// The dispatcher of a `serve` node uses the book of its own registry.
#[tonic::async_trait]
impl ApprovalBackend for SharedApprovals {
    async fn call(
        &self,
        op: ApprovalOp,
        who: &Principal,
        settings: &ApprovalSettings,
        fields: ApprovalFields<'_>,
    ) -> Result<Vec<ApprovalTicket>, ApprovalError> {
        self.run(op, who, settings, fields)
            .await
            .unwrap_or_else(|status| {
                Err(ApprovalError::Unavailable {
                    reason: status.message().to_owned(),
                })
            })
    }
}

impl SharedApprovals {
    /// Runs `op` on the tickets in the store, writing back what changed;
    /// runs again on fresh tickets when another writer got there first.
    async fn run(
        &self,
        op: ApprovalOp,
        who: &Principal,
        settings: &ApprovalSettings,
        fields: ApprovalFields<'_>,
    ) -> Result<Result<Vec<ApprovalTicket>, ApprovalError>, Status> {
        for _ in 0..MAX_RACES {
            let records = self.store.shared_records(PREFIX).await?;
            let before: Vec<(SharedRecord, ApprovalTicket)> = records
                .into_iter()
                .filter_map(|r| {
                    let stored: StoredTicket = serde_json::from_slice(&r.value).ok()?;
                    Some((r, stored.into()))
                })
                .collect();
            let book = Approvals::from_tickets(
                settings.clone(),
                before.iter().map(|(_, t)| t.clone()).collect(),
            );
            let result = book.apply(op, who, fields);
            if self.write_back(&before, book.tickets()).await? {
                return Ok(result);
            }
        }
        Err(Status::aborted(
            "the approval changed under several concurrent calls; call again",
        ))
    }

    /// Writes the tickets that changed; false when another writer changed
    /// one first (the operation must run again on fresh tickets).
    async fn write_back(
        &self,
        before: &[(SharedRecord, ApprovalTicket)],
        after: Vec<ApprovalTicket>,
    ) -> Result<bool, Status> {
        for ticket in &after {
            let old = before.iter().find(|(_, t)| t.id == ticket.id);
            if old.is_some_and(|(_, t)| t == ticket) {
                continue;
            }
            let value = serde_json::to_vec(&StoredTicket::from(ticket))
                .map_err(|e| Status::internal(format!("ticket not encoded ({e}); call again")))?;
            let revision = old.map_or(0, |(r, _)| r.revision);
            let key = format!("{PREFIX}{}", ticket.id);
            let ttl = ticket.expires_in() + KEEP_AFTER_EXPIRY;
            if !self.store.put_shared(&key, value, revision, ttl).await? {
                return Ok(false);
            }
        }
        for (record, _) in before
            .iter()
            .filter(|(_, t)| !after.iter().any(|a| a.id == t.id))
        {
            self.store.delete_shared(&record.key).await?;
        }
        Ok(true)
    }
}
