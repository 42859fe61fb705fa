//! Validate: the arguments are JSON within the size limit, name no key twice
//! (what is checked is what is sent), and satisfy the tool's compiled input
//! schema (narrowed by the caller's grant when it narrows it); a result's
//! `data` satisfies the compiled output schema. Every failing path is named.
//! Valid JSON is first read by the schema's fast shape, which builds no
//! tree; only what it does not accept takes the full check, which decides
//! and names every violation.

use super::authorize::Authorized;
use crate::error::CallError;
use serde_json::Value;
use std::sync::OnceLock;
use toolmesh::{ToolDef, schema};
use toolmesh_policy::Narrowing;

/// An authorized call whose arguments passed every check.
pub(crate) struct Validated {
    pub(crate) authorized: Authorized,
    pub(crate) arguments: Arguments,
}

/// Arguments that passed every check. Their tree is built only when a
/// stage needs one (preconditions, approvals, the cache key, session facts,
/// raw arguments in the audit log): most calls never do.
#[derive(Debug, Clone, Default)]
pub(crate) struct Arguments {
    tree: OnceLock<Value>,
}

impl Arguments {
    fn parsed(tree: Value) -> Self {
        Arguments {
            tree: OnceLock::from(tree),
        }
    }

    /// The tree, if a stage has built it already.
    pub(crate) fn built(&self) -> Option<&Value> {
        self.tree.get()
    }

    /// The arguments as a tree, parsed from `text` (the call's, which they
    /// were checked from) on first use.
    pub(crate) fn tree(&self, text: &str) -> Result<&Value, CallError> {
        if let Some(tree) = self.tree.get() {
            return Ok(tree);
        }
        let tree = schema::parse_arguments(text)?;
        Ok(self.tree.get_or_init(|| tree))
    }
}

/// The checked arguments of a call to `def`, or why they are refused.
/// Empty text stands for `{}`. `narrowing` holds the call to the tool's
/// schema as the caller's grant narrows it (what its ListTools shows).
pub(crate) fn arguments(
    def: &ToolDef,
    text: &str,
    limit: usize,
    narrowing: Option<&Narrowing>,
) -> Result<Arguments, CallError> {
    if text.len() > limit {
        return Err(CallError::ArgumentsTooLarge {
            size: text.len(),
            limit,
        });
    }
    let checks = def
        .input()
        .map_err(|reason| unusable(def, "input", reason))?;
    // A grant's narrowing checks the tree, so build it then.
    if narrowing.is_none() && checks.shape.accepts(text) {
        return Ok(Arguments::default());
    }
    let arguments = schema::parse_arguments(text)?;
    schema::check(&checks.validator, &arguments).map_err(|violations| {
        CallError::ArgumentsInvalid {
            tool: def.label(),
            violations,
        }
    })?;
    if let Some(narrowing) = narrowing {
        narrowing
            .check(&arguments)
            .map_err(|violations| CallError::ArgumentsNarrowed {
                tool: def.label(),
                grant: narrowing.grant.clone(),
                violations,
            })?;
    }
    Ok(Arguments::parsed(arguments))
}

/// The error for a schema of `def` that would not compile when needed.
fn unusable(def: &ToolDef, which: &'static str, reason: &schema::SchemaError) -> CallError {
    CallError::SchemaUnusable {
        tool: def.label(),
        which,
        reason: reason.clone(),
    }
}

/// Whether `data` (a result's JSON text) keeps the output contract of
/// `def`: with no output schema anything goes; with one, `data` must be
/// JSON that satisfies it (empty text is no data, which fails it).
pub(crate) fn output(def: &ToolDef, data: &str) -> Result<(), CallError> {
    let Some(output) = def.output() else {
        return Ok(());
    };
    let output = output.map_err(|reason| unusable(def, "output", reason))?;
    if output.shape.accepts(data) {
        return Ok(());
    }
    let invalid = |violations: String| CallError::OutputInvalid {
        tool: def.label(),
        violations,
    };
    if data.trim().is_empty() {
        return Err(invalid("at /: no data was returned".into()));
    }
    let value: Value =
        serde_json::from_str(data).map_err(|e| invalid(format!("at /: data is not JSON ({e})")))?;
    schema::check(&output.validator, &value).map_err(|violations| invalid(violations.to_string()))
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
        let text = r#"{"n": 3}"#;
        let checked = arguments(&def, text, 100, None).unwrap();
        assert_eq!(checked.tree(text).unwrap()["n"], 3);
        assert!(matches!(
            arguments(&def, r#"{"n": 3}"#, 4, None),
            Err(CallError::ArgumentsTooLarge { size: 8, limit: 4 })
        ));
        assert!(matches!(
            arguments(&def, "{", 100, None),
            Err(CallError::Arguments(_))
        ));
        assert!(
            matches!(
                arguments(&def, r#"{"n": 1, "n": 100}"#, 100, None),
                Err(CallError::Arguments(
                    toolmesh::schema::ArgumentsError::DuplicateKey { .. }
                ))
            ),
            "a repeated key is refused, not read last-wins"
        );
        match arguments(&def, r#"{"n": 11}"#, 100, None) {
            Err(CallError::ArgumentsInvalid { tool, violations }) => {
                assert_eq!(tool, "t@1.0.0");
                assert!(violations.to_string().contains("/n"), "{violations}");
            }
            other => panic!("{other:?}"),
        }
        assert!(
            matches!(
                arguments(&def, "  ", 100, None),
                Err(CallError::ArgumentsInvalid { .. })
            ),
            "empty is {{}}, which lacks n"
        );
    }

    /// A grant's narrowing refuses what the tool's own schema accepts,
    /// naming the grant and the bound.
    #[test]
    fn narrowed_by_the_grant() {
        let narrowing = Narrowing {
            grant: "agents".into(),
            fields: vec![toolmesh_policy::FieldLimit {
                property: "n".into(),
                minimum: None,
                maximum: Some(5.0),
                one_of: None,
                max_length: None,
            }],
        };
        let def = def();
        assert!(arguments(&def, r#"{"n": 5}"#, 100, Some(&narrowing)).is_ok());
        match arguments(&def, r#"{"n": 7}"#, 100, Some(&narrowing)) {
            Err(e @ CallError::ArgumentsNarrowed { .. }) => {
                let text = e.to_string();
                assert!(text.contains("grant \"agents\""), "{text}");
                assert!(
                    text.contains("at /n: 7 is above the maximum of 5"),
                    "{text}"
                );
            }
            other => panic!("{other:?}"),
        }
    }
}
