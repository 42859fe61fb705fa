//! How one attempt toward an executor failed: a gRPC status or an executor's
//! answer classified by what it says about the call (sent or not) and about
//! the instance or the tool there, for retries and outlier ejection.

use crate::endpoints::{Health, Scope};
use std::{error::Error, io, time::Duration};
use tonic::{Code, Status};
use toolmesh::ToolResultExt;
use toolmesh::pb::{ErrorCode, ToolResult};

/// How one attempt toward an executor failed.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum AttemptFailure {
    /// No connection could be made, or the endpoint does not serve the tool:
    /// the call provably did not run.
    NotSent(String),
    /// The connection broke after the request may have reached the
    /// executor (reset, GOAWAY, a transport error): about the instance.
    ConnectionLost(String),
    /// The executor's handler answered UNAVAILABLE: about that tool there.
    Unavailable(String),
    /// The attempt ran out of time.
    Timeout,
    /// The executor answered garbage or an internal error.
    Broken(String),
    /// The executor answered with a result carrying a `ToolError`.
    Reported(Box<ToolResult>),
}

/// An executor's answer: success, its own error, or — for an error code
/// this build does not know — a broken executor (never a success).
pub(crate) fn classify_answer(result: ToolResult) -> Result<ToolResult, AttemptFailure> {
    match &result.error {
        None => Ok(result),
        Some(e) if e.code == 0 => Ok(result),
        Some(e) if ErrorCode::try_from(e.code).is_err() => Err(AttemptFailure::Broken(format!(
            "it answered error code {}, which is not a toolmesh ErrorCode (message: {:?})",
            e.code, e.message
        ))),
        Some(_) => Err(AttemptFailure::Reported(Box::new(result))),
    }
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
            Code::DeadlineExceeded | Code::Cancelled => AttemptFailure::Timeout,
            _ if connection_broke(status) => AttemptFailure::ConnectionLost(detail),
            // A status built from a transport error carries it as its
            // source; one the handler returned has none.
            Code::Unavailable if status.source().is_some() => {
                AttemptFailure::ConnectionLost(detail)
            }
            Code::Unavailable => AttemptFailure::Unavailable(detail),
            _ => AttemptFailure::Broken(detail),
        }
    }

    /// What the failure says, and about what, for outlier ejection: a host
    /// that is gone is about the instance, a handler that failed is about
    /// that tool on it. A timeout set by the caller's own tight deadline
    /// (`caller_bound`) says nothing; one at the tool's or per-attempt
    /// timeout does.
    pub(crate) fn health(&self, caller_bound: bool) -> Health {
        match self {
            AttemptFailure::Timeout if caller_bound => Health::Neutral,
            AttemptFailure::NotSent(_) | AttemptFailure::ConnectionLost(_) => {
                Health::Bad(Scope::Instance)
            }
            AttemptFailure::Unavailable(_)
            | AttemptFailure::Timeout
            | AttemptFailure::Broken(_) => Health::Bad(Scope::Tool),
            AttemptFailure::Reported(result) => match result.error_code() {
                ErrorCode::ExecutorFailed | ErrorCode::Unavailable => Health::Bad(Scope::Tool),
                _ => Health::Good,
            },
        }
    }

    /// The `reason` label of a retry after this failure.
    pub(crate) fn reason(&self) -> &'static str {
        match self {
            AttemptFailure::NotSent(_) => "not_sent",
            AttemptFailure::ConnectionLost(_) => "connection_lost",
            AttemptFailure::Unavailable(_) => "unavailable",
            AttemptFailure::Timeout => "timeout",
            AttemptFailure::Broken(_) => "broken",
            AttemptFailure::Reported(_) => "retryable_error",
        }
    }

    /// The executor's pushback, if it asked for one.
    pub(crate) fn retry_after(&self) -> Option<Duration> {
        match self {
            AttemptFailure::Reported(result) => result
                .error
                .as_ref()
                .filter(|e| e.retry_after_ms > 0)
                .map(|e| Duration::from_millis(e.retry_after_ms.into())),
            _ => None,
        }
    }
}

/// The first error of type `E` in a status' source chain: the one walker
/// every classification below uses.
fn cause<E: Error + 'static>(status: &Status) -> Option<&E> {
    status.source().and_then(toolmesh::find_cause)
}

/// tonic's connect error: the call never left.
fn never_connected(status: &Status) -> bool {
    cause::<tonic::ConnectError>(status).is_some()
}

/// An HTTP/2 REFUSED_STREAM: the server refused the stream before reading
/// the request (RFC 9113 §8.7), as a draining executor does.
fn stream_refused(status: &Status) -> bool {
    cause::<h2::Error>(status).is_some_and(|h2| h2.reason() == Some(h2::Reason::REFUSED_STREAM))
}

/// An I/O error of a broken connection.
fn connection_broke(status: &Status) -> bool {
    cause::<io::Error>(status).is_some_and(|io| {
        matches!(
            io.kind(),
            io::ErrorKind::ConnectionReset
                | io::ErrorKind::ConnectionAborted
                | io::ErrorKind::BrokenPipe
                | io::ErrorKind::UnexpectedEof
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

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
            AttemptFailure::Unavailable(_)
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
        let broken = Status::from_error(Box::new(io::Error::from(io::ErrorKind::ConnectionReset)));
        assert!(matches!(
            AttemptFailure::from_status(&broken),
            AttemptFailure::ConnectionLost(_)
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

    /// Unknown error codes are a broken executor, not a success; code 0 is
    /// success, known codes are the tool's own answer.
    #[test]
    fn answers_are_classified() {
        use toolmesh::ToolErrorExt;
        use toolmesh::pb::ToolError;
        let mut odd = ToolError::new(ErrorCode::ToolError, "odd").into_result();
        odd.error.as_mut().unwrap().code = 999;
        assert!(
            matches!(classify_answer(odd), Err(AttemptFailure::Broken(m)) if m.contains("999"))
        );
        assert!(classify_answer(ToolResult::default()).is_ok());
        let business = ToolError::new(ErrorCode::ToolError, "no such user").into_result();
        assert!(matches!(
            classify_answer(business),
            Err(AttemptFailure::Reported(_))
        ));
    }

    /// A timeout at the caller's own deadline does not count against the
    /// instance; one at the tool's timeout does.
    #[test]
    fn caller_bound_timeouts_are_neutral() {
        assert_eq!(AttemptFailure::Timeout.health(true), Health::Neutral);
        assert_eq!(
            AttemptFailure::Timeout.health(false),
            Health::Bad(Scope::Tool)
        );
        assert_eq!(
            AttemptFailure::NotSent("x".into()).health(true),
            Health::Bad(Scope::Instance)
        );
    }
}
