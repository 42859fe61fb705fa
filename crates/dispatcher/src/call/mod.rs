//! One call, start to end, whichever front door it came in by. Its stages
//! each turn the previous one's output into their own — resolve
//! ([`Resolved`](resolve::Resolved)), authorize, validate, admit
//! ([`Admitted`](admit::Admitted)), attempts ([`Answered`]) — and what
//! features do around a call are layers on that one call service,
//! composed in [`Pipeline::stack`]: the result cache, fallback, canary
//! accounting and observation, each in its own file. A streamed call
//! (`InvokeStream`) runs the same stack; only its attempts differ, relaying
//! what the tool reports (`streamed`).

mod admit;
mod attempt;
mod attempts;
mod authorize;
mod cached;
mod canary;
mod checks;
mod failure;
pub(crate) mod fallback;
mod mark;
mod observe;
mod outgoing;
pub(crate) use observe::stamp_call;
mod reached;
pub(crate) mod resolve;
mod retry;
mod service;
mod streamed;
mod validate;

pub(crate) use attempts::Attempts;
pub(crate) use streamed::Relay;

use crate::metrics::Metrics;
use crate::result_cache::ResultCache;
use admit::Admitted;
use checks::Checks;
use reached::Refused;
use service::{Answered, Call, Service};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;
use toolmesh::Principal;
use toolmesh::pb::{CallContext, InvokeRequest, InvokeResponse};
use toolmesh::{Snapshot, SnapshotHistory};
use toolmesh_governance::Governance;
use toolmesh_telemetry::trace::{self, Context as TraceContext, TARGET};
use tracing::field::Empty;

/// The call pipeline: what its stages and layers share across calls.
pub(crate) struct Pipeline {
    /// The newest snapshot and the recent ones callers may pin.
    pub(crate) snapshots: Arc<SnapshotHistory>,
    pub(crate) governance: Governance,
    pub(crate) attempts: Attempts,
    /// Largest `arguments` accepted, in bytes.
    pub(crate) max_argument_bytes: usize,
    pub(crate) metrics: Arc<Metrics>,
    /// Answers of the tools the policy's `[cache]` names (shared with the
    /// snapshot follower, which drops the answers of replaced contracts).
    pub(crate) cache: Arc<ResultCache>,
    /// Which stand-ins may answer for which tools (`[[fallbacks]]`).
    pub(crate) pairings: fallback::Pairings,
    /// Outcomes of tools under an active rollout, to abort a failing canary.
    pub(crate) canaries: crate::canary::CanaryWatch,
}

/// The call service at the core of the stack: the checks, then the
/// attempts.
struct Core<'p> {
    checks: Checks<'p>,
    attempts: &'p Attempts,
}

impl Service for Core<'_> {
    fn check(&self, call: &Call<'_>) -> impl Future<Output = Result<Admitted, Refused>> + Send {
        self.checks.run(call)
    }

    fn send(&self, call: &Call<'_>, admitted: &Admitted) -> impl Future<Output = Answered> + Send {
        self.attempts.run(call, admitted)
    }
}

impl Pipeline {
    /// The layers every call goes through, innermost first, around the
    /// core (checks, then attempts). A feature around calls is one more
    /// layer here; the stack is a few references, built per call on the
    /// stack, and statically composed (no boxing, no dynamic dispatch).
    fn stack(&self) -> observe::Observe<'_, impl Service + '_> {
        let core = Core {
            checks: Checks {
                snapshots: &self.snapshots,
                governance: &self.governance,
                metrics: &self.metrics,
                max_argument_bytes: self.max_argument_bytes,
            },
            attempts: &self.attempts,
        };
        let cached = cached::Cached {
            cache: &self.cache,
            metrics: &self.metrics,
            inner: core,
        };
        let fallback = fallback::Fallback {
            governance: &self.governance,
            pairings: &self.pairings,
            metrics: &self.metrics,
            inner: cached,
        };
        let canary = canary::Canary {
            watch: &self.canaries,
            snapshots: &self.snapshots,
            inner: fallback,
        };
        observe::Observe {
            governance: &self.governance,
            metrics: &self.metrics,
            snapshots: &self.snapshots,
            inner: canary,
        }
    }

    /// Runs one call for `who` against `snapshot` (pinned or newest);
    /// `caller_timeout` is the caller's deadline, if it sent one; the call's
    /// span continues the caller's trace `parent`; what a streaming tool
    /// reports goes to `relay`.
    pub(crate) async fn run(
        &self,
        snapshot: Arc<Snapshot>,
        who: &Principal,
        mut request: InvokeRequest,
        caller_timeout: Option<Duration>,
        parent: TraceContext,
        relay: &Relay,
    ) -> InvokeResponse {
        let span = call_span(&request.tool, parent);
        if let Some(trace_id) = trace::trace_id(&span) {
            // Executors and the audit log name the trace the call is in.
            request.context.get_or_insert_default().trace_id = trace_id;
        }
        let id = call_id(&request);
        let request = Arc::new(request);
        let call = Call {
            snapshot: &snapshot,
            who,
            request: &request,
            caller_timeout,
            relay,
            started: Instant::now(),
            id: &id,
            span: &span,
            attempts_made: 0,
        };
        let mut response = self.stack().respond(&call).await;
        // Moved, not copied: the call ran under this id.
        response.call_id = id;
        response
    }
}

/// The agent session a call or listing names (empty when none).
pub fn session(context: &Option<CallContext>) -> &str {
    context.as_ref().map_or("", |c| c.session_id.as_str())
}

/// The caller's call id, or a fresh one.
pub(crate) fn call_id(request: &InvokeRequest) -> String {
    if request.call_id.is_empty() {
        // From the thread-local generator: no system call per call.
        uuid::Builder::from_random_bytes(rand::random())
            .into_uuid()
            .to_string()
    } else {
        request.call_id.clone()
    }
}

/// The `execute_tool {tool}` span of one call (OpenTelemetry GenAI
/// conventions), child of the caller's trace; its fields are recorded in
/// `observe`. Disabled, and so nearly free, unless traces are exported.
fn call_span(tool: &str, parent: TraceContext) -> tracing::Span {
    let span = tracing::info_span!(
        target: TARGET,
        "execute_tool",
        "otel.name" = format!("execute_tool {tool}"),
        "otel.kind" = "server",
        "otel.status_code" = Empty,
        "gen_ai.operation.name" = "execute_tool",
        "gen_ai.tool.name" = tool,
        "gen_ai.tool.call.id" = Empty,
        "error.type" = Empty,
        "toolmesh.tool.version" = Empty,
        "toolmesh.snapshot" = Empty,
        "toolmesh.attempts" = Empty,
        "toolmesh.executor" = Empty,
    );
    trace::set_parent(&span, parent);
    span
}
