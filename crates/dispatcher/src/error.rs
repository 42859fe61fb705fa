//! How a call failed when the executor's own answer is not the outcome —
//! refused by a stage or given up on after its attempts — and the one
//! mapping of those reasons to the `ToolError` a model reads.

use std::time::Duration;
use toolmesh::ToolErrorExt;
use toolmesh::pb::{ErrorCode, ToolError};
use toolmesh::schema::{ArgumentsError, NotCovered, Violations};
use toolmesh::suggest::did_you_mean;

/// A call the dispatcher could not complete, before or instead of an
/// executor's own answer: the tool-outcome plane (a `ToolError` inside a
/// normal response), as opposed to [`Refusal`](crate::Refusal).
#[derive(Debug, Clone, thiserror::Error)]
pub enum CallError {
    /// No tool has that name.
    #[error("no tool named {name:?}")]
    UnknownTool {
        /// The name asked for.
        name: String,
        /// Close names that do exist.
        suggestions: Vec<String>,
    },
    /// The tool reference could not be parsed, or no version matches it.
    #[error("{0}")]
    BadReference(String),
    /// A bare name under a rollout whose stable side has no version for
    /// this caller.
    #[error("{tool} has no version to give you: {why}")]
    NoStableVersion {
        /// The tool name.
        tool: String,
        /// Why: the rollout's state and the caller's assignment.
        why: String,
    },
    /// An operator switched the tool off.
    #[error("tool {tool} is disabled by an operator: {reason}")]
    Disabled {
        /// name@version.
        tool: String,
        /// The operator's reason.
        reason: String,
    },
    /// No instance can take the call now.
    #[error("tool {tool} has no healthy executor right now")]
    NoHealthyInstance {
        /// name@version.
        tool: String,
        /// Instances registered but unhealthy, ejected or full.
        registered: usize,
        /// When the first ejected instance returns, if any is ejected.
        retry_after: Option<Duration>,
    },
    /// Arguments over the size limit.
    #[error("arguments are {size} bytes; the limit is {limit}")]
    ArgumentsTooLarge {
        /// Size sent.
        size: usize,
        /// Limit.
        limit: usize,
    },
    /// Arguments are not JSON, or repeat a key.
    #[error("{0}")]
    Arguments(#[from] ArgumentsError),
    /// Arguments do not satisfy the input schema.
    #[error("arguments do not match the input schema of {tool}: {violations}")]
    ArgumentsInvalid {
        /// name@version.
        tool: String,
        /// Every failing path.
        violations: Violations,
    },
    /// Arguments the tool accepts, but beyond what the caller's grant
    /// narrows its schema to.
    #[error("arguments go beyond what grant {grant:?} allows you for {tool}: {violations}")]
    ArgumentsNarrowed {
        /// name@version.
        tool: String,
        /// The grant that narrows the schema.
        grant: String,
        /// Every failing path, with what the grant allows.
        violations: Violations,
    },
    /// The caller's OAuth token lacks the scope calling tools needs.
    #[error("{}", toolmesh::MissingScopes::refusal("calling tools", .0))]
    MissingCallScope(String),
    /// The policy does not grant this tool to the caller. The reason is for
    /// the audit log and the operator; the caller is answered `seen_as`,
    /// as if no tool had the name, so hidden names stay hidden.
    #[error("you may not use {tool}: {reason}")]
    PermissionDenied {
        /// name@version.
        tool: String,
        /// The policy's reason.
        reason: String,
        /// What the caller is told: the [`CallError::UnknownTool`] answer.
        seen_as: Box<CallError>,
    },
    /// The call needs an approval first.
    #[error("{tool} needs an approval before it runs: {summary}")]
    ApprovalRequired {
        /// name@version.
        tool: String,
        /// The approval to ask an approver for.
        approval_id: String,
        /// What would run.
        summary: String,
    },
    /// The approval sent with the call cannot be used for it.
    #[error("{0}")]
    ApprovalUnusable(String),
    /// Over a rate limit or concurrency quota.
    #[error("{message}")]
    RateLimited {
        /// Which limit and what it allows.
        message: String,
        /// When to try again.
        retry_after: Duration,
    },
    /// A declared precondition is not met.
    #[error("{0}")]
    PreconditionFailed(String),
    /// Whether a precondition holds cannot be known now (the registry that
    /// keeps session facts did not answer).
    #[error("{0}")]
    PreconditionUnknown(String),
    /// No attempt reached an executor, or the connection broke under one.
    #[error("could not reach an executor for {tool} ({}; last: {detail})", tries(.attempts))]
    Unreachable {
        /// The tool as the caller named it.
        tool: String,
        /// Attempts made.
        attempts: u32,
        /// How the last attempt failed.
        detail: String,
    },
    /// The last attempt ran out of time.
    #[error("{tool} did not answer within its deadline ({})", tries(.attempts))]
    TimedOut {
        /// The tool as the caller named it.
        tool: String,
        /// Attempts made.
        attempts: u32,
    },
    /// The executor answered garbage or an internal error.
    #[error("the executor for {tool} failed ({detail})")]
    ExecutorBroke {
        /// The tool as the caller named it.
        tool: String,
        /// What it answered.
        detail: String,
    },
    /// The executor answered `data` that breaks the tool's own output schema.
    #[error(
        "{tool} answered data that does not match its own output schema: {violations}; the result was withheld. This is a fault of the tool, not of your arguments: try another tool or report it to the tool's owner"
    )]
    OutputInvalid {
        /// `name@version` of the tool that answered.
        tool: String,
        /// Every failing path.
        violations: String,
    },
    /// A schema of the tool that compiled when it registered did not
    /// compile when its first call needed it (not expected to happen).
    #[error(
        "the {which} schema of {tool} could not be compiled ({reason}); this is a fault of the mesh, not of your arguments: try another tool or report it to an operator"
    )]
    SchemaUnusable {
        /// name@version.
        tool: String,
        /// "input" or "output".
        which: &'static str,
        /// Why it did not compile.
        reason: toolmesh::schema::SchemaError,
    },
    /// The deadline passed before an attempt could start or finish.
    #[error("{tool} did not complete within {budget:?}")]
    DeadlineExceeded {
        /// name@version.
        tool: String,
        /// The budget the call had.
        budget: Duration,
    },
}

