//! Why a caller could not be identified, and why an issuer's keys could not be had; each message says how to fix it.

use std::path::PathBuf;

/// Why a caller could not be identified. The message is safe to return to
/// the caller: it never echoes the token.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    /// No token, and this mesh does not accept anonymous callers.
    #[error(
        "no bearer token: this mesh does not accept anonymous callers; send the request metadata \
         `authorization: Bearer <token>` with a token an operator listed under [[callers]] in the policy"
    )]
    MissingToken,
    /// A token was sent but no `[[callers]]` entry has it.
    #[error(
        "the bearer token (sha256 {digest_prefix}…) is not known to this mesh: check that the whole \
         token was sent, or ask an operator to add it under [[callers]] (token_sha256 keeps it out of the file)"
    )]
    UnknownToken {
        /// The first 12 hex digits of the token's SHA-256, to find it in logs without revealing it.
        digest_prefix: String,
    },
    /// An `authorization` header that is not `Bearer` and one token
    /// (`Bearer Bearer …`, two tokens, a token with spaces).
    #[error(
        "the authorization header must be `Bearer` followed by one token and nothing else: \
         send `authorization: Bearer <token>`"
    )]
    MalformedHeader,
    /// A JWT issued later than now, past the clock skew allowed.
    #[error(
        "the token says it was issued in the future (its `iat` is later than now, past the clock skew allowed): \
         check the clocks of the issuer and of this mesh"
    )]
    IssuedInTheFuture,
    /// A JWT whose header marks as critical an extension this mesh does not
    /// implement (RFC 7515 §4.1.11: it must then be refused).
    #[error(
        "the token's header marks extensions as critical (`crit`) that this mesh does not implement: \
         ask the identity provider for a token without them"
    )]
    CriticalExtension,
    /// A token longer than any identity provider's JWT; not parsed.
    #[error(
        "the bearer token is longer than {max} bytes, far beyond any JWT: send the token your identity provider issued"
    )]
    TokenTooLarge {
        /// The most bytes read.
        max: usize,
    },
    /// A JWT-shaped token that is not a well-formed JWT.
    #[error("the bearer token is not a well-formed JWT: {why}")]
    MalformedToken {
        /// What is missing or malformed.
        why: String,
    },
    /// A JWT from an issuer no `[[issuers]]` entry trusts.
    #[error(
        "the token's issuer {issuer:?} is not trusted by this mesh: use a token from a trusted identity provider, \
         or ask an operator to add that issuer under [[issuers]]"
    )]
    UnknownIssuer {
        /// The token's `iss`, shortened.
        issuer: String,
    },
    /// A JWT signed with an algorithm its issuer's entry (or its key) does not allow.
    #[error(
        "the token is signed with an algorithm{} this mesh does not accept from its issuer: \
         tokens must be signed with RS256, ES256 or EdDSA by the issuer's published keys",
        if algorithm.is_empty() { String::new() } else { format!(" ({algorithm})") }
    )]
    AlgorithmNotAllowed {
        /// The header's `alg`, when known.
        algorithm: String,
    },
    /// A JWT whose `kid` names no key its issuer publishes.
    #[error(
        "the token is signed with a key its issuer does not publish: get a fresh token; \
         if the issuer has just rotated its keys, retry in a minute"
    )]
    UnknownKey,
    /// The issuer's keys could not be fetched (yet, or for too long).
    #[error(
        "the keys of the token's issuer are not available to this mesh right now: retry shortly; \
         if it persists, an operator should check that the issuer's JWKS can be fetched"
    )]
    IssuerKeysUnavailable,
    /// A JWT whose signature does not verify.
    #[error(
        "the token's signature does not verify against its issuer's key: it was altered or not issued by that issuer"
    )]
    BadSignature,
    /// A JWT past its `exp`.
    #[error("the token has expired: get a fresh one from your identity provider")]
    TokenExpired,
    /// A JWT before its `nbf`.
    #[error(
        "the token is not valid yet (its `nbf` is in the future): check the clocks, or retry later"
    )]
    TokenNotYetValid,
    /// A JWT minted for another service.
    #[error(
        "the token was not issued for this mesh: its `aud` names none of the audiences this mesh accepts; \
         request a token for this mesh's audience"
    )]
    WrongAudience,
}

