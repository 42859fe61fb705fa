//! Identity providers whose signed JWTs name callers (`[[issuers]]`): their settings, their cached keys, and verification.

mod fetch;
mod keys;
mod store;
mod verified;
mod verify;

pub use keys::KeySet;
pub use store::{IssuerKeys, KeyStatus};
pub use verified::MAX_VERIFIED_TOKENS;
pub use verify::MAX_TOKEN_BYTES;
pub use verify::{looks_like_jwt, verify};

use crate::IssuerError;
pub use jsonwebtoken::Algorithm;
use std::{collections::BTreeMap, path::PathBuf, time::Duration};

/// Algorithms an issuer accepts when `algorithms` is not set.
pub const DEFAULT_ALGORITHMS: [&str; 3] = ["RS256", "ES256", "EdDSA"];
/// Clock skew tolerated on `exp` and `nbf` when `clock_skew_secs` is not set.
pub const DEFAULT_CLOCK_SKEW_SECS: u64 = 60;
/// The largest `clock_skew_secs` accepted.
pub const MAX_CLOCK_SKEW_SECS: u64 = 600;
/// How often keys are fetched again when `refresh_secs` is not set.
pub const DEFAULT_REFRESH_SECS: u64 = 300;
/// The fewest seconds between two fetches prompted by unknown `kid`s, when
/// `min_refresh_secs` is not set.
pub const DEFAULT_MIN_REFRESH_SECS: u64 = 30;
/// How long the last good keys serve while the JWKS cannot be fetched,
/// when `max_stale_secs` is not set (six hours).
pub const DEFAULT_MAX_STALE_SECS: u64 = 6 * 60 * 60;

/// Where an issuer's public keys come from.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum KeySource {
    /// `jwks_uri` from the issuer's `/.well-known/openid-configuration`.
    Discovery,
    /// A JWKS URL.
    Uri(String),
    /// A local JWKS file (read at load and on each refresh).
    File(PathBuf),
}

/// How fetches of an issuer's keys authenticate (a cluster's API server
/// serves its service-account JWKS under its own CA, to callers with a token).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct FetchAuth {
    /// A PEM file of CA certificates trusted for the fetch, besides the system's.
    pub ca_file: Option<PathBuf>,
    /// A file holding a bearer token sent with the fetch, read at each fetch.
    pub bearer_file: Option<PathBuf>,
}

/// The tenant of an issuer's callers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TenantFrom {
    /// The same for every caller of the issuer.
    Fixed(String),
    /// A string claim of the token.
    Claim(String),
}

/// One validated `[[issuers]]` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Issuer {
    /// The `iss` its tokens carry (also the discovery base).
    pub issuer: String,
    /// A token must name one of these in `aud`.
    pub audiences: Vec<String>,
    /// Where its keys come from.
    pub keys: KeySource,
    /// How key fetches authenticate.
    pub fetch: FetchAuth,
    /// Signature algorithms accepted (never `none`, never HMAC).
    pub algorithms: Vec<Algorithm>,
    /// Seconds of clock skew tolerated on `exp` and `nbf`.
    pub clock_skew_secs: u64,
    /// How often keys are fetched again.
    pub refresh: Duration,
    /// The fewest seconds between two fetches prompted by unknown `kid`s.
    pub min_refresh: Duration,
    /// How long the last good keys serve while the source fails.
    pub max_stale: Duration,
    /// The claim naming the principal (`sub` unless set).
    pub principal_claim: String,
    /// The tenant of its callers.
    pub tenant: TenantFrom,
    /// The claim holding a list (or a space-separated string) of roles.
    pub roles_claim: Option<String>,
    /// Roles every caller of this issuer has.
    pub roles: Vec<String>,
    /// Claim values to role names; when set, values not in it give no role.
    pub role_map: BTreeMap<String, String>,
    /// The OAuth scope (`scope`/`scp` claim) a token needs to list tools.
    pub list_scope: Option<String>,
    /// The OAuth scope a token needs to call tools.
    pub call_scope: Option<String>,
}

impl Issuer {
    /// The cache key of its keys: the same issuer and source keep their
    /// cached keys across a policy reload.
    pub fn key_id(&self) -> (String, KeySource, FetchAuth) {
        (self.issuer.clone(), self.keys.clone(), self.fetch.clone())
    }
}

/// An accepted algorithm name; `none` and the HMAC family are refused,
/// since a public key must never serve as a shared secret.
pub fn parse_algorithm(name: &str) -> Result<Algorithm, IssuerError> {
    match name {
        "RS256" => Ok(Algorithm::RS256),
        "ES256" => Ok(Algorithm::ES256),
        "EdDSA" => Ok(Algorithm::EdDSA),
        n if n.eq_ignore_ascii_case("none") => Err(IssuerError::UnsignedAlgorithm),
        n if n.to_ascii_uppercase().starts_with("HS") => {
            Err(IssuerError::HmacAlgorithm(n.to_owned()))
        }
        n => Err(IssuerError::UnknownAlgorithm(n.to_owned())),
    }
}

/// Whether `url` is plain `http://` to a host other than this machine.
pub fn plain_http_elsewhere(url: &str) -> bool {
    let Some(rest) = url.strip_prefix("http://") else {
        return false;
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let host = match authority.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or_default(),
        None => authority.split(':').next().unwrap_or_default(),
    };
    !matches!(host, "127.0.0.1" | "localhost" | "::1")
}
