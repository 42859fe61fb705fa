//! The policy file as written: serde structs mirroring the TOML, before validation.

use crate::error::RiskError;
use serde::Deserialize;
use std::collections::BTreeMap;
use toml::Spanned;
use toolmesh::pb::RiskLevel;

pub(crate) use toolmesh_identity::DEFAULT_TENANT;

/// The whole file. Unknown tables and keys are errors, so a typo such as
/// `[[grant]]` or `rol = [...]` is reported instead of silently ignored.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawPolicy {
    #[serde(default)]
    pub(crate) auth: RawAuth,
    #[serde(default)]
    pub(crate) callers: Vec<Spanned<RawCaller>>,
    #[serde(default)]
    pub(crate) grants: Vec<Spanned<RawGrant>>,
    #[serde(default)]
    pub(crate) approval: RawApproval,
    #[serde(default)]
    pub(crate) limits: Vec<Spanned<RawLimit>>,
    #[serde(default)]
    pub(crate) cache: crate::cache_policy::RawCache,
    #[serde(default)]
    pub(crate) fallbacks: Vec<Spanned<crate::fallback_policy::RawFallback>>,
    #[serde(default)]
    pub(crate) issuers: Vec<Spanned<RawIssuer>>,
}

/// `[auth]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawAuth {
    #[serde(default)]
    pub(crate) allow_anonymous: bool,
    pub(crate) anonymous: Option<Spanned<RawIdentity>>,
}

/// `[auth.anonymous]`: who a caller without a token is.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawIdentity {
    pub(crate) principal: String,
    pub(crate) tenant: Option<String>,
    #[serde(default)]
    pub(crate) roles: Vec<String>,
}

/// One `[[callers]]` entry.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawCaller {
    pub(crate) token: Option<Spanned<String>>,
    pub(crate) token_sha256: Option<Spanned<String>>,
    /// A DNS name the caller's TLS client certificate is valid for (mTLS).
    pub(crate) tls_name: Option<Spanned<String>>,
    /// With `subject`: the `[[issuers]]` entry whose JWT names this caller.
    pub(crate) issuer: Option<Spanned<String>>,
    /// With `issuer`: the token's exact `sub` (e.g. a Kubernetes service
    /// account's `system:serviceaccount:NS:NAME`).
    pub(crate) subject: Option<Spanned<String>>,
    pub(crate) principal: String,
    pub(crate) tenant: Option<String>,
    #[serde(default)]
    pub(crate) roles: Vec<String>,
}

/// One `[[grants]]` entry.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawGrant {
    pub(crate) name: Spanned<String>,
    #[serde(default)]
    pub(crate) roles: Vec<String>,
    #[serde(default)]
    pub(crate) tenants: Vec<String>,
    #[serde(default)]
    pub(crate) principals: Vec<String>,
    #[serde(default)]
    pub(crate) tools: Vec<Spanned<String>>,
    #[serde(default)]
    pub(crate) tags: Vec<String>,
    pub(crate) max_risk: Option<RiskName>,
    /// `[grants.arguments.TOOL]`: per-property bounds narrowing that
    /// tool's input schema for this grant's callers.
    #[serde(default)]
    pub(crate) arguments: BTreeMap<String, Spanned<BTreeMap<String, RawFieldLimit>>>,
}

/// One property's bounds in `[grants.arguments.TOOL]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawFieldLimit {
    pub(crate) minimum: Option<f64>,
    pub(crate) maximum: Option<f64>,
    #[serde(rename = "enum")]
    pub(crate) one_of: Option<Vec<toml::Value>>,
    pub(crate) max_length: Option<u64>,
}

/// `[approval]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawApproval {
    pub(crate) approver_roles: Option<Spanned<Vec<String>>>,
    pub(crate) ttl_secs: Option<Spanned<u64>>,
    pub(crate) max_open_per_caller: Option<Spanned<u64>>,
    pub(crate) require_for_risk: Option<RiskThreshold>,
    #[serde(default)]
    pub(crate) require_for_tools: Vec<Spanned<String>>,
    #[serde(default)]
    pub(crate) pre_approved_principals: Vec<String>,
}

