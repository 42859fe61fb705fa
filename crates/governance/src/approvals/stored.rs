//! Approval tickets in a form kept outside the process (the registry's
//! store, shared by every dispatcher), and a book rebuilt from them: the
//! rules stay those of [`Approvals`]; only where the tickets live changes.

use super::{ApprovalSettings, ApprovalState, ApprovalTicket, Approvals, id_number};
use crate::Principal;
use serde::{Deserialize, Serialize};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::time::Instant;

/// A ticket with wall-clock times (an `Instant` means nothing to another process).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredTicket {
    /// See [`ApprovalTicket::id`].
    pub id: String,
    /// The tool.
    pub tool: String,
    /// Its exact version.
    pub version: String,
    /// The arguments' digest.
    pub args_sha256: String,
    /// Who asked.
    pub caller: Principal,
    /// What the approver reads.
    pub summary: String,
    /// When it was requested, ms since the Unix epoch.
    pub requested_at_ms: u64,
    /// When it expires, ms since the Unix epoch.
    pub expires_at_ms: u64,
    /// Where it stands.
    pub state: ApprovalState,
}

fn unix_ms(time: SystemTime) -> u64 {
    time.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

impl From<&ApprovalTicket> for StoredTicket {
    fn from(ticket: &ApprovalTicket) -> Self {
        let expires_at = SystemTime::now() + ticket.expires_in();
        StoredTicket {
            id: ticket.id.clone(),
            tool: ticket.tool.clone(),
            version: ticket.version.clone(),
            args_sha256: ticket.args_sha256.clone(),
            caller: ticket.caller.clone(),
            summary: ticket.summary.clone(),
            requested_at_ms: unix_ms(ticket.requested_at),
            expires_at_ms: unix_ms(expires_at),
            state: ticket.state.clone(),
        }
    }
}

impl From<StoredTicket> for ApprovalTicket {
    fn from(stored: StoredTicket) -> Self {
        let left = Duration::from_millis(
            stored
                .expires_at_ms
                .saturating_sub(unix_ms(SystemTime::now())),
        );
        ApprovalTicket {
            id: stored.id,
            tool: stored.tool,
            version: stored.version,
            args_sha256: stored.args_sha256,
            caller: stored.caller,
            summary: stored.summary,
            requested_at: UNIX_EPOCH + Duration::from_millis(stored.requested_at_ms),
            expires_at: Instant::now() + left,
            state: stored.state,
        }
    }
}

impl Approvals {
    /// A book holding `tickets` (read from a shared store), numbering new
    /// tickets after the highest id among them.
    pub fn from_tickets(settings: ApprovalSettings, tickets: Vec<ApprovalTicket>) -> Approvals {
        let book = Approvals::new(settings);
        {
            let mut state = book.lock();
            state.next_id = tickets.iter().map(|t| id_number(&t.id)).max().unwrap_or(0) + 1;
            state.tickets = tickets.into_iter().map(|t| (t.id.clone(), t)).collect();
        }
        book
    }

    /// Every ticket the book holds (to write back to a shared store).
    pub fn tickets(&self) -> Vec<ApprovalTicket> {
        self.lock().tickets.values().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn caller() -> Principal {
        Principal {
            name: "bot".into(),
            tenant: "acme".into(),
            roles: vec![],
            anonymous: false,
            issued_by: None,
        }
    }

    /// A ticket survives the trip through its stored form, and a book
    /// rebuilt from stored tickets numbers new ones after them.
    #[tokio::test]
    async fn round_trip() {
        let book = Approvals::default();
        let ticket = book.request("t", "1.0.0", "d", &caller(), "s").unwrap();
        let stored = StoredTicket::from(&ticket);
        let json = serde_json::to_string(&stored).unwrap();
        let back: ApprovalTicket = serde_json::from_str::<StoredTicket>(&json).unwrap().into();
        assert_eq!(back.id, ticket.id);
        assert_eq!(back.state, ApprovalState::Pending);
        assert!(back.expires_in() > Duration::from_secs(60));
        let rebuilt = Approvals::from_tickets(ApprovalSettings::default(), vec![back]);
        let other = Principal {
            name: "other".into(),
            ..caller()
        };
        let next = rebuilt.request("t", "1.0.0", "e", &other, "s").unwrap();
        assert_eq!(next.id, "a-2");
        assert_eq!(rebuilt.tickets().len(), 2);
    }
}
