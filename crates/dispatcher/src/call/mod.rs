//! One call, start to end, whichever front door it came in by: the stages
//! in the order they run — resolve, authorize, validate, admit, cache (for
//! tools the policy caches), attempts, fallback (for tools the policy gives
//! a stand-in), observe — each in its own file. A streamed call
//! (`InvokeStream`) runs the same stages; only its attempts differ,
//! relaying what the tool reports (`streamed`).

mod admit;
mod attempt;
mod attempts;
mod authorize;
mod cached;
mod failure;
pub(crate) mod fallback;
mod observe;
pub(crate) mod resolve;
mod retry;
mod streamed;
mod validate;

pub(crate) use attempts::Attempts;
pub(crate) use cached::CacheUse;
pub(crate) use streamed::Relay;

use crate::error::CallError;
use crate::metrics::{Metrics, ToolHandles};
use crate::result_cache::ResultCache;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;
use toolmesh::pb::{InvokeRequest, InvokeResponse, ToolResult};
use toolmesh::{Snapshot, SnapshotHistory, ToolDef, ToolEntry, ToolErrorExt, ToolResultExt};
use toolmesh_governance::{CacheRule, Governance, Permit, Principal};
use toolmesh_telemetry::trace::{self, Context as TraceContext, TARGET};
use tracing::field::Empty;
use tracing::{Instrument, debug, warn};

/// The call pipeline: what its stages share across calls.
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

/// One call as it came in, for a stage that runs part of it again.
#[derive(Clone, Copy)]
struct Call<'a> {
    snapshot: &'a Snapshot,
    who: &'a Principal,
    request: &'a InvokeRequest,
    caller_timeout: Option<Duration>,
    relay: &'a Relay,
}

/// A call every check let through: what to send it to, its rate-limit
/// slot (freed when the call ends) and how to cache it, if at all.
pub(crate) struct Checked {
    entry: Arc<ToolEntry>,
    _permit: Permit,
    /// The cache rule and byte bound, for a cached tool.
    cache: Option<(CacheRule, u64)>,
}

/// How a call ended.
pub(crate) enum Outcome {
    /// The executor answered; its result may carry the tool's own error.
    Answered(ToolResult),
    /// A stage refused the call, or its attempts failed.
    Failed(CallError),
}

/// What a call gathers on its way through the stages, for `observe`.
#[derive(Clone)]
pub(crate) struct Trail {
    pub(crate) started: Instant,
    /// The caller's call id, or a fresh one.
    pub(crate) call_id: String,
    pub(crate) snapshot_version: u64,
    /// The resolved definition, once resolved.
    pub(crate) def: Option<Arc<ToolDef>>,
    /// The version that ran, once every check passed.
    pub(crate) tool_version: String,
    /// The arguments, once valid.
    pub(crate) arguments: Option<validate::Arguments>,
    /// The policy rule that granted the call.
    pub(crate) rule: Option<String>,
    /// The approval the call carried or was asked to get.
    pub(crate) approval_id: Option<String>,
    pub(crate) attempts: u32,
    /// The executor of the last attempt.
    pub(crate) executor_id: String,
    /// The resolved tool version's metric handles, once resolved.
    pub(crate) metrics: Option<Arc<ToolHandles>>,
    /// How the call used the result cache, for a cached tool.
    pub(crate) cache: Option<CacheUse>,
    /// The stand-in that answered instead of the tool called, if one did.
    pub(crate) fell_back: Option<fallback::FellBack>,
    /// How a rollout routed the call, when one did.
    pub(crate) rollout: Option<resolve::Routed>,
    /// The call's `execute_tool` span (disabled unless traces are exported).
    pub(crate) span: tracing::Span,
}

impl Trail {
    fn start(request: &InvokeRequest, snapshot_version: u64, span: tracing::Span) -> Self {
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
            metrics: None,
            cache: None,
            fell_back: None,
            rollout: None,
            span,
        }
    }
}

