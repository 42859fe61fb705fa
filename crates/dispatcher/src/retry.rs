//! Retry rules: how an attempt failed, whether that failure may be retried
//! for this tool, the full-jitter backoff, and the dispatcher-wide budget.

use crate::endpoints::Health;
use std::{error::Error as _, io, time::Duration};
use tonic::{Code, Status};
use toolmesh::ToolErrorExt;
use toolmesh::pb::{ErrorCode, ToolError};
use toolmesh::spec::Retry;

/// How one attempt toward an executor failed.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum AttemptFailure {
    /// No connection could be made, or the endpoint does not serve the tool:
    /// the call provably did not run.
    NotSent(String),
    /// The transport failed after the request may have reached the executor
    /// (connection reset, UNAVAILABLE mid-call).
    Transport(String),
    /// The attempt ran out of time.
    Timeout,
    /// The executor answered garbage or an internal error.
    Broken(String),
    /// The executor answered with a `ToolError`.
    Reported(ToolError),
}

impl AttemptFailure {
    /// Classifies a gRPC status from `Executor.Execute`.
    pub(crate) fn from_status(status: &Status) -> Self {
        let detail = format!("{}: {}", status.code().description(), status.message());
        match status.code() {
            _ if never_connected(status) || stream_refused(status) => {
                AttemptFailure::NotSent(detail)
            }
            Code::Unimplemented => AttemptFailure::NotSent(detail),
            Code::Unavailable => AttemptFailure::Transport(detail),
            Code::DeadlineExceeded | Code::Cancelled => AttemptFailure::Timeout,
            _ if connection_broke(status) => AttemptFailure::Transport(detail),
            _ => AttemptFailure::Broken(detail),
        }
    }

    /// Whether the dispatcher may send the call again (the budget and the
    /// attempt limit permitting).
    pub(crate) fn may_retry(&self, idempotent: bool) -> bool {
        match self {
            AttemptFailure::NotSent(_) => true,
            AttemptFailure::Transport(_) | AttemptFailure::Timeout => idempotent,
            AttemptFailure::Broken(_) => false,
            AttemptFailure::Reported(error) => match error.error_code() {
                // The instance does not serve the tool (a stale snapshot):
                // it did not run, so any tool may go elsewhere.
                ErrorCode::NotFound => true,
                _ => idempotent && error.retryable,
            },
        }
    }

    /// What the failure says about the instance, for outlier ejection.
    pub(crate) fn health(&self) -> Health {
        match self {
            AttemptFailure::NotSent(_)
            | AttemptFailure::Transport(_)
            | AttemptFailure::Timeout
            | AttemptFailure::Broken(_) => Health::Bad,
            AttemptFailure::Reported(error) => match error.error_code() {
                ErrorCode::ExecutorFailed | ErrorCode::Unavailable => Health::Bad,
                _ => Health::Good,
            },
        }
    }

    /// The executor's pushback, if it asked for one.
    pub(crate) fn retry_after(&self) -> Option<Duration> {
        match self {
            AttemptFailure::Reported(e) if e.retry_after_ms > 0 => {
                Some(Duration::from_millis(e.retry_after_ms.into()))
            }
            _ => None,
        }
    }
}

/// Walks the status' source chain for tonic's connect error.
fn never_connected(status: &Status) -> bool {
    let mut source = status.source();
    while let Some(err) = source {
        if err.is::<tonic::ConnectError>() {
            return true;
        }
        source = err.source();
    }
    false
}

/// Walks the status' source chain for an HTTP/2 REFUSED_STREAM: the server
/// refused the stream before reading the request (RFC 9113 §8.7), as a
/// draining executor does.
fn stream_refused(status: &Status) -> bool {
    let mut source = status.source();
    while let Some(err) = source {
        if let Some(h2) = err.downcast_ref::<h2::Error>() {
            return h2.reason() == Some(h2::Reason::REFUSED_STREAM);
        }
        source = err.source();
    }
    false
}

/// Walks the status' source chain for an I/O error of a broken connection.
fn connection_broke(status: &Status) -> bool {
    let mut source = status.source();
    while let Some(err) = source {
        if let Some(io) = err.downcast_ref::<io::Error>() {
            return matches!(
                io.kind(),
                io::ErrorKind::ConnectionReset
                    | io::ErrorKind::ConnectionAborted
                    | io::ErrorKind::BrokenPipe
                    | io::ErrorKind::UnexpectedEof
            );
        }
        source = err.source();
    }
    false
}

/// Full-jitter exponential backoff before attempt `next_attempt` (2 for the
/// first retry): uniform in [0, min(initial × multiplier^(n-2), max)].
pub(crate) fn backoff(policy: &Retry, next_attempt: u32) -> Duration {
    let exponent = next_attempt.saturating_sub(2) as i32;
    let ceiling = policy.initial_backoff.as_secs_f64() * policy.multiplier.powi(exponent);
    let ceiling = ceiling.min(policy.max_backoff.as_secs_f64());
    Duration::from_secs_f64(rand::random::<f64>() * ceiling)
}

