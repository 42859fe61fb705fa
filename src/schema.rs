//! JSON Schema handling shared by the registry, the dispatcher and the SDK:
//! compiling a schema (no remote `$ref`), and checking arguments with a
//! message that names every failing JSON path.

mod arguments;
mod covers;
mod deferred;
mod quote;
mod shape;

pub use arguments::{ArgumentsError, parse_arguments};
pub use covers::{Difference, NotCovered, covers};
pub use deferred::Deferred;
pub use quote::{MAX_QUOTED_CHARS, cut_path, quote, quote_str};
pub use shape::Shape;

use jsonschema::Validator;
use serde_json::Value;
use std::fmt;

/// Limits that keep one registration from costing the registry too much.
pub const MAX_SCHEMA_BYTES: usize = 64 * 1024;
/// Deepest nesting of objects and arrays accepted in a schema.
pub const MAX_SCHEMA_DEPTH: usize = 32;
/// Most regular expressions (`pattern` values and `patternProperties`
/// keys) in one schema: each is compiled into the registry, the dispatcher
/// and every executor.
pub const MAX_SCHEMA_PATTERNS: usize = 32;
/// Most regular expressions one registration may compile across all its
/// tools (at most 256 KiB each, so at most 128 MiB for one registration).
pub const MAX_REGISTRATION_PATTERNS: usize = 512;
/// Compiled size allowed per regular expression, in bytes (the regex
/// crate's own default is 10 MiB: 16 patterns such as `x{99999}` in an
/// 824-byte schema cost over 100 MB).
pub const MAX_PATTERN_COMPILED_BYTES: usize = 256 * 1024;
/// Lazy-DFA cache allowed per regular expression, in bytes.
pub const MAX_PATTERN_DFA_BYTES: usize = 256 * 1024;
/// How many failing paths a message lists before it says "and N more".
const MAX_LISTED_VIOLATIONS: usize = 10;

/// Why a schema was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SchemaError {
    /// The text is not JSON.
    #[error("is not valid JSON ({0}); write the schema as a JSON object")]
    NotJson(String),
    /// The JSON is not an object.
    #[error("must be a JSON object such as {{\"type\":\"object\",\"properties\":{{}}}}, got {0}")]
    NotObject(&'static str),
    /// Over the size limit.
    #[error(
        "is {0} bytes; the limit is {MAX_SCHEMA_BYTES} bytes, so split the tool or simplify the schema"
    )]
    TooLarge(usize),
    /// Nested too deeply.
    #[error("nests deeper than {MAX_SCHEMA_DEPTH} levels; flatten it")]
    TooDeep,
    /// More regular expressions than [`MAX_SCHEMA_PATTERNS`].
    #[error(
        "has {0} regular expressions (`pattern` and `patternProperties`); the limit is {MAX_SCHEMA_PATTERNS}, so use `enum`, `format` or fewer, simpler patterns"
    )]
    TooManyPatterns(usize),
    /// A regular expression does not parse, or compiles to more than
    /// [`MAX_PATTERN_COMPILED_BYTES`].
    #[error(
        "has the pattern {pattern}, which is not a valid regular expression or compiles to more than {} KiB (the limit per pattern); fix its syntax, shorten large repetitions such as `x{{99999}}` (use `maxLength` for lengths) or split it",
        MAX_PATTERN_COMPILED_BYTES / 1024
    )]
    BadPattern {
        /// The pattern, as JSON.
        pattern: String,
    },
    /// jsonschema refused it.
    #[error("does not compile as a JSON Schema: {0}")]
    Invalid(String),
}

/// One failing part of a JSON document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// JSON Pointer to the failing value (`""` is the whole document).
    pub path: String,
    /// What is wrong with it.
    pub message: String,
}

/// Arguments that do not satisfy a schema: every failing path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violations(pub Vec<Violation>);

impl fmt::Display for Violations {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, v) in self.0.iter().take(MAX_LISTED_VIOLATIONS).enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            let path = if v.path.is_empty() { "/" } else { &v.path };
            write!(f, "at {path}: {}", v.message)?;
        }
        if self.0.len() > MAX_LISTED_VIOLATIONS {
            write!(f, "; and {} more", self.0.len() - MAX_LISTED_VIOLATIONS)?;
        }
        Ok(())
    }
}

