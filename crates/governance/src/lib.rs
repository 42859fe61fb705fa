//! Governance for toolmesh: who a caller is, which tools it may see and call, what needs approval, how fast, and what each session has done; the audit trail it writes is `toolmesh-audit`'s.
//!
//! A registered tool is not thereby usable by everyone. The dispatcher asks
//! this crate, for every `ListTools` entry and every `Invoke`:
//!
//! 1. [`Policy::authenticate`] — the `authorization: Bearer <token>` value
//!    becomes a [`Principal`] (or the anonymous one, when allowed);
//! 2. [`Policy::decide`] — a [`Decision`]: allowed by which grant, and
//!    whether an approval is needed ([`ApprovalNeed`]), or denied and why;
//!    [`explain`] lists every grant considered, for `toolmesh explain`;
//! 3. [`Approvals`] — single-use tickets bound to tool, version,
//!    [`arguments_digest`] and caller;
//! 4. [`Limits::check`] (via [`Policy::limits`]) — rate limits and
//!    concurrency quotas, with a [`Permit`] that frees its slot on drop;
//! 5. [`AuditSink`] — one JSON [`AuditRecord`] line per call or decision
//!    (from `toolmesh-audit`, re-exported here).
//!
//! [`PolicyHandle`] keeps the policy in force and reloads it on SIGHUP or
//! when its file changes; a bad file leaves the previous policy in force.
//! [`Policy::permissive_dev`] is the development policy ([`DEV_POLICY_TOML`]).
//!
//! # The policy file
//!
//! One TOML file, validated as a whole when it is loaded: unknown keys,
//! bad risk names, bad tool patterns, duplicate tokens or grant names and
//! out-of-range numbers are all reported at once, each with its line, its
//! field and how to fix it. Every table is optional; an empty file admits
//! nobody. A full example (also [`EXAMPLE_POLICY_TOML`]):
//!
//! ```toml
#![doc = include_str!("../policy.example.toml")]
//! ```
//!
//! Grants are checked in file order and the first that allows a call is
//! the decision's `rule`. When none does, the reason names the grants that
//! came closest (a risk cap, or what the caller's grants do cover).
//! Approval is decided after access: a tool needs one when its risk is at
//! or above `require_for_risk` or its name matches `require_for_tools`,
//! unless the caller is in `pre_approved_principals` (never an anonymous one).
//! The raw arguments of a call reach the audit log only for tools tagged
//! [`RAW_ARGUMENTS_TAG`], with `"x-sensitive": true` properties redacted.
#![forbid(unsafe_code)]

pub mod approvals;
pub mod cache_policy;
mod config;
mod decision;
mod error;
pub mod fallback_policy;
mod glob;
mod governance;
mod identity;
pub mod issuers;
pub mod limits;
pub mod narrowing;
mod policy;
pub mod registry_access;
pub mod reload;
pub mod sessions;
pub mod shared_records;

#[cfg(test)]
mod tests;

/// Token and argument digests, from the domain crate (audit records carry them too).
use toolmesh::digest;

pub use approvals::{
    ApprovalError, ApprovalSettings, ApprovalState, ApprovalTicket, Approvals, approval_summary,
};
pub use cache_policy::{CachePolicy, CacheRule, CacheScope};
pub use config::Scope;
pub use decision::{ApprovalNeed, Decision, Explanation, GrantCheck, GrantVerdict, explain};
pub use error::{AuthError, PatternError, PolicyError, Problem, RiskError};
pub use glob::ToolPattern;
pub use governance::Governance;
pub use identity::{Identify, Identity};
pub use limits::{LimitKind, Limited, Limits, Permit};
pub use narrowing::{FieldLimit, Narrowing};
pub use policy::{
    DEFAULT_TENANT, DEV_APPROVER_TOKEN, DEV_POLICY_TOML, MAX_RATE_PER_SEC, MAX_TTL_SECS, Policy,
};
pub use registry_access::{
    ADMIN_ROLE, AccessError, DISPATCHER_ROLE, EXECUTOR_ROLE, OPERATOR_ROLE, SnapshotAccess,
};
pub use reload::{PolicyHandle, PolicyWatcher};
pub use sessions::{Declared, PreconditionError, SessionLimits, Sessions};
pub use shared_records::{MemoryBook, SharedBook, SharedError, SharedRecordsRelay};
pub use toolmesh::digest::{arguments_digest, value_digest};
pub use toolmesh::{IssuedBy, Principal};
/// The audit trail, from `toolmesh-audit` (its records name a [`Principal`]).
pub use toolmesh_audit as audit;
pub use toolmesh_audit::{AuditKind, AuditRecord, AuditSink, RAW_ARGUMENTS_TAG};

/// The full example policy shown in the crate docs (`policy.example.toml`).
pub const EXAMPLE_POLICY_TOML: &str = include_str!("../policy.example.toml");
