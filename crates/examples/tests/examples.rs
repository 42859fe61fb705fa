//! Every example executor through the SDK's in-process call path (the same
//! path a served call takes).

use serde_json::{Value, json};
use std::{
    collections::HashMap,
    time::{SystemTime, UNIX_EPOCH},
};
use toolmesh::ToolResultExt;
use toolmesh::{
    ToolErrorExt,
    pb::{ErrorCode, ExecuteRequest, RiskLevel, ToolResult},
};
use toolmesh_examples::{EXAMPLE_NAMES, ExampleOptions, example};
use toolmesh_executor::{Executor, ServeOptions};

fn get(name: &str) -> Executor {
    example(name, &ExampleOptions::default()).expect(name)
}

fn code(result: &ToolResult) -> ErrorCode {
    result.error_code()
}

fn message(result: &ToolResult) -> &str {
    result.error_message()
}

fn data(result: &ToolResult) -> Value {
    serde_json::from_str(&result.data).unwrap_or_else(|e| panic!("{e}: {result:?}"))
}

fn ok(result: &ToolResult) {
    assert_eq!(code(result), ErrorCode::Unspecified, "{result:?}");
}

fn request(tool: &str, call_id: &str, attempt: u32, args: Value) -> ExecuteRequest {
    ExecuteRequest {
        call_id: call_id.into(),
        tool: tool.into(),
        version: String::new(),
        arguments: args.to_string(),
        attempt,
        context: None,
    }
}

/// Each name in EXAMPLE_NAMES builds an executor whose specs all validate
/// and bind; every schema forbids extra properties; risk and idempotency are
/// as documented; an unknown name is None.
#[tokio::test]
async fn every_example_binds_with_strict_schemas() {
    let expected: HashMap<&str, (RiskLevel, bool)> = [
        ("search_kb", (RiskLevel::Low, true)),
        ("export_report", (RiskLevel::Low, true)),
        ("get_user_info", (RiskLevel::Low, true)),
        ("get_current_time", (RiskLevel::Low, true)),
        ("create_ticket", (RiskLevel::Medium, false)),
        ("send_email", (RiskLevel::High, false)),
        ("read_file", (RiskLevel::Low, true)),
        ("list_files", (RiskLevel::Low, true)),
        ("write_file", (RiskLevel::Medium, false)),
        ("edit_file", (RiskLevel::Medium, false)),
    ]
    .into();
    let mut seen = 0;
    for name in EXAMPLE_NAMES {
        let executor = get(name);
        assert_eq!(executor.service(), name);
        for spec in executor.specs() {
            seen += 1;
            let schema: Value = serde_json::from_str(&spec.input_schema).unwrap();
            assert_eq!(
                schema["additionalProperties"],
                json!(false),
                "{}",
                spec.name
            );
            assert!(!spec.description.is_empty());
            let (risk, idempotent) = expected[spec.name.as_str()];
            assert_eq!(spec.risk, risk as i32, "{}", spec.name);
            assert_eq!(spec.idempotent, idempotent, "{}", spec.name);
        }
        let bound = executor.bind(ServeOptions::default()).await.unwrap();
        bound.run(async {}).await.unwrap();
    }
    assert_eq!(seen, expected.len());
    assert!(example("nope", &ExampleOptions::default()).is_none());
}

/// export_report exports every article (or a topic's) in order, says so
/// in its spec (it streams progress), and refuses a topic no article covers.
/// In process nothing streams: the report is the whole result.
#[tokio::test]
async fn export_report() {
    let kb = get("knowledge");
    let spec = kb
        .specs()
        .into_iter()
        .find(|s| s.name == "export_report")
        .unwrap();
    assert!(spec.streams_progress && spec.read_only);
    let all = kb.call("export_report", json!({"pace_ms": 0})).await;
    ok(&all);
    let ids = data(&all)["articles"].as_array().unwrap().clone();
    assert_eq!(ids.len(), 8);
    assert!(all.output.starts_with("## [KB-101] Reset your password"));
    assert!(all.output.contains("## [KB-108] API rate limits"));
    let billing = kb
        .call("export_report", json!({"topic": "refund", "pace_ms": 0}))
        .await;
    ok(&billing);
    assert_eq!(data(&billing)["articles"], json!(["KB-104"]));
    let none = kb
        .call("export_report", json!({"topic": "zebra", "pace_ms": 0}))
        .await;
    assert_eq!(code(&none), ErrorCode::ToolError);
    assert!(message(&none).contains("no article is about"), "{none:?}");
    let slow = kb.call("export_report", json!({"pace_ms": 2001})).await;
    assert_eq!(code(&slow), ErrorCode::InvalidArguments);
}

/// search_kb finds the article a question is about, honours limit, and
/// reports empty or stop-word-only queries.
#[tokio::test]
async fn search_kb() {
    let kb = get("knowledge");
    let result = kb
        .call("search_kb", json!({"query": "how do I reset my password"}))
        .await;
    ok(&result);
    let hits = data(&result)["results"].as_array().unwrap().clone();
    assert!(!hits.is_empty() && hits.len() <= 3, "{hits:?}");
    assert_eq!(hits[0]["id"], "KB-101", "{hits:?}");
    assert!(
        result.output.contains("[KB-101] Reset your password"),
        "{}",
        result.output
    );

    let one = kb
        .call("search_kb", json!({"query": "refund", "limit": 1}))
        .await;
    let hits = data(&one)["results"].as_array().unwrap().clone();
    assert_eq!(hits.len(), 1);
    assert_eq!(hits[0]["id"], "KB-104");

    let none = kb
        .call("search_kb", json!({"query": "zebra quantum"}))
        .await;
    ok(&none);
    assert!(
        none.output.starts_with("No articles matched"),
        "{}",
        none.output
    );

    for bad in [
        json!({"query": ""}),
        json!({"query": "x", "limit": 11}),
        json!({"q": "x"}),
    ] {
        let result = kb.call("search_kb", bad.clone()).await;
        assert_eq!(
            code(&result),
            ErrorCode::InvalidArguments,
            "{bad}: {result:?}"
        );
    }
    let stop_words = kb.call("search_kb", json!({"query": "how to do it"})).await;
    assert_eq!(code(&stop_words), ErrorCode::ToolError, "{stop_words:?}");
}

