//! The retry decision: whether a failed attempt may be sent again, and
//! after how long — a pure function of the tool's retry policy, the state
//! of the call and the failure, tested without I/O.

use super::attempt::AttemptFailure;
use std::time::Duration;
use toolmesh::ToolResultExt;
use toolmesh::pb::ErrorCode;
use toolmesh::spec::Retry;

/// Where a call stands after a failed attempt.
#[derive(Debug, Clone, Copy)]
pub(crate) struct AttemptState {
    /// Attempts made so far (1 after the first).
    pub(crate) made: u32,
    /// Whether the tool may run twice.
    pub(crate) idempotent: bool,
    /// Time left before the call's deadline.
    pub(crate) left: Duration,
    /// No attempt starts with less than this left.
    pub(crate) min_attempt: Duration,
    /// Whether the call streamed anything to its caller already.
    pub(crate) delivered: bool,
}

/// What to do after a failed attempt.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Next {
    /// Send again (to an instance not tried yet, where one exists) after
    /// this pause, if the retry budget allows.
    Retry {
        /// The pause before the next attempt.
        after: Duration,
    },
    /// Give up: the last failure is the outcome.
    Stop(StopReason),
}

/// Why no further attempt is made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StopReason {
    /// The failure may not be retried for this tool.
    NotRetryable,
    /// The tool's `max_attempts` are spent.
    AttemptsSpent,
    /// The pause plus one more attempt would pass the deadline.
    NoTimeLeft,
    /// The caller has received part of this call's stream: a second run
    /// would repeat or contradict it.
    Delivered,
}

/// Decides the next step. `jitter` is uniform in [0, 1): the backoff is
/// full-jitter exponential, never shorter than the executor's retry-after.
pub(crate) fn decide(
    policy: &Retry,
    state: &AttemptState,
    failure: &AttemptFailure,
    jitter: f64,
) -> Next {
    if state.delivered {
        return Next::Stop(StopReason::Delivered);
    }
    if !may_retry(failure, state.idempotent) {
        return Next::Stop(StopReason::NotRetryable);
    }
    if state.made >= policy.max_attempts {
        return Next::Stop(StopReason::AttemptsSpent);
    }
    let after =
        backoff(policy, state.made + 1, jitter).max(failure.retry_after().unwrap_or_default());
    if after + state.min_attempt > state.left {
        return Next::Stop(StopReason::NoTimeLeft);
    }
    Next::Retry { after }
}

/// Whether a failure may be sent again at all: only if the call provably
/// did not run, or the tool is idempotent and the failure is transient.
pub(crate) fn may_retry(failure: &AttemptFailure, idempotent: bool) -> bool {
    match failure {
        AttemptFailure::NotSent(_) => true,
        AttemptFailure::ConnectionLost(_)
        | AttemptFailure::Unavailable(_)
        | AttemptFailure::Timeout => idempotent,
        AttemptFailure::Broken(_) => false,
        AttemptFailure::Reported(result) => match result.error_code() {
            // The instance does not serve the tool (a stale snapshot):
            // it did not run, so any tool may go elsewhere.
            ErrorCode::NotFound => true,
            _ => idempotent && result.error.as_ref().is_some_and(|e| e.retryable),
        },
    }
}

