//! Callers known in advance: by static bearer token, by client-certificate name, by an issuer's exact subject; and the anonymous caller.

use crate::{AuthError, Token};
use std::collections::HashMap;
use toolmesh::Principal;

/// Callers by the SHA-256 of their token.
type TokenCallers = HashMap<[u8; 32], Principal>;
/// Callers by the name their client certificate is valid for.
type CertificateCallers = Vec<(String, Principal)>;
/// Callers by the issuer and exact subject (`sub`) of their JWT.
type SubjectCallers = HashMap<(String, String), Principal>;

/// The callers a policy names (`[[callers]]` and `[auth]`), each already
/// validated; immutable once built.
#[derive(Debug, Clone)]
pub struct Callers {
    allow_anonymous: bool,
    anonymous: Principal,
    tokens: TokenCallers,
    /// Callers identified by their mTLS client certificate: (name, who).
    certificates: CertificateCallers,
    /// Callers pinned to one subject of an issuer's JWTs.
    subjects: SubjectCallers,
}

impl Callers {
    /// No caller yet; `anonymous` serves callers with no token when
    /// `allow_anonymous` is set.
    pub fn new(allow_anonymous: bool, anonymous: Principal) -> Callers {
        Callers {
            allow_anonymous,
            anonymous,
            tokens: HashMap::new(),
            certificates: Vec::new(),
            subjects: HashMap::new(),
        }
    }

    /// Adds the caller holding the token whose SHA-256 is `digest`.
    pub fn add_token(&mut self, digest: [u8; 32], who: Principal) {
        self.tokens.insert(digest, who);
    }

    /// Adds the caller whose client certificate is valid for `name` (as
    /// [`tls_name`] normalizes it).
    pub fn add_certificate(&mut self, name: String, who: Principal) {
        self.certificates.push((name, who));
    }

    /// Adds the caller pinned to `subject` of `issuer`'s tokens.
    pub fn add_subject(&mut self, issuer: String, subject: String, who: Principal) {
        self.subjects.insert((issuer, subject), who);
    }

    /// How many callers hold a static token.
    pub fn token_count(&self) -> usize {
        self.tokens.len()
    }

    /// Whether anonymous callers are accepted.
    pub fn allows_anonymous(&self) -> bool {
        self.allow_anonymous
    }

    /// Identifies a caller from the value of its `authorization` header
    /// (with or without the `Bearer ` prefix). No token (or an empty one)
    /// is the anonymous principal when allowed; an unknown token is always
    /// an error, never anonymous.
    pub fn authenticate(&self, bearer: Option<&str>) -> Result<Principal, AuthError> {
        let token = bearer.and_then(toolmesh_transport::bearer_token);
        let Some(token) = token else {
            return if self.allow_anonymous {
                Ok(self.anonymous.clone())
            } else {
                Err(AuthError::MissingToken)
            };
        };
        let token = Token::read(token)?;
        self.holding(&token).cloned().ok_or_else(|| token.unknown())
    }

    /// The static caller holding `token`, if any.
    pub fn holding(&self, token: &Token<'_>) -> Option<&Principal> {
        self.tokens.get(token.digest())
    }

    /// The caller whose `tls_name` the peer's (already verified) client
    /// certificate is valid for, if any; `valid_for` answers that per name.
    pub fn authenticate_tls(&self, valid_for: impl Fn(&str) -> bool) -> Option<Principal> {
        self.certificates
            .iter()
            .find(|(name, _)| valid_for(name))
            .map(|(_, who)| who.clone())
    }

    /// The caller pinned to `subject` of `issuer`'s tokens, if any: it
    /// names that caller instead of the issuer's claim mapping.
    pub fn subject_caller(&self, issuer: &str, subject: &str) -> Option<&Principal> {
        if self.subjects.is_empty() {
            return None;
        }
        self.subjects.get(&(issuer.to_owned(), subject.to_owned()))
    }
}

/// Identifies a caller from its bearer token or certificate; the registry's
/// access rules ([`crate::registry_access`]) ask it.
pub trait Identify {
    /// The caller: bearer token first, then the names a verified client
    /// certificate is valid for (`certificate_valid_for`), else anonymous.
    fn identify(
        &self,
        bearer: Option<&str>,
        certificate_valid_for: Option<&dyn Fn(&str) -> bool>,
    ) -> Result<Principal, AuthError>;
}

/// Static tokens and certificate names only: the bearer token's principal;
/// with no token, the one a verified client certificate names; else the
/// anonymous caller where admitted.
impl Identify for Callers {
    fn identify(
        &self,
        bearer: Option<&str>,
        certificate_valid_for: Option<&dyn Fn(&str) -> bool>,
    ) -> Result<Principal, AuthError> {
        if bearer.is_none()
            && let Some(valid_for) = certificate_valid_for
            && let Some(who) = self.authenticate_tls(valid_for)
        {
            return Ok(who);
        }
        self.authenticate(bearer)
    }
}

/// A `tls_name` as matched: a DNS name in lowercase, or a SPIFFE ID as
/// written (its path is case-sensitive); `None` when it is neither.
pub fn tls_name(written: &str) -> Option<String> {
    let name = written.trim();
    if name.starts_with("spiffe://") {
        return toolmesh_transport::is_spiffe_id(name).then(|| name.to_owned());
    }
    let dns = name.to_ascii_lowercase();
    (!dns.is_empty() && !dns.contains(char::is_whitespace)).then_some(dns)
}
