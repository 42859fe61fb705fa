//! The `[[issuers]]` section validated into identity providers ([`Issuer`]s), every problem with its line.

use crate::config::{DEFAULT_TENANT, RawIssuer};
use crate::{Problem, error::line_of};
use std::{collections::BTreeMap, ops::Range, path::PathBuf, time::Duration};
use toml::Spanned;
use toolmesh_identity::DISPATCHER_ROLE;
use toolmesh_identity::issuers::{
    Algorithm, DEFAULT_CLOCK_SKEW_SECS, DEFAULT_MAX_STALE_SECS, DEFAULT_MIN_REFRESH_SECS,
    DEFAULT_REFRESH_SECS, FetchAuth, Issuer, KeySource, MAX_CLOCK_SKEW_SECS, TenantFrom,
    parse_algorithm, plain_http_elsewhere,
};

/// Validates every `[[issuers]]` entry, adding each problem (with its line) to `problems`.
pub(crate) fn validate(
    raw: Vec<Spanned<RawIssuer>>,
    text: &str,
    problems: &mut Vec<Problem>,
) -> Vec<Issuer> {
    let mut out: Vec<Issuer> = Vec::new();
    for (i, entry) in raw.into_iter().enumerate() {
        let mut check = Check {
            text,
            problems,
            n: i + 1,
        };
        let span = entry.span();
        if let Some(issuer) = check.issuer(entry.into_inner(), &span) {
            if let Some(first) = out.iter().position(|o| o.issuer == issuer.issuer) {
                check.problem(
                    &span,
                    "issuer",
                    format!(
                        "{:?} is already [[issuers]] #{}: list each issuer once (several audiences go in one entry)",
                        issuer.issuer,
                        first + 1
                    ),
                );
                continue;
            }
            out.push(issuer);
        }
    }
    out
}

/// The clock skew and key refresh timing of one issuer.
struct Timing {
    clock_skew_secs: u64,
    refresh: Duration,
    min_refresh: Duration,
    max_stale: Duration,
}

/// The problems of one entry.
struct Check<'a> {
    text: &'a str,
    problems: &'a mut Vec<Problem>,
    n: usize,
}

