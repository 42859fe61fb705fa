//! Property tests over what crosses the wire: tool specs, call arguments, tool references and `grpc-timeout` answer with an error, never a panic.

use proptest::prelude::*;
use serde_json::{Map, Value, json};
use std::time::Duration;
use toolmesh::pb::{Precondition, RetryPolicy, ToolSpec};
use toolmesh::schema::{self, ArgumentsError};
use toolmesh::{ToolDef, ToolRef};

/// Small JSON values of every kind, nested a few levels.
fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<f64>()
            .prop_map(|f| serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)),
        "\\PC{0,12}".prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 32, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map("[a-z~/]{0,4}", inner, 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

/// Small schemas built from the keywords tools use, some of them nonsense.
fn json_schema() -> impl Strategy<Value = Value> {
    let keyword = prop_oneof![
        prop_oneof![
            Just("string"),
            Just("number"),
            Just("integer"),
            Just("object"),
            Just("array"),
            Just("boolean"),
            Just("null"),
            Just("nonsense")
        ]
        .prop_map(|t| ("type".to_owned(), json!(t))),
        any::<i32>().prop_map(|n| ("minimum".to_owned(), json!(n))),
        (0u32..20).prop_map(|n| ("maxLength".to_owned(), json!(n))),
        prop_oneof![
            Just("^[a-z]+$"),
            Just("x{3}"),
            Just("("),
            Just("^\\d{1,4}$"),
            Just("x{99999}")
        ]
        .prop_map(|p| ("pattern".to_owned(), json!(p))),
        prop::collection::vec(json_value(), 0..4).prop_map(|v| ("enum".to_owned(), json!(v))),
        prop::collection::vec("[a-z]{1,3}", 0..3).prop_map(|r| ("required".to_owned(), json!(r))),
        any::<bool>().prop_map(|b| ("additionalProperties".to_owned(), json!(b))),
        json_value().prop_map(|v| ("const".to_owned(), v)),
    ];
    let flat = prop::collection::vec(keyword, 0..5)
        .prop_map(|kws| Value::Object(kws.into_iter().collect::<Map<_, _>>()));
    flat.prop_recursive(3, 24, 4, |inner| {
        (
            prop::collection::btree_map("[a-z]{1,3}", inner.clone(), 0..4),
            prop::option::of(inner),
        )
            .prop_map(|(properties, items)| {
                let mut schema = Map::new();
                schema.insert("type".into(), json!("object"));
                schema.insert(
                    "properties".into(),
                    Value::Object(properties.into_iter().collect()),
                );
                if let Some(items) = items {
                    schema.insert("items".into(), items);
                }
                Value::Object(schema)
            })
    })
}

/// Schema text: a generated schema, or arbitrary text.
fn schema_text() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => json_schema().prop_map(|s| s.to_string()),
        1 => "\\PC{0,40}",
        1 => Just(String::new()),
    ]
}

