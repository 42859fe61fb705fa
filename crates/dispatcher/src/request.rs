//! One call as a front door hands it to [`Dispatcher::call`]: the request,
//! who makes it, their deadline and trace, and how it is answered.

use crate::call::Relay;
use crate::{Dispatcher, Refusal};
use std::future::Future;
use std::time::Duration;
use tokio::sync::mpsc;
use toolmesh::Principal;
use toolmesh::pb::{InvokeEvent, InvokeRequest, InvokeResponse, Progress};
use toolmesh_telemetry::trace::Context as TraceContext;

/// One call for [`Dispatcher::call`]: its [`InvokeRequest`], who makes it,
/// and how it is answered — once it ends ([`CallRequest::new`]) or by a
/// stream of events ([`CallRequest::streamed`]); unless told otherwise with
/// no deadline of the caller's, in a trace of its own.
///
/// ```ignore
/// let response = dispatcher
///     .call(CallRequest::new(&who, request).timeout(deadline).trace(parent))
///     .await?;
/// let events = dispatcher.call(CallRequest::streamed(who, request)).await?;
/// ```
#[must_use = "a call request does nothing until passed to Dispatcher::call"]
pub struct CallRequest<R> {
    pub(crate) request: InvokeRequest,
    /// The caller's deadline, if it sent one.
    pub(crate) timeout: Option<Duration>,
    /// The caller's trace, which the call's span continues.
    pub(crate) parent: TraceContext,
    /// Who makes the call, and where what the tool reports goes.
    pub(crate) reply: R,
}

/// A call answered once it ends ([`InvokeResponse`]), run in the caller's
/// task (no stream, no task per call): dropping the future cancels it.
#[derive(Debug)]
pub struct Unary<'w> {
    pub(crate) who: &'w Principal,
    /// Where the tool's progress goes, if the caller shows it.
    pub(crate) relay: Relay,
}

/// A call answered by a stream of events: what the tool reports while it
/// runs (progress and output chunks, for a tool that streams them), then
/// the response ([`InvokeEvent`] `done`), last. The call runs the same
/// stages in a task of its own (so it holds its caller); an attempt that
/// has streamed anything is never retried. Dropping the receiver cancels
/// the call. Must be called inside a tokio runtime.
#[derive(Debug)]
pub struct Streamed {
    pub(crate) who: Principal,
}

impl<'w> CallRequest<Unary<'w>> {
    /// A call of `request` by `who`, answered once it ends.
    pub fn new(who: &'w Principal, request: InvokeRequest) -> Self {
        let relay = Relay::default();
        CallRequest::answered_by(request, Unary { who, relay })
    }

    /// For a caller that shows progress but not output chunks (the MCP
    /// door): each progress report of a tool that streams it goes to
    /// `progress` as it comes, before the response; a tool that does not is
    /// called by plain `Execute`.
    pub fn progress_to(self, progress: mpsc::Sender<Progress>) -> Self {
        let relay = Relay::progress_to(progress);
        CallRequest {
            reply: Unary {
                relay,
                ..self.reply
            },
            ..self
        }
    }
}

impl CallRequest<Streamed> {
    /// A call of `request` by `who`, answered by a stream of events.
    pub fn streamed(who: Principal, request: InvokeRequest) -> Self {
        CallRequest::answered_by(request, Streamed { who })
    }
}

impl<R> CallRequest<R> {
    fn answered_by(request: InvokeRequest, reply: R) -> Self {
        CallRequest {
            request,
            timeout: None,
            parent: TraceContext::new(),
            reply,
        }
    }

    /// The caller's deadline (`None`: it sent none).
    pub fn timeout(self, timeout: impl Into<Option<Duration>>) -> Self {
        CallRequest {
            timeout: timeout.into(),
            ..self
        }
    }

    /// The caller's trace (from [`toolmesh_telemetry::trace::extract`]),
    /// which the call's span continues.
    pub fn trace(self, parent: TraceContext) -> Self {
        CallRequest { parent, ..self }
    }
}

/// How a call is answered: [`Unary`] or [`Streamed`].
pub trait Reply: Sized + Send {
    /// What the caller gets: the response, or the receiver of the events.
    type Answer;

    /// Answers `call` on `dispatcher` (by [`Dispatcher::call`] only: the
    /// token cannot be made outside this crate).
    fn answer<'a>(
        dispatcher: &'a Dispatcher,
        call: CallRequest<Self>,
        token: sealed::Token,
    ) -> impl Future<Output = Result<Self::Answer, Refusal>> + Send + 'a
    where
        Self: 'a;
}

pub(crate) mod sealed {
    /// Only this crate can make one, so only [`Dispatcher::call`](crate::Dispatcher::call)
    /// answers a call.
    #[derive(Debug)]
    pub struct Token(pub(crate) ());
}

impl Reply for Unary<'_> {
    type Answer = InvokeResponse;

    fn answer<'a>(
        dispatcher: &'a Dispatcher,
        call: CallRequest<Self>,
        _: sealed::Token,
    ) -> impl Future<Output = Result<InvokeResponse, Refusal>> + Send + 'a
    where
        Self: 'a,
    {
        // The future of `answer_unary` itself: a wrapping `async fn` would
        // keep a second copy of the request in every call's state.
        dispatcher.answer_unary(call)
    }
}

impl Reply for Streamed {
    type Answer = mpsc::Receiver<InvokeEvent>;

    fn answer<'a>(
        dispatcher: &'a Dispatcher,
        call: CallRequest<Self>,
        _: sealed::Token,
    ) -> impl Future<Output = Result<mpsc::Receiver<InvokeEvent>, Refusal>> + Send + 'a
    where
        Self: 'a,
    {
        // Taken on (or refused) at once; the call runs in a task of its own.
        std::future::ready(dispatcher.answer_streamed(call))
    }
}
