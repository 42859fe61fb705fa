//! Observe: how a call ended becomes the response, the session's facts and
//! the audit record (and the place for metrics and spans).

use super::mark::Mark;
use super::reached::Reached;
use super::resolve::Routed;
use super::service::{Answer, Answered, Call, Outcome, Service};
use crate::error::CallError;
use crate::metrics::Metrics;
use toolmesh::pb::ErrorCode;
use toolmesh::pb::{InvokeRequest, InvokeResponse, ToolResult, ToolSpec};
use toolmesh::{ErrorCodeExt, SnapshotHistory, ToolDef};
use toolmesh_audit::{AuditKind, AuditRecord, outcome_of};
use toolmesh_governance::Governance;
use tracing::Instrument;
use tracing::debug;

/// The outermost layer: what the service within answers becomes the
/// response, the session's facts, the audit record, metrics and the span.
pub(crate) struct Observe<'p, S> {
    pub(crate) governance: &'p Governance,
    pub(crate) metrics: &'p Metrics,
    /// What preconditions declare is read from the newest snapshot.
    pub(crate) snapshots: &'p SnapshotHistory,
    pub(crate) inner: S,
}

impl<S: Service> Observe<'_, S> {
    /// Runs `call` through the service within, in the call's span, and
    /// answers the response the front door returns (its `call_id` left to
    /// the caller, who owns the id).
    pub(crate) async fn respond(&self, call: &Call<'_>) -> InvokeResponse {
        let answer = self.inner.call(call).instrument(call.span.clone()).await;
        self.finish(call, answer).await
    }

    /// Finishes a call: the response the front door returns.
    async fn finish(&self, call: &Call<'_>, answer: Answer) -> InvokeResponse {
        // One pattern: an intermediate `Answered` would stay in this
        // future's state beside its parts.
        let Answer {
            answered:
                Answered {
                    outcome,
                    sent,
                    marks,
                },
            reached,
        } = answer;
        let audited = Audited::of(&outcome, call.request);
        let mut result = outcome.into_result();
        if result.error.as_ref().is_none_or(|e| e.code == 0) {
            self.record_session_facts(call, &reached).await;
        }
        mark_result(&mut result, &reached, &marks);
        let tool_version = reached
            .ran()
            .map_or_else(String::new, |def| def.version().to_string());
        let seen = Seen {
            call,
            reached: &reached,
            tool_version: &tool_version,
            attempts: sent.attempts,
            executor_id: &sent.executor_id,
        };
        self.count_and_trace(&seen, &result);
        self.governance
            .audit(|| audited.record(&seen, &result, &marks));
        InvokeResponse {
            call_id: String::new(),
            snapshot_version: call.snapshot.version(),
            tool_version,
            attempts: sent.attempts,
            executor_id: sent.executor_id,
            result: Some(result),
        }
    }

    /// The call in the metrics, its span and the debug log.
    fn count_and_trace(&self, seen: &Seen<'_>, result: &ToolResult) {
        let code = result.error.as_ref().map_or(ErrorCode::Unspecified, |e| {
            ErrorCode::try_from(e.code).unwrap_or(ErrorCode::ExecutorFailed)
        });
        let elapsed = seen.call.started.elapsed();
        self.metrics
            .call(seen.reached.handles(), code, elapsed.as_secs_f64());
        record_span(seen, code);
        debug!(
            call_id = %seen.call.id,
            tool = %seen.call.request.tool,
            attempts = seen.attempts,
            code = result.error.as_ref().map_or(0, |e| e.code),
            elapsed_us = elapsed.as_micros() as u64,
            "invoke done"
        );
    }

    /// A successful call is a fact later preconditions of its caller's
    /// session can use (only what some precondition of the current snapshot
    /// names is kept).
    async fn record_session_facts(&self, call: &Call<'_>, reached: &Reached) {
        let request = call.request;
        let session = super::session(&request.context);
        if session.is_empty() {
            // Most calls name no session: nothing to record.
            return;
        }
        // Read from the newest snapshot, so pinned calls do not make the
        // per-snapshot memo flip back and forth.
        let current = self.snapshots.current();
        if let (Some(def), Some(arguments)) = (reached.def(), reached.arguments())
            && self.governance.records_facts_of(&current, def.name())
            && let Ok(tree) = arguments.tree(&request.arguments)
        {
            // Boxed: it may wait for the registry; most calls never get here.
            Box::pin(
                self.governance
                    .record_session(&current, call.who, session, def.name(), tree),
            )
            .await;
        }
    }
}

/// What observing a call reads of it.
struct Seen<'a> {
    call: &'a Call<'a>,
    reached: &'a Reached,
    tool_version: &'a str,
    attempts: u32,
    executor_id: &'a str,
}

/// What the audit record of a call says beyond what was seen of it, read
/// from its outcome before that becomes the result.
struct Audited {
    kind: AuditKind,
    /// The caller reads a refusal of a hidden tool as NOT_FOUND; the audit
    /// log keeps what it was.
    denied: bool,
    /// The approval the call carried, or the one it was asked to get.
    approval_id: Option<String>,
}

