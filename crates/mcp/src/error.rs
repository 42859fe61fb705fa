//! What can go wrong behind the MCP handler, and its one mapping to a
//! JSON-RPC error.

use rmcp::ErrorData;

/// Why a backend could not list or call (tool outcomes are not errors: they
/// come back inside the `InvokeResponse`).
#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    /// The caller could not be identified (HTTP answers 401).
    #[error("{0}")]
    Unauthenticated(String),
    /// The caller's token cannot be checked yet (its issuer's keys are
    /// being fetched): an outage to retry, not a refusal (HTTP answers 503
    /// with `Retry-After`, so an OAuth client does not sign in again).
    #[error("{0}")]
    CannotCheckYet(String),
    /// The dispatcher would not take the request (overloaded, expired pin…).
    #[error("{0}")]
    Refused(String),
    /// Stdin ended before an MCP client sent `initialize` (`toolmesh mcp`
    /// run by hand, or with its input closed).
    #[error(
        "stdin closed before an MCP client sent `initialize`: `toolmesh mcp` speaks MCP on stdin and stdout; \
         start it from an MCP client's configuration (command `toolmesh`, args `--server ADDR mcp`)"
    )]
    StdinClosed,
    /// The dispatcher could not be reached or answered garbage.
    #[error("toolmesh dispatcher: {0}")]
    Transport(String),
}

impl From<BackendError> for ErrorData {
    fn from(error: BackendError) -> ErrorData {
        let message = error.to_string();
        match error {
            BackendError::Unauthenticated(_)
            | BackendError::CannotCheckYet(_)
            | BackendError::Refused(_) => ErrorData::invalid_request(message, None),
            BackendError::Transport(_) | BackendError::StdinClosed => {
                // The server's own trouble (the client's mistakes it only answers).
                tracing::warn!(error = %message, "MCP request failed");
                ErrorData::internal_error(message, None)
            }
        }
    }
}

impl From<toolmesh_dispatcher::Refusal> for BackendError {
    fn from(refusal: toolmesh_dispatcher::Refusal) -> BackendError {
        match refusal {
            toolmesh_dispatcher::Refusal::Unauthenticated(e) => e.into(),
            other => BackendError::Refused(other.to_string()),
        }
    }
}

impl From<toolmesh_identity::AuthError> for BackendError {
    fn from(error: toolmesh_identity::AuthError) -> BackendError {
        if error.is_transient() {
            BackendError::CannotCheckYet(error.to_string())
        } else {
            BackendError::Unauthenticated(error.to_string())
        }
    }
}

impl From<tonic::Status> for BackendError {
    fn from(status: tonic::Status) -> BackendError {
        let message = status.message().to_owned();
        match status.code() {
            tonic::Code::Unauthenticated => BackendError::Unauthenticated(message),
            tonic::Code::Unavailable | tonic::Code::Unknown | tonic::Code::Internal => {
                BackendError::Transport(format!(
                    "{message} (is the dispatcher running at the --server address?)"
                ))
            }
            code => BackendError::Refused(format!("{}: {message}", code.description())),
        }
    }
}
