//! How the door stops: every request in flight is counted until its answer has been sent, and open streams end only once those are answered.

use axum::body::{Body, Bytes, HttpBody};
use axum::extract::{Request, State};
use axum::http::Method;
use axum::middleware::Next;
use axum::response::Response;
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio_util::sync::CancellationToken;
use tokio_util::task::{TaskTracker, task_tracker::TaskTrackerToken};

/// The door's drain: the requests in flight (each `POST`, from arrival
/// until its answer's body has been sent or dropped) and the cue that
/// ends open streams (subscriptions, which would otherwise hold a drain
/// until its grace runs out). Cheap to clone; clones share both.
#[derive(Clone, Default)]
pub struct Drain {
    in_flight: TaskTracker,
    streams: CancellationToken,
}

impl Drain {
    /// Resolves once every request in flight has been answered. Call it
    /// after the listener stopped accepting: requests may still arrive on
    /// open connections, and are counted too.
    pub async fn answered(&self) {
        self.in_flight.close();
        self.in_flight.wait().await;
    }

    /// Ends the open streams (and any request still running): the last
    /// step of a drain.
    pub fn end_streams(&self) {
        self.streams.cancel();
    }

    /// What rmcp's service stops on.
    pub(crate) fn streams(&self) -> CancellationToken {
        self.streams.clone()
    }

    /// How many requests are in flight.
    pub fn in_flight(&self) -> usize {
        self.in_flight.len()
    }
}

/// Counts a `POST` (a JSON-RPC request or notification) in flight until its
/// answer's body is done; a `GET` stream is a subscription, ended by
/// [`Drain::end_streams`] instead.
pub(crate) async fn counted(State(drain): State<Drain>, request: Request, next: Next) -> Response {
    if request.method() != Method::POST {
        return next.run(request).await;
    }
    let call = drain.in_flight.token();
    next.run(request)
        .await
        .map(|body| Body::new(Answering { body, _call: call }))
}

/// An answer's body, its request counted in flight until it is dropped.
struct Answering {
    body: Body,
    _call: TaskTrackerToken,
}

impl HttpBody for Answering {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}
