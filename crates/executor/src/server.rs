//! The `toolmesh.v1.Executor` service: one call from request to `ToolResult`, with validation, deadline, cancellation and panic isolation.

use crate::dispatcher_only::DispatcherOnly;
use crate::error::{BadArguments, NotServed};
use crate::metrics::Metrics;
use crate::{
    CallCx, ProgressHandle,
    erased::{Arguments, CallFuture, ErasedTool, Outcome},
    tool::{ToolOutput, duration_ms_ceil},
};
use arc_swap::ArcSwap;
use std::panic::AssertUnwindSafe;
use std::task::Poll;
use std::{any::Any, collections::BTreeMap, sync::Arc, time::Duration};
use tokio::{task::AbortHandle, time::Instant};
use tokio_util::sync::CancellationToken;
use tonic::{Request, Status};
use toolmesh::{
    ErrorCodeExt, ToolDef, ToolErrorExt,
    pb::{self, ErrorCode, ExecuteRequest, ToolError, ToolResult},
    schema,
    spec::SpecError,
    suggest,
};
use toolmesh_transport::{Bound, call_budget};
use tracing::{Instrument, debug, error};

/// How long a call that was cancelled (deadline passed, caller gone) may
/// keep running to notice [`CallCx::cancelled`] and clean up before its task
/// is aborted.
pub const CANCEL_GRACE: Duration = Duration::from_millis(250);

/// One tool as the executor holds it.
#[derive(Clone)]
pub(crate) struct Slot {
    /// The spec as the SDK built it (before normalisation).
    pub(crate) spec: pb::ToolSpec,
    /// The validated definition, or why the spec is invalid.
    pub(crate) def: Result<Arc<ToolDef>, SpecError>,
    /// The tool itself.
    pub(crate) tool: Arc<dyn ErasedTool>,
}

impl Slot {
    /// `tool`, described by `spec`, validated now (a problem is reported
    /// when the set is bound or swapped in).
    pub(crate) fn new(spec: pb::ToolSpec, tool: Arc<dyn ErasedTool>) -> Self {
        Slot {
            def: ToolDef::new(spec.clone()).map(Arc::new),
            spec,
            tool,
        }
    }
}

/// The tools of one executor, by name.
pub(crate) type Tools = BTreeMap<String, Slot>;

/// Everything a call needs: the tools, who we are, and the token that
/// cancels every call when the executor stops.
pub(crate) struct Core {
    /// The tools served now; [`crate::ExecutorControl::replace_tools`]
    /// swaps the whole set while calls of the old one finish.
    pub(crate) tools: ArcSwap<Tools>,
    pub(crate) executor_id: String,
    pub(crate) stop: CancellationToken,
    pub(crate) metrics: Metrics,
}

impl Core {
    /// Runs one call to its `ToolResult`. `caller_timeout` is the time the
    /// caller still allows (from `grpc-timeout`), if it said.
    pub(crate) async fn execute(
        &self,
        mut request: ExecuteRequest,
        caller_timeout: Option<Duration>,
        progress: ProgressHandle,
    ) -> ToolResult {
        let (def, tool) = match self.served(&request) {
            Ok(served) => served,
            Err(not_served) => return failure(not_served.code(), not_served.to_string()),
        };
        // Checked once here; the tool gets them typed.
        let args = match check_arguments(&def, std::mem::take(&mut request.arguments)) {
            Ok(args) => args,
            Err(refused) => return failure(refused.code(), refused.to_string()),
        };
        let (budget, bound) = call_budget(caller_timeout, def.timeout());
        if budget.is_zero() {
            return deadline_exceeded(&def, budget, bound);
        }
        let deadline = Instant::now() + budget;
        let token = self.stop.child_token();
        let cx = CallCx::new(
            request,
            self.executor_id.clone(),
            Some(deadline),
            token.clone(),
            progress,
        );
        debug!(
            tool = def.name(),
            call_id = cx.call_id(),
            attempt = cx.attempt(),
            budget_ms = budget.as_millis() as u64,
            "call started"
        );
        match self.run_until(tool.start(args, cx), deadline, token).await {
            Some(ended) => self.result_of(&def, ended),
            None => deadline_exceeded(&def, budget, bound),
        }
    }

