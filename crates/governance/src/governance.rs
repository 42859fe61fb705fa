//! The governance one server runs with: the live policy, open approvals,
//! session facts and the audit sink, behind one handle every front door uses.

use crate::approvals::{ApprovalError, ApprovalOp, ApprovalTicket, Approve, Deny, StoredApprovals};
use crate::identity::Identity;
use crate::records::{MemoryRecords, RecordStore};
use crate::sessions::{PreconditionError, Sessions};
use crate::{PolicyHandle, SessionLimits};
use serde_json::Value;
use std::sync::Arc;
use toolmesh::pb::Precondition;
use toolmesh::{Principal, Snapshot};
use toolmesh_audit::{AuditKind, AuditRecord, AuditSink};
use toolmesh_identity::AuthError;
use toolmesh_identity::issuers::IssuerKeys;
use toolmesh_policy::Policy;
use toolmesh_transport::PeerCertificate;

/// The governance a dispatcher runs with.
pub struct Governance {
    /// The policy in force (live: reloads show up on the next call).
    pub policy: Arc<PolicyHandle>,
    /// Approval tickets, in the shared records.
    approvals: StoredApprovals,
    /// What each agent session has done, for preconditions, in the shared
    /// records.
    sessions: Sessions,
    audit: Option<AuditSink>,
    /// Who callers are (static tokens, certificates, issuers' JWTs).
    identity: Identity,
}

impl Governance {
    /// Governance by `policy`, writing audit records to `audit` when set,
    /// with its records in this process alone (a [`MemoryRecords`]).
    pub fn new(policy: Arc<PolicyHandle>, audit: Option<AuditSink>) -> Self {
        Governance::sharing(Identity::new(policy), audit, Arc::new(MemoryRecords::new()))
    }

    /// Governance that identifies callers with `identity` (and shares its
    /// issuers' keys, e.g. with the registry in the same process) and
    /// keeps approvals and session facts in `book`: the registry's shared
    /// records (so every dispatcher following that registry sees the same
    /// tickets and judges a precondition alike) or a [`MemoryRecords`]; the
    /// rules run here either way.
    pub fn sharing(
        identity: Identity,
        audit: Option<AuditSink>,
        book: Arc<dyn RecordStore>,
    ) -> Self {
        Governance {
            policy: identity.policy().clone(),
            identity,
            approvals: StoredApprovals::new(book.clone()),
            sessions: Sessions::new(book, SessionLimits::default()),
            audit,
        }
    }

    /// Checks the preconditions of `who` calling `tool` in `session_id`.
    pub async fn check_preconditions(
        &self,
        who: &Principal,
        session_id: &str,
        tool: &str,
        preconditions: &[Precondition],
        arguments: &Value,
    ) -> Result<(), PreconditionError> {
        self.sessions
            .check(who, session_id, tool, preconditions, arguments)
            .await
    }

    /// Whether a successful call of `tool` is a fact some precondition of
    /// `snapshot` names (so [`record_session`](Self::record_session) would
    /// keep something).
    pub fn records_facts_of(&self, snapshot: &Snapshot, tool: &str) -> bool {
        !self
            .sessions
            .declared_for(snapshot)
            .arguments_of(tool)
            .is_empty()
    }

    /// Remembers a successful call for the preconditions `snapshot`
    /// declares (records that cannot take it are logged, the call's
    /// answer stands).
    pub async fn record_session(
        &self,
        snapshot: &Snapshot,
        who: &Principal,
        session_id: &str,
        tool: &str,
        arguments: &Value,
    ) {
        if session_id.is_empty() {
            // Most calls name no session: nothing to record, nothing to look up.
            return;
        }
        let declared = self.sessions.declared_for(snapshot);
        if let Err(reason) = self
            .sessions
            .record(who, session_id, tool, arguments, &declared)
            .await
        {
            tracing::warn!(tool, %reason, "session facts not recorded: the registry did not take them");
        }
    }

