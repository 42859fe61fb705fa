//! Property tests over what crosses the wire: tool specs, call arguments, tool references and `grpc-timeout` answer with an error, never a panic; any request to the MCP door gets a well-formed HTTP answer.

use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
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
                // What compiled when the definition was built compiles
                // again when its first call needs it.
                let checks = def.input();
                prop_assert!(checks.is_ok(), "{:?}", checks.err());
                if let Ok(checks) = checks
                    && let Err(violations) = schema::check(&checks.validator, &arguments) {
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
        let _ = toolmesh_transport::parse_grpc_timeout(&text);
        let (suffix, expected) = [
            ("H", n.checked_mul(3600).map(Duration::from_secs)),
            ("M", n.checked_mul(60).map(Duration::from_secs)),
            ("S", Some(Duration::from_secs(n))),
            ("m", Some(Duration::from_millis(n))),
            ("u", Some(Duration::from_micros(n))),
            ("n", Some(Duration::from_nanos(n))),
        ][unit];
        prop_assert_eq!(toolmesh_transport::parse_grpc_timeout(&format!("{n}{suffix}")), expected);
        prop_assert_eq!(toolmesh_transport::parse_grpc_timeout(&format!("{n}0000000000{suffix}")), None);
    }
}

/// A `POST /mcp` the door's fuzz cases send: the body, and the
/// Content-Type, Accept and MCP-Protocol-Version headers (none: not sent).
#[derive(Debug, Clone)]
struct McpPost {
    body: Vec<u8>,
    content_type: Option<String>,
    accept: Option<String>,
    version: Option<String>,
}

/// Bodies from noise to near-valid JSON-RPC: bytes, JSON values,
/// messages with any method and params, calls repeating an argument key.
fn mcp_body() -> impl Strategy<Value = Vec<u8>> {
    let method = prop_oneof![
        Just("tools/call".to_owned()),
        Just("tools/list".to_owned()),
        Just("initialize".to_owned()),
        Just("server/discover".to_owned()),
        Just("notifications/initialized".to_owned()),
        "\\PC{0,12}",
    ];
    prop_oneof![
        prop::collection::vec(any::<u8>(), 0..256),
        json_value().prop_map(|v| v.to_string().into_bytes()),
        (json_value(), method, json_value()).prop_map(|(id, method, params)| {
            json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
                .to_string()
                .into_bytes()
        }),
        (json_value(), json_value()).prop_map(|(a, b)| {
            format!(
                r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"t","arguments":{{"k":{a},"k":{b}}}}}}}"#
            )
            .into_bytes()
        }),
    ]
}

/// A header value: mostly a likely one (the first most of all), now and
/// then any visible text, seldom none.
fn header_value(likely: &'static [&'static str]) -> impl Strategy<Value = Option<String>> {
    prop::option::weighted(
        0.9,
        prop_oneof![
            4 => Just(likely[0].to_owned()),
            4 => prop::sample::select(likely).prop_map(str::to_owned),
            1 => "[ -~]{0,30}",
        ],
    )
}

fn mcp_post() -> impl Strategy<Value = McpPost> {
    (
        mcp_body(),
        header_value(&[
            "application/json",
            "application/json; charset=utf-8",
            "text/plain",
        ]),
        header_value(&[
            "application/json, text/event-stream",
            "application/json",
            "text/event-stream",
            "*/*",
            "text/html",
            "application/json;q=0",
        ]),
        header_value(&["2025-06-18", "2025-11-25", "2026-07-28", "1999-01-01"]),
    )
        .prop_map(|(body, content_type, accept, version)| McpPost {
            body,
            content_type,
            accept,
            version,
        })
}

/// An HTTP/1.1 answer: status, lower-cased headers, body (unchunked).
struct Answer {
    status: u16,
    headers: String,
    body: Vec<u8>,
}

/// Sends `post` to `/mcp` at `addr` on a fresh connection.
fn send(addr: &str, post: &McpPost) -> Answer {
    use std::io::{Read, Write};
    let mut head = format!("POST /mcp HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    for (name, value) in [
        ("Content-Type", &post.content_type),
        ("Accept", &post.accept),
        ("MCP-Protocol-Version", &post.version),
    ] {
        if let Some(value) = value {
            head.push_str(&format!("{name}: {value}\r\n"));
        }
    }
    head.push_str(&format!("Content-Length: {}\r\n\r\n", post.body.len()));
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(toolmesh_testkit::patient(Duration::from_secs(10))))
        .unwrap();
    stream.write_all(head.as_bytes()).unwrap();
    stream.write_all(&post.body).unwrap();
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).unwrap();
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or_else(|| panic!("no end of headers in {:?}", String::from_utf8_lossy(&raw)));
    let headers = String::from_utf8_lossy(&raw[..split]).to_lowercase();
    let status = headers
        .strip_prefix("http/1.1 ")
        .and_then(|rest| rest.get(..3))
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("no status line: {headers}"));
    let mut body = raw[split + 4..].to_vec();
    if headers.contains("transfer-encoding: chunked") {
        body = unchunk(&body);
    }
    Answer {
        status,
        headers,
        body,
    }
}

/// The payload of a chunked body.
fn unchunk(mut chunked: &[u8]) -> Vec<u8> {
    let mut body = Vec::new();
    while let Some(end) = chunked.windows(2).position(|w| w == b"\r\n") {
        let size = std::str::from_utf8(&chunked[..end])
            .ok()
            .and_then(|s| usize::from_str_radix(s.split(';').next().unwrap_or("").trim(), 16).ok())
            .unwrap_or(0);
        if size == 0 {
            break;
        }
        let start = end + 2;
        body.extend_from_slice(&chunked[start..start + size]);
        chunked = &chunked[start + size + 2..];
    }
    body
}

/// Any body and headers to `/mcp` get a well-formed answer, never a
/// server error: a JSON answer is JSON-RPC (an error object with a code
/// and a message for a 4xx), and the door keeps serving.
#[test]
fn mcp_door_answers_any_request() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let _inside = runtime.enter();
    let (serve, _) = toolmesh_system_tests::serve(&["--mcp-listen", "127.0.0.1:0"]);
    let url = toolmesh_system_tests::TestProc::wait_for_line(
        &serve,
        "MCP listening on ",
        Duration::from_secs(30),
    );
    let addr = url
        .rsplit_once("http://")
        .and_then(|(_, rest)| rest.strip_suffix("/mcp"))
        .unwrap_or_else(|| panic!("no MCP address in {url:?}"))
        .to_owned();
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig::with_cases(256));
    runner
        .run(&mcp_post(), |post| {
            let answer = send(&addr, &post);
            let shown = String::from_utf8_lossy(&answer.body).into_owned();
            prop_assert!(
                (200..500).contains(&answer.status),
                "{} for {:?}: {}",
                answer.status,
                post,
                shown
            );
            if answer.headers.contains("content-type: application/json") {
                let message: Value = serde_json::from_slice(&answer.body)
                    .map_err(|e| TestCaseError::fail(format!("{e}: {shown}")))?;
                prop_assert_eq!(&message["jsonrpc"], "2.0", "{}", shown);
                if answer.status >= 400 {
                    prop_assert!(message["error"]["code"].is_i64(), "{}", shown);
                    prop_assert!(message["error"]["message"].is_string(), "{}", shown);
                }
            }
            Ok(())
        })
        .unwrap();
    let list = McpPost {
        body: br#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#.to_vec(),
        content_type: Some("application/json".into()),
        accept: Some("application/json".into()),
        version: Some("2025-11-25".into()),
    };
    assert_eq!(send(&addr, &list).status, 200, "the door still serves");
}
