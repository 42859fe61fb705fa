//! `ProgressHandle`: how a running tool reports progress and partial output to a caller that streams the call.

use tokio::sync::mpsc;
use toolmesh::pb::{ExecuteEvent, OutputChunk, Progress, execute_event::Event};

/// A running call's line to its caller, from [`CallCx::progress`](crate::CallCx::progress).
///
/// Cheap to clone (a clone can move into a task the tool spawns). When the
/// call is not streamed — `Execute`, or [`Executor::call`](crate::Executor::call)
/// in process — every report is dropped at once.
///
/// ```
/// # use toolmesh_executor::CallCx;
/// # async fn work(cx: CallCx) {
/// let progress = cx.progress();
/// for step in 1..=3 {
///     // … one step of the work …
///     progress.report(step as f64, Some(3.0), format!("step {step} of 3")).await;
/// }
/// # }
/// ```
#[derive(Debug, Clone, Default)]
pub struct ProgressHandle {
    /// The call's event stream, when it is streamed.
    events: Option<mpsc::Sender<ExecuteEvent>>,
}

impl ProgressHandle {
    /// A handle whose reports go to `events`, the call's `ExecuteStream`.
    pub(crate) fn streamed(events: mpsc::Sender<ExecuteEvent>) -> Self {
        ProgressHandle {
            events: Some(events),
        }
    }

    /// Whether reports reach a caller (the call came by `ExecuteStream` and
    /// the caller is still there).
    pub fn is_streamed(&self) -> bool {
        self.events.as_ref().is_some_and(|e| !e.is_closed())
    }

    /// Reports how far the call has come: `progress` is the work done so
    /// far and must grow with every report (MCP clients rely on it), `total`
    /// the work in all when known, `message` what the tool is doing now.
    ///
    /// Waits while the caller is slow to read, so a tool never runs ahead of
    /// what it reported by more than a few events; returns at once when the
    /// call is not streamed or the caller has gone.
    pub async fn report(&self, progress: f64, total: Option<f64>, message: impl Into<String>) {
        self.send(Event::Progress(Progress {
            progress,
            total: total.filter(|t| *t > 0.0).unwrap_or_default(),
            message: message.into(),
        }))
        .await;
    }

    /// Sends a piece of the output as it is produced, for display. The
    /// tool's final [`ToolOutput`](crate::ToolOutput) still carries the
    /// whole output: chunks are a preview, not a part of the result.
    pub async fn partial(&self, text: impl Into<String>) {
        self.send(Event::Chunk(OutputChunk { text: text.into() }))
            .await;
    }

    async fn send(&self, event: Event) {
        if let Some(events) = &self.events {
            // A caller that went away drops the report; the call is being
            // cancelled anyway.
            let _ = events.send(ExecuteEvent { event: Some(event) }).await;
        }
    }
}
