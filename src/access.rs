//! Why a caller may not do what it asked of a registry: one answer for the
//! policy that decides it and the registry that enforces it.

/// A refused caller; the message says what to change.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AccessError {
    /// The caller could not be identified.
    #[error("{0}")]
    Unauthenticated(String),
    /// The caller is known but may not do this.
    #[error("{0}")]
    Forbidden(String),
    /// The caller cannot be identified yet (its issuer's keys are being
    /// fetched): retry.
    #[error("{0}")]
    Unavailable(String),
}
