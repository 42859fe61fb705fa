//! One attempt: send the call to one instance; how it ended is classified
//! in `failure`.

pub(crate) use super::failure::{AttemptFailure, classify_answer};
use super::outgoing::{ExecutorCalls, OutgoingExecute};
use super::streamed::Relay;
use crate::route::Pick;
use sha2::{Digest, Sha256};
use std::sync::Arc;
use std::time::Duration;
use toolmesh::Principal;
use toolmesh::ToolDef;
use toolmesh::pb::{ExecuteRequest, InvokeRequest, ToolResult};
use toolmesh_transport::MAX_CALL_MESSAGE_BYTES;

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
        // Sent from the caller's request by `send` (`OutgoingExecute`),
        // so the arguments are copied once per attempt, into its frame.
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

/// What one attempt sends: the call's [`execute_request`], the caller's
/// request (whose arguments are sent) and the attempt's number; and
/// whether the tool streams its progress (then it goes by `ExecuteStream`).
pub(crate) struct Attempt<'a> {
    pub(crate) execute: &'a ExecuteRequest,
    pub(crate) call: &'a Arc<InvokeRequest>,
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
    let mut rpc = tonic::Request::new(OutgoingExecute {
        fields: ExecuteRequest {
            attempt: attempt.number,
            ..attempt.execute.clone()
        },
        call: Arc::clone(attempt.call),
    });
    rpc.set_timeout(budget);
    if !pick.instance.execute_token.is_empty() {
        // The executor accepts calls from dispatchers only: its token
        // reached us through the registry.
        toolmesh_transport::set_bearer(rpc.metadata_mut(), &pick.instance.execute_token);
    }
    toolmesh_telemetry::trace::inject(span, rpc.metadata_mut());
    let _in_flight = pick.endpoint.start_call();
    let connection = pick.endpoint.connection();
    let mut client = ExecutorCalls(
        tonic::client::Grpc::with_origin(connection.clone(), connection.origin())
            .max_decoding_message_size(MAX_CALL_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_CALL_MESSAGE_BYTES),
    );
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

#[cfg(test)]
mod tests {
    use super::*;
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
        let bot = toolmesh_testkit::principal("agent-bot", "acme", &["agent"]);
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
}
