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

/// A reference that cannot be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "tool reference {0:?} is malformed: write \"name\" or \"name@version\" where version is 1, 1.2 or 1.2.3"
)]
pub struct BadRef(pub String);

impl<'a> ToolRef<'a> {
    /// Parses `name`, `name@MAJOR`, `name@MAJOR.MINOR` or `name@SEMVER`.
    pub fn parse(text: &'a str) -> Result<Self, BadRef> {
        let bad = || BadRef(text.to_owned());
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
}
