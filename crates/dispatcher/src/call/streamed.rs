//! A streaming attempt: `ExecuteStream`'s progress and output chunks relayed to the caller as they come, then its result.

use super::failure::{AttemptFailure, classify_answer};
use super::outgoing::{ExecutorCalls, OutgoingExecute};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tokio::sync::mpsc;
use toolmesh::pb::{ExecuteEvent, InvokeEvent, Progress, ToolResult, execute_event, invoke_event};

/// Where a call's progress and output chunks go — to the caller of
/// `InvokeStream`, to a caller that reads only progress (the MCP door), or
/// nowhere (`Invoke`, which waits for the result) — and whether any
/// reached the caller: from then on the call is never retried.
#[derive(Debug, Default)]
pub(crate) struct Relay {
    caller: Option<Listener>,
    delivered: AtomicBool,
}

/// A caller that reads what the tool reports.
#[derive(Debug)]
enum Listener {
    /// Every event (`InvokeStream`).
    Events(mpsc::Sender<InvokeEvent>),
    /// Progress reports only; output chunks are taken and dropped, since
    /// the result carries the whole output.
    Progress(mpsc::Sender<Progress>),
}

impl Relay {
    /// A relay to the caller reading `caller`.
    pub(crate) fn to(caller: mpsc::Sender<InvokeEvent>) -> Self {
        Relay::listened(Listener::Events(caller))
    }

    /// A relay of progress reports to `caller`.
    pub(crate) fn progress_to(caller: mpsc::Sender<Progress>) -> Self {
        Relay::listened(Listener::Progress(caller))
    }

    fn listened(caller: Listener) -> Self {
        Relay {
            caller: Some(caller),
            delivered: AtomicBool::new(false),
        }
    }

    /// Whether a caller reads what the tool reports (`InvokeStream`, or
    /// progress): only then is a tool that streams its progress called by
    /// `ExecuteStream`; otherwise its plain `Execute` answers with less work
    /// on both ends.
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
        use execute_event::Event;
        let sent = match (&self.caller, event) {
            // The result is never passed: it ends the attempt.
            (None, _) | (_, Event::Result(_)) => return,
            (Some(Listener::Events(caller)), Event::Progress(report)) => {
                send(caller, invoke_event::Event::Progress(report)).await
            }
            (Some(Listener::Events(caller)), Event::Chunk(chunk)) => {
                send(caller, invoke_event::Event::Chunk(chunk)).await
            }
            (Some(Listener::Progress(caller)), Event::Progress(report)) => {
                caller.send(report).await.is_ok()
            }
            // Taken by a caller that shows only progress, as if passed.
            (Some(Listener::Progress(caller)), Event::Chunk(_)) => !caller.is_closed(),
        };
        if sent {
            self.delivered.store(true, Ordering::Relaxed);
        }
    }
}

/// Sends `event` to `caller`; whether it was taken.
async fn send(caller: &mpsc::Sender<InvokeEvent>, event: invoke_event::Event) -> bool {
    caller
        .send(InvokeEvent { event: Some(event) })
        .await
        .is_ok()
}

/// Sends `rpc` by `ExecuteStream`, relaying each event as it comes, and
/// answers the result. The whole stream is bounded by `budget`: a stream
/// could otherwise outlive its deadline.
pub(crate) async fn receive(
    client: &mut ExecutorCalls,
    rpc: tonic::Request<OutgoingExecute>,
    budget: Duration,
    relay: &Relay,
) -> Result<ToolResult, AttemptFailure> {
    tokio::time::timeout(budget, relay_until_result(client, rpc, relay))
        .await
        .unwrap_or(Err(AttemptFailure::Timeout))
}

async fn relay_until_result(
    client: &mut ExecutorCalls,
    rpc: tonic::Request<OutgoingExecute>,
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
