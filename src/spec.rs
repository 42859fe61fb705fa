//! Tool specs: validation of what an executor registers, normalisation of
//! defaults, and the fingerprint that tells replicas of one tool apart from
//! conflicting definitions.

use crate::pb::{RetryPolicy, RiskLevel, ToolSpec};
pub use crate::reference::label;
use crate::schema::{self, Checks, Deferred, SchemaError};
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::{fmt, time::Duration};

/// Timeout used when a spec says 0.
pub const DEFAULT_TIMEOUT: Duration =
    Duration::from_millis(crate::pb::DefaultValue::TimeoutMs as u64);
/// Longest timeout a tool may declare.
pub const MAX_TIMEOUT: Duration = Duration::from_millis(crate::pb::Limit::MaxTimeoutMs as u64);
/// Longest description accepted, in characters.
pub const MAX_DESCRIPTION_CHARS: usize = crate::pb::Limit::MaxDescriptionChars as usize;
pub use crate::reference::MAX_NAME_CHARS;
/// Most attempts any retry policy may ask for (gRFC A6).
pub const MAX_ATTEMPTS_CAP: u32 = 5;
/// The dispatcher's own tool: runs the caller's SearchTools when invoked.
pub const SEARCH_TOOL: &str = "search_tools";
/// The MCP door's tool (search mode) that calls another tool by name.
pub const CALL_TOOL: &str = "call_tool";
/// Names the mesh answers itself, which no executor may register.
pub const RESERVED_NAMES: [&str; 2] = [SEARCH_TOOL, CALL_TOOL];

/// Why one tool of a registration was rejected. The text is for the person
/// who wrote the spec: it says what to change.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    /// The name does not match `^[A-Za-z][A-Za-z0-9_-]{0,63}$`.
    #[error(
        "name {0:?} is invalid: start with a letter, then use only letters, digits, '_' or '-' (no '.': OpenAI's and Anthropic's tool APIs reject it), at most {MAX_NAME_CHARS} characters"
    )]
    InvalidName(String),
    /// The version is not semver.
    #[error("version {version:?} is not a semantic version such as \"1.0.0\": {reason}")]
    InvalidVersion {
        /// What was given.
        version: String,
        /// What the semver parser said.
        reason: String,
    },
    /// The description is empty.
    #[error("description is empty; say what the tool does so a model can choose it")]
    EmptyDescription,
    /// The description is too long.
    #[error("description has {0} characters; the limit is {MAX_DESCRIPTION_CHARS}")]
    DescriptionTooLong(usize),
    /// The input schema is not usable.
    #[error("input_schema {0}")]
    InputSchema(SchemaError),
    /// The output schema is not usable.
    #[error("output_schema {0}")]
    OutputSchema(SchemaError),
    /// The timeout is out of bounds.
    #[error("timeout_ms {0} is out of range: use 0 for the default (10 s) or 1..=600000")]
    TimeoutOutOfRange(u32),
    /// The retry policy makes no sense.
    #[error("retry policy is invalid: {0}")]
    InvalidRetry(String),
    /// The risk enum value is unknown.
    #[error("risk {0} is not a known RiskLevel; use LOW, MEDIUM or HIGH")]
    UnknownRisk(i32),
    /// A snapshot's rollout cannot be used (it is left out).
    #[error("{0}")]
    Rollout(crate::rollout::BadRollout),
}

/// Retry policy with every default filled in.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Retry {
    /// Attempts in all, the first included (1..=5).
    pub max_attempts: u32,
    /// Backoff bound before the first retry.
    pub initial_backoff: Duration,
    /// Upper bound of any backoff.
    pub max_backoff: Duration,
    /// Growth per attempt.
    pub multiplier: f64,
    /// Upper bound of one attempt, if any.
    pub attempt_timeout: Option<Duration>,
}

impl Default for Retry {
    fn default() -> Self {
        Retry {
            max_attempts: 3,
            initial_backoff: Duration::from_millis(25),
            max_backoff: Duration::from_millis(250),
            multiplier: 2.0,
            attempt_timeout: None,
        }
    }
}