/// A schema ready to check documents: parsed, compiled by jsonschema
/// (which names every violation) and as a [`Shape`] (which accepts the
/// common valid documents from their text without building a tree).
pub struct Compiled {
    /// The parsed schema.
    pub schema: Value,
    /// Its checks.
    pub checks: Checks,
}

/// The two checks of a compiled schema.
pub struct Checks {
    /// jsonschema's validator.
    pub validator: Validator,
    /// The fast acceptance check.
    pub shape: Shape,
}

impl Checks {
    /// Compiles both checks of a parsed schema.
    pub fn of(schema: &Value) -> Result<Checks, SchemaError> {
        Ok(Checks {
            validator: compile(schema)?,
            shape: Shape::of(schema),
        })
    }
}

/// Parses and compiles a schema given as text.
pub fn compile_text(text: &str) -> Result<Compiled, SchemaError> {
    let schema = parse_text(text)?;
    let checks = Checks::of(&schema)?;
    Ok(Compiled { schema, checks })
}

/// Parses a schema given as text, within [`MAX_SCHEMA_BYTES`].
pub fn parse_text(text: &str) -> Result<Value, SchemaError> {
    if text.len() > MAX_SCHEMA_BYTES {
        return Err(SchemaError::TooLarge(text.len()));
    }
    serde_json::from_str(text).map_err(|e| SchemaError::NotJson(e.to_string()))
}

/// Compiles a parsed schema. Remote `$ref`s are not fetched: such a schema
/// fails to compile.
pub fn compile(schema: &Value) -> Result<Validator, SchemaError> {
    if !schema.is_object() {
        return Err(SchemaError::NotObject(json_kind(schema)));
    }
    if depth(schema) > MAX_SCHEMA_DEPTH {
        return Err(SchemaError::TooDeep);
    }
    let patterns = count_patterns(schema);
    if patterns > MAX_SCHEMA_PATTERNS {
        return Err(SchemaError::TooManyPatterns(patterns));
    }
    jsonschema::options()
        .with_pattern_options(
            jsonschema::PatternOptions::fancy_regex()
                .size_limit(MAX_PATTERN_COMPILED_BYTES)
                .dfa_size_limit(MAX_PATTERN_DFA_BYTES),
        )
        .build(schema)
        .map_err(|e| match e.kind() {
            jsonschema::error::ValidationErrorKind::Format { format } if format == "regex" => {
                SchemaError::BadPattern {
                    pattern: e.instance().to_string(),
                }
            }
            _ => SchemaError::Invalid(e.to_string()),
        })
}

/// `pattern` strings and `patternProperties` keys anywhere in `schema`
/// (counted generously: a `pattern` key in an unrelated place counts too).
pub fn count_patterns(schema: &Value) -> usize {
    let mut count = 0;
    let mut stack = vec![schema];
    while let Some(v) = stack.pop() {
        match v {
            Value::Array(items) => stack.extend(items),
            Value::Object(map) => {
                for (key, value) in map {
                    match (key.as_str(), value) {
                        ("pattern", Value::String(_)) => count += 1,
                        ("patternProperties", Value::Object(p)) => count += p.len(),
                        _ => {}
                    }
                    stack.push(value);
                }
            }
            _ => {}
        }
    }
    count
}

/// Checks `instance`; fast path first, and only on failure collects every
/// violation to build the message.
pub fn check(validator: &Validator, instance: &Value) -> Result<(), Violations> {
    if validator.is_valid(instance) {
        return Ok(());
    }
    let violations = validator
        .iter_errors(instance)
        .map(|e| Violation {
            path: cut_path(&e.instance_path().to_string()),
            message: describe(&e),
        })
        .collect();
    Err(Violations(violations))
}

/// How many enum options or unexpected names a message lists.
const MAX_LISTED_NAMES: usize = 20;