    /// The definition and tool `request` names, or why this executor does
    /// not run it.
    fn served(
        &self,
        request: &ExecuteRequest,
    ) -> Result<(Arc<ToolDef>, Arc<dyn ErasedTool>), NotServed> {
        let (def, tool) = {
            let tools = self.tools.load();
            let Some(slot) = tools.get(&request.tool) else {
                return Err(not_found(&tools, &self.executor_id, &request.tool));
            };
            (slot.def.clone(), Arc::clone(&slot.tool))
        };
        let def = def.map_err(|reason| NotServed::InvalidSpec {
            tool: request.tool.clone(),
            executor_id: self.executor_id.clone(),
            reason,
        })?;
        let served = def.spec().version.as_str();
        if !request.version.is_empty() && request.version != served {
            return Err(NotServed::OtherVersion {
                label: toolmesh::spec::label(&request.tool, &request.version),
                executor_id: self.executor_id.clone(),
                served: served.to_owned(),
            });
        }
        Ok((def, tool))
    }

    /// Runs a started call until it ends, or None once `deadline` passes
    /// (the call then cancelled through `token`). Most tools answer without
    /// waiting: their first poll runs here, in the request's task, with no
    /// task to spawn and schedule. A call that waits moves to a task of its
    /// own, which can outlive this future by the cancellation grace.
    async fn run_until(
        &self,
        mut call: CallFuture,
        deadline: Instant,
        token: CancellationToken,
    ) -> Option<Ended> {
        if let Some(ended) = poll_in_place(&mut call).await {
            // A first poll that blocked past the deadline ends as a task would.
            return (Instant::now() <= deadline).then_some(ended);
        }
        let mut task = tokio::spawn(call);
        // Dropped with this future: if the caller goes away, or the
        // deadline passes, the call is cancelled and its task reaped.
        let mut guard = CancelOnDrop {
            cancellations: self.metrics.cancellations.clone(),
            token,
            task: Some(task.abort_handle()),
        };
        let joined = tokio::select! {
            biased;
            joined = &mut task => joined,
            () = tokio::time::sleep_until(deadline) => return None,
        };
        guard.disarm();
        Some(match joined {
            Ok(outcome) => Ended::Finished(outcome),
            Err(e) if e.is_panic() => Ended::Panicked(e.into_panic()),
            Err(_) => Ended::Stopped,
        })
    }

    /// The result the caller reads of a call of `def` that ended.
    fn result_of(&self, def: &ToolDef, ended: Ended) -> ToolResult {
        match ended {
            Ended::Finished(Outcome::Ran(Ok(output))) => success(def, output),
            Ended::Finished(Outcome::Ran(Err(fail))) => {
                let code = fail.code();
                let mut error = ToolError::new(code, fail.message).with_retryable(fail.retryable);
                if let Some(after) = fail.retry_after {
                    error = error.with_retry_after_ms(duration_ms_ceil(after));
                }
                error.into_result()
            }
            Ended::Finished(Outcome::BadArguments(message)) => failure(
                ErrorCode::InvalidArguments,
                format!("arguments for {} could not be read: {message}", def.name()),
            ),
            Ended::Panicked(payload) => {
                self.metrics.panics.inc();
                let text = panic_text(payload);
                error!(tool = def.name(), panic = %text, "tool panicked; the executor keeps serving");
                // A panic tends to repeat for the same input: not retryable.
                ToolError::new(
                    ErrorCode::ExecutorFailed,
                    format!(
                        "tool {} panicked: {text}; the call did not complete (the executor keeps serving other calls)",
                        def.name()
                    ),
                )
                .with_retryable(false)
                .into_result()
            }
            Ended::Stopped => failure(
                ErrorCode::ExecutorFailed,
                format!(
                    "tool {} was stopped before it finished: executor {} is shutting down",
                    def.name(),
                    self.executor_id
                ),
            ),
        }
    }
}

/// How a tool's call ended.
enum Ended {
    /// It returned.
    Finished(Outcome),
    /// It panicked, with this payload.
    Panicked(Box<dyn Any + Send>),
    /// The executor stopped it (shutting down).
    Stopped,
}

