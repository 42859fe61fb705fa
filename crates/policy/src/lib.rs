//! The toolmesh policy file: parsing and validating it, and the pure decisions it makes — who a grant admits, what needs approval, which arguments are narrowed, what may be cached, which tool stands in for which.
//!
//! [`Policy::from_toml`] validates one TOML file as a whole: unknown keys,
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
//! the decision's `rule` ([`Policy::decide`], [`explain`]). When none does,
//! the reason names the grants that came closest (a risk cap, or what the
//! caller's grants do cover). Approval is decided after access: a tool
//! needs one when its risk is at or above `require_for_risk` or its name
//! matches `require_for_tools`, unless the caller is in
//! `pre_approved_principals` (never an anonymous one).
//! [`Policy::permissive_dev`] is the development policy ([`DEV_POLICY_TOML`]).
//! Who the callers it names are is `toolmesh-identity`'s.
#![forbid(unsafe_code)]

pub mod approval;
mod builder;
pub mod cache_policy;
mod config;
mod decision;
mod error;
pub mod fallback_policy;
mod issuers;
pub mod limits;
pub mod narrowing;
mod policy;
mod reach;

pub use approval::ApprovalSettings;
pub use cache_policy::{CachePolicy, CacheRule, CacheScope};
pub use config::Scope;
pub use decision::{ApprovalNeed, Decision, Explanation, GrantCheck, GrantVerdict, explain};
pub use error::{PolicyError, Problem, RiskError};
pub use limits::{LimitKind, Limited, Limits, Permit};
pub use narrowing::{FieldLimit, Narrowing};
pub use policy::{DEV_APPROVER_TOKEN, DEV_POLICY_TOML, MAX_RATE_PER_SEC, MAX_TTL_SECS, Policy};
pub use reach::Candidates;
pub use toolmesh_identity::DEFAULT_TENANT;

/// The full example policy shown in the crate docs (`policy.example.toml`).
pub const EXAMPLE_POLICY_TOML: &str = include_str!("../policy.example.toml");
