//! Governance setup for the servers: the policy (file with live reload, or
//! the development default), the registry's gate over it, and the audit sink.

use crate::args::ServerArgs;
use anyhow::Context;
use std::sync::Arc;
use toolmesh_dispatcher::Governance;
use toolmesh_governance::{AuditSink, DEV_POLICY_TOML, Policy, PolicyHandle, PolicyWatcher};
use toolmesh_registry::Gate;

/// Role a caller needs to register executors.
const EXECUTOR_ROLE: &str = "executor";
/// Role a caller needs to disable and enable tools.
const ADMIN_ROLE: &str = "admin";

/// The policy a server runs with, and what keeps it fresh.
pub(crate) struct PolicySetup {
    pub(crate) handle: Arc<PolicyHandle>,
    /// Reloads on SIGHUP and file change while alive.
    pub(crate) _watcher: Option<PolicyWatcher>,
}

/// Loads `--policy`, or the development policy (plus, for `up`, an entry
/// for its generated executor token).
pub(crate) fn load_policy(
    args: &ServerArgs,
    dev_executor_token: Option<&str>,
) -> anyhow::Result<PolicySetup> {
    match &args.policy {
        Some(path) => {
            let (handle, watcher) = PolicyHandle::watch(path)
                .map_err(|e| anyhow::anyhow!("{e}"))
                .with_context(|| format!("policy file {}", path.display()))?;
            tracing::info!(path = %path.display(), "policy loaded; reloads on SIGHUP and on change");
            Ok(PolicySetup {
                handle,
                _watcher: Some(watcher),
            })
        }
        None => {
            let mut text = DEV_POLICY_TOML.to_owned();
            if let Some(token) = dev_executor_token {
                text.push_str(&format!(
                    "\n[[callers]]\ntoken = \"{token}\"\nprincipal = \"dev-executors\"\ntenant = \"dev\"\nroles = [\"{EXECUTOR_ROLE}\"]\n"
                ));
            }
            let policy = Policy::from_toml(&text).map_err(|e| anyhow::anyhow!("{e}"))?;
            tracing::warn!(
                "no --policy given: development policy (anonymous callers may use every tool)"
            );
            Ok(PolicySetup {
                handle: Arc::new(PolicyHandle::new(policy)),
                _watcher: None,
            })
        }
    }
}

/// The dispatcher's governance: the policy plus `--audit`.
pub(crate) async fn governance(
    args: &ServerArgs,
    policy: &PolicySetup,
) -> anyhow::Result<Governance> {
    let audit = match args.audit.as_deref() {
        None => None,
        Some("-") => Some(AuditSink::stdout(4096)),
        Some(path) => Some(
            AuditSink::append_to_file(std::path::Path::new(path), 4096)
                .await
                .with_context(|| format!("cannot open audit file {path}"))?,
        ),
    };
    Ok(Governance::new(policy.handle.clone(), audit))
}

/// The registry's gate over the policy: executors register with a token
/// whose principal has the `executor` role and is its owner; admins hold
/// the `admin` role.
pub(crate) struct PolicyGate(pub(crate) Arc<PolicyHandle>);

impl Gate for PolicyGate {
    fn executor_owner(&self, bearer: Option<&str>) -> Result<String, String> {
        let who = self.0.current().authenticate(bearer).map_err(|e| {
            format!("{e}; executors register with the token of a [[callers]] entry that has the role \"{EXECUTOR_ROLE}\"")
        })?;
        if !who.has_role(EXECUTOR_ROLE) {
            return Err(format!(
                "{} may not register executors: give it the role \"{EXECUTOR_ROLE}\" in the policy",
                who.name
            ));
        }
        // Anonymous registrations claim no names, so ownership starts with
        // the first authenticated owner.
        Ok(if who.anonymous {
            String::new()
        } else {
            who.name
        })
    }

    fn executor_owner_by_certificate(
        &self,
        certificate: &toolmesh::grpc::PeerCertificate,
    ) -> Option<Result<String, String>> {
        let who = self
            .0
            .current()
            .authenticate_tls(|name| certificate.is_valid_for(name))?;
        Some(if who.has_role(EXECUTOR_ROLE) {
            Ok(who.name)
        } else {
            Err(format!(
                "{} may not register executors: give it the role \"{EXECUTOR_ROLE}\" in the policy",
                who.name
            ))
        })
    }

    fn admin(&self, bearer: Option<&str>) -> Result<String, String> {
        let who = self
            .0
            .current()
            .authenticate(bearer)
            .map_err(|e| e.to_string())?;
        if who.has_role(ADMIN_ROLE) {
            Ok(who.name)
        } else {
            Err(format!(
                "{} may not disable or enable tools: that needs the role \"{ADMIN_ROLE}\"",
                who.name
            ))
        }
    }
}
