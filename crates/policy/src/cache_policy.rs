//! The `[cache]` table: which tools' results a dispatcher may reuse, for how long and for whom.

use crate::{Problem, error::line_of};
use serde::{Deserialize, Serialize};
use std::time::Duration;
use toml::Spanned;
use toolmesh::ToolPattern;

/// Bytes of cached results a dispatcher keeps when `max_bytes` is not set.
pub const DEFAULT_CACHE_BYTES: u64 = 64 * 1024 * 1024;
/// The largest `max_bytes` accepted (1 GiB).
pub const MAX_CACHE_BYTES: u64 = 1024 * 1024 * 1024;
/// The longest `ttl_ms` or `stale_if_error_ms` accepted (one day).
pub const MAX_CACHE_MS: u64 = 24 * 60 * 60 * 1000;

/// Who shares a cached answer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CacheScope {
    /// Callers of one tenant share answers.
    #[default]
    Tenant,
    /// Each principal has its own answers.
    Principal,
    /// Every caller shares answers (only for tools whose answer does not depend on who asks).
    Global,
}

/// `[cache]` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawCache {
    max_bytes: Option<Spanned<u64>>,
    #[serde(default)]
    tools: Vec<Spanned<RawCacheTool>>,
}

/// One `[[cache.tools]]` entry as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCacheTool {
    tool: Spanned<String>,
    ttl_ms: Spanned<u64>,
    #[serde(default)]
    stale_if_error_ms: u64,
    #[serde(default)]
    scope: CacheScope,
}

/// How one tool's results are cached.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheRule {
    /// The tools it covers (name or glob).
    pub tool: ToolPattern,
    /// How long an answer is served as fresh.
    pub ttl: Duration,
    /// How much longer an answer may be served, marked stale, when the
    /// tool fails with UNAVAILABLE, DEADLINE_EXCEEDED or EXECUTOR_FAILED.
    pub stale_if_error: Duration,
    /// Who shares an answer.
    pub scope: CacheScope,
}

/// The validated `[cache]` table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CachePolicy {
    /// Bytes of results kept at most; the least recently used go first.
    pub max_bytes: u64,
    /// Rules, in file order; the first whose tool matches applies.
    pub rules: Vec<CacheRule>,
}

impl Default for CachePolicy {
    fn default() -> Self {
        CachePolicy {
            max_bytes: DEFAULT_CACHE_BYTES,
            rules: Vec::new(),
        }
    }
}

impl CachePolicy {
    /// The rule for tool `name`, if its results may be cached; free when
    /// no rule is configured.
    pub fn rule_for(&self, name: &str) -> Option<&CacheRule> {
        if self.rules.is_empty() {
            return None;
        }
        self.rules.iter().find(|r| r.tool.matches(name))
    }
}

/// Validates `[cache]`, adding a problem (with line and field) for each mistake.
pub(crate) fn validate(raw: RawCache, text: &str, problems: &mut Vec<Problem>) -> CachePolicy {
    let mut problem = |span: std::ops::Range<usize>, field: String, message: String| {
        problems.push(Problem {
            line: Some(line_of(text, span.start)),
            field,
            message,
        });
    };
    let max_bytes = match raw.max_bytes {
        None => DEFAULT_CACHE_BYTES,
        Some(max) => {
            let n = *max.get_ref();
            if !(1..=MAX_CACHE_BYTES).contains(&n) {
                let message = format!(
                    "{n} is out of range: use 1..={MAX_CACHE_BYTES} (default {DEFAULT_CACHE_BYTES}, 64 MiB)"
                );
                problem(max.span(), "cache.max_bytes".into(), message);
            }
            n
        }
    };
    let mut rules = Vec::new();
    for (i, entry) in raw.tools.into_iter().enumerate() {
        let field = |key: &str| format!("[[cache.tools]] #{} {key}", i + 1);
        let entry = entry.into_inner();
        let ttl = *entry.ttl_ms.get_ref();
        if !(1..=MAX_CACHE_MS).contains(&ttl) {
            let message = format!("{ttl} is out of range: use 1..={MAX_CACHE_MS} milliseconds");
            problem(entry.ttl_ms.span(), field("ttl_ms"), message);
        }
        if entry.stale_if_error_ms > MAX_CACHE_MS {
            let message = format!(
                "{} is out of range: use 0..={MAX_CACHE_MS} milliseconds (0: never serve stale)",
                entry.stale_if_error_ms
            );
            problem(entry.ttl_ms.span(), field("stale_if_error_ms"), message);
        }
        match ToolPattern::parse(entry.tool.get_ref()) {
            Ok(tool) => rules.push(CacheRule {
                tool,
                ttl: Duration::from_millis(ttl),
                stale_if_error: Duration::from_millis(entry.stale_if_error_ms),
                scope: entry.scope,
            }),
            Err(e) => problem(entry.tool.span(), field("tool"), e.to_string()),
        }
    }
    CachePolicy { max_bytes, rules }
}

#[cfg(test)]
mod tests {
    use crate::Policy;
    use std::time::Duration;

    /// A cache table loads with its defaults; the first matching rule applies.
    #[test]
    fn loads_with_defaults() {
        let policy = Policy::from_toml(
            "[[cache.tools]]\ntool = \"search_*\"\nttl_ms = 500\n\n[[cache.tools]]\ntool = \"*\"\nttl_ms = 9\nscope = \"global\"\n",
        )
        .unwrap();
        let cache = policy.cache();
        assert_eq!(cache.max_bytes, super::DEFAULT_CACHE_BYTES);
        let rule = cache.rule_for("search_kb").unwrap();
        assert_eq!(rule.ttl, Duration::from_millis(500));
        assert_eq!(rule.scope, super::CacheScope::Tenant);
        assert_eq!(
            cache.rule_for("other").unwrap().scope,
            super::CacheScope::Global
        );
        assert!(
            Policy::from_toml("")
                .unwrap()
                .cache()
                .rule_for("x")
                .is_none()
        );
    }

    /// Each mistake is named with its line and field.
    #[test]
    fn mistakes_are_named() {
        let text = "[cache]\nmax_bytes = 0\n\n[[cache.tools]]\ntool = \"a b\"\nttl_ms = 0\n";
        let error = Policy::from_toml(text).unwrap_err().to_string();
        for needle in [
            "line 2: cache.max_bytes",
            "line 6: [[cache.tools]] #1 ttl_ms",
            "#1 tool",
        ] {
            assert!(error.contains(needle), "{needle:?} not in {error}");
        }
        let error =
            Policy::from_toml("[[cache.tools]]\ntool = \"a\"\nttl_ms = 1\nscope = \"team\"\n")
                .unwrap_err()
                .to_string();
        assert!(error.contains("unknown variant `team`"), "{error}");
    }
}
