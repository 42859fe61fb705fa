//! The `[approval]` settings: who may approve and how long a ticket lives, with their defaults and bounds.

use std::time::Duration;

/// Tickets kept at once (pending, decided or used but not yet purged);
/// beyond this, new requests are refused until approvers catch up.
pub const MAX_TICKETS: usize = 10_000;
/// Default lifetime of a ticket.
pub const DEFAULT_TTL: Duration = Duration::from_secs(15 * 60);
/// Default cap on one caller's open tickets (`max_open_per_caller`).
pub const DEFAULT_MAX_OPEN_PER_CALLER: usize = 100;

/// Who may approve and how long a ticket lives; from the policy's `[approval]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApprovalSettings {
    /// Holding any of these roles makes a principal an approver.
    pub approver_roles: Vec<String>,
    /// How long a ticket is valid from the moment it is requested.
    pub ttl: Duration,
    /// Open tickets (pending, or approved and unused) one caller may have.
    pub max_open_per_caller: usize,
}

impl Default for ApprovalSettings {
    fn default() -> Self {
        ApprovalSettings {
            approver_roles: vec!["approver".into()],
            ttl: DEFAULT_TTL,
            max_open_per_caller: DEFAULT_MAX_OPEN_PER_CALLER,
        }
    }
}
