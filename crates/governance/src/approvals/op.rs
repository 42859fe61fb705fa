//! One operation on an approval book, and the call fields it uses: what the dispatcher's front doors ask of the book in this process or of the shared one.

/// One operation on an approval book.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ApprovalOp {
    /// Ask for an approval (or get the open one for the same call).
    Request,
    /// Use an approved ticket.
    Consume,
    /// Approve a ticket.
    Approve,
    /// Deny a ticket.
    Deny,
    /// The pending tickets the principal may see. (There is no view of
    /// every tenant's tickets: the admin page lists what its reader may.)
    List,
}

/// The request fields an operation uses (the others stay empty).
#[derive(Debug, Clone, Copy, Default)]
pub struct ApprovalFields<'a> {
    /// The ticket (consume, approve, deny).
    pub id: &'a str,
    /// The tool (request, consume).
    pub tool: &'a str,
    /// Its version (request, consume).
    pub version: &'a str,
    /// The arguments' digest (request, consume).
    pub args_sha256: &'a str,
    /// What the approver reads (request).
    pub summary: &'a str,
    /// Why (deny).
    pub reason: &'a str,
}