fn tool_spec() -> impl Strategy<Value = ToolSpec> {
    (
        prop_oneof!["[a-z_][a-z0-9_]{0,8}", "\\PC{0,70}"],
        prop_oneof![
            (0u64..3, 0u64..3, 0u64..3).prop_map(|(a, b, c)| format!("{a}.{b}.{c}")),
            "\\PC{0,12}"
        ],
        "\\PC{0,20}",
        schema_text(),
        schema_text(),
        (any::<i32>(), any::<u32>(), any::<bool>()),
        (
            any::<u32>(),
            any::<u32>(),
            any::<u32>(),
            any::<f32>(),
            any::<u32>(),
        ),
        prop::collection::vec(("[a-z_]{0,8}", "[a-z_]{0,4}"), 0..3),
    )
        .prop_map(
            |(
                name,
                version,
                description,
                input,
                output,
                (risk, timeout_ms, idempotent),
                retry,
                pre,
            )| {
                ToolSpec {
                    name,
                    version,
                    description,
                    input_schema: input,
                    output_schema: output,
                    risk,
                    timeout_ms,
                    idempotent,
                    retry: Some(RetryPolicy {
                        max_attempts: retry.0,
                        initial_backoff_ms: retry.1,
                        max_backoff_ms: retry.2,
                        backoff_multiplier: retry.3,
                        attempt_timeout_ms: retry.4,
                    }),
                    preconditions: pre
                        .into_iter()
                        .map(|(tool, same_argument)| Precondition {
                            tool,
                            same_argument,
                        })
                        .collect(),
                    ..ToolSpec::default()
                }
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Any spec is accepted or refused with a message; an accepted one
    /// checks arguments without panicking.
    #[test]
    fn tool_specs_never_panic(spec in tool_spec(), arguments in json_value()) {
        match ToolDef::new(spec) {
            Ok(def) => {
                if let Err(violations) = schema::check(def.validator(), &arguments) {
                    prop_assert!(!violations.0.is_empty());
                    prop_assert!(!violations.to_string().is_empty());
                }
            }
            Err(e) => prop_assert!(e.to_string().len() > 10, "{e}"),
        }
    }

    /// Any text parses to JSON or to an error that says what to send.
    #[test]
    fn argument_text_never_panics(text in "\\PC{0,64}") {
        if let Err(e) = schema::parse_arguments(&text) {
            prop_assert!(e.to_string().contains("send"), "{e}");
        }
    }

    /// Any bytes, read as (lossy) UTF-8, never panic the parser.
    #[test]
    fn argument_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..128)) {
        let _ = schema::parse_arguments(&String::from_utf8_lossy(&bytes));
    }

    /// Serialised JSON reads back as itself (no duplicate keys there), and
    /// checking it against any compiling schema answers without panicking.
    #[test]
    fn arguments_round_trip_and_check(value in json_value(), schema in json_schema()) {
        let parsed = schema::parse_arguments(&value.to_string()).unwrap();
        prop_assert_eq!(&parsed, &value);
        if let Ok(validator) = schema::compile(&schema) {
            let _ = schema::check(&validator, &parsed);
        }
    }

    /// A key written twice in any object is refused, naming it.
    #[test]
    fn duplicate_keys_are_always_refused(
        value in json_value(),
        key in "[a-z]{1,4}",
        first in json_value(),
        second in json_value(),
    ) {
        let text = format!(
            r#"{{"wrap": [{}, {{{k}: {}, {k}: {}}}]}}"#,
            value,
            first,
            second,
            k = Value::String(key.clone()),
        );
        let err = schema::parse_arguments(&text).unwrap_err();
        prop_assert_eq!(err, ArgumentsError::DuplicateKey { key, path: "/wrap/1".into() });
    }

    /// Any tool reference parses or is refused with a message naming it.
    #[test]
    fn tool_refs_never_panic(text in "\\PC{0,24}") {
        if let Err(e) = ToolRef::parse(&text) {
            prop_assert!(!e.to_string().is_empty());
        }
    }

    /// Well-formed references always parse.
    #[test]
    fn well_formed_tool_refs_parse(
        name in "[a-z_][a-z0-9_]{0,12}",
        major in 0u64..1000,
        minor in 0u64..1000,
        patch in 0u64..1000,
    ) {
        for text in [
            name.clone(),
            format!("{name}@{major}"),
            format!("{name}@{major}.{minor}"),
            format!("{name}@{major}.{minor}.{patch}"),
        ] {
            prop_assert!(ToolRef::parse(&text).is_ok(), "{}", text);
        }
    }

    /// Any `grpc-timeout` value parses or is ignored, never panics; every
    /// well-formed value means exactly its amount.
    #[test]
    fn grpc_timeouts(text in "\\PC{0,12}", n in 0u64..100_000_000, unit in 0usize..6) {
        let _ = toolmesh::grpc::parse_grpc_timeout(&text);
        let (suffix, expected) = [
            ("H", n.checked_mul(3600).map(Duration::from_secs)),
            ("M", n.checked_mul(60).map(Duration::from_secs)),
            ("S", Some(Duration::from_secs(n))),
            ("m", Some(Duration::from_millis(n))),
            ("u", Some(Duration::from_micros(n))),
            ("n", Some(Duration::from_nanos(n))),
        ][unit];
        prop_assert_eq!(toolmesh::grpc::parse_grpc_timeout(&format!("{n}{suffix}")), expected);
        prop_assert_eq!(toolmesh::grpc::parse_grpc_timeout(&format!("{n}0000000000{suffix}")), None);
    }
}
