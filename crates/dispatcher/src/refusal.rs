//! Why the dispatcher itself would not serve a request — the gRPC status
//! plane, apart from tool outcomes — and the one mapping to a `Status`.

use tonic::Status;
use toolmesh::NotHeld;
use toolmesh_governance::ApprovalError;
use toolmesh_identity::AuthError;

/// A request the dispatcher refused before (or instead of) running a call.
#[derive(Debug, thiserror::Error)]
pub enum Refusal {
    /// Over `max_in_flight`: shed.
    #[error("the dispatcher is at its limit of {limit} calls in flight; retry with backoff")]
    Overloaded {
        /// The limit.
        limit: usize,
    },
    /// A pinned snapshot this dispatcher no longer holds.
    #[error("{0}; list the tools again and pin the version it returns")]
    PinExpired(#[from] NotHeld),
    /// A ListTools `page_token` this server did not issue.
    #[error(
        "page_token {token:?} was not issued by this server ({why}); list again from the first page, without a page_token"
    )]
    BadPageToken {
        /// The token (its first 64 characters).
        token: String,
        /// What is wrong with it.
        why: String,
    },
    /// A ListTools `page_token` whose snapshot this server no longer holds.
    #[error(
        "page_token continues a listing of snapshot {version} (registry epoch {epoch}), which this server no longer holds; list again from the first page, without a page_token"
    )]
    PageGone {
        /// The snapshot the walk listed.
        version: u64,
        /// Its registry lifetime.
        epoch: String,
    },
    /// The caller could not be identified.
    #[error("{0}")]
    Unauthenticated(#[from] AuthError),
    /// A `ListTools.format` this build does not know.
    #[error(
        "format {0} is unknown; use TOOL_FORMAT_NATIVE, _OPENAI, _OPENAI_RESPONSES, _ANTHROPIC, _GEMINI or _MCP"
    )]
    UnknownFormat(i32),
    /// `explain`'s `caller_token` names no caller.
    #[error("caller_token: {0}")]
    BadCallerToken(AuthError),
    /// A tool reference that cannot be parsed.
    #[error("{0}")]
    BadReference(String),
    /// No tool matches the reference (governance requests only; a call gets
    /// a NOT_FOUND `ToolError` instead).
    #[error("{0}")]
    UnknownTool(String),
    /// The caller may not ask this (for example another caller's view).
    #[error("{0}")]
    NotAllowed(String),
    /// The caller's OAuth token lacks the scope listing tools needs.
    #[error("{}", toolmesh::MissingScopes::refusal("listing tools", .0))]
    MissingListScope(String),
    /// A SearchTools query that cannot be searched (empty, too long).
    #[error("{0}")]
    BadQuery(#[from] toolmesh_search::QueryError),
    /// A SearchTools `max_risk` this build does not know.
    #[error("max_risk {0} is unknown; use RISK_LEVEL_LOW, _MEDIUM or _HIGH (or leave it unset)")]
    UnknownRisk(i32),
    /// An approval that cannot be decided.
    #[error("{0}")]
    Approval(#[from] ApprovalError),
}

impl From<Refusal> for Status {
    fn from(refusal: Refusal) -> Status {
        let message = refusal.to_string();
        match refusal {
            Refusal::Overloaded { .. } => Status::resource_exhausted(message),
            Refusal::Approval(ApprovalError::Unavailable { .. }) => Status::unavailable(message),
            Refusal::PinExpired(_) | Refusal::PageGone { .. } | Refusal::Approval(_) => {
                Status::failed_precondition(message)
            }
            Refusal::Unauthenticated(e) if e.is_transient() => Status::unavailable(message),
            Refusal::Unauthenticated(_) => Status::unauthenticated(message),
            Refusal::UnknownFormat(_)
            | Refusal::BadCallerToken(_)
            | Refusal::BadReference(_)
            | Refusal::BadPageToken { .. }
            | Refusal::BadQuery(_)
            | Refusal::UnknownRisk(_) => Status::invalid_argument(message),
            Refusal::UnknownTool(_) => Status::not_found(message),
            Refusal::NotAllowed(_) | Refusal::MissingListScope(_) => {
                Status::permission_denied(message)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tonic::Code;

    /// Each refusal has its gRPC code, and its message says what to do.
    #[test]
    fn status_mapping_table() {
        let rows: Vec<(Refusal, Code, &str)> = vec![
            (
                Refusal::Overloaded { limit: 7 },
                Code::ResourceExhausted,
                "limit of 7",
            ),
            (
                Refusal::PinExpired(NotHeld {
                    version: 1,
                    oldest: 2,
                    newest: 3,
                }),
                Code::FailedPrecondition,
                "list the tools again",
            ),
            (
                Refusal::PageGone {
                    version: 4,
                    epoch: "e".into(),
                },
                Code::FailedPrecondition,
                "list again from the first page",
            ),
            (
                Refusal::BadPageToken {
                    token: "x".into(),
                    why: "unknown layout".into(),
                },
                Code::InvalidArgument,
                "list again from the first page",
            ),
            (
                Refusal::Unauthenticated(AuthError::MissingToken),
                Code::Unauthenticated,
                "",
            ),
            (
                Refusal::UnknownFormat(99),
                Code::InvalidArgument,
                "TOOL_FORMAT_NATIVE",
            ),
            (
                Refusal::BadQuery(toolmesh_search::QueryError::TooLong { bytes: 2000 }),
                Code::InvalidArgument,
                "at most 1024 bytes",
            ),
            (
                Refusal::UnknownRisk(9),
                Code::InvalidArgument,
                "RISK_LEVEL_LOW",
            ),
            (
                Refusal::UnknownTool("no tool named \"x\"".into()),
                Code::NotFound,
                "x",
            ),
        ];
        for (refusal, code, text) in rows {
            let status = Status::from(refusal);
            assert_eq!(status.code(), code, "{}", status.message());
            assert!(status.message().contains(text), "{}", status.message());
        }
    }
}