/// get_user_info answers for fixture users, reports an unknown user as a
/// TOOL_ERROR the model can act on, and refuses malformed ids.
#[tokio::test]
async fn get_user_info() {
    let accounts = get("accounts");
    let result = accounts
        .call("get_user_info", json!({"user_id": "u_2"}))
        .await;
    ok(&result);
    assert_eq!(data(&result)["name"], "Grace Hopper");
    assert!(
        result.output.contains("grace@example.com"),
        "{}",
        result.output
    );

    let missing = accounts
        .call("get_user_info", json!({"user_id": "u_9"}))
        .await;
    let error = missing.error.unwrap();
    assert_eq!(error.error_code(), ErrorCode::ToolError);
    assert_eq!(
        error.message,
        "user u_9 not found; known users look like u_1"
    );
    assert!(!error.retryable);

    let malformed = accounts
        .call("get_user_info", json!({"user_id": "9"}))
        .await;
    assert_eq!(code(&malformed), ErrorCode::InvalidArguments);
    assert!(
        message(&malformed).contains("/user_id"),
        "{}",
        message(&malformed)
    );
}

/// get_current_time gives the current instant as RFC 3339, in UTC by
/// default or at the asked offset; offsets out of range are refused.
#[tokio::test]
async fn get_current_time() {
    let accounts = get("accounts");
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let utc = accounts.call("get_current_time", json!({})).await;
    ok(&utc);
    let d = data(&utc);
    let time = d["time"].as_str().unwrap();
    assert_eq!(time.len(), 20, "{time}");
    assert!(time.ends_with('Z') && time.as_bytes()[10] == b'T', "{time}");
    assert!((d["unix_seconds"].as_i64().unwrap() - now).abs() < 5);

    let india = accounts
        .call("get_current_time", json!({"utc_offset_minutes": 330}))
        .await;
    assert!(data(&india)["time"].as_str().unwrap().ends_with("+05:30"));
    let west = accounts
        .call("get_current_time", json!({"utc_offset_minutes": -720}))
        .await;
    assert!(data(&west)["time"].as_str().unwrap().ends_with("-12:00"));

    for bad in [
        json!({"utc_offset_minutes": 900}),
        json!({"utc_offset_minutes": "+1"}),
    ] {
        let result = accounts.call("get_current_time", bad.clone()).await;
        assert_eq!(
            code(&result),
            ErrorCode::InvalidArguments,
            "{bad}: {result:?}"
        );
    }
}

/// create_ticket numbers tickets from T-1001, returns the same ticket for a
/// repeated call id, and enforces its schema (title length, priority enum,
/// required body).
#[tokio::test]
async fn create_ticket() {
    let support = get("support");
    let args = json!({"title": "Refund not received", "body": "Invoice 1234, 20 days ago.", "priority": "high", "customer_id": "u_1"});
    let first = support
        .execute(request("create_ticket", "call-a", 1, args.clone()))
        .await;
    ok(&first);
    assert_eq!(data(&first)["ticket_id"], "T-1001");
    assert!(
        first.output.contains("T-1001 (high priority)"),
        "{}",
        first.output
    );
    let retry = support
        .execute(request("create_ticket", "call-a", 2, args.clone()))
        .await;
    assert_eq!(data(&retry)["ticket_id"], "T-1001");
    assert_eq!(retry.metadata["deduplicated"], "true");
    let second = support
        .execute(request("create_ticket", "call-b", 1, args))
        .await;
    assert_eq!(data(&second)["ticket_id"], "T-1002");

    let bad = [
        json!({"title": "x", "body": "y", "priority": "asap"}),
        json!({"title": "x".repeat(201), "body": "y", "priority": "low"}),
        json!({"title": "x", "priority": "low"}),
        json!({"title": "x", "body": "y", "priority": "low", "customer_id": "bob"}),
    ];
    for args in bad {
        let result = support.call("create_ticket", args.clone()).await;
        assert_eq!(
            code(&result),
            ErrorCode::InvalidArguments,
            "{args}: {result:?}"
        );
    }
    let blank = support
        .call(
            "create_ticket",
            json!({"title": "   ", "body": "y", "priority": "low"}),
        )
        .await;
    assert_eq!(code(&blank), ErrorCode::ToolError);
}

/// send_email records the message and returns its id (the same id for a
/// repeated call id), and refuses an address that is not an email.
#[tokio::test]
async fn send_email() {
    let support = get("support");
    let args = json!({"to": "ada@example.com", "subject": "Your refund", "body": "It is on its way.", "priority": "normal"});
    let sent = support
        .execute(request("send_email", "mail-1", 1, args.clone()))
        .await;
    ok(&sent);
    assert_eq!(data(&sent)["message_id"], "msg-000001");
    assert_eq!(data(&sent)["status"], "queued");
    let again = support
        .execute(request("send_email", "mail-1", 2, args))
        .await;
    assert_eq!(data(&again)["message_id"], "msg-000001");
    let bad = support
        .call(
            "send_email",
            json!({"to": "not-an-email", "subject": "s", "body": "b", "priority": "low"}),
        )
        .await;
    assert_eq!(code(&bad), ErrorCode::InvalidArguments);
    assert!(message(&bad).contains("/to"), "{}", message(&bad));
}
