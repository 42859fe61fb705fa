//! The call service every layer wraps: a call as it came in ([`Call`]),
//! what sending it gives ([`Answered`]), what the whole call gives
//! ([`Answer`]), and the [`Service`] trait each layer implements.

use super::admit::Admitted;
use super::mark::Mark;
use super::reached::{Reached, Refused};
use super::streamed::Relay;
use crate::error::CallError;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;
use toolmesh::Principal;
use toolmesh::pb::{ErrorCode, InvokeRequest, ToolResult};
use toolmesh::{Snapshot, ToolErrorExt, ToolResultExt};

/// One call as it came in: read by every layer, written by none.
#[derive(Clone, Copy)]
pub(crate) struct Call<'a> {
    /// The snapshot the call runs against (pinned or newest).
    pub(crate) snapshot: &'a Snapshot,
    pub(crate) who: &'a Principal,
    /// Shared: an attempt sends its arguments from here.
    pub(crate) request: &'a Arc<InvokeRequest>,
    /// The caller's deadline, if it sent one.
    pub(crate) caller_timeout: Option<Duration>,
    /// Where what a streaming tool reports goes.
    pub(crate) relay: &'a Relay,
    pub(crate) started: Instant,
    /// The caller's call id, or a fresh one.
    pub(crate) id: &'a str,
    /// The call's `execute_tool` span (disabled unless traces are exported).
    pub(crate) span: &'a tracing::Span,
    /// Attempts made for this call already: a stand-in continues the count.
    pub(crate) attempts_made: u32,
}

/// How a call ended.
pub(crate) enum Outcome {
    /// The executor answered; its result may carry the tool's own error.
    Answered(ToolResult),
    /// A stage refused the call, or its attempts failed.
    Failed(CallError),
}

impl Outcome {
    /// The result the caller reads: the executor's, or the failure's
    /// `ToolError`.
    pub(crate) fn into_result(self) -> ToolResult {
        match self {
            Outcome::Answered(result) => result,
            Outcome::Failed(error) => error.to_tool_error().into_result(),
        }
    }

    /// The error code the caller reads (UNSPECIFIED for a success).
    pub(crate) fn code(&self) -> ErrorCode {
        match self {
            Outcome::Answered(result) => result.error_code(),
            Outcome::Failed(error) => error.to_tool_error().into_result().error_code(),
        }
    }
}

/// What the attempts did: how many were sent, and to which executor last.
#[derive(Debug, Default)]
pub(crate) struct Sent {
    pub(crate) attempts: u32,
    pub(crate) executor_id: String,
}

impl Sent {
    /// These attempts followed by `later`'s (a stand-in's, after the tool's).
    pub(crate) fn then(self, later: Sent) -> Sent {
        if later.attempts == 0 {
            return self;
        }
        Sent {
            attempts: self.attempts + later.attempts,
            executor_id: later.executor_id,
        }
    }
}

/// What sending an admitted call gives: its outcome, the attempts made,
/// and what the layers it went through say of it.
pub(crate) struct Answered {
    pub(crate) outcome: Outcome,
    pub(crate) sent: Sent,
    pub(crate) marks: Vec<Mark>,
}

impl Answered {
    pub(crate) fn new(outcome: Outcome, sent: Sent) -> Self {
        Answered {
            outcome,
            sent,
            marks: Vec::new(),
        }
    }
}

/// What a whole call gives: how it was answered, and how far through the
/// stages it got.
pub(crate) struct Answer {
    pub(crate) answered: Answered,
    pub(crate) reached: Reached,
}

impl From<Refused> for Answer {
    fn from(Refused { error, reached }: Refused) -> Self {
        Answer {
            answered: Answered::new(Outcome::Failed(error), Sent::default()),
            reached,
        }
    }
}

/// The call service and every layer around it. The core runs the checks
/// and the attempts; a layer wraps another service, changes the step it is
/// about and hands the others to the one within. Every step's future is
/// `Send`, so a call can run on any worker of the runtime.
pub(crate) trait Service: Sync {
    /// Every check before anything is sent.
    fn check(&self, call: &Call<'_>) -> impl Future<Output = Result<Admitted, Refused>> + Send;

    /// Sends an admitted call.
    fn send(&self, call: &Call<'_>, admitted: &Admitted) -> impl Future<Output = Answered> + Send;

    /// The whole call: the checks, then the sending of what they admit.
    fn call(&self, call: &Call<'_>) -> impl Future<Output = Answer> + Send {
        async move {
            match self.check(call).await {
                Err(refused) => refused.into(),
                Ok(admitted) => {
                    let answered = self.send(call, &admitted).await;
                    Answer {
                        answered,
                        reached: admitted.sent(),
                    }
                }
            }
        }
    }
}
