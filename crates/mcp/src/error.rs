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
    /// The dispatcher would not take the request (overloaded, expired pin…).
    #[error("{0}")]
    Refused(String),
    /// The dispatcher could not be reached or answered garbage.
    #[error("toolmesh dispatcher: {0}")]
    Transport(String),
}

impl From<BackendError> for ErrorData {
    fn from(error: BackendError) -> ErrorData {
        let message = error.to_string();
        match error {
            BackendError::Unauthenticated(_) | BackendError::Refused(_) => {
                ErrorData::invalid_request(message, None)
            }
            BackendError::Transport(_) => {
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
            toolmesh_dispatcher::Refusal::Unauthenticated(e) => {
                BackendError::Unauthenticated(e.to_string())
            }
            other => BackendError::Refused(other.to_string()),
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
