//! The error vocabulary a model reads: `ToolError` constructors and facts
//! about each `ErrorCode`; and the walk down an error's causes.

use crate::pb::{ErrorCode, ToolError, ToolResult};

/// Facts about an error code that every component needs to agree on.
pub trait ErrorCodeExt {
    /// The upper-case short name, e.g. `INVALID_ARGUMENTS`.
    fn short_name(&self) -> &'static str;
    /// Whether the same call may succeed if the agent tries again later
    /// (without changing anything).
    fn retryable_by_agent(&self) -> bool;
}

impl ErrorCodeExt for ErrorCode {
    fn short_name(&self) -> &'static str {
        self.as_str_name()
            .strip_prefix("ERROR_CODE_")
            .unwrap_or("UNSPECIFIED")
    }

    fn retryable_by_agent(&self) -> bool {
        matches!(
            self,
            ErrorCode::RateLimited
                | ErrorCode::Unavailable
                | ErrorCode::DeadlineExceeded
                | ErrorCode::ExecutorFailed
        )
    }
}

/// Constructors for the error half of a tool result.
pub trait ToolErrorExt: Sized {
    /// An error with the code's default `retryable` flag.
    fn new(code: ErrorCode, message: impl Into<String>) -> Self;
    /// The same error with an explicit `retryable` flag.
    fn with_retryable(self, retryable: bool) -> Self;
    /// The same error with a retry-after hint.
    fn with_retry_after_ms(self, ms: u32) -> Self;
    /// The code as the enum (unknown numbers read as UNSPECIFIED).
    fn error_code(&self) -> ErrorCode;
    /// Wraps the error into a `ToolResult` with no output.
    fn into_result(self) -> ToolResult;
}

impl ToolErrorExt for ToolError {
    fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        ToolError {
            code: code as i32,
            message: message.into(),
            retryable: code.retryable_by_agent(),
            retry_after_ms: 0,
            approval_id: String::new(),
        }
    }

    fn with_retryable(mut self, retryable: bool) -> Self {
        self.retryable = retryable;
        self
    }

    fn with_retry_after_ms(mut self, ms: u32) -> Self {
        self.retry_after_ms = ms;
        self
    }

    fn error_code(&self) -> ErrorCode {
        ErrorCode::try_from(self.code).unwrap_or(ErrorCode::Unspecified)
    }

    fn into_result(self) -> ToolResult {
        ToolResult {
            error: Some(self),
            ..ToolResult::default()
        }
    }
}

/// `ToolResult.metadata` key the dispatcher sets on a call of a deprecated
/// tool: the tool's deprecation note (front doors show it to the caller).
pub const DEPRECATED_METADATA: &str = "toolmesh.deprecated";

/// Reading the outcome of a tool result.
pub trait ToolResultExt {
    /// The error code; UNSPECIFIED on success.
    fn error_code(&self) -> ErrorCode;
    /// The error message; empty on success.
    fn error_message(&self) -> &str;
}

impl ToolResultExt for ToolResult {
    fn error_code(&self) -> ErrorCode {
        self.error
            .as_ref()
            .map_or(ErrorCode::Unspecified, |e| e.error_code())
    }

    fn error_message(&self) -> &str {
        self.error.as_ref().map_or("", |e| e.message.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Short names drop the proto prefix so CLI output and messages stay readable.
    #[test]
    fn short_names_drop_the_prefix() {
        assert_eq!(
            ErrorCode::InvalidArguments.short_name(),
            "INVALID_ARGUMENTS"
        );
        assert_eq!(ErrorCode::Unspecified.short_name(), "UNSPECIFIED");
    }

    /// Only transient codes are marked retryable by default.
    #[test]
    fn default_retryable_flags() {
        let transient = [ErrorCode::Unavailable, ErrorCode::RateLimited];
        let permanent = [
            ErrorCode::NotFound,
            ErrorCode::InvalidArguments,
            ErrorCode::PermissionDenied,
            ErrorCode::ToolError,
            ErrorCode::Disabled,
        ];
        for code in transient {
            assert!(ToolError::new(code, "x").retryable, "{code:?}");
        }
        for code in permanent {
            assert!(!ToolError::new(code, "x").retryable, "{code:?}");
        }
        let err = ToolError::new(ErrorCode::ToolError, "busy").with_retryable(true);
        assert!(err.retryable);
        assert_eq!(
            err.into_result().error.unwrap().error_code(),
            ErrorCode::ToolError
        );
    }
}

/// An error and every cause under it, `: `-separated; a cause whose text
/// its parent already holds is said once. Where a connection or TLS says
/// what it refused is usually a cause, not the top error.
pub fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    for cause in std::iter::successors(error.source(), |cause| cause.source()) {
        let line = cause.to_string();
        if !text.contains(&line) {
            text.push_str(": ");
            text.push_str(&line);
        }
    }
    text
}

/// The first cause of type `E` under `error` (itself included).
pub fn find_cause<'e, E: std::error::Error + 'static>(
    error: &'e (dyn std::error::Error + 'static),
) -> Option<&'e E> {
    std::iter::successors(Some(error), |cause| cause.source())
        .find_map(|cause| cause.downcast_ref())
}

#[cfg(test)]
mod chain_tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("outer")]
    struct Outer(#[source] Middle);
    #[derive(Debug, thiserror::Error)]
    #[error("middle: inner")]
    struct Middle(#[source] Inner);
    #[derive(Debug, thiserror::Error)]
    #[error("inner")]
    struct Inner;

    #[test]
    fn causes_are_joined_once_and_found_by_type() {
        let error = Outer(Middle(Inner));
        assert_eq!(error_chain(&error), "outer: middle: inner");
        assert!(find_cause::<Inner>(&error).is_some());
        assert!(find_cause::<Outer>(&error).is_some());
        assert!(find_cause::<std::io::Error>(&error).is_none());
    }
}
