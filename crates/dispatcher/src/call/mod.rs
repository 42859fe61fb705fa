//! One call, start to end, whichever front door it came in by: the stages
//! in the order they run — resolve, authorize, validate, admit, attempts,
//! observe — each in its own file.

mod admit;
mod attempt;
mod attempts;
mod authorize;
mod observe;
mod resolve;
mod retry;
mod validate;

pub(crate) use attempts::Attempts;

use crate::error::CallError;
use serde_json::Value;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;
use toolmesh::pb::{InvokeRequest, InvokeResponse, ToolResult};
use toolmesh::{Snapshot, SnapshotHistory, ToolDef, ToolEntry};
use toolmesh_governance::{Governance, Permit, Principal};

/// The call pipeline: what its stages share across calls.
pub(crate) struct Pipeline {
    /// The newest snapshot and the recent ones callers may pin.
    pub(crate) snapshots: Arc<SnapshotHistory>,
    pub(crate) governance: Governance,
    pub(crate) attempts: Attempts,
    /// Largest `arguments` accepted, in bytes.
    pub(crate) max_argument_bytes: usize,
}

/// How a call ended.
pub(crate) enum Outcome {
    /// The executor answered; its result may carry the tool's own error.
    Answered(ToolResult),
    /// A stage refused the call, or its attempts failed.
    Failed(CallError),
}

/// What a call gathers on its way through the stages, for `observe`.
pub(crate) struct Trail {
    pub(crate) started: Instant,
    /// The caller's call id, or a fresh one.
    pub(crate) call_id: String,
    pub(crate) snapshot_version: u64,
    /// The resolved definition, once resolved.
    pub(crate) def: Option<Arc<ToolDef>>,
    /// The version that ran, once every check passed.
    pub(crate) tool_version: String,
    /// The parsed arguments, once valid.
    pub(crate) arguments: Option<Value>,
    /// The policy rule that granted the call.
    pub(crate) rule: Option<String>,
    /// The approval the call carried or was asked to get.
    pub(crate) approval_id: Option<String>,
    pub(crate) attempts: u32,
    /// The executor of the last attempt.
    pub(crate) executor_id: String,
}

impl Trail {
    fn start(request: &InvokeRequest, snapshot_version: u64) -> Self {
        let call_id = if request.call_id.is_empty() {
            // From the thread-local generator: no system call per call.
            uuid::Builder::from_random_bytes(rand::random())
                .into_uuid()
                .to_string()
        } else {
            request.call_id.clone()
        };
        Trail {
            started: Instant::now(),
            call_id,
            snapshot_version,
            def: None,
            tool_version: String::new(),
            arguments: None,
            rule: None,
            approval_id: (!request.approval_id.is_empty()).then(|| request.approval_id.clone()),
            attempts: 0,
            executor_id: String::new(),
        }
    }
}

impl Pipeline {
    /// Runs one call for `who` against `snapshot` (pinned or newest);
    /// `caller_timeout` is the caller's deadline, if it sent one.
    pub(crate) async fn run(
        &self,
        snapshot: Arc<Snapshot>,
        who: &Principal,
        request: InvokeRequest,
        caller_timeout: Option<Duration>,
    ) -> InvokeResponse {
        let mut trail = Trail::start(&request, snapshot.version());
        let outcome = match self.check(&snapshot, who, &request, &mut trail).await {
            Err(refused) => Outcome::Failed(refused),
            Ok((entry, _permit)) => {
                let attempts = self
                    .attempts
                    .run(&entry, &request, who, caller_timeout, &mut trail);
                attempts.await
            }
        };
        observe::finish(&self.governance, &snapshot, who, &request, trail, outcome)
    }

    /// Every check before anything is sent, in the order a model can act
    /// on: exists, may be used, enabled, arguments, preconditions,
    /// approval, rate.
    async fn check(
        &self,
        snapshot: &Snapshot,
        who: &Principal,
        request: &InvokeRequest,
        trail: &mut Trail,
    ) -> Result<(Arc<ToolEntry>, Permit), CallError> {
        let policy = self.governance.policy();
        let current = self.snapshots.current();
        let entry = resolve::tool(snapshot, &current, &policy, who, &request.tool)?;
        let def = trail.def.insert(entry.def.clone()).clone();
        let grant = authorize::grant(&policy, who, &entry)?;
        trail.rule = Some(grant.rule);
        let arguments = validate::arguments(&def, &request.arguments, self.max_argument_bytes)?;
        let arguments = trail.arguments.insert(arguments);
        let permit = admit::admit(
            &self.governance,
            &policy,
            who,
            &def,
            request,
            arguments,
            grant.approval,
        )
        .await?;
        trail.tool_version = def.version().to_string();
        Ok((entry, permit))
    }
}
