//! The `[[fallbacks]]` table: which tool stands in for another when that one has no healthy executor, is disabled, or keeps failing.

use crate::{Problem, error::line_of};
use serde::Deserialize;
use toml::Spanned;
use toolmesh::ToolRef;

/// `[[fallbacks]]` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawFallback {
    tool: Spanned<String>,
    fallback: Spanned<String>,
}

/// One tool's stand-in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FallbackRule {
    /// The primary tool (an exact name).
    pub tool: String,
    /// What stands in: `name` (its newest version) or `name@version`.
    pub fallback: String,
}

/// The validated `[[fallbacks]]` table.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FallbackPolicy {
    rules: Vec<FallbackRule>,
}

impl FallbackPolicy {
    /// The stand-in of tool `name`, if it has one; free when none is set.
    pub fn for_tool(&self, name: &str) -> Option<&FallbackRule> {
        if self.rules.is_empty() {
            return None;
        }
        self.rules.iter().find(|r| r.tool == name)
    }

    /// Every rule, in file order.
    pub fn rules(&self) -> &[FallbackRule] {
        &self.rules
    }
}

/// Validates `[[fallbacks]]`, adding a problem (with line and field) for each mistake.
pub(crate) fn validate(
    raw: Vec<Spanned<RawFallback>>,
    text: &str,
    problems: &mut Vec<Problem>,
) -> FallbackPolicy {
    let mut rules: Vec<FallbackRule> = Vec::new();
    for (i, entry) in raw.into_iter().enumerate() {
        let mut problem = |span: std::ops::Range<usize>, key: &str, message: String| {
            problems.push(Problem {
                line: Some(line_of(text, span.start)),
                field: format!("[[fallbacks]] #{} {key}", i + 1),
                message,
            });
        };
        let entry = entry.into_inner();
        let (tool, fallback) = (entry.tool.get_ref(), entry.fallback.get_ref());
        if let Err(e) = toolmesh::spec::validate_name(tool) {
            problem(
                entry.tool.span(),
                "tool",
                format!("{e}; name one tool exactly"),
            );
            continue;
        }
        let target = match ToolRef::parse(fallback) {
            Ok(target) => target,
            Err(e) => {
                let message = format!("{e}; write a tool name or name@version");
                problem(entry.fallback.span(), "fallback", message);
                continue;
            }
        };
        if target.name == tool {
            let message = format!("{tool} cannot stand in for itself; name another tool");
            problem(entry.fallback.span(), "fallback", message);
        } else if rules.iter().any(|r| r.tool == *tool) {
            let message = format!("{tool} already has a fallback; give each tool one");
            problem(entry.tool.span(), "tool", message);
        } else {
            rules.push(FallbackRule {
                tool: tool.clone(),
                fallback: fallback.clone(),
            });
        }
    }
    FallbackPolicy { rules }
}

#[cfg(test)]
mod tests {
    use crate::Policy;

    /// Rules load in file order; each tool has at most one stand-in.
    #[test]
    fn loads_and_finds() {
        let policy = Policy::from_toml(
            "[[fallbacks]]\ntool = \"search_kb\"\nfallback = \"search_mirror@1\"\n",
        )
        .unwrap();
        let rule = policy.fallbacks().for_tool("search_kb").unwrap();
        assert_eq!(rule.fallback, "search_mirror@1");
        assert!(policy.fallbacks().for_tool("other").is_none());
        assert!(
            Policy::from_toml("")
                .unwrap()
                .fallbacks()
                .rules()
                .is_empty()
        );
    }

    /// Each mistake is named with its line and field.
    #[test]
    fn mistakes_are_named() {
        let text = "[[fallbacks]]\ntool = \"a b\"\nfallback = \"x\"\n\n[[fallbacks]]\ntool = \"a\"\nfallback = \"a@2\"\n\n[[fallbacks]]\ntool = \"b\"\nfallback = \"c@\"\n";
        let error = Policy::from_toml(text).unwrap_err().to_string();
        for needle in [
            "line 2: [[fallbacks]] #1 tool",
            "line 7: [[fallbacks]] #2 fallback",
            "cannot stand in for itself",
            "#3 fallback",
        ] {
            assert!(error.contains(needle), "{needle:?} not in {error}");
        }
    }
}