/// Polls `call` once in the caller's task: how it ended if it did (a panic
/// is caught, as a task would catch it), None if it waits.
async fn poll_in_place(call: &mut CallFuture) -> Option<Ended> {
    std::future::poll_fn(|cx| {
        let polled = std::panic::catch_unwind(AssertUnwindSafe(|| call.as_mut().poll(cx)));
        Poll::Ready(match polled {
            Ok(Poll::Ready(outcome)) => Some(Ended::Finished(outcome)),
            Ok(Poll::Pending) => None,
            Err(payload) => Some(Ended::Panicked(payload)),
        })
    })
    .await
}

/// The arguments checked against the tool's compiled schema: the text
/// itself when the schema's fast shape accepts it (the tool reads it
/// straight into its type), else the tree the full check built, or what is
/// wrong with them. Empty text reads as `{}`; a key repeated in one object
/// is refused.
fn check_arguments(def: &ToolDef, text: String) -> Result<Arguments, BadArguments> {
    let tool = || def.name().to_owned();
    let checks = def.input().map_err(|source| BadArguments::SchemaUnusable {
        tool: tool(),
        source: source.clone(),
    })?;
    if checks.shape.accepts(&text) {
        return Ok(Arguments::Text(text));
    }
    let args = schema::parse_arguments(&text).map_err(|source| BadArguments::Unreadable {
        tool: tool(),
        source,
    })?;
    schema::check(&checks.validator, &args).map_err(|violations| BadArguments::Invalid {
        tool: tool(),
        violations,
    })?;
    Ok(Arguments::Tree(args))
}

fn success(def: &ToolDef, mut output: ToolOutput) -> ToolResult {
    if let Some(e) = output.encode_error {
        return failure(
            ErrorCode::ExecutorFailed,
            format!(
                "tool {} produced a result that could not be encoded as JSON: {e}",
                def.name()
            ),
        );
    }
    let (text, parts) = output.take_content();
    ToolResult {
        output: text,
        data: output.data,
        metadata: output.metadata,
        error: None,
        parts,
    }
}

fn failure(code: ErrorCode, message: String) -> ToolResult {
    ToolError::new(code, message).into_result()
}

fn deadline_exceeded(def: &ToolDef, budget: Duration, bound: Bound) -> ToolResult {
    let why = match bound {
        Bound::Caller => format!("before the caller's deadline ({} ms)", budget.as_millis()),
        Bound::ToolTimeout => format!("within its timeout of {} ms", budget.as_millis()),
    };
    debug!(tool = def.name(), "call exceeded its deadline");
    failure(
        ErrorCode::DeadlineExceeded,
        format!(
            "tool {} did not finish {why}; the call was cancelled",
            def.name()
        ),
    )
}

/// No tool `wanted` among `tools`: the names nearest it, or every name.
fn not_found(tools: &Tools, executor_id: &str, wanted: &str) -> NotServed {
    let names: Vec<&str> = tools.keys().map(String::as_str).collect();
    let close = suggest::close_names(wanted, names.iter().copied(), 3);
    let hint =
        suggest::did_you_mean(&close).unwrap_or_else(|| format!("it serves {}", names.join(", ")));
    NotServed::NoSuchTool {
        executor_id: executor_id.to_owned(),
        shown: toolmesh::reference::shown_prefix(wanted).to_owned(),
        hint,
    }
}

/// The text of a panic payload (`&str` or `String`; anything else is named as such).
fn panic_text(payload: Box<dyn Any + Send>) -> String {
    match payload.downcast::<String>() {
        Ok(text) => *text,
        Err(payload) => match payload.downcast::<&'static str>() {
            Ok(text) => (*text).to_owned(),
            Err(_) => "a panic with a non-text payload".to_owned(),
        },
    }
}

/// Cancels a call and reaps its task unless disarmed first.
struct CancelOnDrop {
    cancellations: prometheus_client::metrics::counter::Counter,
    token: CancellationToken,
    task: Option<AbortHandle>,
}

impl CancelOnDrop {
    fn disarm(&mut self) {
        self.task = None;
    }
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        let Some(task) = self.task.take() else {
            return;
        };
        self.cancellations.inc();
        self.token.cancel();
        if task.is_finished() {
            return;
        }
        // Give the tool a moment to see the cancellation and clean up, then
        // abort it wherever it is.
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn(async move {
                    tokio::time::sleep(CANCEL_GRACE).await;
                    task.abort();
                });
            }
            Err(_) => task.abort(),
        }
    }
}

