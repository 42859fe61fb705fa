//! Validate: the arguments are JSON within the size limit, name no key twice
//! (what is checked is what is sent), and satisfy the tool's compiled input
//! schema; a result's `data` satisfies the compiled output schema. Every
//! failing path is named.

use crate::error::CallError;
use serde_json::Value;
use toolmesh::{ToolDef, schema};

/// The parsed arguments of a call to `def`, or why they are refused.
/// Empty text stands for `{}`.
pub(crate) fn arguments(def: &ToolDef, text: &str, limit: usize) -> Result<Value, CallError> {
    if text.len() > limit {
        return Err(CallError::ArgumentsTooLarge {
            size: text.len(),
            limit,
        });
    }
    let arguments = schema::parse_arguments(text)?;
    schema::check(def.validator(), &arguments).map_err(|violations| {
        CallError::ArgumentsInvalid {
            tool: def.label(),
            violations,
        }
    })?;
    Ok(arguments)
}

/// Whether `data` (a result's JSON text) keeps the output contract of
/// `def`: with no output schema anything goes; with one, `data` must be
/// JSON that satisfies it (empty text is no data, which fails it).
pub(crate) fn output(def: &ToolDef, data: &str) -> Result<(), CallError> {
    let Some(validator) = def.output_validator() else {
        return Ok(());
    };
    let invalid = |violations: String| CallError::OutputInvalid {
        tool: def.label(),
        violations,
    };
    if data.trim().is_empty() {
        return Err(invalid("at /: no data was returned".into()));
    }
    let value: Value =
        serde_json::from_str(data).map_err(|e| invalid(format!("at /: data is not JSON ({e})")))?;
    schema::check(validator, &value).map_err(|violations| invalid(violations.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use toolmesh::pb::ToolSpec;

    fn def() -> ToolDef {
        ToolDef::new(ToolSpec {
            name: "t".into(),
            version: "1.0.0".into(),
            description: "t".into(),
            input_schema: r#"{"type":"object","properties":{"n":{"type":"integer","maximum":10}},"required":["n"]}"#.into(),
            ..ToolSpec::default()
        })
        .unwrap()
    }

    /// A result breaks the output contract when its data is missing, not
    /// JSON or off the schema (naming the path); without a schema anything
    /// passes.
    #[test]
    fn output_contract() {
        assert!(output(&def(), "not json").is_ok(), "no output schema");
        let typed = ToolDef::new(ToolSpec {
            output_schema:
                r#"{"type":"object","properties":{"hits":{"type":"integer"}},"required":["hits"]}"#
                    .into(),
            ..def().spec().clone()
        })
        .unwrap();
        assert!(output(&typed, r#"{"hits": 2}"#).is_ok());
        for (data, path) in [
            ("", "at /:"),
            ("{", "not JSON"),
            (r#"{"hits": "two"}"#, "at /hits"),
        ] {
            match output(&typed, data) {
                Err(e @ CallError::OutputInvalid { .. }) => {
                    assert!(e.to_string().contains(path), "{e}")
                }
                other => panic!("{data}: {other:?}"),
            }
        }
    }

    /// Each way arguments can be wrong has its own refusal; good ones parse.
    #[test]
    fn refusals_and_acceptance() {
        let def = def();
        assert_eq!(arguments(&def, r#"{"n": 3}"#, 100).unwrap()["n"], 3);
        assert!(matches!(
            arguments(&def, r#"{"n": 3}"#, 4),
            Err(CallError::ArgumentsTooLarge { size: 8, limit: 4 })
        ));
        assert!(matches!(
            arguments(&def, "{", 100),
            Err(CallError::Arguments(_))
        ));
        assert!(
            matches!(
                arguments(&def, r#"{"n": 1, "n": 100}"#, 100),
                Err(CallError::Arguments(
                    toolmesh::schema::ArgumentsError::DuplicateKey { .. }
                ))
            ),
            "a repeated key is refused, not read last-wins"
        );
        match arguments(&def, r#"{"n": 11}"#, 100) {
            Err(CallError::ArgumentsInvalid { tool, violations }) => {
                assert_eq!(tool, "t@1.0.0");
                assert!(violations.to_string().contains("/n"), "{violations}");
            }
            other => panic!("{other:?}"),
        }
        assert!(
            matches!(
                arguments(&def, "  ", 100),
                Err(CallError::ArgumentsInvalid { .. })
            ),
            "empty is {{}}, which lacks n"
        );
    }
}
