//! The operations on an approval book, each a type with the fields it uses and the answer it gives (a ticket, nothing, or the open tickets).

use super::{ApprovalError, ApprovalTicket, Approvals};
use toolmesh::Principal;

/// The call a ticket is for: the tool, its exact version and the digest
/// of the arguments.
#[derive(Debug, Clone, Copy)]
pub struct ApprovalCall<'a> {
    /// The tool.
    pub tool: &'a str,
    /// Its exact version.
    pub version: &'a str,
    /// [`arguments_digest`](toolmesh::digest::arguments_digest) of the arguments.
    pub args_sha256: &'a str,
}

/// One operation on an approval book: [`Request`], [`Consume`],
/// [`Approve`], [`Deny`] or [`List`], and nothing else (the set is
/// closed). Each runs the rules of [`Approvals`] on the book's tickets
/// and answers with its own type, so a caller never unpacks an answer
/// meant for another operation.
pub trait ApprovalOp: Copy + Send + Sync + sealed::Sealed {
    /// What the operation answers.
    type Answer: Send;

    /// Runs the operation for `who` on the tickets of `book`.
    fn apply(self, book: &Approvals, who: &Principal) -> Result<Self::Answer, ApprovalError>;
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for super::Request<'_> {}
    impl Sealed for super::Consume<'_> {}
    impl Sealed for super::Approve<'_> {}
    impl Sealed for super::Deny<'_> {}
    impl Sealed for super::List {}
}

/// Ask for an approval of `call` (or get the open ticket for the same
/// call and caller).
#[derive(Debug, Clone, Copy)]
pub struct Request<'a> {
    /// The call to approve.
    pub call: ApprovalCall<'a>,
    /// What the approver reads ([`approval_summary`](super::approval_summary)).
    pub summary: &'a str,
}

impl ApprovalOp for Request<'_> {
    type Answer = ApprovalTicket;

    fn apply(self, book: &Approvals, who: &Principal) -> Result<ApprovalTicket, ApprovalError> {
        let ApprovalCall {
            tool,
            version,
            args_sha256,
        } = self.call;
        book.request(tool, version, args_sha256, who, self.summary)
    }
}

/// Use approved ticket `id` for exactly `call`.
#[derive(Debug, Clone, Copy)]
pub struct Consume<'a> {
    /// The ticket.
    pub id: &'a str,
    /// The call it is used for.
    pub call: ApprovalCall<'a>,
}

impl ApprovalOp for Consume<'_> {
    type Answer = ();

    fn apply(self, book: &Approvals, who: &Principal) -> Result<(), ApprovalError> {
        let ApprovalCall {
            tool,
            version,
            args_sha256,
        } = self.call;
        book.consume(self.id, tool, version, args_sha256, who)
    }
}

/// Approve ticket `id`.
#[derive(Debug, Clone, Copy)]
pub struct Approve<'a> {
    /// The ticket.
    pub id: &'a str,
}

impl ApprovalOp for Approve<'_> {
    type Answer = ApprovalTicket;

    fn apply(self, book: &Approvals, who: &Principal) -> Result<ApprovalTicket, ApprovalError> {
        book.approve(self.id, who)
    }
}

/// Deny ticket `id` (or withdraw one's own request).
#[derive(Debug, Clone, Copy)]
pub struct Deny<'a> {
    /// The ticket.
    pub id: &'a str,
    /// Why, for the agent to read.
    pub reason: &'a str,
}

impl ApprovalOp for Deny<'_> {
    type Answer = ApprovalTicket;

    fn apply(self, book: &Approvals, who: &Principal) -> Result<ApprovalTicket, ApprovalError> {
        book.deny(self.id, who, self.reason)
    }
}

/// The pending tickets the principal may see. (There is no view of every
/// tenant's tickets: the admin page lists what its reader may.)
#[derive(Debug, Clone, Copy)]
pub struct List;

impl ApprovalOp for List {
    type Answer = Vec<ApprovalTicket>;

    fn apply(
        self,
        book: &Approvals,
        who: &Principal,
    ) -> Result<Vec<ApprovalTicket>, ApprovalError> {
        Ok(book.list_for(who, &book.settings().approver_roles))
    }
}
