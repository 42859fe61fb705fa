//! A streaming attempt: `ExecuteStream`'s progress and output chunks relayed to the caller as they come, then its result.

use super::failure::{AttemptFailure, classify_answer};
use crate::upstream::Upstream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tokio::sync::mpsc;
use toolmesh::pb::{
    ExecuteEvent, ExecuteRequest, InvokeEvent, ToolResult, execute_event, executor_client,
    invoke_event,
};

/// Where a call's progress and output chunks go — to the caller of
/// `InvokeStream`, or nowhere (`Invoke`, which waits for the result) — and
/// whether any reached the caller: from then on the call is never retried.
#[derive(Debug, Default)]
pub(crate) struct Relay {
    caller: Option<mpsc::Sender<InvokeEvent>>,
    delivered: AtomicBool,
}

impl Relay {
    /// A relay to the caller reading `caller`.
    pub(crate) fn to(caller: mpsc::Sender<InvokeEvent>) -> Self {
        Relay {
            caller: Some(caller),
            delivered: AtomicBool::new(false),
        }
    }

    /// Whether a caller reads what the tool reports (`InvokeStream`): only
    /// then is a tool that streams its progress called by `ExecuteStream`;
    /// otherwise its plain `Execute` answers with less work on both ends.
    pub(crate) fn listening(&self) -> bool {
        self.caller.is_some()
    }

    /// Whether anything reached the caller.
    pub(crate) fn delivered(&self) -> bool {
        self.delivered.load(Ordering::Relaxed)
    }

    /// Passes one event on (waiting while the caller is slow to read, so
    /// the executor's stream is held back too).
    async fn pass(&self, event: execute_event::Event) {
        let Some(caller) = &self.caller else {
            return;
        };
        let event = match event {
            execute_event::Event::Progress(progress) => invoke_event::Event::Progress(progress),
            execute_event::Event::Chunk(chunk) => invoke_event::Event::Chunk(chunk),
            // Never passed: the result ends the attempt.
            execute_event::Event::Result(_) => return,
        };
        let sent = caller.send(InvokeEvent { event: Some(event) }).await;
        if sent.is_ok() {
            self.delivered.store(true, Ordering::Relaxed);
        }
    }
}

/// Sends `rpc` by `ExecuteStream`, relaying each event as it comes, and
/// answers the result. The whole stream is bounded by `budget`: a stream
/// could otherwise outlive its deadline.
pub(crate) async fn receive(
    client: &mut executor_client::ExecutorClient<Upstream>,
    rpc: tonic::Request<ExecuteRequest>,
    budget: Duration,
    relay: &Relay,
) -> Result<ToolResult, AttemptFailure> {
    tokio::time::timeout(budget, relay_until_result(client, rpc, relay))
        .await
        .unwrap_or(Err(AttemptFailure::Timeout))
}

async fn relay_until_result(
    client: &mut executor_client::ExecutorClient<Upstream>,
    rpc: tonic::Request<ExecuteRequest>,
    relay: &Relay,
) -> Result<ToolResult, AttemptFailure> {
    let failed = |status: tonic::Status| AttemptFailure::from_status(&status);
    let mut events = client
        .execute_stream(rpc)
        .await
        .map_err(failed)?
        .into_inner();
    loop {
        match events.message().await.map_err(failed)? {
            None => {
                return Err(AttemptFailure::Broken(
                    "its stream ended without a result".into(),
                ));
            }
            Some(ExecuteEvent {
                event: Some(execute_event::Event::Result(result)),
            }) => return classify_answer(result),
            Some(ExecuteEvent { event: Some(event) }) => relay.pass(event).await,
            // An event this build does not know: not for the caller.
            Some(ExecuteEvent { event: None }) => {}
        }
    }
}
