//! The validated policy: what it says about callers, grants, approvals, limits, caching and fallbacks.

use crate::{
    approval::ApprovalSettings, builder::Builder, cache_policy::CachePolicy, config::RawPolicy,
    error::PolicyError, fallback_policy::FallbackPolicy, limits::Limits, narrowing::Narrowing,
};
use std::{collections::HashMap, fmt, path::Path, sync::Arc};
use toolmesh::ToolPattern;
use toolmesh::pb::RiskLevel;
use toolmesh_identity::issuers::Issuer;
use toolmesh_identity::{AuthError, Callers, Identify, Principal};

/// Longest approval lifetime accepted (`ttl_secs`).
pub const MAX_TTL_SECS: u64 = 24 * 60 * 60;
/// Highest `rate_per_sec` accepted.
pub const MAX_RATE_PER_SEC: f64 = 1_000_000.0;
/// The token [`Policy::permissive_dev`] accepts for its approver, `dev-approver`.
pub const DEV_APPROVER_TOKEN: &str = "dev-approver";

/// The policy [`Policy::permissive_dev`] uses, also a starting point for a real file.
pub const DEV_POLICY_TOML: &str = r#"# toolmesh development policy: anyone may call anything, register
# executors and switch tools off; HIGH-risk calls still need an approval,
# which the `dev-approver` token can give. No anonymous caller is a
# dispatcher: a dispatcher reads the tokens executors accept and acts for
# any caller on the approval book.
[auth]
allow_anonymous = true
anonymous = { principal = "anonymous", tenant = "dev", roles = ["agent", "admin", "executor"] }

[[callers]]
token = "dev-approver"
principal = "dev-approver"
tenant = "dev"
roles = ["approver", "admin"]

[[grants]]
name = "dev: everything"
tools = ["*"]

[approval]
approver_roles = ["approver"]
require_for_risk = "HIGH"
"#;

/// One validated `[[grants]]` entry.
#[derive(Debug, Clone)]
pub(crate) struct Grant {
    pub(crate) name: String,
    pub(crate) roles: Vec<String>,
    pub(crate) tenants: Vec<String>,
    pub(crate) principals: Vec<String>,
    pub(crate) tools: Vec<ToolPattern>,
    pub(crate) tags: Vec<String>,
    pub(crate) max_risk: RiskLevel,
    /// Input-schema narrowings by tool name (`[grants.arguments.TOOL]`).
    pub(crate) narrowings: HashMap<String, Arc<Narrowing>>,
}

/// The validated `[approval]` table.
#[derive(Debug, Clone)]
pub(crate) struct ApprovalRules {
    pub(crate) settings: ApprovalSettings,
    pub(crate) require_for_risk: Option<RiskLevel>,
    pub(crate) require_for_tools: Vec<ToolPattern>,
    pub(crate) pre_approved_principals: Vec<String>,
}

/// A parsed and validated policy: who callers are, what they may use,
/// what needs approval and how fast they may call. Immutable; share it by
/// `Arc` (a runtime swaps whole policies on reload).
pub struct Policy {
    /// Callers known by token, certificate name or JWT subject, and the anonymous one.
    pub(crate) callers: Callers,
    pub(crate) grants: Vec<Grant>,
    pub(crate) approval: ApprovalRules,
    pub(crate) limits: Limits,
    /// Whether any grant narrows a tool (so calls skip the lookup otherwise).
    pub(crate) narrowed: bool,
    pub(crate) cache: CachePolicy,
    pub(crate) fallbacks: FallbackPolicy,
    /// Identity providers whose JWTs name callers (`[[issuers]]`).
    pub(crate) issuers: Vec<Issuer>,
}

impl fmt::Debug for Policy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Policy")
            .field("allow_anonymous", &self.callers.allows_anonymous())
            .field("callers", &self.callers.token_count())
            .field(
                "grants",
                &self.grants.iter().map(|g| &g.name).collect::<Vec<_>>(),
            )
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

impl Policy {
    /// Parses and validates a policy. Syntax errors carry toml's line and
    /// column; every semantic problem is listed with its line and field.
    pub fn from_toml(text: &str) -> Result<Policy, PolicyError> {
        let raw: RawPolicy = toml::from_str(text).map_err(|e| PolicyError::Syntax {
            origin: "(inline)".into(),
            detail: e.to_string().trim_end().to_owned(),
        })?;
        Builder::new(text).build(raw)
    }

