//! The validated policy: building it from TOML (collecting every problem), authentication and access decisions.

use crate::{
    ApprovalSettings, AuthError, Principal, Problem,
    approvals::{DEFAULT_MAX_OPEN_PER_CALLER, DEFAULT_TTL, MAX_TICKETS},
    cache_policy::{self, CachePolicy},
    config::{self, RawPolicy},
    digest::{hex, parse_sha256_hex, sha256},
    error::PolicyError,
    error::line_of,
    fallback_policy::{self, FallbackPolicy},
    glob::ToolPattern,
    issuers::{self, Issuer},
    limits::{LimitRule, Limits},
    narrowing::{FieldLimit, Narrowing},
    registry_access::DISPATCHER_ROLE,
};
use std::{collections::BTreeMap, sync::Arc};
use std::{collections::HashMap, fmt, num::NonZeroU32, ops::Range, path::Path, time::Duration};
use toml::Spanned;
use toolmesh::pb::RiskLevel;

pub use crate::config::DEFAULT_TENANT;
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

/// Callers by the SHA-256 of their token.
type TokenCallers = HashMap<[u8; 32], Principal>;
/// Callers by the DNS name of their client certificate.
type TlsCallers = Vec<(String, Principal)>;
/// Callers by the issuer and exact subject (`sub`) of their JWT.
type SubjectCallers = HashMap<(String, String), Principal>;

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
/// `Arc` (see [`PolicyHandle`](crate::PolicyHandle) for live reload).
pub struct Policy {
    allow_anonymous: bool,
    anonymous: Principal,
    callers: TokenCallers,
    /// Callers identified by their mTLS client certificate: (DNS name, who).
    tls_callers: TlsCallers,
    /// Callers pinned to one subject of an issuer's JWTs.
    subject_callers: SubjectCallers,
    pub(crate) grants: Vec<Grant>,
    pub(crate) approval: ApprovalRules,
    limits: Limits,
    /// Whether any grant narrows a tool (so calls skip the lookup otherwise).
    narrowed: bool,
    cache: CachePolicy,
    fallbacks: FallbackPolicy,
    /// Identity providers whose JWTs name callers (`[[issuers]]`).
    issuers: Vec<Issuer>,
}

impl fmt::Debug for Policy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Policy")
            .field("allow_anonymous", &self.allow_anonymous)
            .field("callers", &self.callers.len())
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
        Builder {
            text,
            problems: Vec::new(),
        }
        .build(raw)
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
        let token = bearer.and_then(toolmesh_transport::bearer_token);
        let Some(token) = token else {
            return if self.allow_anonymous {
                Ok(self.anonymous.clone())
            } else {
                Err(AuthError::MissingToken)
            };
        };
        if token.contains(char::is_whitespace) {
            return Err(AuthError::MalformedHeader);
        }
        let digest = sha256(token.as_bytes());
        self.callers
            .get(&digest)
            .cloned()
            .ok_or_else(|| AuthError::UnknownToken {
                digest_prefix: hex(&digest[..6]),
            })
    }

    /// The caller whose `tls_name` the peer's (already verified) client
    /// certificate is valid for, if any; `valid_for` answers that per name.
    pub fn authenticate_tls(&self, valid_for: impl Fn(&str) -> bool) -> Option<Principal> {
        self.tls_callers
            .iter()
            .find(|(name, _)| valid_for(name))
            .map(|(_, who)| who.clone())
    }

    /// The caller: the bearer token's principal; with no token, the one a
    /// verified client certificate names (`certificate_valid_for` answers
    /// per `tls_name`); else the anonymous caller where admitted.
    pub fn identify(
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

    /// The identity providers whose JWTs name callers (`[[issuers]]`).
    pub fn issuers(&self) -> &[Issuer] {
        &self.issuers
    }

    /// The `[[callers]]` entry pinned to `subject` of `issuer`'s tokens, if
    /// any: it names that caller instead of the issuer's claim mapping.
    pub fn subject_caller(&self, issuer: &str, subject: &str) -> Option<&Principal> {
        if self.subject_callers.is_empty() {
            return None;
        }
        self.subject_callers
            .get(&(issuer.to_owned(), subject.to_owned()))
    }

    /// Whether anonymous callers are accepted.
    pub fn allows_anonymous(&self) -> bool {
        self.allow_anonymous
    }

    /// The rate limits and concurrency quotas, with their live state.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// Who may approve and how long approvals live, for [`Approvals`](crate::Approvals).
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

/// Collects every problem while turning the raw file into a [`Policy`].
struct Builder<'a> {
    text: &'a str,
    problems: Vec<Problem>,
}