impl Check<'_> {
    fn problem(&mut self, span: &Range<usize>, key: &str, message: impl Into<String>) {
        self.problems.push(Problem {
            line: Some(line_of(self.text, span.start)),
            field: format!("[[issuers]] #{} {key}", self.n),
            message: message.into(),
        });
    }

    /// One entry, checked key by key in the order its problems are listed;
    /// an issuer only when the entry has no problem.
    fn issuer(&mut self, raw: RawIssuer, span: &Range<usize>) -> Option<Issuer> {
        let before = self.problems.len();
        let RawIssuer {
            issuer,
            audiences,
            jwks_uri,
            jwks_file,
            jwks_ca_file,
            jwks_bearer_file,
            algorithms,
            clock_skew_secs,
            refresh_secs,
            min_refresh_secs,
            max_stale_secs,
            principal_claim,
            tenant,
            tenant_claim,
            roles_claim,
            roles,
            role_map,
            list_scope,
            call_scope,
        } = raw;
        let issuer = self.issuer_url(issuer);
        self.audiences(&audiences, span);
        let keys = self.key_source(jwks_uri, jwks_file);
        self.keys_over_https(&keys, &issuer, span);
        let fetch = self.fetch_auth(jwks_ca_file, jwks_bearer_file, &keys, span);
        let algorithms = self.algorithms(algorithms, span);
        let timing = self.timing(
            clock_skew_secs,
            refresh_secs,
            min_refresh_secs,
            max_stale_secs,
        );
        let principal_claim = self
            .claim(principal_claim, "principal_claim")
            .unwrap_or("sub".into());
        let tenant = self.tenant(tenant, tenant_claim);
        let roles_claim = self.claim(roles_claim, "roles_claim");
        let list_scope = self.scope(list_scope, "list_scope");
        let call_scope = self.scope(call_scope, "call_scope");
        self.roles(&roles, &role_map, roles_claim.is_some(), span);
        (self.problems.len() == before).then(|| Issuer {
            issuer,
            audiences: audiences.into_iter().map(Spanned::into_inner).collect(),
            keys,
            fetch,
            algorithms,
            clock_skew_secs: timing.clock_skew_secs,
            refresh: timing.refresh,
            min_refresh: timing.min_refresh,
            max_stale: timing.max_stale,
            principal_claim,
            tenant,
            roles_claim,
            roles,
            role_map,
            list_scope,
            call_scope,
        })
    }

    /// The issuer's URL, as its tokens' `iss` claim names it.
    fn issuer_url(&mut self, raw: Spanned<String>) -> String {
        let issuer = raw.get_ref().trim().to_owned();
        if !is_http_url(&issuer) {
            self.problem(
                &raw.span(),
                "issuer",
                "must be the issuer's URL exactly as its tokens' `iss` claim names it, e.g. \"https://login.example.com/realms/agents\"",
            );
        }
        issuer
    }

    /// At least one audience, none empty.
    fn audiences(&mut self, audiences: &[Spanned<String>], span: &Range<usize>) {
        if audiences.is_empty() {
            self.problem(
                span,
                "audiences",
                "is missing: list the audience (`aud`) tokens must be minted for, e.g. [\"toolmesh\"], so a token for another service is refused",
            );
        }
        for (i, aud) in audiences.iter().enumerate() {
            if aud.get_ref().trim().is_empty() {
                self.problem(
                    &aud.span(),
                    &format!("audiences[{i}]"),
                    "is empty: write an audience",
                );
            }
        }
    }

    /// Where the keys come from: `jwks_uri`, `jwks_file` or, with neither,
    /// discovery from the issuer.
    fn key_source(
        &mut self,
        jwks_uri: Option<Spanned<String>>,
        jwks_file: Option<Spanned<String>>,
    ) -> KeySource {
        match (jwks_uri, jwks_file) {
            (Some(uri), Some(file)) => {
                self.problem(
                    &file.span(),
                    "jwks_file",
                    "is set together with jwks_uri: keys come from one place; keep one (or neither, for discovery from the issuer)",
                );
                KeySource::Uri(uri.into_inner())
            }
            (Some(uri), None) => {
                if !is_http_url(uri.get_ref()) {
                    self.problem(
                        &uri.span(),
                        "jwks_uri",
                        "must be an http:// or https:// URL serving the issuer's JSON Web Key Set",
                    );
                }
                KeySource::Uri(uri.into_inner())
            }
            (None, Some(file)) => {
                if file.get_ref().trim().is_empty() {
                    self.problem(&file.span(), "jwks_file", "is empty: name a JWKS file");
                }
                KeySource::File(PathBuf::from(file.into_inner()))
            }
            (None, None) => KeySource::Discovery,
        }
    }

    /// Keys fetched from another host come over https://, lest they be
    /// swapped in transit.
    fn keys_over_https(&mut self, keys: &KeySource, issuer: &str, span: &Range<usize>) {
        let fetched_from = match keys {
            KeySource::Uri(uri) => Some(("jwks_uri", uri.as_str())),
            KeySource::Discovery => Some(("issuer", issuer)),
            KeySource::File(_) => None,
        };
        if let Some((key, url)) = fetched_from
            && plain_http_elsewhere(url)
        {
            self.problem(
                span,
                key,
                "fetches keys over plain http:// from another host, where they could be swapped in transit: use https:// (http:// is for 127.0.0.1 and localhost only), or a jwks_file",
            );
        }
    }

    /// How keys are fetched over HTTPS; nothing to say for keys read from
    /// disk.
    fn fetch_auth(
        &mut self,
        jwks_ca_file: Option<Spanned<String>>,
        jwks_bearer_file: Option<Spanned<String>>,
        keys: &KeySource,
        span: &Range<usize>,
    ) -> FetchAuth {
        let fetch = FetchAuth {
            ca_file: self.path(jwks_ca_file, "jwks_ca_file"),
            bearer_file: self.path(jwks_bearer_file, "jwks_bearer_file"),
        };
        if matches!(keys, KeySource::File(_)) && fetch != FetchAuth::default() {
            self.problem(
                span,
                "jwks_file",
                "is read from disk, so jwks_ca_file and jwks_bearer_file (for fetching keys over HTTPS) have nothing to do: remove them or fetch from jwks_uri",
            );
        }
        fetch
    }

    /// The clock skew allowed and how often keys are refreshed, each in its
    /// range or its default.
    fn timing(
        &mut self,
        clock_skew_secs: Option<Spanned<u64>>,
        refresh_secs: Option<Spanned<u64>>,
        min_refresh_secs: Option<Spanned<u64>>,
        max_stale_secs: Option<Spanned<u64>>,
    ) -> Timing {
        let clock_skew_secs = self.bounded(
            clock_skew_secs,
            "clock_skew_secs",
            0..=MAX_CLOCK_SKEW_SECS,
            DEFAULT_CLOCK_SKEW_SECS,
        );
        let day = 24 * 60 * 60;
        let refresh = self.bounded(refresh_secs, "refresh_secs", 1..=day, DEFAULT_REFRESH_SECS);
        let min_refresh = self.bounded(
            min_refresh_secs,
            "min_refresh_secs",
            1..=day,
            DEFAULT_MIN_REFRESH_SECS,
        );
        let max_stale = self.bounded(
            max_stale_secs,
            "max_stale_secs",
            0..=7 * day,
            DEFAULT_MAX_STALE_SECS,
        );
        Timing {
            clock_skew_secs,
            refresh: Duration::from_secs(refresh),
            min_refresh: Duration::from_secs(min_refresh),
            max_stale: Duration::from_secs(max_stale),
        }
    }

    /// The caller's tenant: fixed, read from a claim, or the default.
    fn tenant(
        &mut self,
        tenant: Option<Spanned<String>>,
        tenant_claim: Option<Spanned<String>>,
    ) -> TenantFrom {
        match (tenant, tenant_claim) {
            (Some(_), Some(claim)) => {
                self.problem(
                    &claim.span(),
                    "tenant_claim",
                    "is set together with tenant: the tenant is either fixed or read from a claim; keep one",
                );
                TenantFrom::Fixed(DEFAULT_TENANT.into())
            }
            (Some(t), None) if t.get_ref().trim().is_empty() => {
                self.problem(
                    &t.span(),
                    "tenant",
                    format!("is empty: name a tenant, or leave the key out for {DEFAULT_TENANT:?}"),
                );
                TenantFrom::Fixed(DEFAULT_TENANT.into())
            }
            (Some(t), None) => TenantFrom::Fixed(t.into_inner()),
            (None, claim @ Some(_)) => {
                TenantFrom::Claim(self.claim(claim, "tenant_claim").unwrap_or_default())
            }
            (None, None) => TenantFrom::Fixed(DEFAULT_TENANT.into()),
        }
    }

    /// The roles every caller of the issuer gets and those mapped from its
    /// roles claim: named, mapped from a claim that is read, and never the
    /// dispatchers' role.
    fn roles(
        &mut self,
        roles: &[String],
        role_map: &BTreeMap<String, String>,
        has_roles_claim: bool,
        span: &Range<usize>,
    ) {
        if !role_map.is_empty() && !has_roles_claim {
            self.problem(
                span,
                "role_map",
                "is set without roles_claim: name the claim whose values it maps, e.g. roles_claim = \"groups\"",
            );
        }
        for (i, role) in roles.iter().enumerate() {
            if role.trim().is_empty() {
                self.problem(
                    span,
                    &format!("roles[{i}]"),
                    "is empty: remove it or write a name",
                );
            }
        }
        for (value, role) in role_map {
            if role.trim().is_empty() {
                self.problem(
                    span,
                    &format!("role_map.{value}"),
                    "maps to an empty role: write a role name",
                );
            }
        }
        if roles
            .iter()
            .chain(role_map.values())
            .any(|r| r == DISPATCHER_ROLE)
        {
            self.problem(
                span,
                "roles",
                format!(
                    "gives the role \"{}\" to every caller of an identity provider: it reads the tokens executors accept; give it only to a [[callers]] entry that names your dispatchers (with issuer and subject for a dispatcher known by its JWT)",
                    DISPATCHER_ROLE
                ),
            );
        }
    }

    fn algorithms(
        &mut self,
        raw: Option<Vec<Spanned<String>>>,
        span: &Range<usize>,
    ) -> Vec<Algorithm> {
        let Some(raw) = raw else {
            return vec![Algorithm::RS256, Algorithm::ES256, Algorithm::EdDSA];
        };
        if raw.is_empty() {
            self.problem(
                span,
                "algorithms",
                "is empty, so no token could be verified: list some of \"RS256\", \"ES256\", \"EdDSA\", or leave the key out for all three",
            );
        }
        let mut out = Vec::new();
        for (i, name) in raw.iter().enumerate() {
            match parse_algorithm(name.get_ref()) {
                Ok(alg) => out.push(alg),
                Err(why) => {
                    self.problem(&name.span(), &format!("algorithms[{i}]"), why.to_string())
                }
            }
        }
        out
    }

    fn bounded(
        &mut self,
        raw: Option<Spanned<u64>>,
        key: &str,
        range: std::ops::RangeInclusive<u64>,
        default: u64,
    ) -> u64 {
        let Some(value) = raw else { return default };
        let n = *value.get_ref();
        if !range.contains(&n) {
            self.problem(
                &value.span(),
                key,
                format!(
                    "{n} is out of range: use {}..={} (default {default})",
                    range.start(),
                    range.end()
                ),
            );
        }
        n
    }

    /// A file named by `key` (read when keys are fetched, so a failure
    /// then names it).
    fn path(&mut self, raw: Option<Spanned<String>>, key: &str) -> Option<PathBuf> {
        let raw = raw?;
        let path = raw.get_ref().trim();
        if path.is_empty() {
            self.problem(
                &raw.span(),
                key,
                "is empty: name a file, or leave the key out",
            );
        }
        Some(PathBuf::from(path))
    }

    /// An OAuth scope a token must carry: one word.
    fn scope(&mut self, raw: Option<Spanned<String>>, key: &str) -> Option<String> {
        let raw = raw?;
        let scope = raw.get_ref().trim();
        if scope.is_empty()
            || scope
                .chars()
                .any(|c| c.is_whitespace() || c == '"' || c == '\\')
        {
            self.problem(
                &raw.span(),
                key,
                "must be one OAuth scope (no spaces or quotes), e.g. \"tools:call\"",
            );
            return None;
        }
        Some(scope.to_owned())
    }

    fn claim(&mut self, raw: Option<Spanned<String>>, key: &str) -> Option<String> {
        let claim = raw?;
        let name = claim.get_ref().trim();
        if name.is_empty() {
            self.problem(
                &claim.span(),
                key,
                "is empty: name a claim of the token, e.g. \"email\"",
            );
            return None;
        }
        Some(name.to_owned())
    }
}

fn is_http_url(text: &str) -> bool {
    let rest = text
        .strip_prefix("https://")
        .or_else(|| text.strip_prefix("http://"));
    rest.is_some_and(|r| !r.is_empty() && !r.starts_with('/') && !r.contains(char::is_whitespace))
}
