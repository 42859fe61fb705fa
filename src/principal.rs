//! Who is calling: the identity a bearer token (or anonymity) maps to.

use serde::{Deserialize, Serialize};
use std::fmt;

/// An authenticated (or anonymous) caller.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Principal {
    /// The principal's name, e.g. `support-bot`.
    pub name: String,
    /// The tenant it acts for, e.g. `acme`.
    pub tenant: String,
    /// Its roles, which grants and approvals refer to.
    pub roles: Vec<String>,
    /// True when the caller sent no token and the policy allows anonymity.
    pub anonymous: bool,
    /// For a caller known by a JWT of an `[[issuers]]` entry: that issuer
    /// and the token's subject (audit records carry both).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub issued_by: Option<IssuedBy>,
}

/// The issuer and subject of the token a caller was identified by.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct IssuedBy {
    /// The token's `iss`.
    pub issuer: String,
    /// The token's `sub`.
    pub subject: String,
    /// The OAuth scopes its issuer requires that the token does not carry.
    #[serde(default, skip_serializing_if = "MissingScopes::is_empty")]
    pub missing_scopes: MissingScopes,
    /// When the token expires (its `exp`, Unix seconds): a stream opened
    /// with it ends then.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<u64>,
}

/// The scopes an issuer requires for listing and calling tools
/// (`list_scope`, `call_scope`) that a token lacks.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct MissingScopes {
    /// The scope listing tools needs, when the token lacks it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub list: Option<String>,
    /// The scope calling tools needs, when the token lacks it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call: Option<String>,
}

impl MissingScopes {
    /// Whether the token carries every scope required.
    pub fn is_empty(&self) -> bool {
        self.list.is_none() && self.call.is_none()
    }

    /// What a caller whose token lacks `scope` for `action` (e.g. "calling
    /// tools") is told, on every door.
    pub fn refusal(action: &str, scope: &str) -> String {
        format!(
            "{action} needs the OAuth scope {scope:?}, which your token does not carry: ask your identity provider for a token with that scope"
        )
    }
}

impl Principal {
    /// The scope listing tools needs that the caller's token lacks, if any.
    pub fn missing_list_scope(&self) -> Option<&str> {
        self.issued_by.as_ref()?.missing_scopes.list.as_deref()
    }

    /// When the token the caller was identified by expires, if it does.
    pub fn expires_at(&self) -> Option<std::time::SystemTime> {
        let secs = self.issued_by.as_ref()?.expires_at?;
        std::time::UNIX_EPOCH.checked_add(std::time::Duration::from_secs(secs))
    }

    /// The scope calling tools needs that the caller's token lacks, if any.
    pub fn missing_call_scope(&self) -> Option<&str> {
        self.issued_by.as_ref()?.missing_scopes.call.as_deref()
    }

    /// Whether the principal holds `role`.
    pub fn has_role(&self, role: &str) -> bool {
        self.roles.iter().any(|r| r == role)
    }

    /// Whether the principal holds any of `roles`.
    pub fn has_any_role(&self, roles: &[String]) -> bool {
        roles.iter().any(|r| self.has_role(r))
    }

    /// `tenant/name`: a key unique across tenants, e.g. for governance's
    /// rate limits.
    pub fn key(&self) -> String {
        format!("{}/{}", self.tenant, self.name)
    }

    /// The same principal-and-tenant pair (roles aside).
    pub fn same_identity(&self, other: &Principal) -> bool {
        self.name == other.name && self.tenant == other.tenant
    }
}

impl fmt::Display for Principal {
    /// `support-bot (tenant acme, roles agent, support)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (", self.name)?;
        if self.anonymous {
            f.write_str("anonymous, ")?;
        }
        write!(f, "tenant {}, ", self.tenant)?;
        if self.roles.is_empty() {
            f.write_str("no roles)")
        } else {
            write!(f, "roles {})", self.roles.join(", "))
        }
    }
}

/// A principal as shared records carry it (`toolmesh.v1.Principal`).
impl From<&Principal> for crate::pb::Principal {
    fn from(who: &Principal) -> Self {
        crate::pb::Principal {
            name: who.name.clone(),
            tenant: who.tenant.clone(),
            roles: who.roles.clone(),
            anonymous: who.anonymous,
            issuer: who
                .issued_by
                .as_ref()
                .map(|by| by.issuer.clone())
                .unwrap_or_default(),
            subject: who
                .issued_by
                .as_ref()
                .map(|by| by.subject.clone())
                .unwrap_or_default(),
        }
    }
}

impl From<crate::pb::Principal> for Principal {
    fn from(who: crate::pb::Principal) -> Self {
        Principal {
            name: who.name,
            tenant: who.tenant,
            roles: who.roles,
            anonymous: who.anonymous,
            issued_by: (!who.issuer.is_empty()).then_some(IssuedBy {
                issuer: who.issuer,
                subject: who.subject,
                missing_scopes: MissingScopes::default(),
                expires_at: None,
            }),
        }
    }
}