impl Retry {
    fn from_pb(policy: Option<&RetryPolicy>) -> Result<Self, SpecError> {
        let defaults = Retry::default();
        let Some(p) = policy else {
            return Ok(defaults);
        };
        let pick = |ms: u32, default: Duration| {
            if ms == 0 {
                default
            } else {
                Duration::from_millis(ms.into())
            }
        };
        let retry = Retry {
            max_attempts: match p.max_attempts {
                0 => defaults.max_attempts,
                n => n.min(MAX_ATTEMPTS_CAP),
            },
            initial_backoff: pick(p.initial_backoff_ms, defaults.initial_backoff),
            max_backoff: pick(p.max_backoff_ms, defaults.max_backoff),
            multiplier: if p.backoff_multiplier == 0.0 {
                defaults.multiplier
            } else {
                f64::from(p.backoff_multiplier)
            },
            attempt_timeout: (p.attempt_timeout_ms > 0)
                .then(|| Duration::from_millis(p.attempt_timeout_ms.into())),
        };
        if !retry.multiplier.is_finite() || retry.multiplier < 1.0 {
            return Err(SpecError::InvalidRetry(format!(
                "backoff_multiplier {} must be at least 1.0",
                p.backoff_multiplier
            )));
        }
        if retry.initial_backoff > retry.max_backoff {
            return Err(SpecError::InvalidRetry(format!(
                "initial_backoff_ms {} is larger than max_backoff_ms {}",
                retry.initial_backoff.as_millis(),
                retry.max_backoff.as_millis()
            )));
        }
        Ok(retry)
    }

    fn to_pb(self) -> RetryPolicy {
        RetryPolicy {
            max_attempts: self.max_attempts,
            initial_backoff_ms: self.initial_backoff.as_millis() as u32,
            max_backoff_ms: self.max_backoff.as_millis() as u32,
            backoff_multiplier: self.multiplier as f32,
            attempt_timeout_ms: self.attempt_timeout.map_or(0, |t| t.as_millis() as u32),
        }
    }
}

/// A validated, normalised tool spec.
///
/// Built once per name@version (and fingerprint) and shared by `Arc`
/// between snapshots. Its schemas are checked when it is built, then held
/// as their canonical text: each is parsed and compiled the first time a
/// call needs it and kept from then on (most definitions a registry or
/// dispatcher holds are never called).
pub struct ToolDef {
    spec: ToolSpec,
    version: semver::Version,
    input: Deferred,
    /// The output schema, when the tool has one.
    output: Option<Deferred>,
    timeout: Duration,
    retry: Retry,
    fingerprint: String,
    /// Regular expressions its input and output schemas compile (counted
    /// when it is built, or on first asking for a stored definition).
    patterns: std::sync::OnceLock<usize>,
}

/// Whether building a definition compiles its schemas ([`ToolDef::new`])
/// or trusts their canonical text ([`ToolDef::stored`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Schemas {
    Compile,
    Trust,
}

impl fmt::Debug for ToolDef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ToolDef")
            .field("name", &self.spec.name)
            .field("version", &self.spec.version)
            .field("fingerprint", &self.fingerprint)
            .finish_non_exhaustive()
    }
}

impl ToolDef {
    /// Validates `spec` and fills in its defaults (risk LOW, timeout 10 s,
    /// retry policy).
    pub fn new(spec: ToolSpec) -> Result<Self, SpecError> {
        ToolDef::build(spec, Schemas::Compile)
    }

    /// A definition read back from where the mesh keeps validated ones (the
    /// registry's store, a registry's snapshot): its fields are checked as
    /// [`ToolDef::new`] checks them, but its schemas, which compiled when it
    /// was registered and are held in canonical form, are not compiled
    /// again here. Each compiles the first time a call needs it, as for
    /// any definition; one that no longer compiles fails those calls with
    /// its schema error. A registry or dispatcher loading 100,000
    /// definitions would otherwise compile every schema once more.
    pub fn stored(spec: ToolSpec) -> Result<Self, SpecError> {
        ToolDef::build(spec, Schemas::Trust)
    }

