//! The governance runtime of toolmesh: approvals, session preconditions, the live policy and its reload, the records every dispatcher shares, and the `Governance` gRPC service; the audit trail it writes is `toolmesh-audit`'s.
//!
//! A registered tool is not thereby usable by everyone. The dispatcher asks
//! [`Governance`], for every `ListTools` entry and every `Invoke`:
//!
//! 1. [`Identity::authenticate`] — the `authorization: Bearer <token>` value
//!    (or a client certificate) becomes a [`Principal`](toolmesh::Principal) (or the anonymous
//!    one, when allowed); see `toolmesh-identity`;
//! 2. [`Policy::decide`](toolmesh_policy::Policy::decide) — a
//!    [`Decision`](toolmesh_policy::Decision): allowed by which grant, and
//!    whether an approval is needed
//!    ([`ApprovalNeed`](toolmesh_policy::ApprovalNeed)), or denied and why;
//!    [`explain`](toolmesh_policy::explain) lists every grant considered, for `toolmesh explain`
//!    (the policy file and its decisions are `toolmesh-policy`'s);
//! 3. [`Approvals`] — single-use tickets bound to tool, version,
//!    [`arguments_digest`](toolmesh::digest::arguments_digest) and caller;
//! 4. [`Limits::check`](toolmesh_policy::Limits::check) (via
//!    [`Policy::limits`](toolmesh_policy::Policy::limits)) — rate limits and
//!    concurrency quotas, with a [`Permit`](toolmesh_policy::Permit) that frees its slot on drop;
//! 5. [`AuditSink`](toolmesh_audit::AuditSink) — one JSON
//!    [`AuditRecord`](toolmesh_audit::AuditRecord) line per call or decision
//!    (from `toolmesh-audit`).
//!
//! [`PolicyHandle`] keeps the policy in force and reloads it on SIGHUP or
//! when its file changes; a bad file leaves the previous policy in force.
//! The raw arguments of a call reach the audit log only for tools tagged
//! [`RAW_ARGUMENTS_TAG`](toolmesh_audit::RAW_ARGUMENTS_TAG), with `"x-sensitive": true` properties redacted.
#![forbid(unsafe_code)]

pub mod approvals;
mod governance;
mod identity;
pub mod records;
pub mod reload;
pub mod sessions;

#[cfg(test)]
mod issuer_tests;
#[cfg(test)]
mod tests;

/// Token and argument digests, from the domain crate (audit records carry them too).
use toolmesh::digest;

pub use approvals::{ApprovalError, ApprovalState, ApprovalTicket, Approvals, approval_summary};
pub use governance::Governance;
pub use identity::Identity;
pub use records::{MemoryRecords, RecordStore, RecordsError, RemoteRecords};
pub use reload::{PolicyHandle, PolicyWatcher};
pub use sessions::{Declared, PreconditionError, SessionLimits, Sessions};
