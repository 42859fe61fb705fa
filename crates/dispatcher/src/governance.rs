//! Who may call what, as the dispatcher applies it: callers identified from
//! their bearer token, the policy's projection and denials, approvals of
//! high-risk calls, rate limits, session preconditions and the audit trail.

use std::sync::Arc;
use tonic::Status;
use toolmesh_governance::Sessions;
use toolmesh_governance::approvals::{ApprovalState, ApprovalTicket, Approvals};
use toolmesh_governance::audit::{AuditKind, AuditRecord, AuditSink};
use toolmesh_governance::{Policy, PolicyHandle, Principal};

/// The governance a dispatcher runs with.
pub struct Governance {
    pub(crate) policy: Arc<PolicyHandle>,
    pub(crate) approvals: Approvals,
    pub(crate) audit: Option<AuditSink>,
    pub(crate) sessions: Sessions,
}

impl Governance {
    /// Governance by `policy` (live: reloads show up on the next call),
    /// writing audit records to `audit` when set.
    pub fn new(policy: Arc<PolicyHandle>, audit: Option<AuditSink>) -> Self {
        let approvals = Approvals::new(policy.current().approval_settings());
        Governance {
            policy,
            approvals,
            audit,
            sessions: Sessions::default(),
        }
    }

    /// The development policy (anonymous callers may use every tool; HIGH
    /// risk still needs approval), no audit.
    pub fn dev() -> Self {
        Governance::new(Arc::new(PolicyHandle::new(Policy::permissive_dev())), None)
    }

    /// The policy in force now.
    pub fn policy(&self) -> Arc<Policy> {
        self.policy.current()
    }

    /// The caller of a request: its bearer token (`authorization`
    /// metadata), else the mTLS client certificate the handshake verified,
    /// matched against the policy's `tls_name`s, else the anonymous caller
    /// where the policy admits one.
    pub fn authenticate<T>(&self, request: &tonic::Request<T>) -> Result<Principal, Status> {
        let bearer = toolmesh::grpc::bearer(request.metadata());
        let policy = self.policy.current();
        if bearer.is_none()
            && let Some(cert) = toolmesh::grpc::peer_certificate(request)
            && let Some(who) = policy.authenticate_tls(|name| cert.is_valid_for(name))
        {
            return Ok(who);
        }
        policy
            .authenticate(bearer)
            .map_err(|e| Status::unauthenticated(e.to_string()))
    }

    /// The anonymous caller, when the policy admits one.
    pub fn anonymous(&self) -> Result<Principal, Status> {
        self.policy
            .current()
            .authenticate(None)
            .map_err(|e| Status::unauthenticated(e.to_string()))
    }

    pub(crate) fn audit(&self, record: impl FnOnce() -> AuditRecord) {
        if let Some(sink) = &self.audit {
            sink.record(record());
        }
    }

    /// Approves or denies a ticket; audited.
    pub(crate) fn decide_approval(
        &self,
        approver: &Principal,
        id: &str,
        deny: Option<&str>,
    ) -> Result<ApprovalTicket, Status> {
        let decided = match deny {
            None => self.approvals.approve(id, approver),
            Some(reason) => self.approvals.deny(id, approver, reason),
        }
        .map_err(|e| Status::failed_precondition(e.to_string()))?;
        self.audit(|| {
            let kind = if deny.is_some() {
                AuditKind::ApprovalDenied
            } else {
                AuditKind::ApprovalGranted
            };
            let spec = toolmesh::pb::ToolSpec {
                name: decided.tool.clone(),
                version: decided.version.clone(),
                ..Default::default()
            };
            let mut record = AuditRecord::new(kind, approver, &spec, "");
            record.arguments_sha256 = decided.args_sha256.clone();
            record.approval_id = Some(decided.id.clone());
            record.reason = deny.map(str::to_owned);
            record
        });
        Ok(decided)
    }
}

/// The wire form of a ticket.
pub(crate) fn approval_pb(ticket: &ApprovalTicket) -> toolmesh::pb::Approval {
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
