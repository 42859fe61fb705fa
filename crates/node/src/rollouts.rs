//! Operators' decisions in a node: their audit journal (rollouts, tools
//! disabled or enabled), the admin page's feed, and how its dispatcher asks
//! the registry to abort a failing canary — the registry in this process,
//! or one reached by gRPC with the dispatcher's token.

use crate::admin::Feed;
use std::sync::Arc;
use tonic::transport::Channel;
use toolmesh::pb::{self, registry_client::RegistryClient};
use toolmesh_audit::{AuditKind, AuditRecord, AuditSink};
use toolmesh_dispatcher::{AbortError, RolloutControl};
use toolmesh_registry::{
    DecisionJournal, RegistryError, RolloutChange, RolloutDesk, RolloutError, RolloutRequest,
};

/// Rollout decisions and tools disabled or enabled, as audit records.
pub(crate) struct AuditJournal(pub(crate) AuditSink);

#[tonic::async_trait]
impl DecisionJournal for AuditJournal {
    async fn rollout(&self, change: &RolloutChange, rollout: &toolmesh::Rollout) {
        let kind = match change {
            RolloutChange::Start { .. } => AuditKind::RolloutStarted,
            RolloutChange::Set { .. } => AuditKind::RolloutChanged,
            RolloutChange::Promote => AuditKind::RolloutPromoted,
            RolloutChange::Abort { .. } => AuditKind::RolloutAborted,
        };
        // Rollout decisions are rare and an operator waits on each: written
        // and flushed before the answer (calls' records never wait).
        self.0
            .keep(AuditRecord::rollout_decision(
                kind,
                &rollout.changed_by,
                rollout,
            ))
            .await;
    }

    async fn switched(&self, tool: &str, reason: Option<&str>, admin: &str, _version: u64) {
        // Like rollouts: an operator waits, and the record comes first.
        self.0
            .keep(AuditRecord::tool_switch(admin, tool, reason))
            .await;
    }
}

/// How long an operator's decision waits to be in force in the node's own
/// dispatcher before it is answered anyway (with a warning).
const IN_FORCE_LIMIT: std::time::Duration = std::time::Duration::from_secs(10);

/// The journal of a node that runs a registry: the audit journal (if any);
/// the admin page's feed (if any) hears who switched a tool; and, with the
/// node's own dispatcher (`serve`), a decision is answered only once that
/// dispatcher uses the snapshot that holds it, so no call or listing after
/// the answer sees the old state.
pub(crate) struct NodeJournal {
    pub(crate) audit: Option<Arc<dyn DecisionJournal>>,
    pub(crate) feed: Option<Arc<Feed>>,
    pub(crate) dispatcher: Option<toolmesh_dispatcher::Dispatcher>,
}

#[tonic::async_trait]
impl DecisionJournal for NodeJournal {
    async fn rollout(&self, change: &RolloutChange, rollout: &toolmesh::Rollout) {
        if let Some(audit) = &self.audit {
            audit.rollout(change, rollout).await;
        }
    }

    async fn switched(&self, tool: &str, reason: Option<&str>, admin: &str, version: u64) {
        if let Some(audit) = &self.audit {
            audit.switched(tool, reason, admin, version).await;
        }
        if let Some(feed) = &self.feed {
            feed.heard_switch(tool, reason.is_some(), admin, version);
        }
    }

    async fn in_force(&self, version: u64) {
        if let Some(dispatcher) = &self.dispatcher
            && !dispatcher.caught_up(version, IN_FORCE_LIMIT).await
        {
            tracing::warn!(
                version,
                "a decision was answered before this node's dispatcher installed its snapshot"
            );
        }
    }
}

/// The journal of a node's audit sink, if it has one.
pub(crate) fn journal(audit: Option<&AuditSink>) -> Option<Arc<dyn DecisionJournal>> {
    audit.map(|sink| Arc::new(AuditJournal(sink.clone())) as Arc<dyn DecisionJournal>)
}

/// The request of an automatic abort of `tool`'s rollout of `canary`.
fn abort_request(
    tool: &str,
    canary: &semver::Version,
    reason: String,
    actor: &str,
) -> RolloutRequest {
    RolloutRequest {
        tool: tool.to_owned(),
        expect: Some(canary.clone()),
        change: RolloutChange::Abort {
            reason,
            automatic: true,
        },
        actor: actor.to_owned(),
    }
}

/// Aborts through the registry of this process (`serve`).
#[derive(Debug)]
pub(crate) struct LocalAbort(pub(crate) RolloutDesk);

#[tonic::async_trait]
impl RolloutControl for LocalAbort {
    async fn abort(
        &self,
        tool: &str,
        canary: &semver::Version,
        reason: String,
    ) -> Result<(), AbortError> {
        let request = abort_request(tool, canary, reason, "dispatcher");
        match self.0.update(request).await {
            // Already ended, or another version's rollout by now: nothing to do.
            Ok(_)
            | Err(RegistryError::Rollout(
                RolloutError::NotActive { .. } | RolloutError::OtherCanary { .. },
            )) => Ok(()),
            Err(error) => Err(AbortError::Refused(Box::new(error))),
        }
    }
}

/// Aborts through a registry reached by gRPC, with the dispatcher's token
/// (a caller with the role "dispatcher").
#[derive(Debug)]
pub(crate) struct RemoteAbort {
    pub(crate) channel: Channel,
    pub(crate) token: Option<toolmesh_transport::Credential>,
}

#[tonic::async_trait]
impl RolloutControl for RemoteAbort {
    async fn abort(
        &self,
        tool: &str,
        canary: &semver::Version,
        reason: String,
    ) -> Result<(), AbortError> {
        let mut request = tonic::Request::new(pb::UpdateRolloutRequest {
            action: pb::RolloutAction::Abort as i32,
            tool: toolmesh::spec::label(tool, canary),
            reason,
            automatic: true,
            ..Default::default()
        });
        toolmesh_transport::attach_credential(self.token.as_ref(), request.metadata_mut());
        match RegistryClient::new(self.channel.clone())
            .update_rollout(request)
            .await
        {
            Ok(_) => Ok(()),
            // Already ended (another dispatcher was first), or replaced.
            Err(status) if status.code() == tonic::Code::FailedPrecondition => Ok(()),
            Err(status) => Err(AbortError::Status(Box::new(status))),
        }
    }
}
