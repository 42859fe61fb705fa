//! `CallCx`: what a tool knows about the call it is running (ids, caller, deadline, cancellation, progress).

use crate::ProgressHandle;
use std::{future::Future, sync::Arc};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use toolmesh::pb::{CallContext, ExecuteRequest};

/// The context of one call, handed to [`Tool::call`](crate::Tool::call).
///
/// Cheap to clone; every clone sees the same cancellation.
#[derive(Debug, Clone)]
pub struct CallCx {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    call_id: String,
    attempt: u32,
    tool: String,
    executor_id: String,
    context: CallContext,
    deadline: Option<Instant>,
    token: CancellationToken,
    progress: ProgressHandle,
}

impl CallCx {
    /// The context of `request` (its arguments already read) running on
    /// `executor_id` until `deadline`, cancelled by `token`, reporting
    /// through `progress`.
    pub(crate) fn new(
        request: ExecuteRequest,
        executor_id: String,
        deadline: Option<Instant>,
        token: CancellationToken,
        progress: ProgressHandle,
    ) -> Self {
        CallCx {
            inner: Arc::new(Inner {
                call_id: request.call_id,
                attempt: request.attempt.max(1),
                tool: request.tool,
                executor_id,
                context: request.context.unwrap_or_default(),
                deadline,
                token,
                progress,
            }),
        }
    }

    /// The call's id: the same for every attempt of one call, so it is the
    /// idempotency key for tools with side effects. The dispatcher scopes it
    /// to the authenticated caller: two callers reusing one id never share it.
    pub fn call_id(&self) -> &str {
        &self.inner.call_id
    }

    /// 1 for the first attempt, counting up on retries.
    pub fn attempt(&self) -> u32 {
        self.inner.attempt
    }

    /// The name of the tool being called.
    pub fn tool(&self) -> &str {
        &self.inner.tool
    }

    /// The id of the executor running the call.
    pub fn executor_id(&self) -> &str {
        &self.inner.executor_id
    }

    /// Who is calling and on whose behalf. Through a dispatcher, `caller`,
    /// `tenant` and `caller_roles` are the principal it authenticated
    /// (verified); `claimed_caller` / `claimed_tenant` hold what the client
    /// asserted itself and are never verified; `session_id`, `trace_id` and
    /// `metadata` are the client's own. Verified fields are only as strong as
    /// the path to this executor: accept calls from dispatchers only.
    pub fn context(&self) -> &CallContext {
        &self.inner.context
    }

    /// The verified caller: the principal the dispatcher authenticated.
    pub fn caller(&self) -> &str {
        &self.inner.context.caller
    }

    /// The verified tenant the caller acts for.
    pub fn tenant(&self) -> &str {
        &self.inner.context.tenant
    }

    /// When the call's budget runs out: the smaller of the caller's deadline
    /// and the tool's timeout.
    pub fn deadline(&self) -> Option<Instant> {
        self.inner.deadline
    }

    /// Resolves once the call is cancelled: the caller went away, the
    /// deadline passed, or the executor is shutting down and its grace period
    /// ran out. Select on it in long-running work.
    pub fn cancelled(&self) -> impl Future<Output = ()> + Send + 'static {
        self.inner.token.clone().cancelled_owned()
    }

    /// Whether the call has been cancelled.
    pub fn is_cancelled(&self) -> bool {
        self.inner.token.is_cancelled()
    }

    /// Where the tool reports progress and partial output while it runs.
    /// Reports reach the caller when the tool declares
    /// [`streams_progress`](crate::ToolInfo::streams_progress) and the call
    /// came by `ExecuteStream`; otherwise they are dropped, so a tool reports
    /// the same way however it is called.
    pub fn progress(&self) -> &ProgressHandle {
        &self.inner.progress
    }
}
