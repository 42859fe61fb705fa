//! The `toolmesh.v1.Governance` gRPC service: explain a caller's view of a
//! tool (the version a rollout gives it included), list pending approvals,
//! approve or deny them.

use crate::call::resolve;
use crate::{Dispatcher, Refusal};
use tonic::{Request, Response, Status};
use toolmesh::Principal;
use toolmesh::ToolRef;
use toolmesh::pb::{
    ApprovalResponse, ApproveRequest, DenyRequest, ExplainRequest, ExplainResponse,
    ListApprovalsRequest, ListApprovalsResponse, governance_server,
};
use toolmesh::rollout::Audience;
use toolmesh_governance::Governance;
use toolmesh_governance::approvals::List;
use toolmesh_governance::{ApprovalState, ApprovalTicket};
use toolmesh_identity::ADMIN_ROLE;
use toolmesh_policy::{ApprovalNeed, Decision, explain};

/// gRPC adapter for governance over a [`Dispatcher`].
#[derive(Clone)]
pub struct GovernanceService {
    pub(crate) dispatcher: Dispatcher,
}

#[tonic::async_trait]
impl governance_server::Governance for GovernanceService {
    async fn explain(
        &self,
        request: Request<ExplainRequest>,
    ) -> Result<Response<ExplainResponse>, Status> {
        let asker = self.dispatcher.caller(&request)?;
        let request = request.into_inner();
        let policy = self.dispatcher.governance().policy();
        // Only an operator reads why a tool is hidden, whose rollout covers
        // whom, and another caller's view.
        let audience = if asker.has_role(ADMIN_ROLE) {
            Audience::Operator
        } else {
            Audience::Caller
        };
        let who = subject(self.dispatcher.governance(), asker, &request.caller_token)?;
        let reference =
            ToolRef::parse(&request.tool).map_err(|e| Refusal::BadReference(e.to_string()))?;
        let snapshot = self.dispatcher.current_snapshot();
        let caller = resolve::caller(&who, &request.session_id);
        let hidden = audience == Audience::Caller
            && !resolve::may_see(&snapshot, &policy, &who, reference.name);
        let picked = if hidden {
            // Told exactly what a name that does not exist is told.
            Err(resolve::unknown(&snapshot, &policy, &who, reference.name))
        } else {
            resolve::pick(&snapshot, &snapshot, &reference, &caller)
        };
        let (entry, routed) =
            picked.map_err(|e| Refusal::UnknownTool(e.to_tool_error().message))?;
        let entry = &entry;
        let explanation = explain(&policy, &who, entry.def.spec());
        let callable = self.dispatcher.is_callable(entry);
        let (verdict, rule, reason) = match &explanation.decision {
            Decision::Deny { reason } => ("DENIED", String::new(), reason.clone()),
            Decision::Allow { rule, .. } if !callable => (
                "HIDDEN",
                rule.clone(),
                match &entry.disabled {
                    Some(why) => format!("granted by {rule:?}, but disabled by an operator: {why}"),
                    None => {
                        format!("granted by {rule:?}, but no healthy executor serves it right now")
                    }
                },
            ),
            Decision::Allow { rule, .. } => {
                ("VISIBLE", rule.clone(), format!("granted by {rule:?}"))
            }
        };
        let trace = explanation.grants.iter().map(ToString::to_string).collect();
        let input_schema = crate::list::narrowed(&policy, &who, entry)
            .map(|schema| schema.to_string())
            .unwrap_or_default();
        Ok(Response::new(ExplainResponse {
            verdict: verdict.into(),
            principal: who.name.clone(),
            tenant: who.tenant.clone(),
            roles: who.roles.clone(),
            rule,
            reason,
            trace,
            tool_version: entry.def.version().to_string(),
            approval_required: explanation.approval_reason.is_some()
                && matches!(
                    explanation.decision,
                    Decision::Allow {
                        approval: ApprovalNeed::Required,
                        ..
                    }
                ),
            argument_limits: explanation.argument_limits,
            input_schema,
            fallback: crate::call::fallback::describe(
                &self.dispatcher.pipeline.pairings,
                &snapshot,
                &policy,
                &entry.def,
            ),
            rollout: routed
                .map(|routed| routed.explain(entry, &caller, audience))
                .unwrap_or_default(),
        }))
    }

    async fn list_approvals(
        &self,
        request: Request<ListApprovalsRequest>,
    ) -> Result<Response<ListApprovalsResponse>, Status> {
        let governance = self.dispatcher.governance();
        let who = self.dispatcher.caller(&request)?;
        let approvals = governance
            .approval(List, &who)
            .await
            .map_err(Refusal::from)?
            .iter()
            .map(approval_pb)
            .collect();
        Ok(Response::new(ListApprovalsResponse { approvals }))
    }

    async fn approve(
        &self,
        request: Request<ApproveRequest>,
    ) -> Result<Response<ApprovalResponse>, Status> {
        let who = self.dispatcher.caller(&request)?;
        let ticket = self
            .dispatcher
            .decide_approval(&who, &request.get_ref().id, None)
            .await
            .map_err(Refusal::from)?;
        Ok(Response::new(ApprovalResponse {
            approval: Some(approval_pb(&ticket)),
        }))
    }

    async fn deny(
        &self,
        request: Request<DenyRequest>,
    ) -> Result<Response<ApprovalResponse>, Status> {
        let who = self.dispatcher.caller(&request)?;
        let request = request.into_inner();
        let reason = if request.reason.trim().is_empty() {
            "denied by an approver"
        } else {
            request.reason.as_str()
        };
        let ticket = self
            .dispatcher
            .decide_approval(&who, &request.id, Some(reason))
            .await
            .map_err(Refusal::from)?;
        Ok(Response::new(ApprovalResponse {
            approval: Some(approval_pb(&ticket)),
        }))
    }
}

/// Whose view `asker` asks about: its own, or — for an admin — that of
/// the caller holding `caller_token` (a static token or an issuer's JWT).
fn subject(
    governance: &Governance,
    asker: Principal,
    caller_token: &str,
) -> Result<Principal, Refusal> {
    if caller_token.is_empty() {
        return Ok(asker);
    }
    if !asker.has_role(ADMIN_ROLE) {
        // A token's principal and roles are not for every caller to learn.
        return Err(Refusal::NotAllowed(format!(
            "{} may not explain another caller's view: that needs the role \"{}\"; without --caller, explain shows your own",
            asker.name, ADMIN_ROLE
        )));
    }
    governance
        .authenticate(Some(caller_token), None)
        .map_err(Refusal::BadCallerToken)
}

/// The wire form of a ticket.
fn approval_pb(ticket: &ApprovalTicket) -> toolmesh::pb::Approval {
    let (state, decided_by) = match &ticket.state {
        ApprovalState::Pending => ("PENDING", String::new()),
        ApprovalState::Approved { by } => ("APPROVED", by.clone()),
        ApprovalState::Denied { by, .. } => ("DENIED", by.clone()),
        ApprovalState::Used => ("USED", String::new()),
    };
    toolmesh::pb::Approval {
        id: ticket.id.clone(),
        tool: ticket.tool.clone(),
        version: ticket.version.clone(),
        arguments_sha256: ticket.args_sha256.clone(),
        caller: ticket.caller.name.clone(),
        tenant: ticket.caller.tenant.clone(),
        summary: ticket.summary.clone(),
        state: state.to_owned(),
        expires_in_ms: ticket.expires_in().as_millis() as u64,
        decided_by,
    }
}
