//! Observe: how a call ended becomes the response, the session's facts and
//! the audit record (and the place for metrics and spans).

use super::resolve::Routed;
use super::{CacheUse, Outcome, Trail};
use crate::error::CallError;
use crate::metrics::Metrics;
use toolmesh::pb::ErrorCode;
use toolmesh::pb::{InvokeRequest, InvokeResponse, ToolResult, ToolSpec};
use toolmesh::{ErrorCodeExt, Snapshot, ToolDef, ToolErrorExt};
use toolmesh_governance::audit::{AuditKind, AuditRecord, outcome_of};
use toolmesh_governance::{Governance, Principal};
use tracing::debug;

/// Finishes a call: the response the front door returns.
pub(crate) async fn finish(
    governance: &Governance,
    metrics: &Metrics,
    snapshot: &Snapshot,
    who: &Principal,
    request: &InvokeRequest,
    mut trail: Trail,
    outcome: Outcome,
) -> InvokeResponse {
    let kind = audit_kind(&outcome);
    // The caller reads a refusal of a hidden tool as NOT_FOUND; the audit
    // log keeps what it was.
    let denied = matches!(
        &outcome,
        Outcome::Failed(CallError::PermissionDenied { .. })
    );
    let mut result = match outcome {
        Outcome::Answered(result) => result,
        Outcome::Failed(error) => {
            if let CallError::ApprovalRequired { approval_id, .. } = &error {
                trail.approval_id = Some(approval_id.clone());
            }
            error.to_tool_error().into_result()
        }
    };
    if result.error.as_ref().is_none_or(|e| e.code == 0) {
        record_session_facts(governance, snapshot, who, request, &trail).await;
    }
    if let Some(def) = &trail.def
        && !def.spec().deprecated.is_empty()
    {
        result.metadata.insert(
            toolmesh::error::DEPRECATED_METADATA.into(),
            def.spec().deprecated.clone(),
        );
    }
    if let Some(used) = trail.cache {
        mark_cache(&mut result, used);
    }
    if let Some(fell_back) = &trail.fell_back {
        fell_back.mark(&mut result);
    }
    if let (Some(routed), Some(def)) = (&trail.rollout, &trail.def) {
        mark_rollout(&mut result, routed, def);
    }
    let code = result.error.as_ref().map_or(ErrorCode::Unspecified, |e| {
        ErrorCode::try_from(e.code).unwrap_or(ErrorCode::ExecutorFailed)
    });
    let elapsed = trail.started.elapsed();
    metrics.call(trail.metrics.as_deref(), code, elapsed.as_secs_f64());
    record_span(&trail, code);
    debug!(
        call_id = %trail.call_id,
        tool = %request.tool,
        attempts = trail.attempts,
        code = result.error.as_ref().map_or(0, |e| e.code),
        elapsed_us = elapsed.as_micros() as u64,
        "invoke done"
    );
    governance.audit(|| {
        let mut record = audit_record(who, request, &trail, kind, &result);
        if denied {
            record.outcome = ErrorCode::PermissionDenied.short_name().into();
        }
        record
    });
    InvokeResponse {
        call_id: trail.call_id,
        snapshot_version: trail.snapshot_version,
        tool_version: trail.tool_version,
        attempts: trail.attempts,
        executor_id: trail.executor_id,
        result: Some(result),
    }
}

/// Metadata `toolmesh.cache` (and `toolmesh.cache_age_ms` for an answer
/// from the cache) on a cached tool's result.
fn mark_cache(result: &mut ToolResult, used: CacheUse) {
    let metadata = &mut result.metadata;
    metadata.insert("toolmesh.cache".into(), used.name().into());
    if let Some(age) = used.age() {
        metadata.insert("toolmesh.cache_age_ms".into(), age.as_millis().to_string());
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
fn record_span(trail: &Trail, code: ErrorCode) {
    let span = &trail.span;
    if span.is_disabled() {
        return;
    }
    span.record("gen_ai.tool.call.id", trail.call_id.as_str());
    span.record("toolmesh.tool.version", trail.tool_version.as_str());
    span.record("toolmesh.snapshot", trail.snapshot_version);
    span.record("toolmesh.attempts", trail.attempts);
    span.record("toolmesh.executor", trail.executor_id.as_str());
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

/// A successful call is a fact later preconditions of its caller's session
/// can use (only what some precondition of the current snapshot names is
/// kept).
async fn record_session_facts(
    governance: &Governance,
    snapshot: &Snapshot,
    who: &Principal,
    request: &InvokeRequest,
    trail: &Trail,
) {
    let session = request
        .context
        .as_ref()
        .map_or("", |c| c.session_id.as_str());
    if session.is_empty() {
        // Most calls name no session: nothing to record.
        return;
    }
    if let (Some(def), Some(arguments)) = (&trail.def, &trail.arguments)
        && governance.records_facts_of(snapshot, def.name())
        && let Ok(tree) = arguments.tree(&request.arguments)
    {
        // Boxed: it may wait for the registry; most calls never get here.
        Box::pin(governance.record_session(snapshot, who, session, def.name(), tree)).await;
    }
}

/// The audit line of one call.
fn audit_record(
    who: &Principal,
    request: &InvokeRequest,
    trail: &Trail,
    kind: AuditKind,
    result: &ToolResult,
) -> AuditRecord {
    let mut record = match &trail.def {
        Some(def) => {
            // A tree another stage built saves redaction a parse; the
            // digest is taken by the audit writer, off this thread.
            let tree = trail.arguments.as_ref().and_then(|a| a.built());
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
    let context = request.context.clone().unwrap_or_default();
    record.call_id = trail.call_id.clone();
    record.trace_id = context.trace_id;
    record.session_id = context.session_id;
    record.snapshot_version = trail.snapshot_version;
    record.executor_id = trail.executor_id.clone();
    record.attempts = trail.attempts;
    record.outcome = outcome_of(result);
    record.duration_ms = trail.started.elapsed().as_millis() as u64;
    record.approval_id = trail.approval_id.clone();
    record.rule = trail.rule.clone();
    record.cache = trail.cache.map(|used| used.name().to_owned());
    record.fallback_for = trail.fell_back.as_ref().map(|f| f.from.clone());
    record.rollout = trail.rollout.as_ref().map(|routed| {
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
