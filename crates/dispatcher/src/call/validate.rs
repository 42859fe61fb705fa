//! Validate: the arguments are JSON within the size limit, name no key twice
//! (what is checked is what is sent), and satisfy the tool's compiled input
//! schema; every failing path is named.

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