impl Audited {
    fn of(outcome: &Outcome, request: &InvokeRequest) -> Self {
        let approval_id = match outcome {
            Outcome::Failed(CallError::ApprovalRequired { approval_id, .. }) => {
                Some(approval_id.clone())
            }
            _ => (!request.approval_id.is_empty()).then(|| request.approval_id.clone()),
        };
        Audited {
            kind: audit_kind(outcome),
            denied: matches!(outcome, Outcome::Failed(CallError::PermissionDenied { .. })),
            approval_id,
        }
    }

    /// The audit line of the call, with the layers' marks.
    fn record(self, seen: &Seen<'_>, result: &ToolResult, marks: &[Mark]) -> AuditRecord {
        let mut record = audit_record(seen, self.kind, result);
        record.approval_id = self.approval_id;
        for mark in marks {
            mark.on_audit(&mut record);
        }
        if self.denied {
            record.outcome = ErrorCode::PermissionDenied.short_name().into();
        }
        record
    }
}

/// What the caller reads beside the result: the definition's deprecation,
/// the layers' marks, and how a rollout routed the call.
fn mark_result(result: &mut ToolResult, reached: &Reached, marks: &[Mark]) {
    if let Some(def) = reached.def()
        && !def.spec().deprecated.is_empty()
    {
        result.metadata.insert(
            toolmesh::error::DEPRECATED_METADATA.into(),
            def.spec().deprecated.clone(),
        );
    }
    for mark in marks {
        mark.on_result(result);
    }
    if let (Some(routed), Some(def)) = (reached.routed(), reached.def()) {
        mark_rollout(result, routed, def);
    }
}

/// Metadata `toolmesh.version`, `toolmesh.rollout` (`canary` or `stable`)
/// and `toolmesh.rollout_percent` on a call a rollout routed.
fn mark_rollout(result: &mut ToolResult, routed: &Routed, def: &ToolDef) {
    let metadata = &mut result.metadata;
    metadata.insert("toolmesh.version".into(), def.version().to_string());
    metadata.insert("toolmesh.rollout".into(), routed.side().into());
    metadata.insert(
        "toolmesh.rollout_percent".into(),
        routed.rollout.share.percent(),
    );
}

/// The call's span gets what the call became (a no-op when not exported).
fn record_span(seen: &Seen<'_>, code: ErrorCode) {
    let span = seen.call.span;
    if span.is_disabled() {
        return;
    }
    span.record("gen_ai.tool.call.id", seen.call.id);
    span.record("toolmesh.tool.version", seen.tool_version);
    span.record("toolmesh.snapshot", seen.call.snapshot.version());
    span.record("toolmesh.attempts", seen.attempts);
    span.record("toolmesh.executor", seen.executor_id);
    if code != ErrorCode::Unspecified {
        span.record("error.type", code.short_name());
        span.record("otel.status_code", "ERROR");
    }
}

/// What the audit log calls this outcome.
fn audit_kind(outcome: &Outcome) -> AuditKind {
    match outcome {
        Outcome::Failed(CallError::PermissionDenied { .. } | CallError::RateLimited { .. }) => {
            AuditKind::Denied
        }
        Outcome::Failed(CallError::ApprovalRequired { .. }) => AuditKind::ApprovalRequested,
        _ => AuditKind::Invoke,
    }
}

/// The audit line of one call (its approval and the layers' marks are
/// added by the caller).
fn audit_record(seen: &Seen<'_>, kind: AuditKind, result: &ToolResult) -> AuditRecord {
    let (who, request, reached) = (seen.call.who, seen.call.request, seen.reached);
    let mut record = match reached.def() {
        Some(def) => {
            // A tree another stage built saves redaction a parse; the
            // digest is taken by the audit writer, off this thread.
            let tree = reached.arguments().and_then(|a| a.built());
            AuditRecord::for_def(kind, who, def, &request.arguments, tree)
        }
        None => {
            let spec = ToolSpec {
                name: request.tool.clone(),
                ..ToolSpec::default()
            };
            AuditRecord::new(kind, who, &spec, &request.arguments)
        }
    };
    stamp_call(
        &mut record,
        request,
        seen.call.id,
        seen.call.snapshot.version(),
        result,
        seen.call.started.elapsed(),
    );
    record.executor_id = seen.executor_id.to_owned();
    record.attempts = seen.attempts;
    record.rule = reached.rule().map(str::to_owned);
    record.rollout = reached.routed().map(|routed| {
        serde_json::json!({
            "side": routed.side(),
            "percent": routed.rollout.share.percent_number(),
            "canary": routed.rollout.canary.to_string(),
        })
    });
    record.reason = result
        .error
        .as_ref()
        .filter(|e| e.code != 0 && kind != AuditKind::Invoke)
        .map(|e| e.message.clone());
    record
}

/// What every call's audit line says of the call itself: its id, trace
/// and session, the snapshot it ran in, its outcome and wall time.
pub(crate) fn stamp_call(
    record: &mut AuditRecord,
    request: &InvokeRequest,
    call_id: &str,
    snapshot_version: u64,
    result: &ToolResult,
    took: std::time::Duration,
) {
    let context = request.context.clone().unwrap_or_default();
    record.call_id = call_id.to_owned();
    record.trace_id = context.trace_id;
    record.session_id = context.session_id;
    record.snapshot_version = snapshot_version;
    record.outcome = outcome_of(result);
    record.duration_ms = took.as_millis() as u64;
}