impl AuthError {
    /// Whether the caller may simply retry: its token could not be checked
    /// yet (the issuer's keys are being fetched), not found wanting.
    pub fn is_transient(&self) -> bool {
        matches!(self, AuthError::IssuerKeysUnavailable)
    }
}

/// Why an issuer's keys could not be fetched or read, or why an
/// `algorithms` entry is refused. The messages name the file or URL and
/// what to do, as the issuer's key status shows them to operators.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IssuerError {
    /// No HTTP client could be built.
    #[error("no HTTP client: {0}")]
    NoClient(String),
    /// `jwks_ca_file` could not be read.
    #[error("cannot read jwks_ca_file {}: {why}", path.display())]
    UnreadableCaFile {
        /// The file.
        path: PathBuf,
        /// What the OS said.
        why: String,
    },
    /// `jwks_ca_file` holds no PEM certificate.
    #[error("jwks_ca_file {} holds no PEM certificate: {why}", path.display())]
    NoCertificate {
        /// The file.
        path: PathBuf,
        /// What the PEM parser said.
        why: String,
    },
    /// No HTTP client trusting `jwks_ca_file` could be built.
    #[error("no HTTP client with jwks_ca_file {}: {why}", path.display())]
    NoClientWithCa {
        /// The file.
        path: PathBuf,
        /// What the client builder said.
        why: String,
    },
    /// `jwks_bearer_file` could not be read.
    #[error("cannot read jwks_bearer_file {}: {why}", path.display())]
    UnreadableBearerFile {
        /// The file.
        path: PathBuf,
        /// What the OS said.
        why: String,
    },
    /// `jwks_file` could not be read.
    #[error("cannot read {}: {why}", path.display())]
    UnreadableKeyFile {
        /// The file.
        path: PathBuf,
        /// What the OS said.
        why: String,
    },
    /// A fetch was asked of a key source that is a file.
    #[error("no HTTP client for a file")]
    NotFetched,
    /// The GET failed or was refused.
    #[error("GET {url}: {why}")]
    Http {
        /// What was fetched.
        url: String,
        /// The transport error chain, or the HTTP status.
        why: String,
    },
    /// The answer of a GET was too large.
    #[error("GET {url}: the answer is larger than {max} bytes")]
    TooLarge {
        /// What was fetched.
        url: String,
        /// The limit, in bytes.
        max: usize,
    },
    /// The discovery document could not be parsed.
    #[error("the discovery document is not OpenID provider metadata ({0})")]
    NotDiscovery(String),
    /// The discovery document is another issuer's.
    #[error("the discovery document names the issuer {found:?}, not {expected:?}")]
    OtherIssuer {
        /// The issuer it names.
        found: String,
        /// The issuer asked for.
        expected: String,
    },
    /// The discovery document sends key fetches over plain http:// elsewhere.
    #[error(
        "the discovery document names {0}, plain http:// to another host: keys are fetched only over https://"
    )]
    PlainHttpKeys(String),
    /// The key set document is larger than allowed.
    #[error("the key set is larger than {0} bytes")]
    KeySetTooLarge(usize),
    /// The document is not a JWKS.
    #[error("not a JSON Web Key Set ({0})")]
    NotKeySet(String),
    /// The key set holds no key a token could be verified with.
    #[error("the key set holds no RSA, P-256 or Ed25519 signature key")]
    NoUsableKey,
    /// `none` in `algorithms`.
    #[error("\"none\" would accept unsigned tokens: list only \"RS256\", \"ES256\" or \"EdDSA\"")]
    UnsignedAlgorithm,
    /// An HMAC algorithm in `algorithms`.
    #[error(
        "{0:?} is an HMAC (shared-secret) algorithm, which an identity provider's public keys must never verify: list only \"RS256\", \"ES256\" or \"EdDSA\""
    )]
    HmacAlgorithm(String),
    /// Any other algorithm name.
    #[error("{0:?} is not accepted: list only \"RS256\", \"ES256\" or \"EdDSA\"")]
    UnknownAlgorithm(String),
}

impl IssuerError {
    /// `jwks_file` at `path` could not be read, as `error` says.
    pub(crate) fn unreadable_key_file(path: &std::path::Path, error: &std::io::Error) -> Self {
        IssuerError::UnreadableKeyFile {
            path: path.to_owned(),
            why: error.to_string(),
        }
    }
}
