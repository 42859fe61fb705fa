//! Governance setup for a node: the policy (file with live reload, or the
//! development default), the registry's gate over it, and the audit sink.

use crate::config::NodeConfig;
use crate::error::NodeError;
use std::sync::Arc;
use toolmesh_audit::AuditSink;
use toolmesh_governance::{Identity, PolicyHandle, PolicyWatcher};
use toolmesh_identity::{AccessError, DISPATCHER_ROLE, EXECUTOR_ROLE, registry_access};
use toolmesh_policy::{DEV_POLICY_TOML, Policy};
use toolmesh_registry::{Gate, SnapshotReader};

/// Audit records buffered before the writer applies back-pressure.
const AUDIT_CAPACITY: usize = 4096;

/// The policy a server runs with, and what keeps it fresh.
pub struct PolicySetup {
    /// The policy in force.
    pub handle: Arc<PolicyHandle>,
    /// Who callers are by it: the registry's gate, the dispatcher's
    /// governance and the admin page share it (and its issuers' keys).
    pub identity: Identity,
    /// Under the development policy, the token made for this run that a
    /// separate dispatcher follows this registry with (no anonymous caller
    /// is a dispatcher).
    pub dev_dispatcher_token: Option<String>,
    /// Reloads on SIGHUP and file change while alive.
    _watcher: Option<PolicyWatcher>,
}

/// Loads `config.policy`, or the development policy (plus an entry for
/// `config.dev_executor_token`, when set, and one with the `dispatcher`
/// role for a token made for this run).
pub fn load_policy(config: &NodeConfig) -> Result<PolicySetup, NodeError> {
    match &config.policy {
        Some(path) => {
            if config.dev_dispatcher_token.is_some() {
                tracing::warn!(
                    "--dev-dispatcher-token applies only without --policy; name dispatchers in the policy file"
                );
            }
            let (handle, watcher) =
                PolicyHandle::watch(path).map_err(|source| NodeError::Policy {
                    path: path.clone(),
                    source,
                })?;
            tracing::info!(path = %path.display(), "policy loaded; reloads on SIGHUP and on change");
            Ok(PolicySetup {
                identity: Identity::new(handle.clone()),
                handle,
                dev_dispatcher_token: None,
                _watcher: Some(watcher),
            })
        }
        None => {
            let mut text = DEV_POLICY_TOML.to_owned();
            if let Some(token) = &config.dev_executor_token {
                text.push_str(&caller_entry(token, "dev-executors", EXECUTOR_ROLE));
            }
            let dispatcher_token = config
                .dev_dispatcher_token
                .clone()
                .unwrap_or_else(|| format!("dev-dispatcher-{}", uuid::Uuid::new_v4().simple()));
            text.push_str(&caller_entry(
                &dispatcher_token,
                "dev-dispatchers",
                DISPATCHER_ROLE,
            ));
            let policy = Policy::from_toml(&text).map_err(NodeError::DevPolicy)?;
            tracing::warn!(
                "no --policy given: development policy (anonymous callers may use every tool)"
            );
            let handle = Arc::new(PolicyHandle::new(policy));
            Ok(PolicySetup {
                identity: Identity::new(handle.clone()),
                handle,
                dev_dispatcher_token: Some(dispatcher_token),
                _watcher: None,
            })
        }
    }
}

/// A `[[callers]]` entry of the development policy: `token` is
/// `principal` of tenant dev with `role`.
fn caller_entry(token: &str, principal: &str, role: &str) -> String {
    format!(
        "\n[[callers]]\ntoken = \"{token}\"\nprincipal = \"{principal}\"\ntenant = \"dev\"\nroles = [\"{role}\"]\n"
    )
}

/// The audit sink `config.audit` names (`-` is stdout), if any.
pub async fn audit_sink(config: &NodeConfig) -> Result<Option<AuditSink>, NodeError> {
    let Some(path) = config.audit.as_deref() else {
        return Ok(None);
    };
    let sink = match path {
        "-" => AuditSink::stdout(AUDIT_CAPACITY),
        path => AuditSink::append_to_file(std::path::Path::new(path), AUDIT_CAPACITY).await,
    };
    sink.map(Some).map_err(|source| NodeError::Audit {
        path: path.to_owned(),
        source,
    })
}

/// The registry's gate over the policy in force (its tokens, certificate
/// names and issuers' JWTs): the rules themselves are
/// [`toolmesh_identity::registry_access`]'s.
pub struct PolicyGate(pub Identity);

impl Gate for PolicyGate {
    fn executor_owner(&self, bearer: Option<&str>) -> Result<String, AccessError> {
        registry_access::executor_owner(&self.0, bearer)
    }

    fn executor_owner_by_certificate(
        &self,
        certificate: &toolmesh_transport::PeerCertificate,
    ) -> Option<Result<String, AccessError>> {
        registry_access::executor_owner_by_certificate(
            self.0.policy().current().callers(),
            |name| certificate.is_valid_for(name),
        )
    }

    fn admin(&self, bearer: Option<&str>) -> Result<String, AccessError> {
        registry_access::admin(&self.0, bearer)
    }

    fn snapshot_reader(
        &self,
        bearer: Option<&str>,
        certificate: Option<&toolmesh_transport::PeerCertificate>,
    ) -> Result<SnapshotReader, AccessError> {
        let valid_for = certificate.map(|c| move |name: &str| c.is_valid_for(name));
        let valid_for = valid_for.as_ref().map(|f| f as &dyn Fn(&str) -> bool);
        registry_access::snapshot_reader(&self.0, bearer, valid_for).map(|access| SnapshotReader {
            name: access.reader,
            execute_tokens: access.execute_tokens,
            until: access.until,
        })
    }
}
