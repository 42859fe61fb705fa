//! The fast check against jsonschema: never "accepted" where jsonschema refuses, and on the schemas it models, the same answer.

use super::Shape;
use crate::schema::{compile, parse_arguments};
use proptest::prelude::*;
use serde_json::{Value, json};

/// What the full path decides: no repeated key, and jsonschema accepts.
fn full_check(schema: &Value, text: &str) -> bool {
    let validator = compile(schema).expect("test schemas compile");
    parse_arguments(text).is_ok_and(|value| validator.is_valid(&value))
}

/// A schemars-style schema: `$defs`, `$ref`, `Option` as `anyOf` with null.
fn echo_schema() -> Value {
    json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object", "additionalProperties": false,
        "properties": {
            "message": {"type": "string", "description": "text"},
            "payload": {"anyOf": [{"$ref": "#/$defs/Payload"}, {"type": "null"}]}
        },
        "required": ["message"],
        "$defs": {
            "Item": {"type": "object", "additionalProperties": false,
                "properties": {
                    "id": {"type": "integer", "format": "uint64", "minimum": 0},
                    "name": {"type": "string"},
                    "tags": {"type": "array", "items": {"type": "string"}}
                },
                "required": ["id", "name", "tags"]},
            "Payload": {"type": "object", "additionalProperties": false,
                "properties": {"items": {"type": "array", "items": {"$ref": "#/$defs/Item"}}},
                "required": ["items"]}
        }
    })
}

