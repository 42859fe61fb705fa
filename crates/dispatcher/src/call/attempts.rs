//! The attempt loop: pick an instance, send, record what the outcome says
//! about the instance, and ask the retry decision what next — all within
//! one deadline and the dispatcher-wide retry budget.

use super::attempt::{self, AttemptFailure};
use super::retry::{self, AttemptState, Next};
use super::streamed::Relay;
use super::{Outcome, Trail};
use crate::endpoints::{Endpoints, Health, Scope};
use crate::error::CallError;
use crate::metrics::{Metrics, RetryLabels};
use crate::route::{self, NoInstance, Pick};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Notify;
use tokio::time::Instant;
use toolmesh::ToolEntry;
use toolmesh::pb::{InvokeRequest, ToolResult};
use toolmesh::spec::Retry;
use toolmesh_governance::Principal;
use toolmesh_transport::{Bound, call_budget};
use tower::retry::budget::{Budget, TpsBudget};
use tracing::{Instrument, debug, warn};

/// What every call's attempts share.
pub(crate) struct Attempts {
    pub(crate) pool: Arc<Endpoints>,
    /// Retries allowed as a share of calls (plus a floor per second).
    pub(crate) budget: TpsBudget,
    /// Woken when an instance is ejected, so tool health is recomputed.
    pub(crate) ejections: Arc<Notify>,
    pub(crate) metrics: Arc<Metrics>,
    pub(crate) max_in_flight_per_instance: u32,
    /// No attempt starts with less than this left.
    pub(crate) min_attempt: Duration,
}

impl Attempts {
    /// Sends attempts until one answers, the retry decision stops, or the
    /// deadline leaves too little for one more; what a streaming tool
    /// reports goes to `relay`.
    pub(crate) async fn run(
        &self,
        entry: &ToolEntry,
        request: &InvokeRequest,
        who: &Principal,
        caller_timeout: Option<Duration>,
        trail: &mut Trail,
        relay: &Relay,
    ) -> Outcome {
        let def = &entry.def;
        let execute = attempt::execute_request(def, request, who, &trail.call_id);
        let (budget, bound) = call_budget(caller_timeout, def.timeout());
        let deadline = trail.started + budget;
        let policy = def.retry();
        let mut tried: Vec<Arc<str>> = Vec::new();
        let mut last: Option<AttemptFailure> = None;
        self.budget.deposit();
        loop {
            let remaining = deadline.saturating_duration_since(Instant::now());
            if remaining < self.min_attempt {
                return out_of_time(last, budget, request, trail);
            }
            let pick = match route::pick(entry, &self.pool, &tried, self.max_in_flight_per_instance)
            {
                Ok(pick) => pick,
                Err(none) => return no_instance(entry, none, last, request, trail),
            };
            trail.attempts += 1;
            trail.executor_id = pick.instance.executor_id.to_string();
            tried.push(pick.instance.endpoint.clone());
            // Envoy's per_try_timeout: a hung instance costs one slice.
            let slice = policy
                .attempt_timeout
                .map_or(remaining, |t| t.min(remaining));
            let this = attempt::Attempt {
                execute: &execute,
                arguments: &request.arguments,
                number: trail.attempts,
                streams: def.streams_progress() && relay.listening(),
            };
            let failure = match self.send_one(&pick, this, slice, trail, relay).await {
                Ok(result) => return self.answered(entry, &pick, result, trail),
                Err(failure) => failure,
            };
            let caller_bound = slice == remaining && bound == Bound::Caller;
            self.record(entry, &pick, failure.health(caller_bound));
            let state = self.state(entry, trail, deadline, relay);
            match self.next_step(&policy, &state, &failure, trail, def.name()) {
                Some(pause) => {
                    tokio::time::sleep(pause).await;
                    last = Some(failure);
                }
                None => return outcome(failure, request, trail),
            }
        }
    }

    /// Where the call stands after a failed attempt, for the retry decision.
    fn state(
        &self,
        entry: &ToolEntry,
        trail: &Trail,
        deadline: Instant,
        relay: &Relay,
    ) -> AttemptState {
        AttemptState {
            made: trail.attempts,
            idempotent: entry.def.idempotent(),
            left: deadline.saturating_duration_since(Instant::now()),
            min_attempt: self.min_attempt,
            delivered: relay.delivered(),
        }
    }

    /// Sends `this` attempt to `pick` in its own span, counted.
    async fn send_one(
        &self,
        pick: &Pick,
        this: attempt::Attempt<'_>,
        slice: Duration,
        trail: &Trail,
        relay: &Relay,
    ) -> Result<ToolResult, AttemptFailure> {
        if let Some(handles) = &trail.metrics {
            self.metrics.attempt(handles);
        }
        let span = attempt::span(&trail.span, trail.attempts, &trail.executor_id);
        attempt::send(pick, this, slice, &span, relay)
            .instrument(span.clone())
            .await
    }

    /// The executor answered: a result that breaks its own output contract
    /// counts against the tool on that instance and never reaches the model
    /// (it is not retried: the tool ran); any other is the outcome.
    fn answered(
        &self,
        entry: &ToolEntry,
        pick: &Pick,
        result: ToolResult,
        trail: &Trail,
    ) -> Outcome {
        let def = &entry.def;
        if let Err(broken) = super::validate::output(def, &result.data) {
            warn!(call_id = %trail.call_id, tool = def.name(), %broken, "result withheld");
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
        trail: &Trail,
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
                debug!(call_id = %trail.call_id, attempt = trail.attempts, ?failure, "attempt failed; retrying");
                Some(after)
            }
            Next::Retry { .. } => {
                self.metrics.budget_exhausted.inc();
                warn!(call_id = %trail.call_id, tool, "retry budget exhausted; not retrying");
                None
            }
            Next::Stop(reason) => {
                debug!(call_id = %trail.call_id, attempt = trail.attempts, ?failure, ?reason, "attempt failed; stopping");
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
            self.ejections.notify_one();
        }
    }
}

/// The outcome when the last attempt failed this way: the executor's own
/// answer when it gave one, else what the dispatcher makes of the failure.
fn outcome(failure: AttemptFailure, request: &InvokeRequest, trail: &Trail) -> Outcome {
    let tool = request.tool.clone();
    let attempts = trail.attempts;
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
    trail: &Trail,
) -> Outcome {
    match last {
        Some(failure) if failure != AttemptFailure::Timeout => outcome(failure, request, trail),
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
    trail: &Trail,
) -> Outcome {
    match last {
        Some(failure) => outcome(failure, request, trail),
        None => Outcome::Failed(CallError::NoHealthyInstance {
            tool: entry.def.label(),
            registered: none.registered,
            retry_after: none.retry_after,
        }),
    }
}