impl Builder<'_> {
    fn problem(&mut self, span: Option<Range<usize>>, field: String, message: impl Into<String>) {
        self.problems.push(Problem {
            line: span.map(|s| line_of(self.text, s.start)),
            field,
            message: message.into(),
        });
    }

    fn line(&self, span: &Range<usize>) -> usize {
        line_of(self.text, span.start)
    }

    /// Checks that every entry of a list of names is non-empty.
    fn names(&mut self, list: Vec<String>, span: &Range<usize>, field: &str) -> Vec<String> {
        for (i, name) in list.iter().enumerate() {
            if name.trim().is_empty() {
                self.problem(
                    Some(span.clone()),
                    format!("{field}[{i}]"),
                    "is empty: remove it or write a name",
                );
            }
        }
        list
    }

    fn patterns(&mut self, list: Vec<Spanned<String>>, field: &str) -> Vec<ToolPattern> {
        let mut out = Vec::with_capacity(list.len());
        for (i, item) in list.into_iter().enumerate() {
            let span = item.span();
            match ToolPattern::parse(item.get_ref()) {
                Ok(p) => out.push(p),
                Err(e) => self.problem(Some(span), format!("{field}[{i}]"), e.to_string()),
            }
        }
        out
    }

    fn build(mut self, raw: RawPolicy) -> Result<Policy, PolicyError> {
        let anonymous = match raw.auth.anonymous {
            Some(identity) => {
                let span = identity.span();
                let id = identity.into_inner();
                if id.principal.trim().is_empty() {
                    self.problem(
                        Some(span.clone()),
                        "auth.anonymous.principal".into(),
                        "is empty: name the anonymous caller, e.g. \"anonymous\"",
                    );
                }
                let roles = self.names(id.roles, &span, "auth.anonymous.roles");
                if roles.iter().any(|r| r == DISPATCHER_ROLE) {
                    self.problem(
                        Some(span.clone()),
                        "auth.anonymous.roles".into(),
                        format!(
                            "gives anonymous callers the role \"{DISPATCHER_ROLE}\", which reads the tokens executors accept and acts for any caller on the approval book; give it only to a [[callers]] entry (a token or tls_name) that names your dispatchers"
                        ),
                    );
                }
                Principal {
                    name: id.principal,
                    tenant: self.tenant(id.tenant, &span, "auth.anonymous.tenant"),
                    roles,
                    anonymous: true,
                    issued_by: None,
                }
            }
            None => Principal {
                name: "anonymous".into(),
                tenant: DEFAULT_TENANT.into(),
                roles: Vec::new(),
                anonymous: true,
                issued_by: None,
            },
        };
        let issuers = issuers::validate(raw.issuers, self.text, &mut self.problems);
        let (callers, tls_callers, subject_callers) = self.callers(raw.callers, &issuers);
        let grants = self.grants(raw.grants);
        let approval = self.approval(raw.approval);
        let limits = self.limits(raw.limits);
        let cache = cache_policy::validate(raw.cache, self.text, &mut self.problems);
        let fallbacks = fallback_policy::validate(raw.fallbacks, self.text, &mut self.problems);
        if !self.problems.is_empty() {
            return Err(PolicyError::Invalid {
                origin: "(inline)".into(),
                problems: self.problems,
            });
        }
        Ok(Policy {
            narrowed: grants.iter().any(|g| !g.narrowings.is_empty()),
            cache,
            fallbacks,
            issuers,
            allow_anonymous: raw.auth.allow_anonymous,
            anonymous,
            callers,
            tls_callers,
            subject_callers,
            grants,
            approval,
            limits: Limits::new(limits),
        })
    }

    fn tenant(&mut self, tenant: Option<String>, span: &Range<usize>, field: &str) -> String {
        match tenant {
            None => DEFAULT_TENANT.into(),
            Some(t) if t.trim().is_empty() => {
                self.problem(
                    Some(span.clone()),
                    field.into(),
                    format!("is empty: name a tenant, or leave the key out for {DEFAULT_TENANT:?}"),
                );
                t
            }
            Some(t) => t,
        }
    }

    fn callers(
        &mut self,
        raw: Vec<Spanned<config::RawCaller>>,
        issuers: &[Issuer],
    ) -> (TokenCallers, TlsCallers, SubjectCallers) {
        let mut callers = HashMap::new();
        let mut tls_callers = Vec::new();
        let mut subject_callers: SubjectCallers = HashMap::new();
        let mut subject_lines: HashMap<(String, String), usize> = HashMap::new();
        let mut seen: HashMap<[u8; 32], (usize, usize, String)> = HashMap::new();
        for (i, entry) in raw.into_iter().enumerate() {
            let n = i + 1;
            let span = entry.span();
            let c = entry.into_inner();
            let field = |key: &str| format!("[[callers]] #{n} {key}");
            if c.principal.trim().is_empty() {
                self.problem(
                    Some(span.clone()),
                    field("principal"),
                    "is empty: name who holds this token, e.g. \"support-bot\"",
                );
            }
            if c.issuer.is_some() || c.subject.is_some() {
                let (Some(issuer), Some(subject)) = (&c.issuer, &c.subject) else {
                    self.problem(
                        Some(span.clone()),
                        field(if c.issuer.is_some() { "subject" } else { "issuer" }),
                        "is missing: a caller known by its JWT names both the issuer (an [[issuers]] entry's `issuer`) and the token's exact subject (`sub`)",
                    );
                    continue;
                };
                if c.token.is_some() || c.token_sha256.is_some() || c.tls_name.is_some() {
                    self.problem(
                        Some(subject.span()),
                        field("subject"),
                        "is set together with a token or tls_name: a caller is identified by one of them, so use several entries",
                    );
                    continue;
                }
                let key = (
                    issuer.get_ref().trim().to_owned(),
                    subject.get_ref().trim().to_owned(),
                );
                if !issuers.iter().any(|i| i.issuer == key.0) {
                    self.problem(
                        Some(issuer.span()),
                        field("issuer"),
                        format!(
                            "{:?} is no [[issuers]] entry's issuer: add that entry (its tokens are verified by it) or correct the URL",
                            key.0
                        ),
                    );
                    continue;
                }
                if key.1.is_empty() {
                    self.problem(
                        Some(subject.span()),
                        field("subject"),
                        "is empty: write the token's exact `sub`, e.g. \"system:serviceaccount:toolmesh:dispatcher\"",
                    );
                    continue;
                }
                if let Some(first) = subject_lines.get(&key) {
                    self.problem(
                        Some(subject.span()),
                        field("subject"),
                        format!(
                            "pins {:?} of {:?} a second time (first on line {first}): keep one entry",
                            key.1, key.0
                        ),
                    );
                    continue;
                }
                subject_lines.insert(key.clone(), self.line(&subject.span()));
                let principal = self.caller_principal(c.principal, c.tenant, c.roles, &span, n);
                subject_callers.insert(key, principal);
                continue;
            }
            if let Some(name) = c.tls_name {
                if c.token.is_some() || c.token_sha256.is_some() {
                    self.problem(
                        Some(name.span()),
                        field("tls_name"),
                        "is set together with a token: a caller is identified by one or the other, so use two entries",
                    );
                    continue;
                }
                let Some(tls_name) = tls_name(name.get_ref()) else {
                    self.problem(
                        Some(name.span()),
                        field("tls_name"),
                        "must be the DNS name the caller's client certificate is issued for, e.g. \"support-bot.agents.internal\", or its SPIFFE ID, e.g. \"spiffe://example.org/ns/agents/sa/support-bot\"",
                    );
                    continue;
                };
                let principal = self.caller_principal(c.principal, c.tenant, c.roles, &span, n);
                tls_callers.push((tls_name, principal));
                continue;
            }
            let digest = match (c.token, c.token_sha256) {
                (Some(_), Some(h)) => {
                    self.problem(
                        Some(h.span()),
                        field("token_sha256"),
                        "is set together with token: keep only one (token_sha256 keeps the secret out of the file)",
                    );
                    None
                }
                (None, None) => {
                    self.problem(
                        Some(span.clone()),
                        field("token"),
                        "is missing: add token = \"...\", token_sha256 = \"<hex SHA-256 of the token>\", tls_name = \"<DNS name of its client certificate>\", or issuer and subject (a JWT's `iss` and `sub`)",
                    );
                    None
                }
                (Some(t), None) => {
                    let token = t.get_ref();
                    if token.is_empty()
                        || token.chars().any(|c| c.is_whitespace() || c.is_control())
                    {
                        self.problem(
                            Some(t.span()),
                            field("token"),
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
                            field("token_sha256"),
                            "is not 64 hex digits: write the SHA-256 of the token, e.g. from `printf %s TOKEN | sha256sum`",
                        );
                        None
                    }
                },
            };
            let principal = self.caller_principal(c.principal, c.tenant, c.roles, &span, n);
            let Some((digest, token_span)) = digest else {
                continue;
            };
            if let Some((first, first_line, first_name)) = seen.get(&digest) {
                let message = format!(
                    "is the same token as [[callers]] #{first} (line {first_line}, principal {first_name:?}); \
                     every caller needs its own token: generate a new one for one of them"
                );
                self.problem(Some(token_span), field("token"), message);
                continue;
            }
            seen.insert(digest, (n, self.line(&token_span), principal.name.clone()));
            callers.insert(digest, principal);
        }
        (callers, tls_callers, subject_callers)
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

    fn grants(&mut self, raw: Vec<Spanned<config::RawGrant>>) -> Vec<Grant> {
        let mut grants = Vec::new();
        let mut names: HashMap<String, usize> = HashMap::new();
        for (i, entry) in raw.into_iter().enumerate() {
            let n = i + 1;
            let span = entry.span();
            let g = entry.into_inner();
            let field = |key: &str| format!("[[grants]] #{n} {key}");
            let name_span = g.name.span();
            let name = g.name.into_inner();
            if name.trim().is_empty() {
                self.problem(
                    Some(name_span.clone()),
                    field("name"),
                    "is empty: name the grant so decisions and audits can cite it",
                );
            } else if let Some(first) = names.get(&name) {
                let message = format!(
                    "{name:?} is already the name of the grant on line {first}: give each grant its own name"
                );
                self.problem(Some(name_span.clone()), field("name"), message);
            } else {
                names.insert(name.clone(), self.line(&name_span));
            }
            if g.tools.is_empty() && g.tags.is_empty() {
                self.problem(
                    Some(span.clone()),
                    field("tools"),
                    "is missing: the grant covers no tool; add tools = [\"*\"] for every tool, or list names, globs or tags = [...]",
                );
            }
            let tools = self.patterns(g.tools, &field("tools"));
            let narrowings = self.narrowings(g.arguments, &name, &tools, &field("arguments"));
            grants.push(Grant {
                narrowings,
                roles: self.names(g.roles, &span, &field("roles")),
                tenants: self.names(g.tenants, &span, &field("tenants")),
                principals: self.names(g.principals, &span, &field("principals")),
                tools,
                tags: self.names(g.tags, &span, &field("tags")),
                max_risk: g.max_risk.map_or(RiskLevel::High, |r| r.0),
                name,
            });
        }
        grants
    }

    /// `[grants.arguments.TOOL]` tables: each names a tool the grant covers
    /// and well-formed bounds (applied as an intersection, so they can only
    /// narrow the tool's own schema).
    fn narrowings(
        &mut self,
        raw: BTreeMap<String, Spanned<BTreeMap<String, config::RawFieldLimit>>>,
        grant: &str,
        tools: &[ToolPattern],
        field: &str,
    ) -> HashMap<String, Arc<Narrowing>> {
        let mut out = HashMap::new();
        for (tool, table) in raw {
            let span = table.span();
            let at = format!("{field}.{tool}");
            if !tools.iter().any(|p| p.matches(&tool)) {
                let message = format!(
                    "narrows {tool:?}, which this grant's tools do not cover: add it to tools or move the table to the grant that gives {tool:?}"
                );
                self.problem(Some(span.clone()), at.clone(), message);
                continue;
            }
            let fields = table
                .into_inner()
                .into_iter()
                .filter_map(|(property, limit)| self.field_limit(property, limit, &span, &at))
                .collect();
            let narrowing = Narrowing {
                grant: grant.to_owned(),
                fields,
            };
            out.insert(tool, Arc::new(narrowing));
        }
        out
    }

    fn field_limit(
        &mut self,
        property: String,
        raw: config::RawFieldLimit,
        span: &Range<usize>,
        at: &str,
    ) -> Option<FieldLimit> {
        let at = format!("{at}.{property}");
        let bad = |this: &mut Self, message: &str| {
            this.problem(Some(span.clone()), at.clone(), message.to_owned());
        };
        let numbers = [raw.minimum, raw.maximum];
        if numbers.iter().flatten().any(|n| !n.is_finite()) {
            bad(self, "minimum and maximum must be finite numbers");
        }
        if let (Some(min), Some(max)) = (raw.minimum, raw.maximum)
            && min > max
        {
            bad(
                self,
                "minimum is above maximum, so no value would do: swap them or widen the range",
            );
        }
        let one_of = match raw.one_of {
            Some(values) if values.is_empty() => {
                bad(self, "enum is empty, so no value would do: list the values this grant allows");
                None
            }
            Some(values) => values
                .into_iter()
                .map(|v| match v {
                    toml::Value::Datetime(_) => None,
                    v => serde_json::to_value(v).ok(),
                })
                .collect::<Option<Vec<_>>>()
                .or_else(|| {
                    bad(self, "enum holds a date-time, which JSON arguments cannot carry: write it as a string");
                    None
                }),
            None => None,
        };
        if raw.minimum.is_none()
            && raw.maximum.is_none()
            && one_of.is_none()
            && raw.max_length.is_none()
        {
            bad(
                self,
                "narrows nothing: set minimum, maximum, enum or max_length, or remove it",
            );
            return None;
        }
        Some(FieldLimit {
            property,
            minimum: raw.minimum,
            maximum: raw.maximum,
            one_of,
            max_length: raw.max_length,
        })
    }

    fn approval(&mut self, raw: config::RawApproval) -> ApprovalRules {
        let approver_roles = match raw.approver_roles {
            None => ApprovalSettings::default().approver_roles,
            Some(roles) => {
                let span = roles.span();
                let roles = roles.into_inner();
                if roles.is_empty() {
                    self.problem(
                        Some(span.clone()),
                        "approval.approver_roles".into(),
                        "is empty, so nobody could approve: name at least one role, e.g. [\"approver\"]",
                    );
                }
                self.names(roles, &span, "approval.approver_roles")
            }
        };
        let ttl = match raw.ttl_secs {
            None => DEFAULT_TTL,
            Some(ttl) => {
                let secs = *ttl.get_ref();
                if !(1..=MAX_TTL_SECS).contains(&secs) {
                    self.problem(
                        Some(ttl.span()),
                        "approval.ttl_secs".into(),
                        format!("{secs} is out of range: use 1..={MAX_TTL_SECS} (default 900, 15 minutes)"),
                    );
                }
                Duration::from_secs(secs)
            }
        };
        let max_open_per_caller = match raw.max_open_per_caller {
            None => DEFAULT_MAX_OPEN_PER_CALLER,
            Some(max) => {
                let n = *max.get_ref();
                let limit = MAX_TICKETS as u64;
                if !(1..=limit).contains(&n) {
                    self.problem(
                        Some(max.span()),
                        "approval.max_open_per_caller".into(),
                        format!("{n} is out of range: use 1..={limit} (default {DEFAULT_MAX_OPEN_PER_CALLER})"),
                    );
                }
                usize::try_from(n).unwrap_or(MAX_TICKETS)
            }
        };
        ApprovalRules {
            settings: ApprovalSettings {
                approver_roles,
                ttl,
                max_open_per_caller,
            },
            require_for_risk: raw.require_for_risk.map_or(Some(RiskLevel::High), |t| t.0),
            require_for_tools: self.patterns(raw.require_for_tools, "approval.require_for_tools"),
            pre_approved_principals: raw.pre_approved_principals,
        }
    }

    fn limits(&mut self, raw: Vec<Spanned<config::RawLimit>>) -> Vec<LimitRule> {
        let mut rules = Vec::new();
        for (i, entry) in raw.into_iter().enumerate() {
            let n = i + 1;
            let span = entry.span();
            let l = entry.into_inner();
            let field = |key: &str| format!("[[limits]] #{n} {key}");
            let tool = match l.tool {
                None => ToolPattern::parse("*").ok(),
                Some(t) => {
                    let span = t.span();
                    match ToolPattern::parse(t.get_ref()) {
                        Ok(p) => Some(p),
                        Err(e) => {
                            self.problem(Some(span), field("tool"), e.to_string());
                            None
                        }
                    }
                }
            };
            let rate = l.rate_per_sec.map(|r| (*r.get_ref(), r.span()));
            if let Some((rate, span)) = &rate
                && !(rate.is_finite() && *rate > 0.0 && *rate <= MAX_RATE_PER_SEC)
            {
                let message = format!(
                    "{rate} is out of range: use a number above 0 and at most {MAX_RATE_PER_SEC} \
                     (0.5 = one call every 2 s)"
                );
                self.problem(Some(span.clone()), field("rate_per_sec"), message);
            }
            let burst = match (&l.burst, &rate) {
                (Some(b), None) => {
                    self.problem(
                        Some(b.span()),
                        field("burst"),
                        "needs rate_per_sec: a burst is the size of a rate bucket; add rate_per_sec or remove burst",
                    );
                    None
                }
                (Some(b), Some(_)) => {
                    let burst = NonZeroU32::new(*b.get_ref());
                    if burst.is_none() {
                        self.problem(
                            Some(b.span()),
                            field("burst"),
                            "is 0: use at least 1 (calls that may go at once after a quiet spell)",
                        );
                    }
                    burst
                }
                (None, Some((rate, _))) => {
                    NonZeroU32::new(rate.ceil().clamp(1.0, f64::from(u32::MAX)) as u32)
                }
                (None, None) => None,
            };
            if let Some(m) = &l.max_concurrent
                && *m.get_ref() == 0
            {
                self.problem(
                    Some(m.span()),
                    field("max_concurrent"),
                    "is 0, which would refuse every call: use at least 1, or leave it out",
                );
            }
            if rate.is_none() && l.max_concurrent.is_none() {
                self.problem(
                    Some(span),
                    field("rate_per_sec"),
                    "is missing, and so is max_concurrent: this limit limits nothing; add either or remove the entry",
                );
            }
            if let Some(tool) = tool {
                rules.push(LimitRule {
                    index: n,
                    tool,
                    scope: l.per,
                    rate: rate.zip(burst).map(|((r, _), b)| (r, b)),
                    max_concurrent: l.max_concurrent.map(|m| *m.get_ref()),
                });
            }
        }
        rules
    }
}

/// A `tls_name` as matched: a DNS name in lowercase, or a SPIFFE ID as
/// written (its path is case-sensitive); `None` when it is neither.
fn tls_name(written: &str) -> Option<String> {
    let name = written.trim();
    if name.starts_with("spiffe://") {
        return toolmesh_transport::is_spiffe_id(name).then(|| name.to_owned());
    }
    let dns = name.to_ascii_lowercase();
    (!dns.is_empty() && !dns.contains(char::is_whitespace)).then_some(dns)
}
