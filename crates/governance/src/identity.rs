//! Who a caller is, for every door and for the registry alike: the live
//! policy's static tokens and certificate names, then the JWTs of its
//! `[[issuers]]` against keys kept across reloads.

use crate::PolicyHandle;
use std::sync::Arc;
use toolmesh_identity::issuers::{self, IssuerKeys, KeyStatus};
use toolmesh_identity::{AuthError, Identify, Principal, Token};
use toolmesh_policy::Policy;
use toolmesh_transport::PeerCertificate;

/// Identifies callers by the policy in force. Cheap to clone: every clone
/// shares the issuers' key cache.
#[derive(Clone)]
pub struct Identity {
    policy: Arc<PolicyHandle>,
    keys: Arc<IssuerKeys>,
}

impl std::fmt::Debug for Identity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Identity").finish_non_exhaustive()
    }
}

impl Identity {
    /// Identity by `policy`; the keys of its issuers are fetched from now,
    /// so the first JWT caller finds them.
    pub fn new(policy: Arc<PolicyHandle>) -> Identity {
        let keys = Arc::new(IssuerKeys::default());
        keys.follow(policy.generation(), policy.current().issuers());
        Identity { policy, keys }
    }

    /// The policy it identifies by.
    pub fn policy(&self) -> &Arc<PolicyHandle> {
        &self.policy
    }

    /// How the keys of each `[[issuers]]` entry stand (health, metrics).
    pub fn issuer_keys(&self) -> Arc<IssuerKeys> {
        self.keys.clone()
    }

    /// How the keys of each `[[issuers]]` entry of the policy in force
    /// stand (a reload is followed even before the next JWT arrives).
    pub fn issuer_status(&self) -> Vec<KeyStatus> {
        self.current();
        self.keys.status()
    }

    /// The policy in force, its issuers' key stores following it.
    fn current(&self) -> Arc<Policy> {
        // The generation before the policy: a reload in between is seen
        // again on the next call (the handle stores, then counts).
        let generation = self.policy.generation();
        let policy = self.policy.current();
        self.keys.follow(generation, policy.issuers());
        policy
    }

    /// The caller: its bearer token (a static `[[callers]]` token first, as
    /// fast as without issuers; else a JWT of an issuer, verified against
    /// cached keys), else the verified mTLS client certificate matched
    /// against the policy's `tls_name`s, else the anonymous caller where
    /// the policy admits one.
    pub fn authenticate(
        &self,
        bearer: Option<&str>,
        certificate: Option<&PeerCertificate>,
    ) -> Result<Principal, AuthError> {
        let valid_for = certificate.map(|cert| move |name: &str| cert.is_valid_for(name));
        self.identify(
            bearer,
            valid_for.as_ref().map(|f| f as &dyn Fn(&str) -> bool),
        )
    }
}

/// Static tokens, certificate names and the JWTs of the policy's issuers.
impl Identify for Identity {
    fn identify(
        &self,
        bearer: Option<&str>,
        certificate_valid_for: Option<&dyn Fn(&str) -> bool>,
    ) -> Result<Principal, AuthError> {
        let policy = self.current();
        let token = match bearer.and_then(toolmesh_transport::bearer_token) {
            Some(text) if !policy.issuers().is_empty() => Token::read(text)?,
            // No issuers: static tokens and certificates only.
            _ => return policy.identify(bearer, certificate_valid_for),
        };
        // A static token first (as fast as without issuers), then a JWT;
        // the token is hashed once for both lookups.
        if let Some(who) = policy.callers().holding(&token) {
            return Ok(who.clone());
        }
        if issuers::looks_like_jwt(token.text()) {
            return issuers::verify(&token, policy.issuers(), policy.callers(), &self.keys);
        }
        Err(token.unknown())
    }
}
