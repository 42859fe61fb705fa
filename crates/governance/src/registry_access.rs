//! The registry's authorization rules: who may register executors and who may disable and enable tools.

use crate::{Identify, Policy, Principal};

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
/// the certificate names no caller of the policy.
pub fn executor_owner_by_certificate(
    policy: &Policy,
    valid_for: impl Fn(&str) -> bool,
) -> Option<Result<String, AccessError>> {
    let who = policy.authenticate_tls(valid_for)?;
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

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> Policy {
        Policy::from_toml(
            r#"
[[callers]]
token = "tok-exec"
principal = "kb-team"
roles = ["executor"]

[[callers]]
token = "tok-ops"
principal = "ops"
roles = ["admin"]

[[callers]]
tls_name = "ops.internal"
principal = "ops-host"
roles = ["admin"]

[[callers]]
token = "tok-dispatcher"
principal = "dispatcher-1"
roles = ["dispatcher"]

[[callers]]
token = "tok-agent"
principal = "agent"
roles = ["agent"]
"#,
        )
        .unwrap()
    }

    /// Executors need the executor role; admins the admin role; each
    /// refusal says which role is missing or how to authenticate.
    #[test]
    fn roles_decide() {
        let policy = policy();
        assert_eq!(
            executor_owner(&policy, Some("tok-exec")).unwrap(),
            "kb-team"
        );
        let forbidden = executor_owner(&policy, Some("tok-ops")).unwrap_err();
        assert!(matches!(&forbidden, AccessError::Forbidden(m) if m.contains("role \"executor\"")));
        let unknown = executor_owner(&policy, Some("tok-nobody")).unwrap_err();
        assert!(matches!(&unknown, AccessError::Unauthenticated(m) if m.contains("[[callers]]")));
        assert_eq!(admin(&policy, Some("tok-ops")).unwrap(), "ops");
        assert!(matches!(
            admin(&policy, Some("tok-exec")),
            Err(AccessError::Forbidden(_))
        ));
        assert!(matches!(
            admin(&policy, None),
            Err(AccessError::Unauthenticated(_))
        ));
        let by_cert = executor_owner_by_certificate(&policy, |name| name == "ops.internal");
        assert!(matches!(by_cert, Some(Err(AccessError::Forbidden(_)))));
        assert!(executor_owner_by_certificate(&policy, |_| false).is_none());
    }

    /// The admin listener is read with a token whose principal is an admin
    /// or operator; no token is refused even where anonymous callers are
    /// admins (the development policy), and the refusal names the roles.
    #[test]
    fn admin_readers() {
        let policy = Policy::from_toml(
            r#"
[auth]
allow_anonymous = true
anonymous = { principal = "anonymous", roles = ["admin"] }

[[callers]]
token = "tok-ops"
principal = "ops"
roles = ["admin"]

[[callers]]
token = "tok-watch"
principal = "watcher"
roles = ["operator"]

[[callers]]
token = "tok-agent"
principal = "agent"
roles = ["agent"]
"#,
        )
        .unwrap();
        assert_eq!(admin_reader(&policy, Some("tok-ops")).unwrap().name, "ops");
        assert_eq!(
            admin_reader(&policy, Some("Bearer tok-watch"))
                .unwrap()
                .name,
            "watcher"
        );
        for (token, forbidden) in [
            (Some("tok-agent"), true),
            (None, false),
            (Some(""), false),
            (Some("nope"), false),
        ] {
            match admin_reader(&policy, token) {
                Err(AccessError::Forbidden(m)) if forbidden => {
                    assert!(m.contains("\"operator\""), "{m}")
                }
                Err(AccessError::Unauthenticated(m)) if !forbidden => {
                    assert!(m.contains("\"operator\""), "{m}")
                }
                other => panic!("{token:?}: {other:?}"),
            }
        }
    }

    /// Snapshots are for dispatchers (with executor tokens) and operators
    /// (without); anyone else is refused, saying which role is needed.
    #[test]
    fn snapshot_readers() {
        let policy = policy();
        let dispatcher = snapshot_reader(&policy, Some("tok-dispatcher"), None).unwrap();
        assert!(dispatcher.execute_tokens);
        let ops = snapshot_reader(&policy, Some("tok-ops"), None).unwrap();
        assert_eq!((ops.reader.as_str(), ops.execute_tokens), ("ops", false));
        let by_cert = snapshot_reader(&policy, None, Some(&|name: &str| name == "ops.internal"));
        assert_eq!(by_cert.unwrap().reader, "ops-host");
        assert!(matches!(
            snapshot_reader(&policy, Some("tok-agent"), None),
            Err(AccessError::Forbidden(m)) if m.contains("\"dispatcher\"")
        ));
        assert!(matches!(
            snapshot_reader(&policy, None, None),
            Err(AccessError::Unauthenticated(_))
        ));
        let dev = snapshot_reader(&Policy::permissive_dev(), None, None).unwrap();
        assert!(
            !dev.execute_tokens,
            "under the development policy anonymous callers read snapshots as operators, never as dispatchers"
        );
    }

    /// No policy may make anonymous callers dispatchers: they would read
    /// execute tokens and act for anyone on the approval book.
    #[test]
    fn anonymous_is_never_a_dispatcher() {
        let text = "[auth]\nallow_anonymous = true\nanonymous = { principal = \"anon\", roles = [\"agent\", \"dispatcher\"] }\n";
        let error = Policy::from_toml(text).unwrap_err().to_string();
        assert!(
            error.contains("auth.anonymous.roles") && error.contains("[[callers]]"),
            "{error}"
        );
    }

    /// Under the development policy anonymous executors own nothing.
    #[test]
    fn anonymous_owns_nothing() {
        let dev = Policy::permissive_dev();
        assert_eq!(executor_owner(&dev, None).unwrap(), "");
    }
}
