//! Tool-name patterns: exact names or globs with `*` (any run) and `?` (one character).

use std::fmt;

/// Why a tool-name pattern is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PatternError {
    /// Nothing written.
    #[error("is empty: write a tool name such as \"search_kb\" or a glob such as \"get_*\"")]
    Empty,
    /// A character no tool name holds.
    #[error(
        "{text:?} has {bad:?}, which no tool name holds: use letters, digits, '_', '.', '-', \
         and the wildcards '*' (any characters) and '?' (one character)"
    )]
    BadCharacter {
        /// The pattern as written.
        text: String,
        /// The first character refused.
        bad: char,
    },
}

/// A validated tool-name pattern such as `search_kb`, `get_*` or `*`.
///
/// Only the characters a tool name may hold (letters, digits, `_`, `.`,
/// `-`) plus `*` and `?` are accepted, so a typo such as `get_[id]` is
/// rejected when the policy is loaded instead of silently matching nothing.
#[derive(Clone, PartialEq, Eq)]
pub struct ToolPattern {
    text: String,
    wildcard: bool,
}

impl fmt::Debug for ToolPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.text)
    }
}

impl fmt::Display for ToolPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl ToolPattern {
    /// Parses a pattern; the error says which character is wrong and what is allowed.
    pub fn parse(text: &str) -> Result<Self, PatternError> {
        if text.is_empty() {
            return Err(PatternError::Empty);
        }
        if let Some(bad) = text
            .chars()
            .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-' | '*' | '?')))
        {
            return Err(PatternError::BadCharacter {
                text: text.to_owned(),
                bad,
            });
        }
        Ok(ToolPattern {
            text: text.to_owned(),
            wildcard: text.contains(['*', '?']),
        })
    }

    /// The pattern as written.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// The names this pattern can match, as an ordered map can look them up:
    /// one exact name, or every name starting with the literal text before
    /// the first wildcard (empty for a pattern that starts with one: every
    /// name).
    pub fn reach(&self) -> Reach<'_> {
        if !self.wildcard {
            return Reach::Exact(&self.text);
        }
        let literal = self.text.find(['*', '?']).unwrap_or(self.text.len());
        Reach::Prefix(&self.text[..literal])
    }

    /// Whether `name` matches the whole pattern (case-sensitive).
    pub fn matches(&self, name: &str) -> bool {
        if !self.wildcard {
            return self.text == name;
        }
        wildcard_match(self.text.as_bytes(), name.as_bytes())
    }
}

/// Which names a [`ToolPattern`] can match ([`ToolPattern::reach`]): a
/// superset found by one lookup or one range of sorted names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reach<'a> {
    /// Exactly this name.
    Exact(&'a str),
    /// Names starting with this text (every name when it is empty).
    Prefix(&'a str),
}

/// Iterative glob matching with single-star backtracking: O(pattern × name)
/// in the worst case, no recursion, no allocation. Patterns are ASCII and so
/// are valid tool names, so comparing bytes is exact.
fn wildcard_match(pattern: &[u8], name: &[u8]) -> bool {
    let (mut p, mut n) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while n < name.len() {
        match pattern.get(p) {
            Some(b'*') => {
                star = Some((p, n));
                p += 1;
            }
            Some(&c) if c == b'?' || c == name[n] => {
                p += 1;
                n += 1;
            }
            _ => match star {
                Some((sp, sn)) => {
                    p = sp + 1;
                    n = sn + 1;
                    star = Some((sp, sn + 1));
                }
                None => return false,
            },
        }
    }
    pattern[p..].iter().all(|&c| c == b'*')
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Exact names, `*`, `?` and combinations match whole names only.
    #[test]
    fn matching_table() {
        let cases = [
            ("search_kb", "search_kb", true),
            ("search_kb", "search_kb2", false),
            ("get_*", "get_user", true),
            ("get_*", "get_", true),
            ("get_*", "forget_user", false),
            ("*", "anything.at-all", true),
            ("*_user", "get_user", true),
            ("*_user", "get_users", false),
            ("g?t_*", "got_x", true),
            ("g?t_*", "gt_x", false),
            ("a*b*c", "axxbyyc", true),
            ("a*b*c", "axxbyy", false),
            ("**", "", true),
            ("kb.*", "kb.search", true),
        ];
        for (pattern, name, expected) in cases {
            let p = ToolPattern::parse(pattern).unwrap();
            assert_eq!(p.matches(name), expected, "{pattern} vs {name}");
        }
    }

    /// A pattern reaches its exact name, or the names starting with its
    /// text before the first wildcard; every name it matches is in reach.
    #[test]
    fn reach_covers_every_match() {
        let cases = [
            ("search_kb", Reach::Exact("search_kb")),
            ("billing_*", Reach::Prefix("billing_")),
            ("g?t_*", Reach::Prefix("g")),
            ("*_user", Reach::Prefix("")),
            ("*", Reach::Prefix("")),
        ];
        for (pattern, reach) in cases {
            assert_eq!(ToolPattern::parse(pattern).unwrap().reach(), reach);
        }
        let names = ["get_user", "got_x", "billing_a", "search_kb", "a_user"];
        for pattern in ["search_kb", "billing_*", "g?t_*", "*_user", "get_*"] {
            let p = ToolPattern::parse(pattern).unwrap();
            for name in names.iter().filter(|n| p.matches(n)) {
                let reached = match p.reach() {
                    Reach::Exact(exact) => exact == *name,
                    Reach::Prefix(prefix) => name.starts_with(prefix),
                };
                assert!(reached, "{pattern} matches {name} out of reach");
            }
        }
    }

    /// Characters no tool name holds are rejected with a message naming them.
    #[test]
    fn bad_patterns_are_named() {
        let err = ToolPattern::parse("get_[id]").unwrap_err().to_string();
        assert!(err.contains("'['"), "{err}");
        let empty = ToolPattern::parse("").unwrap_err().to_string();
        assert!(empty.contains("is empty"), "{empty}");
        assert!(ToolPattern::parse("send email").is_err());
    }
}