    fn build(mut spec: ToolSpec, schemas: Schemas) -> Result<Self, SpecError> {
        validate_name(&spec.name)?;
        let version =
            semver::Version::parse(&spec.version).map_err(|e| SpecError::InvalidVersion {
                version: spec.version.clone(),
                reason: e.to_string(),
            })?;
        if spec.description.trim().is_empty() {
            return Err(SpecError::EmptyDescription);
        }
        let chars = spec.description.chars().count();
        if chars > MAX_DESCRIPTION_CHARS {
            return Err(SpecError::DescriptionTooLong(chars));
        }
        let has_output = !spec.output_schema.trim().is_empty();
        let patterns = std::sync::OnceLock::new();
        if schemas == Schemas::Compile {
            let input = schema::compile_text(&spec.input_schema).map_err(SpecError::InputSchema)?;
            let mut count = schema::count_patterns(&input.schema);
            if has_output {
                let output =
                    schema::compile_text(&spec.output_schema).map_err(SpecError::OutputSchema)?;
                count += schema::count_patterns(&output.schema);
                spec.output_schema = output.schema.to_string();
            }
            // Canonical text: serde_json's map is sorted, so equal schemas
            // give equal fingerprints whatever their key order or whitespace.
            spec.input_schema = input.schema.to_string();
            let _ = patterns.set(count);
        }
        let timeout = match spec.timeout_ms {
            0 => DEFAULT_TIMEOUT,
            ms if u64::from(ms) > MAX_TIMEOUT.as_millis() as u64 => {
                return Err(SpecError::TimeoutOutOfRange(ms));
            }
            ms => Duration::from_millis(ms.into()),
        };
        let risk = match RiskLevel::try_from(spec.risk) {
            Ok(RiskLevel::Unspecified) => RiskLevel::Low,
            Ok(risk) => risk,
            Err(_) => return Err(SpecError::UnknownRisk(spec.risk)),
        };
        let retry = Retry::from_pb(spec.retry.as_ref())?;
        spec.risk = risk as i32;
        spec.timeout_ms = timeout.as_millis() as u32;
        spec.retry = Some(retry.to_pb());
        let fingerprint = fingerprint(&spec);
        Ok(ToolDef {
            spec,
            version,
            input: Deferred::default(),
            output: has_output.then(Deferred::default),
            timeout,
            retry,
            fingerprint,
            patterns,
        })
    }

    /// Regular expressions (`pattern` values and `patternProperties` keys)
    /// its input and output schemas compile, for budgets across tools such
    /// as [`MAX_REGISTRATION_PATTERNS`](schema::MAX_REGISTRATION_PATTERNS).
    pub fn pattern_count(&self) -> usize {
        *self.patterns.get_or_init(|| {
            let input = self.read_input_schema(schema::count_patterns);
            let output = self.output.as_ref().map_or(0, |output| {
                output.read(&self.spec.output_schema, schema::count_patterns)
            });
            input + output
        })
    }

