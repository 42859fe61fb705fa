//! The attempt loop, the call service at the core of every layer: pick an
//! instance, send, record what the outcome says about the instance, and
//! ask the retry decision what next — all within one deadline and the
//! dispatcher-wide retry budget.

use super::admit::Admitted;
use super::attempt::{self, AttemptFailure};
use super::retry::{self, AttemptState, Next};
use super::service::{Answered, Call, Outcome, Sent};
use crate::endpoints::{Endpoints, Health, Scope};
use crate::error::CallError;
use crate::metrics::{Metrics, RetryLabels};
use crate::route::{self, NoInstance, Pick};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tokio::time::Instant;
use toolmesh::ToolEntry;
use toolmesh::pb::{InvokeRequest, ToolResult};
use toolmesh::spec::Retry;
use toolmesh_transport::{Bound, call_budget};
use tower::retry::budget::{Budget, TpsBudget};
use tracing::{Instrument, debug, warn};

/// What every call's attempts share.
pub(crate) struct Attempts {
    pub(crate) pool: Arc<Endpoints>,
    /// Retries allowed as a share of calls (plus a floor per second).
    pub(crate) budget: TpsBudget,
    /// Counts the ejections: tool health and callers' watches of their
    /// tools hear each one and look again.
    pub(crate) ejections: watch::Sender<u64>,
    pub(crate) metrics: Arc<Metrics>,
    pub(crate) max_in_flight_per_instance: u32,
    /// No attempt starts with less than this left.
    pub(crate) min_attempt: Duration,
}

impl Attempts {
    /// Sends attempts until one answers, the retry decision stops, or the
    /// deadline leaves too little for one more; what a streaming tool
    /// reports goes to the call's relay.
    pub(crate) async fn run(&self, call: &Call<'_>, admitted: &Admitted) -> Answered {
        let resolved = admitted.resolved();
        let entry = &*resolved.entry;
        let (def, request, relay) = (&entry.def, call.request, call.relay);
        let execute = attempt::execute_request(def, request, call.who, call.id);
        let (budget, bound) = call_budget(call.caller_timeout, def.timeout());
        let deadline = call.started + budget;
        let policy = def.retry();
        let mut tried: Vec<Arc<str>> = Vec::new();
        let mut last: Option<AttemptFailure> = None;
        let mut sent = Sent::default();
        self.budget.deposit();
        let outcome = loop {
            let made = call.attempts_made + sent.attempts;
            let remaining = deadline.saturating_duration_since(Instant::now());
            if remaining < self.min_attempt {
                break out_of_time(last, budget, request, made);
            }
            let pick = match route::pick(entry, &self.pool, &tried, self.max_in_flight_per_instance)
            {
                Ok(pick) => pick,
                Err(none) => break no_instance(entry, none, last, request, made),
            };
            sent.attempts += 1;
            sent.executor_id = pick.instance.executor_id.to_string();
            let number = made + 1;
            tried.push(pick.instance.endpoint.clone());
            // Envoy's per_try_timeout: a hung instance costs one slice.
            let slice = policy
                .attempt_timeout
                .map_or(remaining, |t| t.min(remaining));
            let this = attempt::Attempt {
                execute: &execute,
                call: request,
                number,
                streams: def.streams_progress() && relay.listening(),
            };
            let span = attempt::span(call.span, number, &sent.executor_id);
            self.metrics.attempt(&resolved.handles);
            let sending = attempt::send(&pick, this, slice, &span, relay).instrument(span.clone());
            let failure = match sending.await {
                Ok(result) => break self.answered(entry, &pick, result, call.id),
                Err(failure) => failure,
            };
            let caller_bound = slice == remaining && bound == Bound::Caller;
            self.record(entry, &pick, failure.health(caller_bound));
            let state = AttemptState {
                made: number,
                idempotent: def.idempotent(),
                left: deadline.saturating_duration_since(Instant::now()),
                min_attempt: self.min_attempt,
                delivered: relay.delivered(),
            };
            match self.next_step(&policy, &state, &failure, call.id, def.name()) {
                Some(pause) => {
                    tokio::time::sleep(pause).await;
                    last = Some(failure);
                }
                None => break outcome(failure, request, number),
            }
        };
        Answered::new(outcome, sent)
    }

