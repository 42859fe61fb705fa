//! Approval tickets as shared records (`toolmesh.v1.ApprovalTicket`, kept by the registry for every dispatcher), and a book rebuilt from them: the rules stay those of [`Approvals`]; only where the tickets live changes.

use super::{ApprovalSettings, ApprovalState, ApprovalTicket, Approvals, id_number};
use crate::records::unix_ms;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::time::Instant;
use toolmesh::pb;

/// A ticket with wall-clock times (an `Instant` means nothing to another
/// process) and its state as the contract's enum.
impl From<&ApprovalTicket> for pb::ApprovalTicket {
    fn from(ticket: &ApprovalTicket) -> Self {
        let expires_at = SystemTime::now() + ticket.expires_in();
        let (state, decided_by, reason) = match &ticket.state {
            ApprovalState::Pending => (pb::ApprovalState::Pending, "", ""),
            ApprovalState::Approved { by } => (pb::ApprovalState::Approved, by.as_str(), ""),
            ApprovalState::Denied { by, reason } => {
                (pb::ApprovalState::Denied, by.as_str(), reason.as_str())
            }
            ApprovalState::Used => (pb::ApprovalState::Used, "", ""),
        };
        pb::ApprovalTicket {
            id: ticket.id.clone(),
            tool: ticket.tool.clone(),
            version: ticket.version.clone(),
            arguments_sha256: ticket.args_sha256.clone(),
            caller: Some((&ticket.caller).into()),
            summary: ticket.summary.clone(),
            requested_at_ms: unix_ms(ticket.requested_at),
            expires_at_ms: unix_ms(expires_at),
            state: state as i32,
            decided_by: decided_by.to_owned(),
            reason: reason.to_owned(),
        }
    }
}

impl ApprovalState {
    /// The state a shared record holds; `None` for one this version does
    /// not know.
    pub fn from_record(ticket: &pb::ApprovalTicket) -> Option<ApprovalState> {
        let by = || ticket.decided_by.clone();
        Some(match ticket.state() {
            pb::ApprovalState::Unspecified => return None,
            pb::ApprovalState::Pending => ApprovalState::Pending,
            pb::ApprovalState::Approved => ApprovalState::Approved { by: by() },
            pb::ApprovalState::Denied => ApprovalState::Denied {
                by: by(),
                reason: ticket.reason.clone(),
            },
            pb::ApprovalState::Used => ApprovalState::Used,
        })
    }
}

impl ApprovalTicket {
    /// The ticket a shared record holds; `None` when its state is unknown.
    pub fn from_record(ticket: pb::ApprovalTicket) -> Option<ApprovalTicket> {
        let state = ApprovalState::from_record(&ticket)?;
        let left = Duration::from_millis(
            ticket
                .expires_at_ms
                .saturating_sub(unix_ms(SystemTime::now())),
        );
        Some(ApprovalTicket {
            id: ticket.id,
            tool: ticket.tool,
            version: ticket.version,
            args_sha256: ticket.arguments_sha256,
            caller: ticket.caller.unwrap_or_default().into(),
            summary: ticket.summary,
            requested_at: UNIX_EPOCH + Duration::from_millis(ticket.requested_at_ms),
            expires_at: Instant::now() + left,
            state,
        })
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
    use prost::Message;
    use toolmesh::{IssuedBy, Principal};

    fn caller() -> Principal {
        Principal {
            name: "bot".into(),
            tenant: "acme".into(),
            roles: vec![],
            anonymous: false,
            issued_by: Some(IssuedBy {
                issuer: "https://idp.example".into(),
                subject: "u-42".into(),
                missing_scopes: Default::default(),
                expires_at: None,
            }),
        }
    }

    /// A ticket survives the trip through its shared record, and a book
    /// rebuilt from shared tickets numbers new ones after them.
    #[tokio::test]
    async fn round_trip() {
        let book = Approvals::default();
        let ticket = book.request("t", "1.0.0", "d", &caller(), "s").unwrap();
        let record = pb::ApprovalTicket::from(&ticket);
        let bytes = record.encode_to_vec();
        let back =
            ApprovalTicket::from_record(pb::ApprovalTicket::decode(bytes.as_slice()).unwrap())
                .unwrap();
        assert_eq!(back.id, ticket.id);
        assert_eq!(
            back.caller,
            caller(),
            "the caller, its issuer and subject too"
        );
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

    /// Every state, with who decided and why, survives its record.
    #[tokio::test]
    async fn states_round_trip() {
        let book = Approvals::default();
        let mut ticket = book.request("t", "1.0.0", "d", &caller(), "s").unwrap();
        for state in [
            ApprovalState::Pending,
            ApprovalState::Approved { by: "ann".into() },
            ApprovalState::Denied {
                by: "ann".into(),
                reason: "no".into(),
            },
            ApprovalState::Used,
        ] {
            ticket.state = state.clone();
            let back = ApprovalTicket::from_record((&ticket).into()).unwrap();
            assert_eq!((back.state, back.caller), (state, caller()));
        }
    }
}
