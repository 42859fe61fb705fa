//! One call as a front door hands it to [`Dispatcher::call`]: the request,
//! who makes it, their deadline and trace, and how it is answered.

use crate::call::Relay;
use crate::{Dispatcher, Refusal};
use std::borrow::Cow;
use std::future::Future;
use std::time::Duration;
use tokio::sync::mpsc;
use toolmesh::pb::{InvokeEvent, InvokeRequest, InvokeResponse, Progress};
use toolmesh_governance::Principal;
use toolmesh_telemetry::trace::Context as TraceContext;

/// One call for [`Dispatcher::call`], built from its [`InvokeRequest`]:
/// unless told otherwise the anonymous caller's, with no deadline of the
/// caller's, in a trace of its own, and answered once it ends ([`Unary`]).
///
/// ```ignore
/// let response = dispatcher
///     .call(CallRequest::new(request).caller(&who).timeout(deadline).trace(parent))
///     .await?;
/// let events = dispatcher.call(CallRequest::new(request).streamed()).await?;
/// ```
#[must_use = "a call request does nothing until passed to Dispatcher::call"]
pub struct CallRequest<'w, R = Unary> {
    pub(crate) request: InvokeRequest,
    /// None: the anonymous caller, where the policy admits one.
    pub(crate) caller: Option<Cow<'w, Principal>>,
    /// The caller's deadline, if it sent one.
    pub(crate) timeout: Option<Duration>,
    /// The caller's trace, which the call's span continues.
    pub(crate) parent: TraceContext,
    pub(crate) reply: R,
}

/// A call answered once it ends ([`InvokeResponse`]), run in the caller's
/// task (no stream, no task per call): dropping the future cancels it.
#[derive(Debug, Default)]
pub struct Unary {
    /// Where the tool's progress goes, if the caller shows it.
    pub(crate) relay: Relay,
}

/// A call answered by a stream of events: what the tool reports while it
/// runs (progress and output chunks, for a tool that streams them), then
/// the response ([`InvokeEvent`] `done`), last. The call runs the same
/// stages; an attempt that has streamed anything is never retried.
/// Dropping the receiver cancels the call. Must be called inside a tokio
/// runtime.
#[derive(Debug)]
pub struct Streamed;

impl CallRequest<'static> {
    /// A call of `request` by the anonymous caller, with no deadline of the
    /// caller's, in a trace of its own, answered once it ends.
    pub fn new(request: InvokeRequest) -> Self {
        CallRequest {
            request,
            caller: None,
            timeout: None,
            parent: TraceContext::new(),
            reply: Unary::default(),
        }
    }
}

impl<'w, R> CallRequest<'w, R> {
    /// The call made by `who`.
    pub fn caller<'c>(self, who: &'c Principal) -> CallRequest<'c, R> {
        self.with_caller(Cow::Borrowed(who))
    }

    /// The call made by `who`, held by the call (a streamed call, which
    /// outlives the front door's task, needs no copy of it).
    pub fn owned_caller(self, who: Principal) -> CallRequest<'w, R> {
        self.with_caller(Cow::Owned(who))
    }

    fn with_caller<'c>(self, who: Cow<'c, Principal>) -> CallRequest<'c, R> {
        CallRequest {
            request: self.request,
            caller: Some(who),
            timeout: self.timeout,
            parent: self.parent,
            reply: self.reply,
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

impl<'w> CallRequest<'w, Unary> {
    /// For a caller that shows progress but not output chunks (the MCP
    /// door): each progress report of a tool that streams it goes to
    /// `progress` as it comes, before the response; a tool that does not is
    /// called by plain `Execute`.
    pub fn progress_to(self, progress: mpsc::Sender<Progress>) -> Self {
        let relay = Relay::progress_to(progress);
        CallRequest {
            reply: Unary { relay },
            ..self
        }
    }

    /// The call answered by a stream of events ([`Streamed`]) instead;
    /// its events replace any [`progress_to`](Self::progress_to).
    pub fn streamed(self) -> CallRequest<'w, Streamed> {
        CallRequest {
            request: self.request,
            caller: self.caller,
            timeout: self.timeout,
            parent: self.parent,
            reply: Streamed,
        }
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
        call: CallRequest<'a, Self>,
        token: sealed::Token,
    ) -> impl Future<Output = Result<Self::Answer, Refusal>> + Send + 'a;
}

pub(crate) mod sealed {
    /// Only this crate can make one, so only [`Dispatcher::call`](crate::Dispatcher::call)
    /// answers a call.
    #[derive(Debug)]
    pub struct Token(pub(crate) ());
}

impl Reply for Unary {
    type Answer = InvokeResponse;

    fn answer<'a>(
        dispatcher: &'a Dispatcher,
        call: CallRequest<'a, Self>,
        _: sealed::Token,
    ) -> impl Future<Output = Result<InvokeResponse, Refusal>> + Send + 'a {
        // The future of `answer_unary` itself: a wrapping `async fn` would
        // keep a second copy of the request in every call's state.
        dispatcher.answer_unary(call)
    }
}

impl Reply for Streamed {
    type Answer = mpsc::Receiver<InvokeEvent>;

    fn answer<'a>(
        dispatcher: &'a Dispatcher,
        call: CallRequest<'a, Self>,
        _: sealed::Token,
    ) -> impl Future<Output = Result<mpsc::Receiver<InvokeEvent>, Refusal>> + Send + 'a {
        // Taken on (or refused) at once; the call runs in a task of its own.
        std::future::ready(dispatcher.answer_streamed(call))
    }
}