    /// The executor answered: a result that breaks its own output contract
    /// counts against the tool on that instance and never reaches the model
    /// (it is not retried: the tool ran); any other is the outcome.
    fn answered(
        &self,
        entry: &ToolEntry,
        pick: &Pick,
        result: ToolResult,
        call_id: &str,
    ) -> Outcome {
        let def = &entry.def;
        if let Err(broken) = super::validate::output(def, &result.data) {
            warn!(call_id = %call_id, tool = def.name(), %broken, "result withheld");
            self.record(entry, pick, Health::Bad(Scope::Tool));
            return Outcome::Failed(broken);
        }
        self.record(entry, pick, Health::Good);
        Outcome::Answered(result)
    }

    /// The retry decision for a failed attempt, with the budget applied:
    /// `Some(pause)` to send again after it, `None` to stop.
    fn next_step(
        &self,
        policy: &Retry,
        state: &AttemptState,
        failure: &AttemptFailure,
        call_id: &str,
        tool: &str,
    ) -> Option<Duration> {
        match retry::decide(policy, state, failure, rand::random()) {
            Next::Retry { after } if self.budget.withdraw() => {
                self.metrics
                    .retries
                    .get_or_create(&RetryLabels {
                        reason: failure.reason(),
                    })
                    .inc();
                debug!(call_id = %call_id, attempt = state.made, ?failure, "attempt failed; retrying");
                Some(after)
            }
            Next::Retry { .. } => {
                self.metrics.budget_exhausted.inc();
                warn!(call_id = %call_id, tool, "retry budget exhausted; not retrying");
                None
            }
            Next::Stop(reason) => {
                debug!(call_id = %call_id, attempt = state.made, ?failure, ?reason, "attempt failed; stopping");
                None
            }
        }
    }

    /// Records an attempt's outcome against the instance; may eject it.
    fn record(&self, entry: &ToolEntry, pick: &Pick, health: Health) {
        let address = &pick.instance.endpoint;
        // Walking the tool's instances matters only when a failure may eject.
        let may_eject =
            matches!(health, Health::Bad(_)) && route::may_eject(entry, &self.pool, address);
        if self
            .pool
            .record(&pick.endpoint, entry.def.name(), health, may_eject)
        {
            warn!(
                endpoint = &**address,
                tool = entry.def.name(),
                ?health,
                "ejected after repeated failures (the instance, or this tool on it)"
            );
            self.metrics.ejections.inc();
            self.ejections.send_modify(|count| *count += 1);
        }
    }
}

/// The outcome when the last attempt failed this way: the executor's own
/// answer when it gave one, else what the dispatcher makes of the failure.
fn outcome(failure: AttemptFailure, request: &InvokeRequest, attempts: u32) -> Outcome {
    let tool = request.tool.clone();
    Outcome::Failed(match failure {
        AttemptFailure::Reported(result) => return Outcome::Answered(*result),
        AttemptFailure::NotSent(detail)
        | AttemptFailure::ConnectionLost(detail)
        | AttemptFailure::Unavailable(detail) => CallError::Unreachable {
            tool,
            attempts,
            detail,
        },
        AttemptFailure::Timeout => CallError::TimedOut { tool, attempts },
        AttemptFailure::Broken(detail) => CallError::ExecutorBroke { tool, detail },
    })
}

/// Too little time is left for another attempt: the last failure if it
/// says more than "timed out", else "deadline exceeded".
fn out_of_time(
    last: Option<AttemptFailure>,
    budget: Duration,
    request: &InvokeRequest,
    attempts: u32,
) -> Outcome {
    match last {
        Some(failure) if failure != AttemptFailure::Timeout => outcome(failure, request, attempts),
        _ => Outcome::Failed(CallError::DeadlineExceeded {
            tool: request.tool.clone(),
            budget,
        }),
    }
}

/// No instance can take the next attempt: the last failure if there was
/// one, else "unavailable".
fn no_instance(
    entry: &ToolEntry,
    none: NoInstance,
    last: Option<AttemptFailure>,
    request: &InvokeRequest,
    attempts: u32,
) -> Outcome {
    match last {
        Some(failure) => outcome(failure, request, attempts),
        None => Outcome::Failed(CallError::NoHealthyInstance {
            tool: entry.def.label(),
            registered: none.registered,
            retry_after: none.retry_after,
        }),
    }
}
