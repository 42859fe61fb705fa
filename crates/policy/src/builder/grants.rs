//! `[[grants]]`: who may call which tools, up to which risk, with which arguments narrowed.

use super::Builder;
use crate::config;
use crate::narrowing::{FieldLimit, Narrowing};
use crate::policy::Grant;
use std::collections::{BTreeMap, HashMap};
use std::{ops::Range, sync::Arc};
use toml::Spanned;
use toolmesh::ToolPattern;
use toolmesh::pb::RiskLevel;

impl Builder<'_> {
    /// The `[[grants]]` entries: unique names, tool patterns, and narrowed arguments.
    pub(super) fn grants(&mut self, raw: Vec<Spanned<config::RawGrant>>) -> Vec<Grant> {
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
}