    /// The normalised spec (defaults filled in, schemas in canonical form).
    pub fn spec(&self) -> &ToolSpec {
        &self.spec
    }
    /// The tool's name.
    pub fn name(&self) -> &str {
        &self.spec.name
    }
    /// The parsed version.
    pub fn version(&self) -> &semver::Version {
        &self.version
    }
    /// The parsed input schema (parsed once, then kept).
    pub fn input_schema(&self) -> &Value {
        self.input.tree(&self.spec.input_schema)
    }
    /// `f` applied to the parsed input schema, without keeping the tree
    /// (for reading every definition once: a listing, a search index).
    pub fn read_input_schema<R>(&self, f: impl FnOnce(&Value) -> R) -> R {
        self.input.read(&self.spec.input_schema, f)
    }
    /// The input schema's checks (validator and fast shape), compiled the
    /// first time they are asked for. It compiled when the definition was
    /// built, so the error is not expected.
    pub fn input(&self) -> Result<&Checks, &SchemaError> {
        self.input.checks(&self.spec.input_schema)
    }
    /// The parsed output schema, when the tool declares one (parsed once,
    /// then kept).
    pub fn output_schema(&self) -> Option<&Value> {
        let output = self.output.as_ref()?;
        Some(output.tree(&self.spec.output_schema))
    }
    /// The output schema's checks, when declared, compiled the first time
    /// they are asked for.
    pub fn output(&self) -> Option<Result<&Checks, &SchemaError>> {
        let output = self.output.as_ref()?;
        Some(output.checks(&self.spec.output_schema))
    }
    /// Whether the tool only reads: LOW risk and declared `read_only` (MCP's
    /// `readOnlyHint`; with [`idempotent`](Self::idempotent), its answers
    /// may be cached).
    pub fn read_only(&self) -> bool {
        self.spec.read_only && self.spec.risk == RiskLevel::Low as i32
    }
    /// Whether executors serve the tool on `ExecuteStream`, reporting
    /// progress while it runs (else only on `Execute`).
    pub fn streams_progress(&self) -> bool {
        self.spec.streams_progress
    }
    /// Upper bound for one execution.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }
    /// The retry policy with defaults filled in.
    pub fn retry(&self) -> Retry {
        self.retry
    }
    /// Whether the dispatcher may resend a call that may have reached an executor.
    pub fn idempotent(&self) -> bool {
        self.spec.idempotent
    }
    /// The risk level (never UNSPECIFIED).
    pub fn risk(&self) -> RiskLevel {
        effective_risk(self.spec.risk)
    }
    /// `name@version`, as every message names one definition.
    pub fn label(&self) -> String {
        label(self.name(), self.version())
    }
    /// Hex SHA-256 over the fields replicas must agree on.
    pub fn fingerprint(&self) -> &str {
        &self.fingerprint
    }

    /// The fields in which `other` (same name@version) disagrees with this
    /// definition; empty when they are replicas of one tool.
    pub fn conflicts_with(&self, other: &ToolDef) -> Vec<&'static str> {
        let (a, b) = (&self.spec, &other.spec);
        let mut fields = Vec::new();
        if a.description != b.description {
            fields.push("description");
        }
        if a.input_schema != b.input_schema {
            fields.push("input_schema");
        }
        if a.output_schema != b.output_schema {
            fields.push("output_schema");
        }
        if a.risk != b.risk {
            fields.push("risk");
        }
        if a.idempotent != b.idempotent {
            fields.push("idempotent");
        }
        if a.read_only != b.read_only {
            fields.push("read_only");
        }
        if a.timeout_ms != b.timeout_ms {
            fields.push("timeout_ms");
        }
        if a.streams_progress != b.streams_progress {
            fields.push("streams_progress");
        }
        if a.read_only != b.read_only {
            fields.push("read_only");
        }
        fields
    }
}

/// The risk a raw `RiskLevel` number stands for, by the one rule every
/// component applies: UNSPECIFIED is the documented default (LOW), and a
/// number this build does not know is HIGH, so an unknown risk is never
/// treated as lower than it might be.
pub fn effective_risk(raw: i32) -> RiskLevel {
    match RiskLevel::try_from(raw) {
        Ok(RiskLevel::Unspecified) => RiskLevel::Low,
        Ok(risk) => risk,
        Err(_) => RiskLevel::High,
    }
}

/// Checks a tool name against `^[A-Za-z][A-Za-z0-9_-]{0,63}$`: what the
/// strictest model API (OpenAI, Anthropic: `^[a-zA-Z0-9_-]{1,64}$`) and MCP
/// accept, so every model-facing shape carries the name unchanged and a
/// model calls a tool by the name it was shown.
pub fn validate_name(name: &str) -> Result<(), SpecError> {
    let mut chars = name.chars();
    let first_ok = chars.next().is_some_and(|c| c.is_ascii_alphabetic());
    let rest_ok = chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-'));
    if first_ok && rest_ok && name.len() <= MAX_NAME_CHARS {
        Ok(())
    } else {
        Err(SpecError::InvalidName(name.to_owned()))
    }
}

