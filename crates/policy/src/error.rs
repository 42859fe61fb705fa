//! Errors of loading a policy, each saying how to fix it.

use std::{fmt, path::PathBuf};

/// One thing wrong in a policy file: where, which field, and what to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// 1-based line in the file, when known.
    pub line: Option<usize>,
    /// The field, as a path such as `grants[2].tools[0]`.
    pub field: String,
    /// What is wrong and how to fix it.
    pub message: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            Some(line) => write!(f, "line {line}: {}: {}", self.field, self.message),
            None => write!(f, "{}: {}", self.field, self.message),
        }
    }
}

/// Why a policy could not be loaded. The previous policy, if any, stays in force.
#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    /// The file could not be read.
    #[error("cannot read policy file {}: {source}; check the path and its permissions", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// What the OS said.
        source: std::io::Error,
    },
    /// The text is not TOML of the expected shape (toml's message names the
    /// line, the column and the offending key or value).
    #[error("policy {origin} is not valid: {detail}")]
    Syntax {
        /// The file path, or `(inline)`.
        origin: String,
        /// The parser's message.
        detail: String,
    },
    /// The TOML parsed but some values make no sense; every problem is listed.
    #[error("policy {origin} has {} problem(s):\n{}", problems.len(), ProblemList(problems))]
    Invalid {
        /// The file path, or `(inline)`.
        origin: String,
        /// Each problem found.
        problems: Vec<Problem>,
    },
}

struct ProblemList<'a>(&'a [Problem]);

impl fmt::Display for ProblemList<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, p) in self.0.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "  {p}")?;
        }
        Ok(())
    }
}

impl PolicyError {
    /// The same error attributed to `origin` (a file path) instead of `(inline)`.
    pub(crate) fn with_origin(self, new: String) -> Self {
        match self {
            PolicyError::Syntax { detail, .. } => PolicyError::Syntax {
                origin: new,
                detail,
            },
            PolicyError::Invalid { problems, .. } => PolicyError::Invalid {
                origin: new,
                problems,
            },
            other => other,
        }
    }
}

/// A risk name in a policy file that is none of the levels.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RiskError {
    /// A tool's risk (`LOW`, `MEDIUM`, `HIGH`).
    #[error("unknown risk {0:?}: use \"LOW\", \"MEDIUM\" or \"HIGH\"")]
    Level(String),
    /// `require_for_risk`, which also takes `NONE`.
    #[error(
        "unknown risk {0:?}: use \"LOW\", \"MEDIUM\", \"HIGH\", or \"NONE\" to require approval by tool name only"
    )]
    Threshold(String),
}

/// 1-based line of byte offset `at` in `text`.
pub(crate) fn line_of(text: &str, at: usize) -> usize {
    let at = at.min(text.len());
    text.as_bytes()[..at]
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
        + 1
}
