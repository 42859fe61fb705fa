//! Turning the raw file into a [`Policy`], one section at a time, collecting every problem with its line and field.

mod approval;
mod callers;
mod grants;
mod limits;

use crate::config::{RawAuth, RawPolicy};
use crate::error::{PolicyError, Problem, line_of};
use crate::limits::Limits;
use crate::{Policy, cache_policy, fallback_policy, issuers};
use std::ops::Range;
use toml::Spanned;
use toolmesh::ToolPattern;
use toolmesh_identity::{Callers, DEFAULT_TENANT, DISPATCHER_ROLE, Principal};

/// Collects every problem while turning the raw file into a [`Policy`].
pub(crate) struct Builder<'a> {
    text: &'a str,
    problems: Vec<Problem>,
}

impl<'a> Builder<'a> {
    /// A builder for the policy written as `text`.
    pub(crate) fn new(text: &'a str) -> Self {
        Builder {
            text,
            problems: Vec::new(),
        }
    }
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

    /// The whole policy, or every problem found in it.
    pub(crate) fn build(mut self, raw: RawPolicy) -> Result<Policy, PolicyError> {
        let anonymous = self.anonymous(raw.auth);
        let issuers = issuers::validate(raw.issuers, self.text, &mut self.problems);
        let mut callers = Callers::new(anonymous.allowed, anonymous.principal);
        self.callers(raw.callers, &issuers, &mut callers);
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
            callers,
            grants,
            approval,
            limits: Limits::new(limits),
        })
    }

    /// `[auth]`: whether callers without a token are admitted, and as whom
    /// (never as a dispatcher).
    fn anonymous(&mut self, auth: RawAuth) -> Anonymous {
        let principal = match auth.anonymous {
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
        Anonymous {
            allowed: auth.allow_anonymous,
            principal,
        }
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
}

/// The validated `[auth]` table.
struct Anonymous {
    /// Whether callers without a token are admitted.
    allowed: bool,
    /// Who they are.
    principal: Principal,
}