fn fingerprint(spec: &ToolSpec) -> String {
    let mut hasher = Sha256::new();
    for part in [
        spec.description.as_bytes(),
        spec.input_schema.as_bytes(),
        spec.output_schema.as_bytes(),
        &spec.risk.to_be_bytes(),
        &[u8::from(spec.idempotent)],
        &spec.timeout_ms.to_be_bytes(),
    ] {
        hasher.update((part.len() as u64).to_be_bytes());
        hasher.update(part);
    }
    // Only when set, so definitions from before the field keep their fingerprint.
    if spec.read_only {
        hasher.update(b"read_only");
    }
    if spec.streams_progress {
        hasher.update(b"streams_progress");
    }
    hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> ToolSpec {
        ToolSpec {
            name: "search_kb".into(),
            version: "1.0.0".into(),
            description: "Search the knowledge base.".into(),
            input_schema:
                r#"{"type":"object","properties":{"q":{"type":"string"}},"required":["q"]}"#.into(),
            ..ToolSpec::default()
        }
    }

    /// A stored definition is the definition `new` made of the same
    /// spec (fields, fingerprint, pattern count), without compiling its
    /// schemas; its other fields are checked as `new` checks them, and a
    /// schema that does not compile fails the checks a call asks for.
    #[test]
    fn a_stored_definition_is_trusted_for_its_schemas_only() {
        let mut with_pattern = spec();
        with_pattern.input_schema =
            r#"{"type":"object","properties":{"q":{"type":"string","pattern":"^a+$"}}}"#.into();
        with_pattern.output_schema = r#"{"patternProperties":{"^x":{}}}"#.into();
        let made = ToolDef::new(with_pattern).unwrap();
        let stored = ToolDef::stored(made.spec().clone()).unwrap();
        assert_eq!(stored.spec(), made.spec());
        assert_eq!(stored.fingerprint(), made.fingerprint());
        assert_eq!(stored.pattern_count(), 2);
        assert_eq!(stored.pattern_count(), made.pattern_count());
        assert!(stored.input().is_ok() && stored.output().is_some_and(|o| o.is_ok()));

        let mut bad_version = made.spec().clone();
        bad_version.version = "one".into();
        let refused = ToolDef::stored(bad_version).unwrap_err().to_string();
        assert!(refused.contains("not a semantic version"), "{refused}");

        let mut uncompilable = made.spec().clone();
        uncompilable.input_schema = r#"{"minimum":"x"}"#.into();
        assert!(ToolDef::new(uncompilable.clone()).is_err());
        let kept = ToolDef::stored(uncompilable).unwrap();
        let Err(error) = kept.input() else {
            panic!("a schema that does not compile gave checks");
        };
        assert!(error.to_string().contains("does not compile"), "{error}");
    }

    /// One row per rule: what is accepted, and what each rejection says.
    #[test]
    fn validation_table() {
        type Edit = fn(&mut ToolSpec);
        let cases: &[(&str, Edit, Option<&str>)] = &[
            ("valid", |_| {}, None),
            ("dashed name", |s| s.name = "kb_search-v2".into(), None),
            (
                "dotted name (OpenAI and Anthropic reject '.')",
                |s| s.name = "kb.search".into(),
                Some("no '.'"),
            ),
            (
                "empty name",
                |s| s.name = String::new(),
                Some("name \"\" is invalid"),
            ),
            (
                "digit first",
                |s| s.name = "1tool".into(),
                Some("start with a letter"),
            ),
            (
                "space in name",
                |s| s.name = "a b".into(),
                Some("is invalid"),
            ),
            ("65 chars", |s| s.name = "a".repeat(65), Some("at most 64")),
            ("64 chars", |s| s.name = "a".repeat(64), None),
            (
                "not semver",
                |s| s.version = "1.0".into(),
                Some("not a semantic version"),
            ),
            ("pre-release", |s| s.version = "2.0.0-beta.1".into(), None),
            (
                "blank description",
                |s| s.description = "  ".into(),
                Some("description is empty"),
            ),
            (
                "schema not JSON",
                |s| s.input_schema = "{".into(),
                Some("input_schema is not valid JSON"),
            ),
            (
                "schema array",
                |s| s.input_schema = "[]".into(),
                Some("input_schema must be a JSON object"),
            ),
            (
                "schema invalid",
                |s| s.input_schema = r#"{"type":"nope"}"#.into(),
                Some("input_schema does not compile"),
            ),
            (
                "output invalid",
                |s| s.output_schema = r#"{"minimum":"x"}"#.into(),
                Some("output_schema does not compile"),
            ),
            (
                "output regex too costly",
                |s| s.output_schema = r#"{"pattern":"x{99999}"}"#.into(),
                Some(r#"output_schema has the pattern "x{99999}""#),
            ),
            (
                "input regex too costly",
                |s| s.input_schema = r#"{"properties":{"a":{"pattern":"a{99999}"}}}"#.into(),
                Some("compiles to more than 256 KiB"),
            ),
            (
                "output valid",
                |s| s.output_schema = r#"{"type":"object"}"#.into(),
                None,
            ),
            ("timeout max", |s| s.timeout_ms = 600_000, None),
            (
                "timeout over",
                |s| s.timeout_ms = 600_001,
                Some("timeout_ms 600001 is out of range"),
            ),
            ("unknown risk", |s| s.risk = 9, Some("risk 9")),
            (
                "bad multiplier",
                |s| {
                    s.retry = Some(RetryPolicy {
                        backoff_multiplier: 0.5,
                        ..Default::default()
                    })
                },
                Some("backoff_multiplier"),
            ),
        ];
        for (label, edit, expected) in cases {
            let mut s = spec();
            edit(&mut s);
            match (ToolDef::new(s), expected) {
                (Ok(_), None) => {}
                (Err(e), Some(text)) => {
                    assert!(e.to_string().contains(text), "{label}: {e}")
                }
                (Ok(_), Some(text)) => panic!("{label}: accepted, expected {text:?}"),
                (Err(e), None) => panic!("{label}: rejected: {e}"),
            }
        }
    }

    /// Defaults are filled in: LOW risk, 10 s timeout, 3 attempts capped at 5.
    #[test]
    fn defaults_are_filled_in() {
        let def = ToolDef::new(spec()).unwrap();
        assert_eq!(def.risk(), RiskLevel::Low);
        assert_eq!(def.timeout(), DEFAULT_TIMEOUT);
        assert_eq!(def.spec().timeout_ms, 10_000);
        assert_eq!(def.retry().max_attempts, 3);
        let mut s = spec();
        s.retry = Some(RetryPolicy {
            max_attempts: 9,
            ..Default::default()
        });
        assert_eq!(
            ToolDef::new(s).unwrap().retry().max_attempts,
            MAX_ATTEMPTS_CAP
        );
    }

    /// Key order and whitespace do not change the fingerprint; meaning does.
    #[test]
    fn fingerprint_is_semantic() {
        let a = ToolDef::new(spec()).unwrap();
        let mut s = spec();
        s.input_schema =
            r#"{ "required": ["q"], "properties": {"q": {"type": "string"}}, "type": "object" }"#
                .into();
        s.owner = "other-team".into();
        let b = ToolDef::new(s).unwrap();
        assert_eq!(a.fingerprint(), b.fingerprint());
        assert!(a.conflicts_with(&b).is_empty());
        let mut s = spec();
        s.idempotent = true;
        s.description = "Different.".into();
        let c = ToolDef::new(s).unwrap();
        assert_ne!(a.fingerprint(), c.fingerprint());
        assert_eq!(a.conflicts_with(&c), vec!["description", "idempotent"]);
        // Replicas must agree on how they are called (Execute or ExecuteStream).
        let streaming = ToolDef::new(ToolSpec {
            streams_progress: true,
            ..spec()
        })
        .unwrap();
        assert!(streaming.streams_progress() && !a.streams_progress());
        assert_ne!(a.fingerprint(), streaming.fingerprint());
        assert_eq!(a.conflicts_with(&streaming), vec!["streams_progress"]);
    }
}