/// Full-jitter exponential backoff before attempt `next_attempt` (2 for the
/// first retry): `jitter` × min(initial × multiplier^(n-2), max).
pub(crate) fn backoff(policy: &Retry, next_attempt: u32, jitter: f64) -> Duration {
    let exponent = next_attempt.saturating_sub(2) as i32;
    let ceiling = policy.initial_backoff.as_secs_f64() * policy.multiplier.powi(exponent);
    let ceiling = ceiling.min(policy.max_backoff.as_secs_f64());
    Duration::from_secs_f64(jitter.clamp(0.0, 1.0) * ceiling)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::endpoints::{Health, Scope};
    use toolmesh::ToolErrorExt;
    use toolmesh::pb::ToolError;

    fn reported(code: ErrorCode, retryable: bool) -> AttemptFailure {
        AttemptFailure::Reported(Box::new(
            ToolError::new(code, "x")
                .with_retryable(retryable)
                .into_result(),
        ))
    }

    /// The retry rules, one row per failure kind: retried for idempotent
    /// tools, for non-idempotent tools, and what it says about the instance.
    #[test]
    fn retry_rule_table() {
        use AttemptFailure as F;
        const HOST: Health = Health::Bad(Scope::Instance);
        const TOOL: Health = Health::Bad(Scope::Tool);
        #[rustfmt::skip]
        let rows: Vec<(&str, AttemptFailure, bool, bool, Health)> = vec![
            ("connect refused", F::NotSent("refused".into()), true, true, HOST),
            ("reset mid-call", F::ConnectionLost("reset".into()), true, false, HOST),
            ("handler UNAVAILABLE", F::Unavailable("busy".into()), true, false, TOOL),
            ("attempt timeout", F::Timeout, true, false, TOOL),
            ("garbage / internal", F::Broken("internal".into()), false, false, TOOL),
            ("declared retryable", reported(ErrorCode::ToolError, true), true, false, Health::Good),
            ("declared not retryable", reported(ErrorCode::Unavailable, false), false, false, TOOL),
            ("business error", reported(ErrorCode::ToolError, false), false, false, Health::Good),
            ("invalid arguments", reported(ErrorCode::InvalidArguments, false), false, false, Health::Good),
            ("executor unavailable", reported(ErrorCode::Unavailable, true), true, false, TOOL),
            ("executor failed", reported(ErrorCode::ExecutorFailed, false), false, false, TOOL),
            ("stale: tool not served", reported(ErrorCode::NotFound, false), true, true, Health::Good),
        ];
        for (label, failure, idempotent, non_idempotent, health) in rows {
            assert_eq!(may_retry(&failure, true), idempotent, "{label}: idempotent");
            assert_eq!(
                may_retry(&failure, false),
                non_idempotent,
                "{label}: non-idempotent"
            );
            assert_eq!(failure.health(false), health, "{label}: health");
        }
    }

    fn state(made: u32, idempotent: bool, left_ms: u64) -> AttemptState {
        AttemptState {
            made,
            idempotent,
            left: Duration::from_millis(left_ms),
            min_attempt: Duration::from_millis(5),
            delivered: false,
        }
    }

    /// The decision, one row per situation: what the rules, the attempt
    /// count and the time left make of a failure.
    #[test]
    fn decision_table() {
        let policy = Retry::default();
        let refused = AttemptFailure::NotSent("refused".into());
        let reset = AttemptFailure::ConnectionLost("reset".into());
        let pushback = AttemptFailure::Reported(Box::new(
            ToolError::new(ErrorCode::Unavailable, "busy")
                .with_retryable(true)
                .with_retry_after_ms(200)
                .into_result(),
        ));
        let rows: Vec<(&str, AttemptState, &AttemptFailure, f64, Next)> = vec![
            (
                "first retry, no jitter",
                state(1, true, 1000),
                &refused,
                0.0,
                Next::Retry {
                    after: Duration::ZERO,
                },
            ),
            (
                "full jitter reaches the ceiling",
                state(1, true, 1000),
                &refused,
                1.0,
                Next::Retry {
                    after: policy.initial_backoff,
                },
            ),
            (
                "attempts spent",
                state(policy.max_attempts, true, 1000),
                &refused,
                0.0,
                Next::Stop(StopReason::AttemptsSpent),
            ),
            (
                "never resend what may have run",
                state(1, false, 1000),
                &AttemptFailure::Timeout,
                0.0,
                Next::Stop(StopReason::NotRetryable),
            ),
            (
                "retry-after honoured",
                state(1, true, 1000),
                &pushback,
                0.0,
                Next::Retry {
                    after: Duration::from_millis(200),
                },
            ),
            (
                "retry-after past the deadline",
                state(1, true, 150),
                &pushback,
                0.0,
                Next::Stop(StopReason::NoTimeLeft),
            ),
            (
                "too little left for one more",
                state(1, true, 4),
                &refused,
                0.0,
                Next::Stop(StopReason::NoTimeLeft),
            ),
            (
                "a stream that reached the caller, then answered a retryable error",
                AttemptState {
                    delivered: true,
                    ..state(1, true, 1000)
                },
                &pushback,
                0.0,
                Next::Stop(StopReason::Delivered),
            ),
            (
                "a stream that reached the caller, then broke",
                AttemptState {
                    delivered: true,
                    ..state(1, true, 1000)
                },
                &reset,
                0.0,
                Next::Stop(StopReason::Delivered),
            ),
            (
                "a stream that failed before delivering anything",
                state(1, true, 1000),
                &reset,
                0.0,
                Next::Retry {
                    after: Duration::ZERO,
                },
            ),
        ];
        for (label, state, failure, jitter, next) in rows {
            assert_eq!(decide(&policy, &state, failure, jitter), next, "{label}");
        }
    }

    /// Backoff stays within [0, min(initial × multiplier^n, max)].
    #[test]
    fn backoff_is_full_jitter_and_capped() {
        let policy = Retry::default();
        for step in 0..=10 {
            let jitter = f64::from(step) / 10.0;
            assert!(backoff(&policy, 2, jitter) <= Duration::from_millis(25));
            assert!(backoff(&policy, 3, jitter) <= Duration::from_millis(50));
            assert!(backoff(&policy, 9, jitter) <= Duration::from_millis(250));
        }
        assert!(
            backoff(&policy, 3, 0.5) < backoff(&policy, 3, 0.9),
            "jittered"
        );
    }
}
