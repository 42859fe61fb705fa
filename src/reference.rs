//! Tool references as callers write them — `name`, `name@1`, `name@1.2`,
//! `name@1.2.3` — and how a reference picks one of the served versions.

use semver::Version;
use std::fmt;

/// Which versions a reference accepts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VersionPattern {
    /// `name`: the newest stable version.
    Newest,
    /// `name@1`: the newest stable 1.x.y.
    Major(u64),
    /// `name@1.2`: the newest stable 1.2.y.
    Minor(u64, u64),
    /// `name@1.2.3` or `name@2.0.0-beta.1`: exactly that version.
    Exact(Version),
}

impl VersionPattern {
    /// Whether `version` satisfies the pattern. Pre-releases match only
    /// when named exactly.
    pub fn matches(&self, version: &Version) -> bool {
        let stable = version.pre.is_empty();
        match self {
            VersionPattern::Newest => stable,
            VersionPattern::Major(major) => stable && version.major == *major,
            VersionPattern::Minor(major, minor) => {
                stable && version.major == *major && version.minor == *minor
            }
            VersionPattern::Exact(exact) => version == exact,
        }
    }
}

impl fmt::Display for VersionPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            VersionPattern::Newest => f.write_str("newest stable"),
            VersionPattern::Major(m) => write!(f, "{m}"),
            VersionPattern::Minor(m, n) => write!(f, "{m}.{n}"),
            VersionPattern::Exact(v) => write!(f, "{v}"),
        }
    }
}

/// A parsed `name[@version]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolRef<'a> {
    /// The tool name.
    pub name: &'a str,
    /// The versions it accepts.
    pub version: VersionPattern,
}

/// Longest tool name, in characters.
pub const MAX_NAME_CHARS: usize = 64;

/// The longest reference parsed: a name of [`MAX_NAME_CHARS`] characters,
/// `@` and a version of up to 64 characters. Anything longer is refused
/// before any lookup or "did you mean" matching, whose work grows with it.
pub const MAX_REFERENCE_BYTES: usize = MAX_NAME_CHARS + 1 + 64;

/// How much of an over-long value an error message repeats.
const SHOWN_BYTES: usize = MAX_REFERENCE_BYTES;

/// A reference that cannot be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BadRef {
    /// Not `name` or `name@version`.
    #[error(
        "tool reference {0:?} is malformed: write \"name\" or \"name@version\" where version is 1, 1.2 or 1.2.3"
    )]
    Malformed(String),
    /// Longer than any tool name and version together.
    #[error(
        "tool reference {shown:?}... is {bytes} bytes long: a tool name has at most {MAX_NAME_CHARS} characters; list the tools to see the names"
    )]
    TooLong {
        /// Its first bytes (on a character boundary).
        shown: String,
        /// Its length.
        bytes: usize,
    },
}

/// The first bytes of `text`, cut on a character boundary: what an error
/// message repeats of an over-long value.
pub fn shown_prefix(text: &str) -> &str {
    let mut end = text.len().min(SHOWN_BYTES);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

impl<'a> ToolRef<'a> {
    /// Parses `name`, `name@MAJOR`, `name@MAJOR.MINOR` or `name@SEMVER`.
    pub fn parse(text: &'a str) -> Result<Self, BadRef> {
        if text.len() > MAX_REFERENCE_BYTES {
            return Err(BadRef::TooLong {
                shown: shown_prefix(text).to_owned(),
                bytes: text.len(),
            });
        }
        let bad = || BadRef::Malformed(text.to_owned());
        let Some((name, version)) = text.split_once('@') else {
            return Ok(ToolRef {
                name: text,
                version: VersionPattern::Newest,
            });
        };
        if name.is_empty() {
            return Err(bad());
        }
        let number = |s: &str| s.parse::<u64>().map_err(|_| bad());
        let parts: Vec<&str> = version.splitn(3, '.').collect();
        let version = match parts.as_slice() {
            [major] => VersionPattern::Major(number(major)?),
            [major, minor] => VersionPattern::Minor(number(major)?, number(minor)?),
            _ => VersionPattern::Exact(Version::parse(version).map_err(|_| bad())?),
        };
        Ok(ToolRef { name, version })
    }

    /// The newest of `versions` that the reference accepts.
    pub fn select<'v>(
        &self,
        versions: impl IntoIterator<Item = &'v Version>,
    ) -> Option<&'v Version> {
        versions
            .into_iter()
            .filter(|v| self.version.matches(v))
            .max()
    }
}

/// `name@version`: how messages, keys and logs name one tool definition.
pub fn label(name: &str, version: &impl fmt::Display) -> String {
    format!("{name}@{version}")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The version selection table: what each reference picks from one set.
    #[test]
    fn selection_table() {
        let served: Vec<Version> = ["1.0.0", "1.2.0", "1.2.5", "1.10.0", "2.0.0", "3.0.0-beta.1"]
            .iter()
            .map(|v| Version::parse(v).unwrap())
            .collect();
        let cases = [
            ("t", Some("2.0.0")),
            ("t@1", Some("1.10.0")),
            ("t@1.2", Some("1.2.5")),
            ("t@1.2.0", Some("1.2.0")),
            ("t@1.3", None),
            ("t@4", None),
            ("t@3", None),
            ("t@3.0.0-beta.1", Some("3.0.0-beta.1")),
        ];
        for (text, expected) in cases {
            let r = ToolRef::parse(text).unwrap();
            let got = r.select(&served).map(|v| v.to_string());
            assert_eq!(got.as_deref(), expected, "{text}");
        }
    }

    /// Malformed references are refused with the accepted forms spelled out.
    #[test]
    fn malformed_references() {
        for text in ["@1", "t@", "t@x", "t@1.x", "t@1.2.3.4"] {
            let err = ToolRef::parse(text).unwrap_err();
            assert!(err.to_string().contains("name@version"), "{text}");
        }
    }

    /// An over-long reference is refused by its length, and the message
    /// repeats only its first bytes (cut on a character boundary).
    #[test]
    fn over_long_references() {
        let long = format!("é{}", "x".repeat(2 << 20));
        let err = ToolRef::parse(&long).unwrap_err();
        let message = err.to_string();
        assert!(message.contains("at most 64 characters"), "{message}");
        assert!(message.len() < 400, "{message}");
        let longest = format!("{}@{}", "t".repeat(MAX_NAME_CHARS), "1".repeat(64));
        assert_eq!(longest.len(), MAX_REFERENCE_BYTES);
        assert!(!matches!(
            ToolRef::parse(&longest),
            Err(BadRef::TooLong { .. })
        ));
    }
}