/// One `[[limits]]` entry.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawLimit {
    pub(crate) tool: Option<Spanned<String>>,
    #[serde(default)]
    pub(crate) per: Scope,
    pub(crate) rate_per_sec: Option<Spanned<f64>>,
    pub(crate) burst: Option<Spanned<u32>>,
    pub(crate) max_concurrent: Option<Spanned<u32>>,
}

/// Who shares one bucket of a `[[limits]]` entry.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Scope {
    /// Each caller has its own bucket (and concurrency count).
    #[default]
    Caller,
    /// Each tool has one bucket shared by every caller.
    Tool,
}

/// A risk name as written in the file: `LOW`, `MEDIUM` or `HIGH`.
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(try_from = "String")]
pub(crate) struct RiskName(pub(crate) RiskLevel);

impl TryFrom<String> for RiskName {
    type Error = RiskError;
    fn try_from(text: String) -> Result<Self, RiskError> {
        match parse_risk(&text) {
            Some(risk) => Ok(RiskName(risk)),
            None => Err(RiskError::Level(text)),
        }
    }
}

/// `require_for_risk`: a risk name, or `NONE` for "never because of risk".
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(try_from = "String")]
pub(crate) struct RiskThreshold(pub(crate) Option<RiskLevel>);

impl TryFrom<String> for RiskThreshold {
    type Error = RiskError;
    fn try_from(text: String) -> Result<Self, RiskError> {
        if text.eq_ignore_ascii_case("none") {
            return Ok(RiskThreshold(None));
        }
        match parse_risk(&text) {
            Some(risk) => Ok(RiskThreshold(Some(risk))),
            None => Err(RiskError::Threshold(text)),
        }
    }
}

fn parse_risk(text: &str) -> Option<RiskLevel> {
    match text.to_ascii_uppercase().as_str() {
        "LOW" => Some(RiskLevel::Low),
        "MEDIUM" => Some(RiskLevel::Medium),
        "HIGH" => Some(RiskLevel::High),
        _ => None,
    }
}

/// The upper-case name of a risk level (`UNSPECIFIED` reads as `LOW`).
pub(crate) fn risk_name(risk: RiskLevel) -> &'static str {
    match risk {
        RiskLevel::Unspecified | RiskLevel::Low => "LOW",
        RiskLevel::Medium => "MEDIUM",
        RiskLevel::High => "HIGH",
    }
}

/// One `[[issuers]]` entry as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawIssuer {
    pub(crate) issuer: Spanned<String>,
    #[serde(default)]
    pub(crate) audiences: Vec<Spanned<String>>,
    pub(crate) jwks_uri: Option<Spanned<String>>,
    pub(crate) jwks_file: Option<Spanned<String>>,
    pub(crate) jwks_ca_file: Option<Spanned<String>>,
    pub(crate) jwks_bearer_file: Option<Spanned<String>>,
    pub(crate) algorithms: Option<Vec<Spanned<String>>>,
    pub(crate) clock_skew_secs: Option<Spanned<u64>>,
    pub(crate) refresh_secs: Option<Spanned<u64>>,
    pub(crate) min_refresh_secs: Option<Spanned<u64>>,
    pub(crate) max_stale_secs: Option<Spanned<u64>>,
    pub(crate) principal_claim: Option<Spanned<String>>,
    pub(crate) tenant: Option<Spanned<String>>,
    pub(crate) tenant_claim: Option<Spanned<String>>,
    pub(crate) roles_claim: Option<Spanned<String>>,
    #[serde(default)]
    pub(crate) roles: Vec<String>,
    #[serde(default)]
    pub(crate) role_map: BTreeMap<String, String>,
    pub(crate) list_scope: Option<Spanned<String>>,
    pub(crate) call_scope: Option<Spanned<String>>,
}
