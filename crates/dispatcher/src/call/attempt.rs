//! One attempt: send the call to one instance and classify how it ended.

use super::streamed::Relay;
use crate::endpoints::{Health, Scope};
use crate::route::Pick;
use sha2::{Digest, Sha256};
use std::{error::Error, io, time::Duration};
use tonic::{Code, Status};
use toolmesh::grpc::MAX_CALL_MESSAGE_BYTES;
use toolmesh::pb::{
    ErrorCode, ExecuteRequest, InvokeRequest, ToolResult, executor_client::ExecutorClient,
};
use toolmesh::{ToolDef, ToolResultExt};
use toolmesh_governance::Principal;

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

/// What the executor is sent for a call by `who`: the identity in the
/// context is the authenticated one (the client's claim is kept apart), and
/// a call id the client chose is scoped to the caller.
pub(crate) fn execute_request(
    def: &ToolDef,
    request: &InvokeRequest,
    who: &Principal,
    call_id: &str,
) -> ExecuteRequest {
    let mut context = request.context.clone().unwrap_or_default();
    let claimed = (
        std::mem::take(&mut context.caller),
        std::mem::take(&mut context.tenant),
    );
    context.claimed_caller = if claimed.0 == who.name {
        String::new()
    } else {
        claimed.0
    };
    context.claimed_tenant = if claimed.1 == who.tenant {
        String::new()
    } else {
        claimed.1
    };
    context.caller = who.name.clone();
    context.tenant = who.tenant.clone();
    context.caller_roles = who.roles.clone();
    let call_id = if request.call_id.is_empty() {
        call_id.to_owned()
    } else {
        scoped_call_id(who, &request.call_id)
    };
    ExecuteRequest {
        call_id,
        tool: def.name().to_owned(),
        version: def.spec().version.clone(),
        // Filled per attempt by `send`, so the arguments are copied once
        // per attempt and no more.
        arguments: String::new(),
        attempt: 0,
        context: Some(context),
    }
}

/// "c-" and 32 hex digits of SHA-256 over (tenant, principal, call id),
/// each length-prefixed so no two triples share an encoding.
fn scoped_call_id(who: &Principal, call_id: &str) -> String {
    let mut hash = Sha256::new();
    for part in [who.tenant.as_str(), who.name.as_str(), call_id] {
        hash.update((part.len() as u64).to_be_bytes());
        hash.update(part.as_bytes());
    }
    let digest = hash.finalize();
    let hex: String = digest[..16].iter().map(|b| format!("{b:02x}")).collect();
    format!("c-{hex}")
}

/// What one attempt sends: the call's [`execute_request`], its arguments
/// and the attempt's number; and whether the tool streams its progress
/// (then it goes by `ExecuteStream`).
pub(crate) struct Attempt<'a> {
    pub(crate) execute: &'a ExecuteRequest,
    pub(crate) arguments: &'a str,
    pub(crate) number: u32,
    pub(crate) streams: bool,
}

/// Sends `attempt` to `pick`, bounded by `budget` (also sent as the
/// request's `grpc-timeout`, so the executor knows its deadline); a
/// streaming tool's reports go to `relay`.
pub(crate) async fn send(
    pick: &Pick,
    attempt: Attempt<'_>,
    budget: Duration,
    span: &tracing::Span,
    relay: &Relay,
) -> Result<ToolResult, AttemptFailure> {
    let mut rpc = tonic::Request::new(ExecuteRequest {
        attempt: attempt.number,
        arguments: attempt.arguments.to_owned(),
        ..attempt.execute.clone()
    });
    rpc.set_timeout(budget);
    if !pick.instance.execute_token.is_empty() {
        // The executor accepts calls from dispatchers only: its token
        // reached us through the registry.
        toolmesh::grpc::set_bearer(rpc.metadata_mut(), &pick.instance.execute_token);
    }
    toolmesh_telemetry::trace::inject(span, rpc.metadata_mut());
    let _in_flight = pick.endpoint.start_call();
    let upstream = pick.endpoint.upstream();
    let mut client = ExecutorClient::with_origin(upstream.clone(), upstream.origin())
        .max_decoding_message_size(MAX_CALL_MESSAGE_BYTES)
        .max_encoding_message_size(MAX_CALL_MESSAGE_BYTES);
    if attempt.streams {
        // Boxed: only streaming tools take this path.
        return Box::pin(super::streamed::receive(&mut client, rpc, budget, relay)).await;
    }
    match tokio::time::timeout(budget, client.execute(rpc)).await {
        Err(_) => Err(AttemptFailure::Timeout),
        Ok(Err(status)) => Err(AttemptFailure::from_status(&status)),
        Ok(Ok(answer)) => classify_answer(answer.into_inner().result.unwrap_or_default()),
    }
}

/// The span of attempt number `attempt`, a child of the call's span
/// (disabled, and so nearly free, unless traces are exported).
pub(crate) fn span(call: &tracing::Span, attempt: u32, executor: &str) -> tracing::Span {
    tracing::info_span!(
        target: toolmesh_telemetry::trace::TARGET,
        parent: call,
        "attempt",
        "otel.name" = "execute_tool attempt",
        "otel.kind" = "client",
        "toolmesh.attempt" = attempt,
        "toolmesh.executor" = executor,
    )
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

    /// The executor sees the authenticated identity, never the client's
    /// claim, and call ids scoped per caller.
    #[test]
    fn identity_and_call_ids_are_the_callers_own() {
        let def = ToolDef::new(toolmesh::pb::ToolSpec {
            name: "t".into(),
            version: "1.0.0".into(),
            description: "t".into(),
            input_schema: "{}".into(),
            ..Default::default()
        })
        .unwrap();
        let bot = Principal {
            name: "agent-bot".into(),
            tenant: "acme".into(),
            roles: vec!["agent".into()],
            anonymous: false,
        };
        let forged = InvokeRequest {
            tool: "t".into(),
            call_id: "c-1".into(),
            context: Some(toolmesh::pb::CallContext {
                caller: "alice".into(),
                tenant: "globex".into(),
                ..Default::default()
            }),
            ..Default::default()
        };
        let sent = execute_request(&def, &forged, &bot, "c-1");
        let context = sent.context.unwrap();
        assert_eq!(
            (context.caller.as_str(), context.tenant.as_str()),
            ("agent-bot", "acme")
        );
        assert_eq!(
            (
                context.claimed_caller.as_str(),
                context.claimed_tenant.as_str()
            ),
            ("alice", "globex")
        );
        assert_eq!(context.caller_roles, ["agent"]);
        let other = Principal {
            name: "other-bot".into(),
            ..bot.clone()
        };
        let theirs = execute_request(&def, &forged, &other, "c-1").call_id;
        assert_ne!(sent.call_id, theirs, "same id, different callers");
        assert_eq!(
            sent.call_id,
            execute_request(&def, &forged, &bot, "c-1").call_id
        );
        assert!(sent.call_id.starts_with("c-") && sent.call_id.len() == 34);
        let generated = InvokeRequest {
            call_id: String::new(),
            ..forged
        };
        assert_eq!(
            execute_request(&def, &generated, &bot, "uuid").call_id,
            "uuid"
        );
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
