//! Who a caller is: static bearer tokens, client-certificate names, the JWTs of identity providers verified against their fetched keys, and the registry's access rules by role.
//!
//! [`Callers`] holds the callers a policy names in advance (and the
//! anonymous one); [`issuers`] verifies the JWTs of `[[issuers]]` against
//! keys cached across policy reloads ([`issuers::IssuerKeys`]);
//! [`registry_access`] says who may register executors, switch tools and
//! read snapshots. The policy file that names all of them is parsed by
//! `toolmesh-policy`.
#![forbid(unsafe_code)]

mod callers;
mod error;
pub mod issuers;
pub mod registry_access;
#[cfg(feature = "signing")]
pub mod signing;
mod token;

pub use callers::{Callers, Identify, tls_name};
pub use error::{AuthError, IssuerError};
pub use registry_access::{
    ADMIN_ROLE, AccessError, DISPATCHER_ROLE, EXECUTOR_ROLE, OPERATOR_ROLE, SnapshotAccess,
};
pub use token::Token;
pub use toolmesh::{IssuedBy, Principal};

/// Tenant of a caller that names none.
pub const DEFAULT_TENANT: &str = "default";