/// What is wrong, for a model: jsonschema's sentence with the failing
/// value quoted at most [`MAX_QUOTED_CHARS`] long ([`quote`]), every enum
/// option (jsonschema abbreviates them) and the unexpected names, each
/// list cut after [`MAX_LISTED_NAMES`].
fn describe(e: &jsonschema::ValidationError<'_>) -> String {
    use jsonschema::error::ValidationErrorKind as Kind;
    match e.kind() {
        Kind::Enum { options } => {
            format!(
                "{} is not one of {}",
                quote(e.instance()),
                list_values(options)
            )
        }
        Kind::Constant { expected_value } => format!("{} was expected", quote(expected_value)),
        Kind::AdditionalProperties { unexpected } | Kind::UnevaluatedProperties { unexpected } => {
            format!("{} not allowed here", unexpected_properties(unexpected))
        }
        Kind::PropertyNames { error } => {
            format!("property name {}", describe(error))
        }
        _ => e.masked_with(quote(e.instance())).to_string(),
    }
}

/// `the property "a" is` or `the properties "a", "b" … (300 in all) are`.
fn unexpected_properties(names: &[String]) -> String {
    let quoted: Vec<String> = names
        .iter()
        .take(MAX_LISTED_NAMES)
        .map(|n| quote_str(n))
        .collect();
    match names.len() {
        1 => format!("the property {} is", quoted[0]),
        n if n > MAX_LISTED_NAMES => {
            format!("the properties {} … ({n} in all) are", quoted.join(", "))
        }
        _ => format!("the properties {} are", quoted.join(", ")),
    }
}

/// `"a", "b" or "c"` for an enum's options (each quoted, the list cut
/// after [`MAX_LISTED_NAMES`]).
fn list_values(options: &Value) -> String {
    let Some(items) = options.as_array() else {
        return quote(options);
    };
    let mut texts: Vec<String> = items.iter().take(MAX_LISTED_NAMES).map(quote).collect();
    if items.len() > MAX_LISTED_NAMES {
        let last = texts.pop().unwrap_or_default();
        return format!(
            "{}, {last} … ({} options in all; list the tool to see them)",
            texts.join(", "),
            items.len()
        );
    }
    match texts.as_slice() {
        [] => "nothing".to_owned(),
        [one] => one.clone(),
        [init @ .., last] => format!("{} or {last}", init.join(", ")),
    }
}