/// The shape models the schemas tools commonly declare, and answers as
/// jsonschema does on valid and invalid arguments alike.
#[test]
fn models_a_generated_schema() {
    let schema = echo_schema();
    let shape = Shape::of(&schema);
    assert!(!shape.defers(), "{shape:?}");
    for (text, valid) in [
        (r#"{"message":"hi"}"#, true),
        (r#"{"message":"hi","payload":null}"#, true),
        (
            r#"{"message":"hi","payload":{"items":[{"id":1,"name":"a","tags":["x"]}]}}"#,
            true,
        ),
        (
            r#"{"message":"hi","payload":{"items":[{"id":1.0,"name":"a","tags":[]}]}}"#,
            true,
        ),
        (r#"{"message":"h\u00e9"}"#, true),
        (r#"{"payload":null}"#, false),
        (r#"{"message":3}"#, false),
        (r#"{"message":"hi","extra":1}"#, false),
        (
            r#"{"message":"hi","payload":{"items":[{"id":-1,"name":"a","tags":[]}]}}"#,
            false,
        ),
        (
            r#"{"message":"hi","payload":{"items":[{"id":1.5,"name":"a","tags":[]}]}}"#,
            false,
        ),
        (
            r#"{"message":"hi","payload":{"items":[{"id":1,"name":"a"}]}}"#,
            false,
        ),
        (r#"{"message":"hi","payload":[]}"#, false),
        (r#"{"message":"hi"} x"#, false),
        (r#"{"message":"hi""#, false),
        ("", false),
    ] {
        assert_eq!(shape.accepts(text), valid, "{text}");
        assert_eq!(full_check(&schema, text), valid, "{text}");
    }
}

/// A repeated key is never accepted, at any depth, listed or not.
#[test]
fn refuses_repeated_keys() {
    let shape = Shape::of(&json!({"type": "object", "properties": {"a": {}}}));
    assert!(shape.accepts(r#"{"a":1,"b":{"c":1,"d":2}}"#));
    for text in [
        r#"{"a":1,"a":2}"#,
        r#"{"b":1,"b":2}"#,
        r#"{"b":{"c":1,"c":2}}"#,
        r#"{"b":[{"c":1,"\u0063":2}]}"#,
    ] {
        assert!(!shape.accepts(text), "{text}");
    }
    // Past the short list, repeats are still found (in the hash set).
    let many: Vec<String> = (0..40).map(|i| format!("\"k{i}\":{i}")).collect();
    let text = format!("{{{}}}", many.join(","));
    assert!(shape.accepts(&text));
    let repeated = format!("{{{},\"k3\":0}}", many.join(","));
    assert!(!shape.accepts(&repeated));
}

/// What the shape does not model is left to the full check: the schema
/// still compiles, and the parts that use it are not accepted fast.
#[test]
fn defers_what_it_does_not_model() {
    for schema in [
        json!({"type": "string", "pattern": "^a"}),
        json!({"type": "integer", "multipleOf": 2}),
        json!({"not": {"type": "null"}}),
        json!({"allOf": [{"type": "string"}]}),
        json!({"anyOf": [{"type": "string"}, {"type": "string", "minLength": 2}]}),
        json!({"type": "string", "format": "email"}),
        json!({"$schema": "http://json-schema.org/draft-04/schema#", "type": "string"}),
        json!({"$ref": "#/$defs/a", "type": "string", "$defs": {"a": {}}}),
        json!({"$defs": {"a": {"$id": "other", "type": "string"}}, "$ref": "#/$defs/a"}),
        json!({"type": "integer", "maximum": 9_007_199_254_740_993u64}),
        json!({"type": "array", "items": [{"type": "string"}]}),
        json!({"type": "string", "x-custom": true}),
    ] {
        let shape = Shape::of(&schema);
        assert!(shape.defers(), "{schema}");
        assert!(!shape.accepts(r#""abc""#), "{schema}");
    }
    // A deferred part costs only the values that reach it.
    let partly = json!({"type": "object", "properties": {
        "id": {"type": "string", "pattern": "^a"}, "n": {"type": "integer"}}});
    let shape = Shape::of(&partly);
    assert!(shape.accepts(r#"{"n":1}"#));
    assert!(!shape.accepts(r#"{"n":1,"id":"abc"}"#));
    assert!(full_check(&partly, r#"{"n":1,"id":"abc"}"#));
}

/// Integers too large for an exact comparison go to the full check.
#[test]
fn large_numbers_defer() {
    let shape = Shape::of(&json!({"type": "integer", "maximum": 10}));
    assert!(shape.accepts("10"));
    assert!(!shape.accepts("11"));
    assert!(!shape.accepts("18446744073709551615"));
    assert!(!shape.accepts("1e300"));
}

/// A recursive schema compiles and checks nested values.
#[test]
fn recursive_references() {
    let schema = json!({"$ref": "#/$defs/node", "$defs": {"node": {
        "type": "object", "additionalProperties": false,
        "properties": {"name": {"type": "string"},
                       "children": {"type": "array", "items": {"$ref": "#/$defs/node"}}}}}});
    let shape = Shape::of(&schema);
    assert!(!shape.defers());
    let good = r#"{"name":"a","children":[{"name":"b","children":[{"name":"c"}]}]}"#;
    let bad = r#"{"name":"a","children":[{"name":"b","children":[{"name":3}]}]}"#;
    assert!(shape.accepts(good) && full_check(&schema, good));
    assert!(!shape.accepts(bad) && !full_check(&schema, bad));
    let selfish = json!({"$ref": "#/$defs/a", "$defs": {"a": {"$ref": "#/$defs/a"}}});
    assert!(!Shape::of(&selfish).accepts("1"));
}

fn scalar_value() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        (-3i64..12).prop_map(|n| json!(n)),
        (-6i32..24).prop_map(|n| json!(f64::from(n) / 2.0)),
        prop::sample::select(vec!["", "a", "ab", "abc", "é", "éé", "\"", "x\u{1F600}"])
            .prop_map(|s| json!(s)),
    ]
}

fn instance() -> impl Strategy<Value = Value> {
    scalar_value().prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map(
                prop::sample::select(vec!["a", "b", "c", "d"]).prop_map(String::from),
                inner,
                0..4
            )
            .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

fn type_name() -> impl Strategy<Value = Value> {
    prop_oneof![
        prop::sample::select(vec![
            "null", "boolean", "integer", "number", "string", "array", "object"
        ])
        .prop_map(|t| json!(t)),
        prop::sample::subsequence(vec!["null", "integer", "string", "object"], 1..3)
            .prop_map(|ts| json!(ts)),
    ]
}

fn leaf_schema() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(json!({})),
        Just(json!(true)),
        Just(json!(false)),
        type_name().prop_map(|t| json!({"type": t})),
        (0u64..3, 0u64..4)
            .prop_map(|(a, b)| json!({"type": "string", "minLength": a, "maxLength": b})),
        (-2i64..6, -2i64..8).prop_map(|(a, b)| json!({"minimum": a, "exclusiveMaximum": b})),
        (-2i64..6)
            .prop_map(|a| json!({"type": "number", "exclusiveMinimum": f64::from(a as i32) / 2.0})),
        (-2i64..6).prop_map(|a| json!({"type": "integer", "format": "uint64", "maximum": a})),
        prop::collection::vec(scalar_value(), 1..4).prop_map(|v| json!({"enum": v})),
        scalar_value().prop_map(|v| json!({"const": v})),
        Just(json!({"type": "string", "pattern": "^a"})),
        Just(json!({"multipleOf": 2})),
    ]
}

fn schema() -> impl Strategy<Value = Value> {
    leaf_schema().prop_recursive(3, 16, 3, |inner| {
        let names = prop::sample::select(vec!["a", "b", "c", "d"]);
        prop_oneof![
            (inner.clone(), 0u64..2, 1u64..4).prop_map(|(items, min, max)| json!({
                "type": "array", "items": items, "minItems": min, "maxItems": max})),
            (
                prop::collection::btree_map(
                    names.clone().prop_map(String::from),
                    inner.clone(),
                    0..3
                ),
                prop::sample::subsequence(vec!["a", "b", "c"], 0..2),
                prop_oneof![Just(json!(true)), Just(json!(false)), inner.clone()],
                any::<bool>(),
            )
                .prop_map(|(properties, required, additional, typed)| {
                    let mut schema = json!({"properties": properties, "required": required,
                        "additionalProperties": additional});
                    if typed {
                        schema["type"] = json!("object");
                    }
                    schema
                }),
            prop::collection::vec(inner.clone(), 1..3)
                .prop_map(|alternatives| json!({"anyOf": alternatives})),
            prop::collection::vec(inner.clone(), 1..3)
                .prop_map(|alternatives| json!({"oneOf": alternatives})),
            inner.prop_map(|target| json!({"$ref": "#/$defs/t", "$defs": {"t": target}})),
        ]
    })
}

/// The answer both checks must give: "accepted" only where jsonschema
/// accepts, and the same answer wherever the shape models everything.
fn same_answer(schema: &Value, value: &Value) -> Result<(), TestCaseError> {
    let Ok(validator) = compile(schema) else {
        return Ok(());
    };
    let shape = Shape::of(schema);
    let text = value.to_string();
    let valid = validator.is_valid(value);
    let accepted = shape.accepts(&text);
    prop_assert!(
        !accepted || valid,
        "accepted what jsonschema refuses: {schema} {text}"
    );
    if !shape.defers() {
        prop_assert_eq!(accepted, valid, "{} {}", schema, text);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(3000))]

    /// Every bound and type of one value, at its edges.
    #[test]
    fn scalars_agree(schema in leaf_schema(), value in scalar_value()) {
        same_answer(&schema, &value)?;
    }

    /// "Accepted" is never wrong; and on what the shape fully models,
    /// refusals agree with jsonschema too.
    #[test]
    fn agrees_with_jsonschema(schema in schema(), value in instance()) {
        same_answer(&schema, &value)?;
    }
}
