//! Which tool names a caller's grants can reach, so a listing looks them up in the sorted snapshot instead of deciding every tool.

use crate::policy::{Grant, Policy};
use std::collections::BTreeSet;
use toolmesh::{Principal, Reach};

/// The tool names a caller may possibly be granted ([`Policy::candidates`]):
/// a superset of what [`Policy::decide`] allows it, never less, so a
/// listing that decides only these lists exactly what deciding every tool
/// would.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Candidates {
    /// Any name: a grant for the caller covers tools by tag, or by a
    /// pattern that starts with a wildcard (`*`, `*_read`); decide every tool.
    Every,
    /// Only these names and the names under these prefixes.
    Named {
        /// Exact names, sorted.
        names: BTreeSet<String>,
        /// Name prefixes (`billing_` of `billing_*`), sorted, none inside
        /// another, none empty.
        prefixes: Vec<String>,
    },
}

impl Policy {
    /// The tool names `who`'s grants can reach: the exact names and the
    /// literal prefixes of the patterns of every grant that covers `who`,
    /// or [`Candidates::Every`] when one of them cannot be looked up by
    /// name (tags, a leading wildcard).
    pub fn candidates(&self, who: &Principal) -> Candidates {
        let mut names = BTreeSet::new();
        let mut prefixes = Vec::new();
        for grant in self.grants.iter().filter(|g| g.covers(who)) {
            if !grant.tags.is_empty() {
                return Candidates::Every;
            }
            for pattern in &grant.tools {
                match pattern.reach() {
                    Reach::Exact(name) => {
                        names.insert(name.to_owned());
                    }
                    Reach::Prefix("") => return Candidates::Every,
                    Reach::Prefix(prefix) => prefixes.push(prefix.to_owned()),
                }
            }
        }
        prefixes.sort();
        let mut outermost: Vec<String> = Vec::with_capacity(prefixes.len());
        for prefix in prefixes {
            // Sorted, so a prefix inside another comes right after it.
            if outermost
                .last()
                .is_none_or(|kept| !prefix.starts_with(kept.as_str()))
            {
                outermost.push(prefix);
            }
        }
        Candidates::Named {
            names,
            prefixes: outermost,
        }
    }
}

impl Grant {
    /// Whether this grant is for `who` (its principals, tenants and roles,
    /// each when it names any).
    pub(crate) fn covers(&self, who: &Principal) -> bool {
        (self.principals.is_empty() || self.principals.contains(&who.name))
            && (self.tenants.is_empty() || self.tenants.contains(&who.tenant))
            && (self.roles.is_empty() || who.has_any_role(&self.roles))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(grants: &str) -> Policy {
        Policy::from_toml(&format!(
            "[[callers]]\ntoken = \"t\"\nprincipal = \"billing-bot\"\ntenant = \"acme\"\nroles = [\"billing\"]\n{grants}"
        ))
        .unwrap()
    }

    /// The caller holding token `t`.
    fn who(policy: &Policy) -> Principal {
        policy.authenticate(Some("t")).unwrap()
    }

    /// Exact names and prefixes of the caller's grants are its candidates,
    /// a prefix inside another folded into it; other callers' grants add
    /// nothing.
    #[test]
    fn names_and_prefixes_of_the_callers_grants() {
        let policy = policy(
            r#"
[[grants]]
name = "billing"
roles = ["billing"]
tools = ["billing_*", "billing_refund_*", "invoice_get", "g?t_*"]

[[grants]]
name = "others"
roles = ["support"]
tools = ["*"]
"#,
        );
        assert_eq!(
            policy.candidates(&who(&policy)),
            Candidates::Named {
                names: ["invoice_get".to_owned()].into(),
                prefixes: vec!["billing_".into(), "g".into()],
            }
        );
    }

    /// A grant by tag or by a pattern starting with a wildcard can reach any
    /// name: every tool is decided.
    #[test]
    fn tags_and_leading_wildcards_reach_everything() {
        for grant in [
            r#"tags = ["finance"]"#,
            r#"tools = ["*_read"]"#,
            r#"tools = ["*"]"#,
        ] {
            let policy = policy(&format!(
                "[[grants]]\nname = \"g\"\nroles = [\"billing\"]\n{grant}\n"
            ));
            assert_eq!(
                policy.candidates(&who(&policy)),
                Candidates::Every,
                "{grant}"
            );
        }
    }
}