/// The error a model reads when the last attempt failed this way.
pub(crate) fn final_error(failure: AttemptFailure, tool: &str, attempts: u32) -> ToolError {
    let tried = if attempts == 1 {
        "1 attempt".to_owned()
    } else {
        format!("{attempts} attempts")
    };
    match failure {
        AttemptFailure::Reported(error) => error,
        AttemptFailure::NotSent(detail) | AttemptFailure::Transport(detail) => ToolError::new(
            ErrorCode::Unavailable,
            format!(
                "could not reach an executor for {tool} ({tried}; last: {detail}); try again shortly"
            ),
        ),
        AttemptFailure::Timeout => ToolError::new(
            ErrorCode::DeadlineExceeded,
            format!("{tool} did not answer within its deadline ({tried})"),
        ),
        AttemptFailure::Broken(detail) => ToolError::new(
            ErrorCode::ExecutorFailed,
            format!(
                "the executor for {tool} failed ({detail}); the call may or may not have taken effect"
            ),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reported(code: ErrorCode, retryable: bool) -> AttemptFailure {
        AttemptFailure::Reported(ToolError::new(code, "x").with_retryable(retryable))
    }

    /// The retry rules, one row per failure kind: retried for idempotent
    /// tools, for non-idempotent tools, and what it says about the instance.
    #[test]
    fn retry_rule_table() {
        use AttemptFailure as F;
        let rows: Vec<(&str, AttemptFailure, bool, bool, Health)> = vec![
            (
                "connect refused",
                F::NotSent("refused".into()),
                true,
                true,
                Health::Bad,
            ),
            (
                "reset mid-call",
                F::Transport("reset".into()),
                true,
                false,
                Health::Bad,
            ),
            ("attempt timeout", F::Timeout, true, false, Health::Bad),
            (
                "garbage / internal",
                F::Broken("internal".into()),
                false,
                false,
                Health::Bad,
            ),
            (
                "declared retryable",
                reported(ErrorCode::ToolError, true),
                true,
                false,
                Health::Good,
            ),
            (
                "declared not retryable",
                reported(ErrorCode::Unavailable, false),
                false,
                false,
                Health::Bad,
            ),
            (
                "business error",
                reported(ErrorCode::ToolError, false),
                false,
                false,
                Health::Good,
            ),
            (
                "invalid arguments",
                reported(ErrorCode::InvalidArguments, false),
                false,
                false,
                Health::Good,
            ),
            (
                "executor unavailable",
                reported(ErrorCode::Unavailable, true),
                true,
                false,
                Health::Bad,
            ),
            (
                "executor failed",
                reported(ErrorCode::ExecutorFailed, false),
                false,
                false,
                Health::Bad,
            ),
            (
                "stale: tool not served",
                reported(ErrorCode::NotFound, false),
                true,
                true,
                Health::Good,
            ),
        ];
        for (label, failure, idempotent, non_idempotent, health) in rows {
            assert_eq!(failure.may_retry(true), idempotent, "{label}: idempotent");
            assert_eq!(
                failure.may_retry(false),
                non_idempotent,
                "{label}: non-idempotent"
            );
            assert_eq!(failure.health(), health, "{label}: health");
        }
    }

    /// gRPC statuses are classified by code and by their source chain.
    #[test]
    fn status_classification() {
        let refused = Status::from_error(Box::new(tonic::ConnectError(Box::new(io::Error::from(
            io::ErrorKind::ConnectionRefused,
        )))));
        assert_eq!(refused.code(), Code::Unavailable);
        assert!(matches!(
            AttemptFailure::from_status(&refused),
            AttemptFailure::NotSent(_)
        ));
        let unavailable = Status::unavailable("going away");
        assert!(matches!(
            AttemptFailure::from_status(&unavailable),
            AttemptFailure::Transport(_)
        ));
        let internal = Status::internal("h2 protocol error");
        assert!(matches!(
            AttemptFailure::from_status(&internal),
            AttemptFailure::Broken(_)
        ));
        let refused = Status::from_error(Box::new(h2::Error::from(h2::Reason::REFUSED_STREAM)));
        assert!(matches!(
            AttemptFailure::from_status(&refused),
            AttemptFailure::NotSent(_)
        ));
        let reset = Status::from_error(Box::new(h2::Error::from(h2::Reason::CANCEL)));
        assert!(!matches!(
            AttemptFailure::from_status(&reset),
            AttemptFailure::NotSent(_)
        ));
        let unimplemented = Status::unimplemented("no such service");
        assert!(matches!(
            AttemptFailure::from_status(&unimplemented),
            AttemptFailure::NotSent(_)
        ));
        assert_eq!(
            AttemptFailure::from_status(&Status::deadline_exceeded("late")),
            AttemptFailure::Timeout
        );
    }

    /// Backoff stays within [0, min(initial × multiplier^n, max)].
    #[test]
    fn backoff_is_full_jitter_and_capped() {
        let policy = Retry::default();
        for _ in 0..200 {
            assert!(backoff(&policy, 2) <= Duration::from_millis(25));
            assert!(backoff(&policy, 3) <= Duration::from_millis(50));
            assert!(backoff(&policy, 9) <= Duration::from_millis(250));
        }
        let spread: std::collections::HashSet<u128> =
            (0..50).map(|_| backoff(&policy, 3).as_micros()).collect();
        assert!(spread.len() > 10, "jittered");
    }

    /// The final message says what happened and how often it was tried.
    #[test]
    fn final_errors_read_well() {
        let e = final_error(AttemptFailure::NotSent("refused".into()), "search_kb", 3);
        assert_eq!(e.error_code(), ErrorCode::Unavailable);
        assert!(e.message.contains("3 attempts"), "{}", e.message);
        let e = final_error(AttemptFailure::Broken("internal".into()), "t", 1);
        assert_eq!(e.error_code(), ErrorCode::ExecutorFailed);
    }
}
