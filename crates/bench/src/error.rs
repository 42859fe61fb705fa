//! Why a benchmark run could not finish.

use std::time::Duration;

/// A benchmark run that could not finish. Misses against targets are not
/// errors: they are figures in the [`Report`](crate::Report).
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// A process could not be started, or went away before it was ready.
    #[error(transparent)]
    Proc(#[from] toolmesh_procs::ProcError),
    /// Something did not happen in time.
    #[error("timed out after {timeout:?} waiting for {what}")]
    Timeout {
        /// What was awaited.
        what: String,
        /// How long the bench waited.
        timeout: Duration,
    },
    /// A file or socket operation failed.
    #[error("{context}: {source}")]
    Io {
        /// What the bench was doing.
        context: String,
        /// What the OS said.
        #[source]
        source: std::io::Error,
    },
    /// A gRPC call failed.
    #[error("{what}: {status}")]
    Rpc {
        /// Which call.
        what: String,
        /// The status it answered.
        #[source]
        status: Box<tonic::Status>,
    },
    /// A gRPC server could not be served.
    #[error("{what}: {source}")]
    Transport {
        /// Which server.
        what: String,
        /// What tonic said.
        #[source]
        source: tonic::transport::Error,
    },
    /// An address printed by a process could not be used.
    #[error(transparent)]
    BadAddress(#[from] toolmesh_transport::BadAddress),
    /// A step answered, but not as it must for the bench to go on (for
    /// example the echo tool answered an error, or a registration was
    /// refused).
    #[error("{what}: {detail}")]
    Failed {
        /// The step.
        what: String,
        /// What went wrong.
        detail: String,
    },
    /// A call the bench needs to succeed failed.
    #[error("{what}: {source}")]
    Call {
        /// Which call.
        what: String,
        /// How it failed.
        #[source]
        source: Box<CallFailed>,
    },
    /// The JSON report could not be written.
    #[error("cannot encode the report as JSON: {0}")]
    Json(#[from] serde_json::Error),
}

impl BenchError {
    /// An I/O error with what the bench was doing.
    pub(crate) fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        BenchError::Io {
            context: context.into(),
            source,
        }
    }

    /// A failed gRPC call.
    pub(crate) fn rpc(what: impl Into<String>, status: tonic::Status) -> Self {
        BenchError::Rpc {
            what: what.into(),
            status: Box::new(status),
        }
    }

    /// A call the bench needs that failed.
    pub(crate) fn call(what: impl Into<String>, failed: CallFailed) -> Self {
        BenchError::Call {
            what: what.into(),
            source: Box::new(failed),
        }
    }

    /// A step that answered wrongly.
    pub(crate) fn failed(what: impl Into<String>, detail: impl Into<String>) -> Self {
        BenchError::Failed {
            what: what.into(),
            detail: detail.into(),
        }
    }

    /// Something that did not happen within `timeout`.
    pub(crate) fn timeout(what: impl Into<String>, timeout: Duration) -> Self {
        BenchError::Timeout {
            what: what.into(),
            timeout,
        }
    }
}

/// How one measured call failed (counted as an error in the figures, or
/// fatal for the first call that checks a target works).
#[derive(Debug, thiserror::Error)]
pub enum CallFailed {
    /// The HTTP request could not be built.
    #[error(transparent)]
    Request(#[from] hyper::http::Error),
    /// No answer within the bench's deadline.
    #[error("timed out")]
    TimedOut,
    /// The HTTP exchange failed.
    #[error(transparent)]
    Http(#[from] hyper_util::client::legacy::Error),
    /// The answer's body could not be read.
    #[error(transparent)]
    Body(#[from] hyper::Error),
    /// The answer is not JSON.
    #[error("HTTP {status}: {source}")]
    NotJson {
        /// The HTTP status.
        status: hyper::StatusCode,
        /// What the JSON parser said.
        source: serde_json::Error,
    },
    /// A JSON-RPC error answer.
    #[error("JSON-RPC error {0}")]
    JsonRpc(serde_json::Value),
    /// An HTTP error status, or a tool result marked as an error.
    #[error("HTTP {status}: {answer}")]
    Answer {
        /// The HTTP status.
        status: hyper::StatusCode,
        /// The whole answer.
        answer: serde_json::Value,
    },
    /// A dispatcher in this process refused the call.
    #[error(transparent)]
    Refused(#[from] toolmesh_dispatcher::Refusal),
    /// The RPC failed.
    #[error("{code:?}: {message}")]
    Status {
        /// The gRPC code.
        code: tonic::Code,
        /// Its message.
        message: String,
    },
    /// The tool answered an error.
    #[error("tool error {code}: {message}")]
    Tool {
        /// The toolmesh error code.
        code: i32,
        /// Its message.
        message: String,
    },
}
