//! A schema held as its text until something needs it: the tree is parsed the first time it is read, the checks compiled the first time a document is checked.

use super::{Checks, SchemaError, parse_text};
use serde_json::Value;
use std::sync::OnceLock;

/// What a schema held as text has built so far. A registry or dispatcher
/// holds every definition of the mesh and most are never called: compiled,
/// a schema of 1 KiB costs about 20 KiB (its tree 7, jsonschema's
/// validator 11, the shape 3), so neither is built before it is used.
///
/// The text it is given must be one that parsed and compiled already (a
/// [`ToolDef`](crate::ToolDef)'s canonical text, printed from the tree it
/// compiled): building from it again gives the same tree and checks.
#[derive(Default)]
pub struct Deferred {
    tree: OnceLock<Value>,
    checks: OnceLock<Result<Checks, SchemaError>>,
}

impl Deferred {
    /// The parsed schema of `text`, parsed once and kept.
    pub fn tree(&self, text: &str) -> &Value {
        // The text was printed from a tree that parsed: reading it back
        // cannot fail, and if it did the schema would read as `null`.
        self.tree
            .get_or_init(|| parse_text(text).unwrap_or_default())
    }

    /// `f` applied to the parsed schema of `text`, without keeping the tree
    /// when no one kept it yet (for reading every definition once, as a
    /// listing or a search index does).
    pub fn read<R>(&self, text: &str, f: impl FnOnce(&Value) -> R) -> R {
        match self.tree.get() {
            Some(tree) => f(tree),
            None => f(&parse_text(text).unwrap_or_default()),
        }
    }

    /// The compiled checks of `text`, compiled once and kept (the tree is
    /// not kept for them).
    pub fn checks(&self, text: &str) -> Result<&Checks, &SchemaError> {
        self.checks
            .get_or_init(|| self.read(text, Checks::of))
            .as_ref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const TEXT: &str = r#"{"properties":{"n":{"maximum":3,"type":"integer"}},"type":"object"}"#;

    #[test]
    fn reading_keeps_nothing_and_checking_keeps_only_the_checks() {
        let deferred = Deferred::default();
        let maximum = deferred.read(TEXT, |tree| tree["properties"]["n"]["maximum"].clone());
        assert_eq!(maximum, json!(3));
        assert!(
            deferred.tree.get().is_none(),
            "a read must not keep the tree"
        );

        let checks = deferred.checks(TEXT).unwrap();
        assert!(checks.shape.accepts(r#"{"n":2}"#));
        assert!(checks.validator.is_valid(&json!({"n": 2})));
        assert!(!checks.validator.is_valid(&json!({"n": 4})));
        assert!(
            deferred.tree.get().is_none(),
            "compiling must not keep the tree"
        );

        assert_eq!(deferred.tree(TEXT)["type"], json!("object"));
        assert!(
            deferred.tree.get().is_some(),
            "asking for the tree keeps it"
        );
    }

    #[test]
    fn a_tool_definition_compiles_its_schemas_when_first_used() {
        let def = crate::ToolDef::new(crate::pb::ToolSpec {
            name: "count".into(),
            version: "1.0.0".into(),
            description: "Counts.".into(),
            input_schema: TEXT.into(),
            output_schema: r#"{"type":"object","required":["total"]}"#.into(),
            ..Default::default()
        })
        .unwrap();
        let input = def.input().unwrap();
        assert!(!input.validator.is_valid(&json!({"n": "two"})));
        let output = def.output().unwrap().unwrap();
        assert!(!output.validator.is_valid(&json!({})));
        assert_eq!(
            def.input_schema()["properties"]["n"]["type"],
            json!("integer")
        );
    }
}
