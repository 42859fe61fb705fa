//! `[[callers]]`: each caller known by one of a token (or its SHA-256), a client-certificate name, or an issuer's exact JWT subject.

use super::Builder;
use crate::config::RawCaller;
use std::collections::HashMap;
use std::ops::Range;
use toml::Spanned;
use toolmesh::digest::{parse_sha256_hex, sha256};
use toolmesh_identity::issuers::Issuer;
use toolmesh_identity::{Callers, Principal, tls_name};

/// What earlier entries claimed, so a later one claiming it again is refused.
#[derive(Default)]
struct Claimed {
    /// Token digests: the entry number, its line and its principal.
    tokens: HashMap<[u8; 32], (usize, usize, String)>,
    /// (issuer, subject) pairs: the line of the entry pinning them.
    subjects: HashMap<(String, String), usize>,
}

/// The field `key` of `[[callers]]` entry `n`.
fn field(n: usize, key: &str) -> String {
    format!("[[callers]] #{n} {key}")
}

impl Builder<'_> {
    /// Every `[[callers]]` entry into `callers`; `issuers` are those a
    /// subject entry may name.
    pub(super) fn callers(
        &mut self,
        raw: Vec<Spanned<RawCaller>>,
        issuers: &[Issuer],
        callers: &mut Callers,
    ) {
        let mut claimed = Claimed::default();
        for (i, entry) in raw.into_iter().enumerate() {
            let n = i + 1;
            let span = entry.span();
            let c = entry.into_inner();
            if c.principal.trim().is_empty() {
                self.problem(
                    Some(span.clone()),
                    field(n, "principal"),
                    "is empty: name who holds this token, e.g. \"support-bot\"",
                );
            }
            if c.issuer.is_some() || c.subject.is_some() {
                self.subject_caller(c, &span, n, issuers, &mut claimed, callers);
            } else if c.tls_name.is_some() {
                self.certificate_caller(c, &span, n, callers);
            } else {
                self.token_caller(c, &span, n, &mut claimed, callers);
            }
        }
    }

    /// An entry naming the issuer and exact subject of a JWT.
    fn subject_caller(
        &mut self,
        c: RawCaller,
        span: &Range<usize>,
        n: usize,
        issuers: &[Issuer],
        claimed: &mut Claimed,
        callers: &mut Callers,
    ) {
        let (Some(issuer), Some(subject)) = (&c.issuer, &c.subject) else {
            self.problem(
                Some(span.clone()),
                field(n, if c.issuer.is_some() { "subject" } else { "issuer" }),
                "is missing: a caller known by its JWT names both the issuer (an [[issuers]] entry's `issuer`) and the token's exact subject (`sub`)",
            );
            return;
        };
        if c.token.is_some() || c.token_sha256.is_some() || c.tls_name.is_some() {
            self.problem(
                Some(subject.span()),
                field(n, "subject"),
                "is set together with a token or tls_name: a caller is identified by one of them, so use several entries",
            );
            return;
        }
        let key = (
            issuer.get_ref().trim().to_owned(),
            subject.get_ref().trim().to_owned(),
        );
        if !issuers.iter().any(|i| i.issuer == key.0) {
            self.problem(
                Some(issuer.span()),
                field(n, "issuer"),
                format!(
                    "{:?} is no [[issuers]] entry's issuer: add that entry (its tokens are verified by it) or correct the URL",
                    key.0
                ),
            );
            return;
        }
        if key.1.is_empty() {
            self.problem(
                Some(subject.span()),
                field(n, "subject"),
                "is empty: write the token's exact `sub`, e.g. \"system:serviceaccount:toolmesh:dispatcher\"",
            );
            return;
        }
        if let Some(first) = claimed.subjects.get(&key) {
            self.problem(
                Some(subject.span()),
                field(n, "subject"),
                format!(
                    "pins {:?} of {:?} a second time (first on line {first}): keep one entry",
                    key.1, key.0
                ),
            );
            return;
        }
        claimed
            .subjects
            .insert(key.clone(), self.line(&subject.span()));
        let principal = self.caller_principal(c.principal, c.tenant, c.roles, span, n);
        let (issuer, subject) = key;
        callers.add_subject(issuer, subject, principal);
    }

    /// An entry naming the name its client certificate is valid for.
    fn certificate_caller(
        &mut self,
        c: RawCaller,
        span: &Range<usize>,
        n: usize,
        callers: &mut Callers,
    ) {
        let Some(name) = c.tls_name else { return };
        if c.token.is_some() || c.token_sha256.is_some() {
            self.problem(
                Some(name.span()),
                field(n, "tls_name"),
                "is set together with a token: a caller is identified by one or the other, so use two entries",
            );
            return;
        }
        let Some(tls_name) = tls_name(name.get_ref()) else {
            self.problem(
                Some(name.span()),
                field(n, "tls_name"),
                "must be the DNS name the caller's client certificate is issued for, e.g. \"support-bot.agents.internal\", or its SPIFFE ID, e.g. \"spiffe://example.org/ns/agents/sa/support-bot\"",
            );
            return;
        };
        let principal = self.caller_principal(c.principal, c.tenant, c.roles, span, n);
        callers.add_certificate(tls_name, principal);
    }

    /// An entry naming its bearer token, or the token's SHA-256; each
    /// token belongs to one caller.
    fn token_caller(
        &mut self,
        c: RawCaller,
        span: &Range<usize>,
        n: usize,
        claimed: &mut Claimed,
        callers: &mut Callers,
    ) {
        let digest = self.token_digest(c.token, c.token_sha256, span, n);
        let principal = self.caller_principal(c.principal, c.tenant, c.roles, span, n);
        let Some((digest, token_span)) = digest else {
            return;
        };
        if let Some((first, first_line, first_name)) = claimed.tokens.get(&digest) {
            let message = format!(
                "is the same token as [[callers]] #{first} (line {first_line}, principal {first_name:?}); \
                 every caller needs its own token: generate a new one for one of them"
            );
            self.problem(Some(token_span), field(n, "token"), message);
            return;
        }
        claimed
            .tokens
            .insert(digest, (n, self.line(&token_span), principal.name.clone()));
        callers.add_token(digest, principal);
    }

    /// The SHA-256 of the entry's token (and where it is written), from
    /// `token` or `token_sha256`: exactly one of them, well-formed.
    fn token_digest(
        &mut self,
        token: Option<Spanned<String>>,
        token_sha256: Option<Spanned<String>>,
        span: &Range<usize>,
        n: usize,
    ) -> Option<([u8; 32], Range<usize>)> {
        match (token, token_sha256) {
            (Some(_), Some(h)) => {
                self.problem(
                    Some(h.span()),
                    field(n, "token_sha256"),
                    "is set together with token: keep only one (token_sha256 keeps the secret out of the file)",
                );
                None
            }
            (None, None) => {
                self.problem(
                    Some(span.clone()),
                    field(n, "token"),
                    "is missing: add token = \"...\", token_sha256 = \"<hex SHA-256 of the token>\", tls_name = \"<DNS name of its client certificate>\", or issuer and subject (a JWT's `iss` and `sub`)",
                );
                None
            }
            (Some(t), None) => {
                let token = t.get_ref();
                if token.is_empty() || token.chars().any(|c| c.is_whitespace() || c.is_control()) {
                    self.problem(
                        Some(t.span()),
                        field(n, "token"),
                        "must be non-empty with no spaces or control characters, as it travels in an HTTP header",
                    );
                    None
                } else {
                    Some((sha256(token.as_bytes()), t.span()))
                }
            }
            (None, Some(h)) => match parse_sha256_hex(h.get_ref().trim()) {
                Some(d) => Some((d, h.span())),
                None => {
                    self.problem(
                        Some(h.span()),
                        field(n, "token_sha256"),
                        "is not 64 hex digits: write the SHA-256 of the token, e.g. from `printf %s TOKEN | sha256sum`",
                    );
                    None
                }
            },
        }
    }

    /// The principal of `[[callers]]` entry `n`.
    fn caller_principal(
        &mut self,
        name: String,
        tenant: Option<String>,
        roles: Vec<String>,
        span: &Range<usize>,
        n: usize,
    ) -> Principal {
        Principal {
            tenant: self.tenant(tenant, span, &format!("[[callers]] #{n} tenant")),
            roles: self.names(roles, span, &format!("[[callers]] #{n} roles")),
            name,
            anonymous: false,
            issued_by: None,
        }
    }
}
