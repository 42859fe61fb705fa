//! Admit: what must hold before a valid call may run — the session's
//! preconditions, an approval for high-risk tools, and the rate limits.

use super::validate::{Arguments, Validated};
use crate::error::CallError;
use serde_json::Value;
use toolmesh::Principal;
use toolmesh::ToolDef;
use toolmesh::digest::value_digest;
use toolmesh::pb::InvokeRequest;
use toolmesh_governance::approvals::{ApprovalCall, Consume, Request};
use toolmesh_governance::{Governance, PreconditionError, approval_summary};
use toolmesh_policy::{ApprovalNeed, Permit, Policy};

/// A valid call admitted to run, holding its rate-limit slot until it
/// ends.
pub(crate) struct Admitted {
    pub(crate) validated: Validated,
    pub(crate) _permit: Permit,
}

/// Admits a call whose arguments are valid; the permit holds the caller's
/// concurrency slot while the call runs. Only a call that needs an approval
/// waits (for the registry, when approvals are shared).
pub(crate) async fn admit(
    governance: &Governance,
    policy: &Policy,
    who: &Principal,
    def: &ToolDef,
    request: &InvokeRequest,
    arguments: &Arguments,
    approval: ApprovalNeed,
) -> Result<Permit, CallError> {
    let session = super::session(&request.context);
    let preconditions = &def.spec().preconditions;
    if !preconditions.is_empty() {
        // Boxed: it may ask the registry; most tools declare none.
        Box::pin(governance.check_preconditions(
            who,
            session,
            def.name(),
            preconditions,
            arguments.tree(&request.arguments)?,
        ))
        .await
        .map_err(|e| match e {
            PreconditionError::Unavailable { .. } => CallError::PreconditionUnknown(e.to_string()),
            _ => CallError::PreconditionFailed(e.to_string()),
        })?;
    }
    if approval == ApprovalNeed::Required {
        // Boxed: it may ask the registry; most calls need no approval.
        Box::pin(approved(
            governance,
            def,
            who,
            &request.approval_id,
            arguments.tree(&request.arguments)?,
        ))
        .await?;
    }
    // Without [[limits]] there is nothing to count (and no lock to take).
    let limits = policy.limits();
    if limits.is_empty() {
        return Ok(Permit::unlimited());
    }
    limits
        .check(def.name(), &who.key())
        .map_err(|limited| CallError::RateLimited {
            message: limited.message,
            retry_after: limited.retry_after,
        })
}

/// Consumes the approval the call carries, or asks for one.
async fn approved(
    governance: &Governance,
    def: &ToolDef,
    who: &Principal,
    approval_id: &str,
    arguments: &Value,
) -> Result<(), CallError> {
    let digest = value_digest(arguments);
    let version = def.version().to_string();
    let call = ApprovalCall {
        tool: def.name(),
        version: &version,
        args_sha256: &digest,
    };
    if !approval_id.is_empty() {
        let consume = Consume {
            id: approval_id,
            call,
        };
        return governance
            .approval(consume, who)
            .await
            .map_err(|e| CallError::ApprovalUnusable(e.to_string()));
    }
    let summary = approval_summary(&def.label(), who, def.input_schema(), arguments, &digest);
    let request = Request {
        call,
        summary: &summary,
    };
    let ticket = governance
        .approval(request, who)
        .await
        .map_err(|e| CallError::ApprovalUnusable(e.to_string()))?;
    Err(CallError::ApprovalRequired {
        tool: def.label(),
        approval_id: ticket.id,
        summary,
    })
}
