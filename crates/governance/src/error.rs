//! Errors of loading a policy and of authenticating a caller, each saying how to fix it.

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

/// Why a caller could not be identified. The message is safe to return to
/// the caller: it never echoes the token.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    /// No token, and this mesh does not accept anonymous callers.
    #[error(
        "no bearer token: this mesh does not accept anonymous callers; send the request metadata \
         `authorization: Bearer <token>` with a token an operator listed under [[callers]] in the policy"
    )]
    MissingToken,
    /// A token was sent but no `[[callers]]` entry has it.
    #[error(
        "the bearer token (sha256 {digest_prefix}…) is not known to this mesh: check that the whole \
         token was sent, or ask an operator to add it under [[callers]] (token_sha256 keeps it out of the file)"
    )]
    UnknownToken {
        /// The first 12 hex digits of the token's SHA-256, to find it in logs without revealing it.
        digest_prefix: String,
    },
    /// An `authorization` header that is not `Bearer` and one token
    /// (`Bearer Bearer …`, two tokens, a token with spaces).
    #[error(
        "the authorization header must be `Bearer` followed by one token and nothing else: \
         send `authorization: Bearer <token>`"
    )]
    MalformedHeader,
    /// A JWT issued later than now, past the clock skew allowed.
    #[error(
        "the token says it was issued in the future (its `iat` is later than now, past the clock skew allowed): \
         check the clocks of the issuer and of this mesh"
    )]
    IssuedInTheFuture,
    /// A JWT whose header marks as critical an extension this mesh does not
    /// implement (RFC 7515 §4.1.11: it must then be refused).
    #[error(
        "the token's header marks extensions as critical (`crit`) that this mesh does not implement: \
         ask the identity provider for a token without them"
    )]
    CriticalExtension,
    /// A token longer than any identity provider's JWT; not parsed.
    #[error(
        "the bearer token is longer than {max} bytes, far beyond any JWT: send the token your identity provider issued"
    )]
    TokenTooLarge {
        /// The most bytes read.
        max: usize,
    },
    /// A JWT-shaped token that is not a well-formed JWT.
    #[error("the bearer token is not a well-formed JWT: {why}")]
    MalformedToken {
        /// What is missing or malformed.
        why: String,
    },
    /// A JWT from an issuer no `[[issuers]]` entry trusts.
    #[error(
        "the token's issuer {issuer:?} is not trusted by this mesh: use a token from a trusted identity provider, \
         or ask an operator to add that issuer under [[issuers]]"
    )]
    UnknownIssuer {
        /// The token's `iss`, shortened.
        issuer: String,
    },
    /// A JWT signed with an algorithm its issuer's entry (or its key) does not allow.
    #[error(
        "the token is signed with an algorithm{} this mesh does not accept from its issuer: \
         tokens must be signed with RS256, ES256 or EdDSA by the issuer's published keys",
        if algorithm.is_empty() { String::new() } else { format!(" ({algorithm})") }
    )]
    AlgorithmNotAllowed {
        /// The header's `alg`, when known.
        algorithm: String,
    },
    /// A JWT whose `kid` names no key its issuer publishes.
    #[error(
        "the token is signed with a key its issuer does not publish: get a fresh token; \
         if the issuer has just rotated its keys, retry in a minute"
    )]
    UnknownKey,
    /// The issuer's keys could not be fetched (yet, or for too long).
    #[error(
        "the keys of the token's issuer are not available to this mesh right now: retry shortly; \
         if it persists, an operator should check that the issuer's JWKS can be fetched"
    )]
    IssuerKeysUnavailable,
    /// A JWT whose signature does not verify.
    #[error(
        "the token's signature does not verify against its issuer's key: it was altered or not issued by that issuer"
    )]
    BadSignature,
    /// A JWT past its `exp`.
    #[error("the token has expired: get a fresh one from your identity provider")]
    TokenExpired,
    /// A JWT before its `nbf`.
    #[error(
        "the token is not valid yet (its `nbf` is in the future): check the clocks, or retry later"
    )]
    TokenNotYetValid,
    /// A JWT minted for another service.
    #[error(
        "the token was not issued for this mesh: its `aud` names none of the audiences this mesh accepts; \
         request a token for this mesh's audience"
    )]
    WrongAudience,
}

impl AuthError {
    /// Whether the caller may simply retry: its token could not be checked
    /// yet (the issuer's keys are being fetched), not found wanting.
    pub fn is_transient(&self) -> bool {
        matches!(self, AuthError::IssuerKeysUnavailable)
    }
}

/// Why a tool-name pattern is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PatternError {
    /// Nothing written.
    #[error("is empty: write a tool name such as \"search_kb\" or a glob such as \"get_*\"")]
    Empty,
    /// A character no tool name holds.
    #[error(
        "{text:?} has {bad:?}, which no tool name holds: use letters, digits, '_', '.', '-', \
         and the wildcards '*' (any characters) and '?' (one character)"
    )]
    BadCharacter {
        /// The pattern as written.
        text: String,
        /// The first character refused.
        bad: char,
    },
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