/// The JSON type name of a value, for messages.
pub fn json_kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Nesting depth of objects and arrays (a scalar is 0).
fn depth(value: &Value) -> usize {
    // Iterative, so a hostile document cannot overflow the stack.
    let mut deepest = 0;
    let mut stack = vec![(value, 0usize)];
    while let Some((v, d)) = stack.pop() {
        deepest = deepest.max(d);
        if d > MAX_SCHEMA_DEPTH {
            break;
        }
        match v {
            Value::Array(items) => stack.extend(items.iter().map(|i| (i, d + 1))),
            Value::Object(map) => stack.extend(map.values().map(|i| (i, d + 1))),
            _ => {}
        }
    }
    deepest
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ticket_schema() -> Validator {
        compile(&json!({
            "type": "object",
            "properties": {
                "title": {"type": "string", "minLength": 1},
                "priority": {"enum": ["low", "normal", "high", "urgent"]},
                "tags": {"type": "array", "items": {"type": "string"}}
            },
            "required": ["title", "priority"],
            "additionalProperties": false
        }))
        .unwrap()
    }

    /// Valid arguments pass; every failing path is named in one message.
    #[test]
    fn names_every_failing_path() {
        let v = ticket_schema();
        assert!(check(&v, &json!({"title": "t", "priority": "low"})).is_ok());
        let err = check(&v, &json!({"title": "", "priority": "soon", "tags": [1]})).unwrap_err();
        let paths: Vec<&str> = err.0.iter().map(|v| v.path.as_str()).collect();
        assert!(paths.contains(&"/title"), "{paths:?}");
        assert!(paths.contains(&"/priority"), "{paths:?}");
        assert!(paths.contains(&"/tags/0"), "{paths:?}");
        let text = err.to_string();
        assert!(
            text.contains(
                r#"at /priority: "soon" is not one of "low", "normal", "high" or "urgent""#
            ),
            "{text}"
        );
    }

    /// A missing required field is reported at the root with the field's name.
    #[test]
    fn missing_field_is_named() {
        let err = check(&ticket_schema(), &json!({"title": "x"})).unwrap_err();
        assert!(err.to_string().contains("priority"), "{err}");
    }

    /// Schemas that are not objects, not JSON, too deep or invalid are refused.
    #[test]
    fn refuses_bad_schemas() {
        assert!(matches!(compile_text("{"), Err(SchemaError::NotJson(_))));
        assert!(matches!(compile_text("[]"), Err(SchemaError::NotObject(_))));
        assert!(matches!(
            compile_text(r#"{"type": 5}"#),
            Err(SchemaError::Invalid(_))
        ));
        let mut deep = json!({"type": "string"});
        for _ in 0..40 {
            deep = json!({"type": "object", "properties": {"a": deep}});
        }
        assert!(matches!(compile(&deep), Err(SchemaError::TooDeep)));
        let huge = format!(r#"{{"description": "{}"}}"#, "x".repeat(MAX_SCHEMA_BYTES));
        assert!(matches!(compile_text(&huge), Err(SchemaError::TooLarge(_))));
    }

    /// An 824-byte schema with 16 `x{99999}` patterns is refused quickly, naming the limit and the fix.
    #[test]
    fn regex_heavy_schemas_are_refused_quickly() {
        let properties: serde_json::Map<String, Value> = (0..16)
            .map(|i| {
                (
                    format!("p{i}"),
                    json!({"type": "string", "pattern": "x{99999}"}),
                )
            })
            .collect();
        let schema = json!({"type": "object", "properties": properties});
        assert!(schema.to_string().len() < 1024);
        let started = std::time::Instant::now();
        let err = compile(&schema).unwrap_err();
        assert!(
            started.elapsed() < std::time::Duration::from_secs(2),
            "{:?}",
            started.elapsed()
        );
        assert!(matches!(err, SchemaError::BadPattern { .. }), "{err}");
        let text = err.to_string();
        assert!(text.contains(r#"pattern "x{99999}""#), "{text}");
        assert!(text.contains("256 KiB"), "{text}");
        assert!(text.contains("maxLength"), "{text}");

        let many: serde_json::Map<String, Value> = (0..=MAX_SCHEMA_PATTERNS)
            .map(|i| (format!("^k{i}$"), json!({})))
            .collect();
        let err = compile(&json!({"patternProperties": many})).unwrap_err();
        assert_eq!(err, SchemaError::TooManyPatterns(MAX_SCHEMA_PATTERNS + 1));
        assert!(err.to_string().contains("the limit is 32"), "{err}");
    }

    /// Ordinary patterns (Unicode classes, anchors, bounded repeats, lookarounds) still compile and work.
    #[test]
    fn ordinary_patterns_compile() {
        let v = compile(&json!({
            "type": "object",
            "properties": {
                "email": {"type": "string", "pattern": "^[^@\\s]+@[^@\\s]+\\.[a-z]{2,}$"},
                "slug": {"type": "string", "pattern": "^\\w{1,64}$"},
                "no_tmp": {"type": "string", "pattern": "^(?!/tmp).*"}
            },
            "patternProperties": {"^x-": {"type": "string"}}
        }))
        .unwrap();
        assert!(
            check(
                &v,
                &json!({"email": "a@b.io", "slug": "ok_1", "no_tmp": "/home"})
            )
            .is_ok()
        );
        assert!(check(&v, &json!({"email": "nope", "no_tmp": "/tmp/x"})).is_err());
    }

    /// A remote `$ref` is never fetched: the schema fails to compile.
    #[test]
    fn remote_refs_are_not_fetched() {
        let schema = json!({"$ref": "https://example.com/schema.json"});
        assert!(matches!(compile(&schema), Err(SchemaError::Invalid(_))));
    }

    /// The message for `instance` against `schema`.
    fn message(schema: Value, instance: Value) -> String {
        check(&compile(&schema).unwrap(), &instance)
            .unwrap_err()
            .to_string()
    }

    /// Every kind of failure quotes a bad value in at most about 100
    /// characters with its size, however large the value (a 120 KB query
    /// once came back whole, into the model's context).
    #[test]
    fn messages_quote_large_values_briefly() {
        let query = "reset ".repeat(20_000);
        let items: Vec<u32> = (0..5_000).collect();
        let members: serde_json::Map<String, Value> =
            (0..300).map(|i| (format!("key{i}"), json!(i))).collect();
        let cases = [
            (
                json!({"properties": {"q": {"type": "string", "maxLength": 500}}}),
                json!({"q": query}),
                "at /q: \"reset reset ",
                " …\" (120,000 characters) is longer than 500 characters",
            ),
            (
                json!({"properties": {"q": {"type": "string", "pattern": "^[a-z]+$"}}}),
                json!({"q": query}),
                "at /q: \"reset",
                "(120,000 characters) does not match \"^[a-z]+$\"",
            ),
            (
                json!({"properties": {"q": {"enum": ["low", "high"]}}}),
                json!({"q": query}),
                "at /q: \"reset",
                "(120,000 characters) is not one of \"low\" or \"high\"",
            ),
            (
                json!({"properties": {"n": {"type": "array", "maxItems": 3}}}),
                json!({"n": items}),
                "at /n: [0,1,2,",
                " … (5,000 items) has more than 3 items",
            ),
            (
                json!({"properties": {"o": {"type": "string"}}}),
                json!({"o": Value::Object(members.clone())}),
                "at /o: {",
                " … (300 keys) is not of type \"string\"",
            ),
            (
                json!({"properties": {"o": {"maxProperties": 2}}}),
                json!({"o": Value::Object(members)}),
                "at /o: {",
                " … (300 keys) has more than 2 properties",
            ),
        ];
        for (schema, instance, starts, contains) in cases {
            let text = message(schema, instance);
            assert!(text.starts_with(starts), "{text}");
            assert!(text.contains(contains), "{text}");
            assert!(
                text.chars().count() < 250,
                "{} characters: {text}",
                text.len()
            );
        }
    }

    /// Unexpected names are quoted briefly and listed up to 20; a huge
    /// enum lists its first options and how many there are; a long path is
    /// cut in its middle.
    #[test]
    fn names_paths_and_options_are_bounded() {
        let closed =
            json!({"type": "object", "properties": {"a": {}}, "additionalProperties": false});
        let one = message(closed.clone(), json!({"x".repeat(10_000): 1}));
        assert!(one.starts_with("at /: the property \"xxx"), "{one}");
        assert!(
            one.ends_with("(10,000 characters) is not allowed here"),
            "{one}"
        );
        let many: serde_json::Map<String, Value> =
            (0..300).map(|i| (format!("k{i:03}"), json!(i))).collect();
        let listed = message(closed, Value::Object(many));
        assert!(
            listed.contains("… (300 in all) are not allowed here"),
            "{listed}"
        );
        assert!(listed.chars().count() < 400, "{listed}");

        let options: Vec<String> = (0..1_000).map(|i| format!("option{i}")).collect();
        let text = message(json!({"enum": options}), json!("nope"));
        assert!(
            text.contains("\"option19\" … (1000 options in all; list the tool to see them)"),
            "{text}"
        );
        assert!(text.chars().count() < 500, "{text}");

        let key = "k".repeat(5_000);
        let deep = json!({"properties": {&key: {"type": "string"}}});
        let text = message(deep, json!({&key: 1}));
        assert!(text.contains('…') && text.chars().count() < 250, "{text}");
    }

    /// Short values are still quoted whole, as before.
    #[test]
    fn short_values_are_quoted_whole() {
        let text = message(
            json!({"properties": {"priority": {"enum": ["low", "normal"]}}}),
            json!({"priority": "soon"}),
        );
        assert_eq!(
            text,
            "at /priority: \"soon\" is not one of \"low\" or \"normal\""
        );
    }
}