    /// One approval operation by `who`, under the approval settings of the
    /// policy in force (a reload applies to tickets requested from then on).
    pub async fn approval<O: ApprovalOp>(
        &self,
        op: O,
        who: &Principal,
    ) -> Result<O::Answer, ApprovalError> {
        let settings = self.policy.current().approval_settings();
        self.approvals.call(op, who, &settings).await
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

    /// The caller: its bearer token (a `[[callers]]` token, else a JWT of
    /// one of the policy's `[[issuers]]`), else the verified mTLS client
    /// certificate matched against the policy's `tls_name`s, else the
    /// anonymous caller where the policy admits one. Static tokens are
    /// looked up first, as fast as without issuers; a JWT is verified
    /// against cached keys (an unknown `kid` asks for a bounded refresh).
    pub fn authenticate(
        &self,
        bearer: Option<&str>,
        certificate: Option<&PeerCertificate>,
    ) -> Result<Principal, AuthError> {
        self.identity.authenticate(bearer, certificate)
    }

    /// Who callers are, for the registry beside this dispatcher.
    pub fn identity(&self) -> &Identity {
        &self.identity
    }

    /// How the keys of each `[[issuers]]` entry stand (for health and metrics).
    pub fn issuer_keys(&self) -> Arc<IssuerKeys> {
        self.identity.issuer_keys()
    }

    /// Writes an audit record, built only when an audit sink is set.
    pub fn audit(&self, record: impl FnOnce() -> AuditRecord) {
        if let Some(sink) = &self.audit {
            sink.record(record());
        }
    }

    /// Writes the audit record of a decision an operator waits on, and
    /// returns once it is written (see [`AuditSink::keep`]).
    pub async fn audit_decision(&self, record: impl FnOnce() -> AuditRecord) {
        if let Some(sink) = &self.audit {
            sink.keep(record()).await;
        }
    }

    /// Approves (`deny` = None) or denies a ticket; audited before it is answered.
    pub async fn decide_approval(
        &self,
        approver: &Principal,
        id: &str,
        deny: Option<&str>,
    ) -> Result<ApprovalTicket, ApprovalError> {
        let decided = match deny {
            None => self.approval(Approve { id }, approver).await?,
            Some(reason) => self.approval(Deny { id, reason }, approver).await?,
        };
        self.audit_decision(|| {
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
            record.set_arguments_sha256(decided.args_sha256.clone());
            record.approval_id = Some(decided.id.clone());
            record.reason = deny.map(str::to_owned);
            record
        })
        .await;
        Ok(decided)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::approvals::{ApprovalCall, Consume, List, Request};
    use toolmesh_testkit::principal;

    fn approving(role: &str) -> Policy {
        Policy::from_toml(&format!("[approval]\napprover_roles = [\"{role}\"]\n")).unwrap()
    }

    /// A ticket lives in the governance's book between operations:
    /// requested, listed, decided (audited), used once; the approval
    /// settings of a reloaded policy rule the next operation.
    #[tokio::test]
    async fn approvals_live_in_the_book_under_the_policy_in_force() {
        let handle = Arc::new(PolicyHandle::new(approving("approver")));
        let governance = Governance::new(handle.clone(), None);
        let bot = principal("bot", "acme", &["agent"]);
        let call = ApprovalCall {
            tool: "wipe",
            version: "1.0.0",
            args_sha256: "d",
        };
        let request = Request {
            call,
            summary: "wipe it",
        };
        let ticket = governance.approval(request, &bot).await.unwrap();
        assert_eq!(
            governance.approval(request, &bot).await.unwrap().id,
            ticket.id
        );
        let alice = principal("alice", "acme", &["approver"]);
        let listed = governance.approval(List, &alice).await.unwrap();
        assert_eq!(listed.len(), 1);
        handle.replace(approving("release-manager"));
        let err = governance
            .decide_approval(&alice, &ticket.id, None)
            .await
            .unwrap_err();
        assert!(matches!(err, ApprovalError::NotApprover { .. }), "{err}");
        let manager = principal("mo", "acme", &["release-manager"]);
        governance
            .decide_approval(&manager, &ticket.id, None)
            .await
            .unwrap();
        let consume = Consume {
            id: &ticket.id,
            call,
        };
        governance.approval(consume, &bot).await.unwrap();
        let err = governance.approval(consume, &bot).await.unwrap_err();
        assert!(matches!(err, ApprovalError::Used { .. }), "{err}");
    }
}