    /// Reads and validates the policy file at `path`.
    pub fn load(path: &Path) -> Result<Policy, PolicyError> {
        let text = std::fs::read_to_string(path).map_err(|source| PolicyError::Read {
            path: path.to_owned(),
            source,
        })?;
        Policy::from_toml(&text).map_err(|e| e.with_origin(path.display().to_string()))
    }

    /// The development policy ([`DEV_POLICY_TOML`]): anonymous callers
    /// allowed (tenant `dev`, role `agent`), every tool granted, HIGH-risk
    /// calls still need approval, which the [`DEV_APPROVER_TOKEN`] caller can give.
    pub fn permissive_dev() -> Policy {
        // A constant the tests parse; failing here is a bug in this crate, not bad input.
        Policy::from_toml(DEV_POLICY_TOML).expect("DEV_POLICY_TOML is valid")
    }

    /// Identifies a caller from the value of its `authorization` header
    /// (with or without the `Bearer ` prefix). No token (or an empty one)
    /// is the anonymous principal when the policy allows it; an unknown
    /// token is always an error, never anonymous.
    pub fn authenticate(&self, bearer: Option<&str>) -> Result<Principal, AuthError> {
        self.callers.authenticate(bearer)
    }

    /// The caller whose `tls_name` the peer's (already verified) client
    /// certificate is valid for, if any; `valid_for` answers that per name.
    pub fn authenticate_tls(&self, valid_for: impl Fn(&str) -> bool) -> Option<Principal> {
        self.callers.authenticate_tls(valid_for)
    }

    /// The caller: the bearer token's principal; with no token, the one a
    /// verified client certificate names (`certificate_valid_for` answers
    /// per `tls_name`); else the anonymous caller where admitted.
    pub fn identify(
        &self,
        bearer: Option<&str>,
        certificate_valid_for: Option<&dyn Fn(&str) -> bool>,
    ) -> Result<Principal, AuthError> {
        self.callers.identify(bearer, certificate_valid_for)
    }

    /// The callers it names in advance (tokens, certificate names, JWT
    /// subjects) and the anonymous one.
    pub fn callers(&self) -> &Callers {
        &self.callers
    }

    /// The identity providers whose JWTs name callers (`[[issuers]]`).
    pub fn issuers(&self) -> &[Issuer] {
        &self.issuers
    }

    /// The `[[callers]]` entry pinned to `subject` of `issuer`'s tokens, if
    /// any: it names that caller instead of the issuer's claim mapping.
    pub fn subject_caller(&self, issuer: &str, subject: &str) -> Option<&Principal> {
        self.callers.subject_caller(issuer, subject)
    }

    /// Whether anonymous callers are accepted.
    pub fn allows_anonymous(&self) -> bool {
        self.callers.allows_anonymous()
    }

    /// The rate limits and concurrency quotas, with their live state.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// Who may approve and how long approvals live, for the approval book.
    pub fn approval_settings(&self) -> ApprovalSettings {
        self.approval.settings.clone()
    }

    /// Which tool stands in for which (`[[fallbacks]]`).
    pub fn fallbacks(&self) -> &FallbackPolicy {
        &self.fallbacks
    }

    /// Which tools' results a dispatcher may reuse (`[cache]`).
    pub fn cache(&self) -> &CachePolicy {
        &self.cache
    }

    /// Whether any grant narrows a tool's arguments.
    pub fn narrows_any(&self) -> bool {
        self.narrowed
    }

    /// How grant `rule` narrows `tool`'s input schema, if it does. Free
    /// when no grant narrows anything.
    pub fn narrowing(&self, rule: &str, tool: &str) -> Option<&Arc<Narrowing>> {
        if !self.narrowed {
            return None;
        }
        self.grants
            .iter()
            .find(|g| g.name == rule)
            .and_then(|g| g.narrowings.get(tool))
    }

    /// The names of the grants, in file order.
    pub fn grant_names(&self) -> impl Iterator<Item = &str> {
        self.grants.iter().map(|g| g.name.as_str())
    }
}

/// Static tokens and certificate names only.
impl Identify for Policy {
    fn identify(
        &self,
        bearer: Option<&str>,
        certificate_valid_for: Option<&dyn Fn(&str) -> bool>,
    ) -> Result<Principal, AuthError> {
        self.callers.identify(bearer, certificate_valid_for)
    }
}
