//! The governance one server runs with: the live policy, open approvals,
//! session facts and the audit sink, behind one handle every front door uses.

use crate::approvals::{
    ApprovalError, ApprovalFields, ApprovalOp, ApprovalTicket, Approvals, SharedApprovals,
};
use crate::audit::{AuditKind, AuditRecord, AuditSink};
use crate::identity::Identity;
use crate::issuers::IssuerKeys;
use crate::sessions::{PreconditionError, SharedSessions};
use crate::shared_records::SharedBook;
use crate::{AuthError, Policy, PolicyHandle, Principal, Sessions};
use serde_json::Value;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use toolmesh::Snapshot;
use toolmesh::pb::Precondition;
use toolmesh_transport::PeerCertificate;

/// The governance a dispatcher runs with.
pub struct Governance {
    /// The policy in force (live: reloads show up on the next call).
    pub policy: Arc<PolicyHandle>,
    approvals: Approvals,
    /// The policy generation whose approval settings `approvals` holds.
    approvals_generation: AtomicU64,
    /// What each agent session has done, for preconditions (in this
    /// process; `shared_sessions` instead when set).
    pub sessions: Sessions,
    /// The registry's session facts, used instead of `sessions` when set.
    shared_sessions: Option<SharedSessions>,
    audit: Option<AuditSink>,
    /// The registry's shared book, used instead of `approvals` when set.
    shared_approvals: Option<SharedApprovals>,
    /// Who callers are (static tokens, certificates, issuers' JWTs).
    identity: Identity,
}

impl Governance {
    /// Governance by `policy`, writing audit records to `audit` when set.
    pub fn new(policy: Arc<PolicyHandle>, audit: Option<AuditSink>) -> Self {
        Governance::sharing(Identity::new(policy), audit)
    }

    /// Governance that identifies callers with `identity` (and shares its
    /// issuers' keys, e.g. with the registry in the same process).
    pub fn sharing(identity: Identity, audit: Option<AuditSink>) -> Self {
        let policy = identity.policy().clone();
        let approvals = Approvals::new(policy.current().approval_settings());
        Governance {
            identity,
            approvals_generation: AtomicU64::new(policy.generation()),
            policy,
            approvals,
            audit,
            sessions: Sessions::default(),
            shared_sessions: None,
            shared_approvals: None,
        }
    }

    /// Keeps approvals and session facts among the registry's shared
    /// records (every dispatcher following that registry sees the same
    /// tickets and judges a precondition alike) instead of in this
    /// process; the rules still run here.
    pub fn with_shared_records(mut self, book: Arc<dyn SharedBook>) -> Self {
        self.shared_sessions = Some(SharedSessions::new(book.clone(), self.sessions.limits()));
        self.shared_approvals = Some(SharedApprovals::new(book));
        self
    }

    /// Checks the preconditions of `who` calling `tool` in `session_id`
    /// (with the registry when session facts are shared).
    pub async fn check_preconditions(
        &self,
        who: &Principal,
        session_id: &str,
        tool: &str,
        preconditions: &[Precondition],
        arguments: &Value,
    ) -> Result<(), PreconditionError> {
        match &self.shared_sessions {
            _ if preconditions.is_empty() => Ok(()),
            Some(shared) => {
                shared
                    .check(who, session_id, tool, preconditions, arguments)
                    .await
            }
            None => self
                .sessions
                .check(who, session_id, tool, preconditions, arguments),
        }
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
    /// declares (with the registry when session facts are shared; a
    /// registry that cannot take them is logged, the call's answer stands).
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
        let Some(shared) = &self.shared_sessions else {
            return self
                .sessions
                .record(who, session_id, tool, arguments, &declared);
        };
        if let Err(reason) = shared
            .record(who, session_id, tool, arguments, &declared)
            .await
        {
            tracing::warn!(tool, %reason, "session facts not recorded: the registry did not take them");
        }
    }

    /// One approval operation, on the registry's shared book when there is
    /// one, else on this process' [`approvals`](Self::approvals).
    pub async fn approval(
        &self,
        op: ApprovalOp,
        who: &Principal,
        fields: ApprovalFields<'_>,
    ) -> Result<Vec<ApprovalTicket>, ApprovalError> {
        match &self.shared_approvals {
            Some(shared) => {
                let settings = self.policy.current().approval_settings();
                shared.call(op, who, &settings, fields).await
            }
            None => self.approvals().apply(op, who, fields),
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

    /// Approvals requested by calls and decided by approvers, under the
    /// approval settings of the policy in force (a reload applies to
    /// tickets requested from then on).
    pub fn approvals(&self) -> &Approvals {
        let generation = self.policy.generation();
        if self
            .approvals_generation
            .swap(generation, Ordering::Relaxed)
            != generation
        {
            self.approvals
                .set_settings(self.policy.current().approval_settings());
        }
        &self.approvals
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
        let (op, reason) = match deny {
            None => (ApprovalOp::Approve, ""),
            Some(reason) => (ApprovalOp::Deny, reason),
        };
        let fields = ApprovalFields {
            id,
            reason,
            ..ApprovalFields::default()
        };
        let decided = self
            .approval(op, approver, fields)
            .await?
            .into_iter()
            .next()
            .ok_or_else(|| ApprovalError::Unknown { id: id.to_owned() })?;
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