impl Pipeline {
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
        let mut trail = Trail::start(&request, snapshot.version(), span.clone());
        let outcome = match self.check(&snapshot, who, &request, &mut trail).await {
            Err(refused) => Outcome::Failed(refused),
            Ok(checked) => {
                let send = self.send(checked, &request, who, caller_timeout, &mut trail, relay);
                send.instrument(span.clone()).await
            }
        };
        let call = Call {
            snapshot: &snapshot,
            who,
            request: &request,
            caller_timeout,
            relay,
        };
        // Boxed: rare, and its state would otherwise make every call's
        // future larger (the state of one call is allocated per call).
        let outcome = match fallback::wanted(&self.governance, &trail, &outcome) {
            None => outcome,
            Some(wanted) => {
                Box::pin(self.fall_back(call, &mut trail, outcome, wanted))
                    .instrument(span)
                    .await
            }
        };
        // What preconditions declare is read from the newest snapshot, so
        // pinned calls do not make the per-snapshot memo flip back and forth.
        let current = self.snapshots.current();
        let ran = trail.def.clone().filter(|_| !trail.tool_version.is_empty());
        let response = observe::finish(
            &self.governance,
            &self.metrics,
            &current,
            who,
            &request,
            trail,
            outcome,
        )
        .await;
        if let Some(def) = ran {
            let code = response.result.as_ref().map_or(
                toolmesh::pb::ErrorCode::Unspecified,
                ToolResultExt::error_code,
            );
            self.canaries
                .record(&current, def.name(), def.version(), code);
        }
        response
    }

    /// The stand-in's answer when the policy names one for the tool and
    /// the tool's outcome calls for it (see `fallback`); else `outcome`.
    /// The stand-in passes every check itself; when it cannot be used the
    /// tool's own failure stands.
    async fn fall_back(
        &self,
        call: Call<'_>,
        trail: &mut Trail,
        outcome: Outcome,
        wanted: fallback::Wanted,
    ) -> Outcome {
        let fallback::Wanted { def, rule, why } = wanted;
        if call.relay.delivered() {
            // Like a retry: a caller that saw part of one answer never gets another.
            return outcome;
        }
        let stand_in = InvokeRequest {
            tool: rule.fallback.clone(),
            ..call.request.clone()
        };
        let mut scratch = trail.clone();
        let checked = match self
            .check(call.snapshot, call.who, &stand_in, &mut scratch)
            .await
        {
            Ok(checked) => checked,
            Err(refused) => {
                debug!(call_id = %trail.call_id, fallback = %rule.fallback, %refused, "fallback not usable");
                return outcome;
            }
        };
        if let Err(why_not) = self.pairings.check(&def, &checked.entry.def) {
            warn!(call_id = %trail.call_id, %why_not, "fallback refused: not a safe stand-in");
            return outcome;
        }
        let left = call
            .caller_timeout
            .map(|t| t.saturating_sub(trail.started.elapsed()));
        let to = checked.entry.def.label();
        let answered = self
            .send(checked, &stand_in, call.who, left, &mut scratch, call.relay)
            .await;
        self.metrics.fallback(def.name());
        scratch.fell_back = Some(fallback::FellBack {
            from: def.label(),
            to,
            why,
        });
        *trail = scratch;
        answered
    }

    /// Sends a checked call: through the cache for a cached tool (an answer
    /// from the cache streams nothing), else straight to the attempt loop
    /// (no cache work at all).
    async fn send(
        &self,
        checked: Checked,
        request: &InvokeRequest,
        who: &Principal,
        caller_timeout: Option<Duration>,
        trail: &mut Trail,
        relay: &Relay,
    ) -> Outcome {
        let entry = &checked.entry;
        let (Some((rule, max_bytes)), Some(arguments)) = (&checked.cache, &trail.arguments) else {
            return self
                .attempts
                .run(entry, request, who, caller_timeout, trail, relay)
                .await;
        };
        let key = match arguments.tree(&request.arguments) {
            Ok(tree) => cached::key(&entry.def, rule.scope, who, tree),
            Err(e) => return Outcome::Failed(e),
        };
        let caller = cached::Caller {
            tool: &request.tool,
            started: trail.started,
            timeout: caller_timeout,
        };
        let call = async {
            match self
                .attempts
                .run(entry, request, who, caller_timeout, trail, relay)
                .await
            {
                Outcome::Answered(result) => result,
                Outcome::Failed(error) => error.to_tool_error().into_result(),
            }
        };
        // Boxed: only cached tools take this path; unboxed, its state would
        // enlarge every call's future.
        let cached = cached::run(&self.cache, rule, key, *max_bytes, caller, call);
        let (outcome, used) = Box::pin(cached).await;
        trail.cache = Some(used);
        self.metrics.cache(used.name());
        outcome
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
    ) -> Result<Checked, CallError> {
        let policy = self.governance.policy();
        let current = self.snapshots.current();
        let session = request
            .context
            .as_ref()
            .map_or("", |c| c.session_id.as_str());
        let (entry, routed) =
            resolve::tool(snapshot, &current, &policy, who, session, &request.tool)?;
        trail.rollout = routed;
        let def = trail.def.insert(entry.def.clone()).clone();
        trail.metrics = Some(self.metrics.tool(&def));
        let grant = authorize::grant(snapshot, &policy, who, &entry)?;
        trail.rule = Some(grant.rule);
        let arguments = validate::arguments(
            &def,
            &request.arguments,
            self.max_argument_bytes,
            grant.narrowing.as_deref(),
        )?;
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
        let cache = cached::rule(policy.cache().rule_for(def.name()), &def)
            .map(|rule| (rule.clone(), policy.cache().max_bytes));
        Ok(Checked {
            entry,
            _permit: permit,
            cache,
        })
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