/// Why a stand-in may not answer for a tool (`[[fallbacks]]`).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub(crate) enum Unpaired {
    /// The stand-in may refuse arguments the tool accepts.
    #[error("{to} may refuse arguments {from} accepts: input schema, {why}")]
    Input {
        /// The tool, name@version.
        from: String,
        /// The stand-in, name@version.
        to: String,
        /// Where the input schemas differ.
        why: Box<NotCovered>,
    },
    /// The tool promises an output schema, the stand-in none.
    #[error("{from} promises an output schema and {to} declares none")]
    NoOutput {
        /// The tool, name@version.
        from: String,
        /// The stand-in, name@version.
        to: String,
    },
    /// The stand-in may answer outside the tool's output schema.
    #[error("{to} may answer outside {from}'s output schema: {why}")]
    Output {
        /// The tool, name@version.
        from: String,
        /// The stand-in, name@version.
        to: String,
        /// Where the output schemas differ.
        why: Box<NotCovered>,
    },
}

/// Why the registry did not abort a failing canary's rollout
/// ([`RolloutControl`](crate::RolloutControl)).
#[derive(Debug, thiserror::Error)]
pub enum AbortError {
    /// The registry in this process refused.
    #[error(transparent)]
    Refused(Box<dyn std::error::Error + Send + Sync>),
    /// The registry reached by gRPC answered with this status.
    #[error("{}: {}", .0.code(), .0.message())]
    Status(Box<tonic::Status>),
}

/// "1 attempt", "3 attempts".
fn tries(attempts: &u32) -> String {
    if *attempts == 1 {
        "1 attempt".to_owned()
    } else {
        format!("{attempts} attempts")
    }
}

