//! The registry's authorization rules: who may register executors and who may disable and enable tools.

use crate::{Callers, Identify, Principal};

/// Role a caller needs to register executors.
pub const EXECUTOR_ROLE: &str = "executor";
/// Role a caller needs to disable and enable tools (and to read snapshots).
pub const ADMIN_ROLE: &str = "admin";
/// Role of a read-only operator: reads the admin page, its JSON and (unless
/// served publicly) `/metrics`, which name every tool and executor; it
/// changes nothing.
pub const OPERATOR_ROLE: &str = "operator";
/// Role a dispatcher following a registry needs: it reads snapshots,
/// executor endpoints and the tokens executors accept calls with.
pub const DISPATCHER_ROLE: &str = "dispatcher";

/// What a caller of GetSnapshot / WatchSnapshots may see.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotAccess {
    /// Who reads.
    pub reader: String,
    /// Whether it sees the tokens executors accept calls with (dispatchers
    /// only: an operator reading snapshots must not be able to call an
    /// executor past the dispatcher).
    pub execute_tokens: bool,
    /// When the reader's token expires (a JWT): its streams end then.
    pub until: Option<std::time::SystemTime>,
}

pub use toolmesh::AccessError;

/// The refusal of a caller `identify` could not name; `needs` says who may.
fn unidentified(error: crate::AuthError, needs: &str) -> AccessError {
    if error.is_transient() {
        AccessError::Unavailable(error.to_string())
    } else {
        AccessError::Unauthenticated(format!("{error}; {needs}"))
    }
}

/// The owner an executor registers as, from its bearer token: its principal
/// must have [`EXECUTOR_ROLE`]. Anonymous registrations (where the policy
/// admits them) claim no names, so ownership starts with the first
/// authenticated owner: their owner is the empty string.
pub fn executor_owner(
    identity: &(impl Identify + ?Sized),
    bearer: Option<&str>,
) -> Result<String, AccessError> {
    let who = identity.identify(bearer, None).map_err(|e| {
        unidentified(e, &format!(
            "executors register with the token of a [[callers]] entry (or of an [[issuers]] entry's provider) whose principal has the role \"{EXECUTOR_ROLE}\""
        ))
    })?;
    may_register(&who)?;
    Ok(if who.anonymous {
        String::new()
    } else {
        who.name
    })
}

/// The owner an executor registers as from a verified client certificate
/// (`valid_for` tests the certificate against a `tls_name`); `None` when
/// the certificate names no known caller.
pub fn executor_owner_by_certificate(
    callers: &Callers,
    valid_for: impl Fn(&str) -> bool,
) -> Option<Result<String, AccessError>> {
    let who = callers.authenticate_tls(valid_for)?;
    Some(may_register(&who).map(|()| who.name))
}

/// The principal allowed to disable and enable tools: it must have
/// [`ADMIN_ROLE`].
pub fn admin(
    identity: &(impl Identify + ?Sized),
    bearer: Option<&str>,
) -> Result<String, AccessError> {
    let who = identity
        .identify(bearer, None)
        .map_err(|e| AccessError::Unauthenticated(e.to_string()))?;
    may_switch(&who)?;
    Ok(who.name)
}

/// Whether `who` may disable and enable tools and change rollouts: it has
/// [`ADMIN_ROLE`] (an [`OPERATOR_ROLE`] reader may not). The one rule of
/// the registry's RPCs and of the admin page's buttons.
pub fn may_switch(who: &Principal) -> Result<(), AccessError> {
    if who.has_role(ADMIN_ROLE) {
        Ok(())
    } else {
        Err(AccessError::Forbidden(format!(
            "{} may not disable or enable tools: that needs the role \"{ADMIN_ROLE}\"",
            who.name
        )))
    }
}

/// Who may read snapshots: dispatchers ([`DISPATCHER_ROLE`]) and
/// operators ([`ADMIN_ROLE`]); the caller is the bearer token's principal,
/// else the one a verified client certificate names (`certificate_valid_for`).
pub fn snapshot_reader(
    identity: &(impl Identify + ?Sized),
    bearer: Option<&str>,
    certificate_valid_for: Option<&dyn Fn(&str) -> bool>,
) -> Result<SnapshotAccess, AccessError> {
    let who = identity
        .identify(bearer, certificate_valid_for)
        .map_err(|e| {
            unidentified(e, &format!(
                "snapshots are read with the token of a [[callers]] entry that has the role \"{DISPATCHER_ROLE}\" or \"{ADMIN_ROLE}\""
            ))
        })?;
    let execute_tokens = who.has_role(DISPATCHER_ROLE);
    if execute_tokens || who.has_role(ADMIN_ROLE) {
        Ok(SnapshotAccess {
            until: who.expires_at(),
            reader: who.name,
            execute_tokens,
        })
    } else {
        Err(AccessError::Forbidden(format!(
            "{} may not read snapshots (they name every tool and executor): that needs the role \"{DISPATCHER_ROLE}\" or \"{ADMIN_ROLE}\"",
            who.name
        )))
    }
}

/// Who may read the admin listener (page, `/api/state`, and `/metrics`
/// unless it is public): the principal of a bearer token (never the
/// anonymous one, whatever roles the policy gives it) holding
/// [`ADMIN_ROLE`] or [`OPERATOR_ROLE`].
pub fn admin_reader(
    identity: &(impl Identify + ?Sized),
    bearer: Option<&str>,
) -> Result<Principal, AccessError> {
    let needs = format!(
        "the admin page and its metrics are read with the token of a [[callers]] entry that has the role \"{ADMIN_ROLE}\" or \"{OPERATOR_ROLE}\""
    );
    if bearer.and_then(toolmesh_transport::bearer_token).is_none() {
        return Err(AccessError::Unauthenticated(format!(
            "no token was sent; {needs}"
        )));
    }
    let who = identity
        .identify(bearer, None)
        .map_err(|e| unidentified(e, &needs))?;
    if who.has_role(ADMIN_ROLE) || who.has_role(OPERATOR_ROLE) {
        Ok(who)
    } else {
        Err(AccessError::Forbidden(format!(
            "{} may not read the admin page (it names every tool and executor): {needs}",
            who.name
        )))
    }
}

fn may_register(who: &Principal) -> Result<(), AccessError> {
    if who.has_role(EXECUTOR_ROLE) {
        Ok(())
    } else {
        Err(AccessError::Forbidden(format!(
            "{} may not register executors: give it the role \"{EXECUTOR_ROLE}\" in the policy",
            who.name
        )))
    }
}
