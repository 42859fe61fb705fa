//! `ExecuteStream`: one call's progress and output chunks sent as the tool reports them, then its result, and nothing after it.

use crate::ProgressHandle;
use crate::server::{Accepted, Core};
use futures_util::Stream;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use tokio::sync::mpsc;
use tonic::Status;
use toolmesh::pb::{ExecuteEvent, ExecuteRequest, execute_event::Event};

/// Events a call may get ahead of its reader before `report` waits.
pub(crate) const EVENT_BUFFER: usize = 16;

/// Runs `request` on `core`: what the tool reports into `events` as it
/// comes, then the result. When the caller goes away (the stream is
/// dropped) the call is dropped, which cancels it as a dropped `Execute` does.
pub(crate) async fn run(
    core: Arc<Core>,
    request: ExecuteRequest,
    accepted: Accepted,
    events: mpsc::Sender<ExecuteEvent>,
) {
    let progress = ProgressHandle::streamed(events.clone());
    let result = tokio::select! {
        result = core.serve(request, accepted, progress) => result,
        () = events.closed() => return,
    };
    let _ = events
        .send(ExecuteEvent {
            event: Some(Event::Result(result)),
        })
        .await;
}

/// The response of one `ExecuteStream`: the events as they come, ending at
/// the result (a late report of a tool being cancelled never follows it).
pub(crate) struct Events {
    received: mpsc::Receiver<ExecuteEvent>,
    done: bool,
}

impl Events {
    pub(crate) fn new(received: mpsc::Receiver<ExecuteEvent>) -> Self {
        Events {
            received,
            done: false,
        }
    }
}

impl Stream for Events {
    type Item = Result<ExecuteEvent, Status>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if self.done {
            return Poll::Ready(None);
        }
        let event = std::task::ready!(self.received.poll_recv(cx));
        if let Some(ExecuteEvent {
            event: Some(Event::Result(_)),
        }) = &event
        {
            self.done = true;
            // Whatever the tool still reports has nowhere to go.
            self.received.close();
        }
        Poll::Ready(event.map(Ok))
    }
}
