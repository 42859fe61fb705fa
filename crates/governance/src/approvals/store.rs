//! Approvals kept among the registry's shared records, so that every dispatcher of the mesh sees the same tickets: the rules of [`Approvals`] run here, and what changed is written back with a compare on each ticket's revision (a ticket is used once even when two dispatchers race).

use super::{ApprovalError, ApprovalOp, ApprovalSettings, ApprovalTicket, Approvals};
use crate::records::{RecordStore, RecordsError, until_written};
use std::sync::Arc;
use std::time::Duration;
use toolmesh::Principal;
use toolmesh::pb::{self, shared_record::Value};

/// Where tickets live among the shared records.
pub const PREFIX: &str = "approval/";
/// How long a ticket's record outlives the ticket.
const KEEP_AFTER_EXPIRY: Duration = Duration::from_secs(60);

/// A ticket as read, with the revision a write compares against.
struct Read {
    key: String,
    revision: i64,
    ticket: ApprovalTicket,
}

/// The approval book in the registry's shared records.
#[derive(Clone)]
pub struct StoredApprovals {
    book: Arc<dyn RecordStore>,
}

impl std::fmt::Debug for StoredApprovals {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoredApprovals").finish_non_exhaustive()
    }
}

impl StoredApprovals {
    /// Tickets kept in `book`.
    pub fn new(book: Arc<dyn RecordStore>) -> Self {
        StoredApprovals { book }
    }

    /// Runs `op` on the shared tickets, writing back what changed; runs
    /// again on fresh tickets when another dispatcher got there first.
    pub async fn call<O: ApprovalOp>(
        &self,
        op: O,
        who: &Principal,
        settings: &ApprovalSettings,
    ) -> Result<O::Answer, ApprovalError> {
        until_written("the approval", || self.attempt(op, who, settings))
            .await
            .unwrap_or_else(|e| {
                Err(ApprovalError::Unavailable {
                    reason: e.to_string(),
                })
            })
    }

    /// One try: the answer, or `None` when another writer came first.
    async fn attempt<O: ApprovalOp>(
        &self,
        op: O,
        who: &Principal,
        settings: &ApprovalSettings,
    ) -> Result<Option<Result<O::Answer, ApprovalError>>, RecordsError> {
        let before = self.read().await?;
        let book = Approvals::from_tickets(
            settings.clone(),
            before.iter().map(|r| r.ticket.clone()).collect(),
        );
        let answer = op.apply(&book, who);
        Ok(self
            .write_back(&before, book.tickets())
            .await?
            .then_some(answer))
    }

    /// Every ticket in the book (records this version cannot read are
    /// left alone).
    async fn read(&self) -> Result<Vec<Read>, RecordsError> {
        let records = self.book.list(PREFIX, false).await?;
        Ok(records
            .into_iter()
            .filter_map(|r| match r.value {
                Some(Value::Ticket(ticket)) => Some(Read {
                    ticket: ApprovalTicket::from_record(ticket)?,
                    key: r.key,
                    revision: r.revision,
                }),
                _ => None,
            })
            .collect())
    }

    /// Writes the tickets that changed and removes the purged ones; false
    /// when another writer changed one first (the operation must run again
    /// on fresh tickets).
    async fn write_back(
        &self,
        before: &[Read],
        after: Vec<ApprovalTicket>,
    ) -> Result<bool, RecordsError> {
        for ticket in &after {
            let old = before.iter().find(|r| r.ticket.id == ticket.id);
            if old.is_some_and(|r| r.ticket == *ticket) {
                continue;
            }
            let record = pb::SharedRecord {
                key: format!("{PREFIX}{}", ticket.id),
                revision: old.map_or(0, |r| r.revision),
                value: Some(Value::Ticket(ticket.into())),
            };
            let ttl = ticket.expires_in() + KEEP_AFTER_EXPIRY;
            if !self.book.compare_and_put(record, ttl).await? {
                return Ok(false);
            }
        }
        for gone in before
            .iter()
            .filter(|r| !after.iter().any(|a| a.id == r.ticket.id))
        {
            self.book.delete(&gone.key).await?;
        }
        Ok(true)
    }
}