/// When a request arrived (stamped by [`stamp_arrival`] before its body is
/// decoded), so time spent decoding counts against the caller's deadline.
#[derive(Debug, Clone, Copy)]
struct Arrived(Instant);

/// Interceptor that records a request's arrival time.
pub(crate) fn stamp_arrival(mut request: Request<()>) -> Result<Request<()>, Status> {
    request.extensions_mut().insert(Arrived(Instant::now()));
    Ok(request)
}

/// The tonic service answering `toolmesh.v1.Executor` (`Execute` and `ExecuteStream`).
pub(crate) struct ExecuteService {
    pub(crate) core: Arc<Core>,
    /// Set when registered: only calls carrying the registered token run.
    pub(crate) dispatcher_only: Option<Arc<DispatcherOnly>>,
}

/// A request the service admitted: the time its caller still allows, and
/// the span it runs in.
pub(crate) struct Accepted {
    caller_timeout: Option<Duration>,
    span: tracing::Span,
}

impl ExecuteService {
    /// Admits `request` (only dispatchers, once registered) and reads the
    /// deadline and trace it carries.
    pub(crate) fn accept(&self, request: &Request<ExecuteRequest>) -> Result<Accepted, Status> {
        if let Some(gate) = &self.dispatcher_only {
            gate.admit(request.metadata())?;
        }
        let arrived = request.extensions().get::<Arrived>().map(|a| a.0);
        let caller_timeout =
            toolmesh_transport::request_timeout(request.metadata()).map(|timeout| {
                // Time already spent since arrival is gone from the budget.
                timeout.saturating_sub(arrived.map_or(Duration::ZERO, |at| at.elapsed()))
            });
        Ok(Accepted {
            caller_timeout,
            span: execute_span(request),
        })
    }
}

impl Core {
    /// Runs a served call to its result, counted in the metrics and
    /// traced in its span; reports go to `progress`.
    pub(crate) async fn serve(
        &self,
        request: ExecuteRequest,
        accepted: Accepted,
        progress: ProgressHandle,
    ) -> ToolResult {
        let tool = request.tool.clone();
        self.metrics.in_flight.inc();
        let started = Instant::now();
        let _in_flight = InFlight(&self.metrics);
        let span = accepted.span;
        let result = self
            .execute(request, accepted.caller_timeout, progress)
            .instrument(span.clone())
            .await;
        let code = result.error.as_ref().map_or(ErrorCode::Unspecified, |e| {
            ErrorCode::try_from(e.code).unwrap_or(ErrorCode::ExecutorFailed)
        });
        self.metrics
            .executed(&tool, code, started.elapsed().as_secs_f64());
        if code != ErrorCode::Unspecified && !span.is_disabled() {
            span.record("error.type", code.short_name());
            span.record("otel.status_code", "ERROR");
        }
        result
    }
}

/// Counts an execution out of flight however it ends (the caller may go away).
struct InFlight<'a>(&'a Metrics);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.in_flight.dec();
    }
}

/// The executor's `execute_tool {tool}` span, continuing the dispatcher's
/// attempt span from the request's `traceparent` (disabled, and so nearly
/// free, unless traces are exported).
fn execute_span(request: &Request<ExecuteRequest>) -> tracing::Span {
    let call = request.get_ref();
    let span = tracing::info_span!(
        target: toolmesh_telemetry::trace::TARGET,
        "execute_tool",
        "otel.name" = format!("execute_tool {}", call.tool),
        "otel.kind" = "server",
        "otel.status_code" = tracing::field::Empty,
        "gen_ai.operation.name" = "execute_tool",
        "gen_ai.tool.name" = call.tool.as_str(),
        "gen_ai.tool.call.id" = call.call_id.as_str(),
        "error.type" = tracing::field::Empty,
        "toolmesh.attempt" = call.attempt,
    );
    let parent = toolmesh_telemetry::trace::extract(request.metadata());
    toolmesh_telemetry::trace::set_parent(&span, parent);
    span
}