impl CallError {
    /// The error a model reads: what was wrong and how to fix it.
    pub fn to_tool_error(&self) -> ToolError {
        match self {
            CallError::UnknownTool { name, suggestions } => {
                let names: Vec<&str> = suggestions.iter().map(String::as_str).collect();
                let hint = did_you_mean(&names)
                    .map(|s| format!("; {s}"))
                    .unwrap_or_else(|| "; list the tools to see what exists".to_owned());
                ToolError::new(ErrorCode::NotFound, format!("no tool named {name:?}{hint}"))
            }
            CallError::BadReference(message) => ToolError::new(ErrorCode::NotFound, message),
            CallError::NoStableVersion { tool, .. } => ToolError::new(
                ErrorCode::Unavailable,
                format!("{self}; call {tool}@VERSION to name a version, or ask an operator"),
            ),
            CallError::PermissionDenied { seen_as, .. } => seen_as.to_tool_error(),
            CallError::MissingCallScope(_) => {
                ToolError::new(ErrorCode::PermissionDenied, self.to_string())
            }
            CallError::ApprovalRequired { approval_id, .. } => {
                let mut error = ToolError::new(
                    ErrorCode::ApprovalRequired,
                    format!(
                        "{self}; ask an approver to run `toolmesh approve {approval_id}`, then call again with approval_id {approval_id:?} and the same arguments"
                    ),
                );
                error.approval_id = approval_id.clone();
                error
            }
            CallError::ApprovalUnusable(_) => {
                ToolError::new(ErrorCode::ApprovalRequired, self.to_string())
            }
            CallError::RateLimited { retry_after, .. } => {
                ToolError::new(ErrorCode::RateLimited, self.to_string())
                    .with_retry_after_ms(retry_after.as_millis().max(1) as u32)
            }
            CallError::PreconditionFailed(_) => {
                ToolError::new(ErrorCode::PreconditionFailed, self.to_string())
            }
            CallError::PreconditionUnknown(_) => {
                ToolError::new(ErrorCode::Unavailable, self.to_string()).with_retry_after_ms(1_000)
            }
            CallError::Disabled { .. } => ToolError::new(
                ErrorCode::Disabled,
                format!("{self}; use another tool or ask an operator"),
            ),
            CallError::NoHealthyInstance {
                tool,
                registered,
                retry_after,
            } => {
                let why = if *registered == 0 {
                    "no executor serves it at the moment".to_owned()
                } else {
                    format!("its {registered} instance(s) are unhealthy, ejected or busy")
                };
                let error = ToolError::new(
                    ErrorCode::Unavailable,
                    format!("tool {tool} is unavailable: {why}; try again later"),
                );
                match retry_after {
                    Some(after) => error.with_retry_after_ms(after.as_millis() as u32),
                    None => error,
                }
            }
            CallError::ArgumentsTooLarge { .. } => ToolError::new(
                ErrorCode::InvalidArguments,
                format!("{self}; send smaller arguments"),
            ),
            CallError::Arguments(_) => {
                ToolError::new(ErrorCode::InvalidArguments, self.to_string())
            }
            CallError::ArgumentsInvalid { .. } | CallError::ArgumentsNarrowed { .. } => {
                ToolError::new(
                    ErrorCode::InvalidArguments,
                    format!("{self}; fix these fields and call again"),
                )
            }
            CallError::DeadlineExceeded { .. } => ToolError::new(
                ErrorCode::DeadlineExceeded,
                format!("{self}; try again with a longer deadline or smaller input"),
            ),
            CallError::Unreachable { .. } => {
                ToolError::new(ErrorCode::Unavailable, format!("{self}; try again shortly"))
            }
            CallError::TimedOut { .. } => {
                ToolError::new(ErrorCode::DeadlineExceeded, self.to_string())
            }
            CallError::OutputInvalid { .. } | CallError::SchemaUnusable { .. } => {
                ToolError::new(ErrorCode::ExecutorFailed, self.to_string())
            }
            CallError::ExecutorBroke { .. } => ToolError::new(
                ErrorCode::ExecutorFailed,
                format!("{self}; the call may or may not have taken effect"),
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use toolmesh::schema::Violation;

    /// Each refusal maps to its code, and its message says how to fix it.
    #[test]
    fn error_mapping_table() {
        let mut rows: Vec<(CallError, ErrorCode, &str)> = vec![
            (
                CallError::UnknownTool {
                    name: "acc_ech".into(),
                    suggestions: vec!["acc_echo".into()],
                },
                ErrorCode::NotFound,
                "did you mean \"acc_echo\"?",
            ),
            (
                CallError::UnknownTool {
                    name: "zz".into(),
                    suggestions: vec![],
                },
                ErrorCode::NotFound,
                "list the tools",
            ),
            (
                CallError::Disabled {
                    tool: "t@1.0.0".into(),
                    reason: "incident 42".into(),
                },
                ErrorCode::Disabled,
                "incident 42",
            ),
            (
                CallError::NoHealthyInstance {
                    tool: "t@1.0.0".into(),
                    registered: 0,
                    retry_after: None,
                },
                ErrorCode::Unavailable,
                "no executor serves it",
            ),
            (
                CallError::Arguments(ArgumentsError::NotJson("EOF at line 1 column 1".into())),
                ErrorCode::InvalidArguments,
                "send one JSON object",
            ),
            (
                CallError::ArgumentsInvalid {
                    tool: "t@1.0.0".into(),
                    violations: Violations(vec![Violation {
                        path: "/priority".into(),
                        message: "bad".into(),
                    }]),
                },
                ErrorCode::InvalidArguments,
                "at /priority: bad",
            ),
            (
                CallError::DeadlineExceeded {
                    tool: "t".into(),
                    budget: Duration::from_millis(5),
                },
                ErrorCode::DeadlineExceeded,
                "longer deadline",
            ),
        ];
        rows.push((
            CallError::Unreachable {
                tool: "search_kb".into(),
                attempts: 3,
                detail: "refused".into(),
            },
            ErrorCode::Unavailable,
            "(3 attempts; last: refused); try again shortly",
        ));
        rows.push((
            CallError::TimedOut {
                tool: "t".into(),
                attempts: 1,
            },
            ErrorCode::DeadlineExceeded,
            "within its deadline (1 attempt)",
        ));
        rows.push((
            CallError::ExecutorBroke {
                tool: "t".into(),
                detail: "internal".into(),
            },
            ErrorCode::ExecutorFailed,
            "may or may not have taken effect",
        ));
        for (error, code, text) in rows {
            let e = error.to_tool_error();
            assert_eq!(e.error_code(), code, "{error}");
            assert!(e.message.contains(text), "{}", e.message);
        }
        let unavailable = CallError::NoHealthyInstance {
            tool: "t".into(),
            registered: 2,
            retry_after: Some(Duration::from_secs(3)),
        }
        .to_tool_error();
        assert!(unavailable.retryable);
        assert_eq!(unavailable.retry_after_ms, 3000);
    }
}
