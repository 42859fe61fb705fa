//! One attempt: send the call to one instance and classify how it ended.

use crate::endpoints::Health;
use crate::route::Pick;
use std::{error::Error, io, time::Duration};
use tonic::{Code, Status};
use toolmesh::grpc::MAX_CALL_MESSAGE_BYTES;
use toolmesh::pb::{
    ErrorCode, ExecuteRequest, InvokeRequest, ToolResult, executor_client::ExecutorClient,
};
use toolmesh::{ToolDef, ToolResultExt};

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
    /// The executor answered with a result carrying a `ToolError`.
    Reported(ToolResult),
}

/// Sends attempt number `attempt` of a call to `pick`, bounded by `budget`
/// (sent as the request's `grpc-timeout`, which the channel enforces: no
/// second timer per call).
pub(crate) async fn send(
    pick: &Pick,
    def: &ToolDef,
    request: &InvokeRequest,
    call_id: &str,
    attempt: u32,
    budget: Duration,
) -> Result<ToolResult, AttemptFailure> {
    let mut rpc = tonic::Request::new(ExecuteRequest {
        call_id: call_id.to_owned(),
        tool: def.name().to_owned(),
        version: def.spec().version.clone(),
        arguments: request.arguments.clone(),
        attempt,
        context: request.context.clone(),
    });
    rpc.set_timeout(budget);
    let _in_flight = pick.endpoint.start_call();
    let mut client = ExecutorClient::new(pick.endpoint.channel())
        .max_decoding_message_size(MAX_CALL_MESSAGE_BYTES)
        .max_encoding_message_size(MAX_CALL_MESSAGE_BYTES);
    match client.execute(rpc).await {
        Err(status) => Err(AttemptFailure::from_status(&status)),
        Ok(answer) => {
            let result = answer.into_inner().result.unwrap_or_default();
            match result.error_code() {
                ErrorCode::Unspecified => Ok(result),
                _ => Err(AttemptFailure::Reported(result)),
            }
        }
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
            Code::Unavailable => AttemptFailure::Transport(detail),
            Code::DeadlineExceeded | Code::Cancelled => AttemptFailure::Timeout,
            _ if connection_broke(status) => AttemptFailure::Transport(detail),
            _ => AttemptFailure::Broken(detail),
        }
    }

    /// What the failure says about the instance, for outlier ejection. A
    /// timeout set by the caller's own tight deadline (`caller_bound`) says
    /// nothing about it; one at the tool's or per-attempt timeout does.
    pub(crate) fn health(&self, caller_bound: bool) -> Health {
        match self {
            AttemptFailure::Timeout if caller_bound => Health::Neutral,
            AttemptFailure::NotSent(_)
            | AttemptFailure::Transport(_)
            | AttemptFailure::Timeout
            | AttemptFailure::Broken(_) => Health::Bad,
            AttemptFailure::Reported(result) => match result.error_code() {
                ErrorCode::ExecutorFailed | ErrorCode::Unavailable => Health::Bad,
                _ => Health::Good,
            },
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
    let mut source = status.source();
    while let Some(err) = source {
        if let Some(found) = err.downcast_ref::<E>() {
            return Some(found);
        }
        source = err.source();
    }
    None
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
        let broken = Status::from_error(Box::new(io::Error::from(io::ErrorKind::ConnectionReset)));
        assert!(matches!(
            AttemptFailure::from_status(&broken),
            AttemptFailure::Transport(_)
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

    /// A timeout at the caller's own deadline does not count against the
    /// instance; one at the tool's timeout does.
    #[test]
    fn caller_bound_timeouts_are_neutral() {
        assert_eq!(AttemptFailure::Timeout.health(true), Health::Neutral);
        assert_eq!(AttemptFailure::Timeout.health(false), Health::Bad);
        assert_eq!(
            AttemptFailure::NotSent("x".into()).health(true),
            Health::Bad
        );
    }
}
