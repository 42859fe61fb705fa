//! `toolmesh bridge openapi` against a FastAPI application's own
//! `/openapi.json` (tests/python/openapi_target, its packages pinned by
//! scripts/prepare/python-openapi-target.sh), every part a real process:
//! its operations are listed and called through the dispatcher's Invoke
//! (and through the MCP door with the official Python client) with path, query, header and body arguments, their schemas keep the
//! document's constraints, statuses reach callers as the mesh's error
//! classes, the bridge's own credentials reach the API (never a caller's),
//! governance applies to bridged operations as to any tool, the API
//! going away takes the bridge NOT_SERVING until it is back, and a changed
//! document is read again.

use serde_json::{Value, json};
use std::process::Command;
use std::time::{Duration, Instant};
use toolmesh::pb::{
    ApproveRequest, ErrorCode, InvokeRequest, ListToolsRequest, RiskLevel, ToolFormat, ToolSpec,
    governance_client::GovernanceClient,
};
use toolmesh_system_tests::*;

/// Generous: the application imports FastAPI and pydantic at start on a
/// loaded box.
const READY: Duration = Duration::from_secs(30);

/// The FastAPI application on `port` (0: a free one), and its address.
fn bookshop(port: u16) -> (Proc, String) {
    let python = prepared(
        "TOOLMESH_TEST_PYTHON_OPENAPI_TARGET",
        "python-openapi-target.sh",
    );
    let mut command = Command::new(python);
    command
        .arg(python_script("openapi_target/app.py"))
        .arg(port.to_string());
    let proc = Proc::spawn("bookshop", command);
    let addr = proc.listen_addr();
    (proc, addr)
}

/// `toolmesh bridge openapi --registry REGISTRY --spec URL ARGS…` with
/// `env` added, serving.
fn bridge(registry: &str, spec: &str, args: &[&str], env: &[(&str, &str)]) -> Proc {
    let mut command = Command::new(toolmesh_bin());
    command
        .args(["bridge", "openapi", "--registry", registry, "--spec", spec])
        .args(args)
        .envs(env.iter().copied());
    let proc = Proc::spawn("bridge-openapi", command);
    proc.wait_for_line("serves ", READY);
    proc
}

fn schema(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {text}"))
}

/// The operations become tools with the document's schemas and the
/// methods' idempotency; path (percent-encoded), query, header and body
/// arguments reach the API; 404 and 422 are tool errors quoting FastAPI,
/// 500 a system error, a slow endpoint meets the call's deadline; the
/// API sees the bridge's credentials, not the caller's; the API going away
/// de-exposes the tools and NOT_SERVING follows, and its return brings
/// them back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fastapi_application_bridged() {
    let (mut app, app_addr) = bookshop(0);
    let port: u16 = app_addr.rsplit(':').next().unwrap().parse().unwrap();
    let (_serve, addr, mcp_url) = serve_with_mcp_door(&[]);
    let dir = temp_dir("bridge-openapi");
    let bearer = dir.join("bearer");
    std::fs::write(&bearer, "tok-outbound\n").unwrap();
    let spec = format!("http://{app_addr}/openapi.json");
    let bridge = bridge(
        &addr,
        &spec,
        &[
            "--timeout-ms",
            "3000",
            "--bearer-file",
            bearer.to_str().unwrap(),
            "--header-env",
            "X-Api-Key=BOOKSHOP_KEY",
        ],
        &[("BOOKSHOP_KEY", "key-42")],
    );
    let bridge_addr = bridge.listen_addr();
    let mut client = dispatcher(&addr);
    let names = [
        "get_book",
        "list_books",
        "add_book",
        "remove_book",
        "reserve_book",
        "echo",
        "whoami",
        "broken",
        "slow",
    ];
    until_listed(&mut client, &names, READY).await;
    let specs: Vec<ToolSpec> = client
        .list_tools(ListToolsRequest {
            format: ToolFormat::Native as i32,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .tools;
    let spec_of = |name: &str| specs.iter().find(|s| s.name == name).unwrap().clone();

    // GET: read-only and idempotent, LOW; POST: neither, unless the
    // document says x-idempotent; DELETE: idempotent and HIGH.
    let get = spec_of("get_book");
    assert!(get.read_only && get.idempotent, "{get:?}");
    assert_eq!(get.risk, RiskLevel::Low as i32);
    assert_eq!(get.description, "Get one book by its id.");
    assert_eq!(get.version, "2.1.0", "info.version");
    let add = spec_of("add_book");
    assert!(!add.read_only && !add.idempotent, "{add:?}");
    let reserve = spec_of("reserve_book");
    assert!(
        reserve.idempotent && !reserve.read_only,
        "x-idempotent: {reserve:?}"
    );
    let remove = spec_of("remove_book");
    assert!(
        remove.idempotent && remove.risk == RiskLevel::High as i32,
        "{remove:?}"
    );

    // Schemas: the path parameter required, the query's bounds kept, the
    // body under `body` with the model's constraints under $defs.
    let get_input = schema(&get.input_schema);
    assert_eq!(get_input["required"], json!(["book_id"]), "{get_input}");
    let list_input = schema(&spec_of("list_books").input_schema);
    assert_eq!(
        list_input["properties"]["limit"]["maximum"], 50,
        "{list_input}"
    );
    assert_eq!(
        list_input["properties"]["limit"]["minimum"], 1,
        "{list_input}"
    );
    let add_input = schema(&add.input_schema);
    assert_eq!(add_input["required"], json!(["body"]), "{add_input}");
    let body_ref = add_input["properties"]["body"]["$ref"].as_str().unwrap();
    let new_book = &add_input["$defs"][body_ref.rsplit('/').next().unwrap()];
    assert_eq!(
        new_book["properties"]["pages"]["exclusiveMinimum"].as_f64(),
        Some(0.0),
        "{add_input}"
    );
    assert_eq!(
        new_book["properties"]["title"]["maxLength"], 100,
        "{add_input}"
    );
    let book_output = schema(&get.output_schema);
    assert!(book_output["$ref"].is_string(), "{book_output}");

    // Calls: path, query, header and body arguments.
    let got = invoke(&mut client, "get_book", r#"{"book_id": "b1"}"#, None).await;
    assert_eq!(result_json(&got)["title"], "Dune");
    let echoed = invoke(
        &mut client,
        "echo",
        r#"{"text": "what? a #1 é", "note": "x y&z=1"}"#,
        None,
    )
    .await;
    let echoed = result_json(&echoed);
    assert_eq!(echoed["text"], "what? a #1 é");
    assert_eq!(echoed["note"], "x y&z=1");
    assert_eq!(echoed["raw_path"], "/echo/what%3F%20a%20%231%20%C3%A9");
    let by_tag = invoke(&mut client, "list_books", r#"{"tag": "history"}"#, None).await;
    assert_eq!(
        result_json(&by_tag),
        json!([{"id": "b2", "title": "SPQR", "pages": 608, "tags": ["history"], "reserved": false}])
    );
    let added = invoke(
        &mut client,
        "add_book",
        r#"{"body": {"title": "Emma", "pages": 474, "tags": ["fiction"]}, "x-request-id": "b9"}"#,
        None,
    )
    .await;
    assert_eq!(
        result_json(&added)["id"],
        "b9",
        "the header reached the API"
    );
    // A constraint of the document is checked before the API is called.
    let refused = invoke(
        &mut client,
        "add_book",
        r#"{"body": {"title": "Emma", "pages": 0}}"#,
        None,
    )
    .await;
    assert_eq!(
        error_code(&refused),
        ErrorCode::InvalidArguments,
        "{}",
        message(&refused)
    );

    // 404 and 422: tool errors quoting the API.
    let missing = invoke(&mut client, "get_book", r#"{"book_id": "nope"}"#, None).await;
    assert_eq!(
        error_code(&missing),
        ErrorCode::ToolError,
        "{}",
        message(&missing)
    );
    assert!(
        message(&missing).contains("404") && message(&missing).contains("no book with id 'nope'"),
        "{}",
        message(&missing)
    );
    let invalid = invoke(
        &mut client,
        "add_book",
        r#"{"body": {"title": "emma", "pages": 3}}"#,
        None,
    )
    .await;
    assert_eq!(
        error_code(&invalid),
        ErrorCode::ToolError,
        "{}",
        message(&invalid)
    );
    assert!(
        message(&invalid)
            .contains("body.title: Value error, the title must start with a capital letter"),
        "{}",
        message(&invalid)
    );
    // 500: a system error, not retryable.
    let broken = invoke(&mut client, "broken", "{}", None).await;
    assert_eq!(
        error_code(&broken),
        ErrorCode::ExecutorFailed,
        "{}",
        message(&broken)
    );
    assert!(
        message(&broken).contains("the shelf database is on fire"),
        "{}",
        message(&broken)
    );
    // A slow endpoint: the tool's timeout (3 s), then the caller's deadline.
    let started = Instant::now();
    let slow = invoke(&mut client, "slow", r#"{"seconds": 20}"#, None).await;
    assert_eq!(
        error_code(&slow),
        ErrorCode::DeadlineExceeded,
        "{}",
        message(&slow)
    );
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    let slow = try_invoke(
        &mut client,
        "slow",
        r#"{"seconds": 20}"#,
        Some(Duration::from_secs(1)),
    )
    .await;
    match &slow {
        Ok(response) => assert_eq!(error_code(response), ErrorCode::DeadlineExceeded),
        Err(status) => assert_eq!(status.code(), tonic::Code::DeadlineExceeded),
    }
    let quick = invoke(&mut client, "slow", r#"{"seconds": 0.1}"#, None).await;
    assert_eq!(result_json(&quick)["slept"], 0.1);

    // The bridge's own credentials, never the caller's token.
    let whoami = InvokeRequest {
        tool: "whoami".into(),
        arguments: "{}".into(),
        ..Default::default()
    };
    let seen = invoke_with_token(&mut client, whoami, Some("dev-approver")).await;
    assert_eq!(
        result_json(&seen),
        json!({"authorization": "Bearer tok-outbound", "api_key": "key-42"})
    );

    // The same through the MCP door, with the official Python client.
    python_door(
        "openapi",
        &mcp_url,
        &[],
        &["listed", "call", "tool error", "system error"],
    );

    // The API goes away: NOT_SERVING, the tools leave the listing.
    assert_eq!(health_status(&bridge_addr, "").await, 1, "SERVING");
    app.kill9();
    eventually("the bridge's tools de-exposed", READY, || {
        let mut client = client.clone();
        async move {
            let listed = listed(&mut client).await?;
            (!listed.iter().any(|l| l == "get_book")).then_some(())
        }
    })
    .await;
    assert_eq!(health_status(&bridge_addr, "").await, 2, "NOT_SERVING");

    // Back on its port: the tools return.
    let (_app, _) = bookshop(port);
    until_listed(&mut client, &["get_book"], READY).await;
    let again = invoke(&mut client, "get_book", r#"{"book_id": "b1"}"#, None).await;
    assert_eq!(result_json(&again)["title"], "Dune");
    assert_eq!(health_status(&bridge_addr, "").await, 1, "SERVING");
}

/// Governance applies to bridged operations unchanged: a grant that does
/// not name an operation hides it from the agent (listed for an admin,
/// refused to the agent by name), and an operation made HIGH with `--risk`
/// waits for an approval, then runs once approved.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn governance_applies_to_bridged_operations() {
    let (_app, app_addr) = bookshop(0);
    let dir = temp_dir("bridge-openapi-governance");
    let policy = dir.join("policy.toml");
    std::fs::write(
        &policy,
        acme_policy()
            .grant(
                "agents: the books",
                &["agent"],
                &["get_book", "list_books", "add_book"],
            )
            .grant("admins: every tool", &["admin"], &["*"])
            .then("[approval]\napprover_roles = [\"approver\"]\nrequire_for_risk = \"HIGH\"\n")
            .build_toml(),
    )
    .unwrap();
    let (_serve, addr) = serve(&["--policy", policy.to_str().unwrap()]);
    let _bridge = bridge(
        &addr,
        &format!("http://{app_addr}/openapi.json"),
        &[
            "--token",
            "tok-exec",
            "--operations",
            "get_book,list_books,add_book,whoami",
            "--risk",
            "add_book=high",
        ],
        &[],
    );
    let client = dispatcher(&addr);
    let listed_as = |token: &'static str| {
        let mut client = client.clone();
        async move {
            let request = ListToolsRequest::default();
            let tools = client
                .list_tools(with_token(request, Some(token)))
                .await
                .ok()?;
            let mut names: Vec<String> = tools
                .into_inner()
                .tools
                .into_iter()
                .map(|t| t.name)
                .collect();
            names.sort();
            Some(names)
        }
    };
    eventually("the admin lists every bridged operation", READY, || async {
        listed_as("tok-approver")
            .await
            .filter(|names| names.len() == 4)
    })
    .await;
    assert_eq!(
        listed_as("tok-agent").await.unwrap(),
        ["add_book", "get_book", "list_books"],
        "whoami hidden from the agent"
    );
    let call = |tool: &str, arguments: &str, approval: &str| InvokeRequest {
        tool: tool.into(),
        arguments: arguments.into(),
        approval_id: approval.into(),
        ..Default::default()
    };
    let hidden = invoke_with_token(
        &mut client.clone(),
        call("whoami", "{}", ""),
        Some("tok-agent"),
    )
    .await;
    assert_ne!(code(&hidden), 0, "a hidden operation is not run");
    assert!(
        !message(&hidden).contains("authorization"),
        "{}",
        message(&hidden)
    );

    let book = r#"{"body": {"title": "Middlemarch", "pages": 880}, "x-request-id": "b7"}"#;
    let asked = invoke_with_token(
        &mut client.clone(),
        call("add_book", book, ""),
        Some("tok-agent"),
    )
    .await;
    assert_eq!(
        error_code(&asked),
        ErrorCode::ApprovalRequired,
        "{}",
        message(&asked)
    );
    let absent = invoke_with_token(
        &mut client.clone(),
        call("get_book", r#"{"book_id": "b7"}"#, ""),
        Some("tok-agent"),
    )
    .await;
    assert_eq!(
        error_code(&absent),
        ErrorCode::ToolError,
        "nothing added before the approval"
    );
    let id = asked.result.unwrap().error.unwrap().approval_id;
    GovernanceClient::new(
        toolmesh_transport::channel(&addr, &toolmesh_transport::Tls::none()).unwrap(),
    )
    .approve(with_token(
        ApproveRequest { id: id.clone() },
        Some("tok-approver"),
    ))
    .await
    .expect("approve");
    let added = invoke_with_token(
        &mut client.clone(),
        call("add_book", book, &id),
        Some("tok-agent"),
    )
    .await;
    assert_eq!(result_json(&added)["id"], "b7");
}

/// The body of `GET PATH` from the HTTP server at `addr` (HTTP/1.0, so
/// the server closes the connection after it).
fn http_get(addr: &str, path: &str) -> String {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    write!(stream, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    let (head, body) = answer.split_once("\r\n\r\n").unwrap_or((&answer, ""));
    assert!(
        head.starts_with("HTTP/1.1 200") || head.starts_with("HTTP/1.0 200"),
        "{head}"
    );
    body.to_owned()
}

/// The document is read again every `--refresh-secs`: a document file
/// that gains an operation brings its tool in, callable, while the bridge
/// keeps serving; the others stay as they were.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_document_is_read_again() {
    let (_app, app_addr) = bookshop(0);
    let full: Value = serde_json::from_str(&http_get(&app_addr, "/openapi.json")).unwrap();
    let mut fewer = full.clone();
    fewer["paths"]
        .as_object_mut()
        .unwrap()
        .remove("/echo/{text}")
        .expect("the application's echo operation");
    let dir = temp_dir("bridge-openapi-refresh");
    let file = dir.join("openapi.json");
    // Written whole and renamed, so the bridge never reads half a document.
    let write = |document: &Value| {
        let next = dir.join("openapi.json.next");
        std::fs::write(&next, document.to_string()).unwrap();
        std::fs::rename(&next, &file).unwrap();
    };
    write(&fewer);
    let (_serve, addr) = serve(&[]);
    let base = format!("http://{app_addr}");
    let bridge = bridge(
        &addr,
        file.to_str().unwrap(),
        &["--base-url", &base, "--refresh-secs", "1"],
        &[],
    );
    let mut client = dispatcher(&addr);
    until_listed(&mut client, &["get_book", "whoami"], READY).await;
    let before = listed(&mut client).await.unwrap();
    assert!(!before.iter().any(|name| name == "echo"), "{before:?}");

    write(&full);
    until_listed(&mut client, &["echo", "get_book", "whoami"], READY).await;
    bridge.wait_for_line("registered them again", READY);
    let echoed = invoke(&mut client, "echo", r#"{"text": "hi", "note": "n"}"#, None).await;
    let echoed = result_json(&echoed);
    assert_eq!(
        (&echoed["text"], &echoed["note"]),
        (&json!("hi"), &json!("n"))
    );
    let got = invoke(&mut client, "get_book", r#"{"book_id": "b1"}"#, None).await;
    assert_eq!(result_json(&got)["title"], "Dune");
}

/// A bad glob and two operations given one name are refused at start
/// speaking of operations and `--operations`, never of `--tools`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn selections_name_the_operations_flag() {
    let (_app, app_addr) = bookshop(0);
    let (_serve, addr) = serve(&[]);
    let spec = format!("http://{app_addr}/openapi.json");
    let refused = |extra: &[&str]| {
        let mut args = vec!["bridge", "openapi", "--registry", &addr, "--spec", &spec];
        args.extend_from_slice(extra);
        refused_usage(&args)
    };
    let error = refused(&["--operations", "get[book]"]);
    assert!(error.contains("--operations: \"get[book]\""), "{error}");
    let error = refused(&["--rename", "echo=whoami"]);
    assert!(
        error.contains("upstream operations \"")
            && error.contains("would both be called \"whoami\""),
        "{error}"
    );
    assert!(!error.contains("--tools"), "{error}");
    let error = refused(&["--operations", "delete_*"]);
    assert!(
        error.contains("matching --operations delete_*") && error.contains("get_book"),
        "{error}"
    );
}

/// README's "Bring an existing HTTP API" runs as printed: the bridge line
/// beside a running mesh (the README's addresses and `$TOKEN` filled in
/// with this run's) and the call after it, each by `sh`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readme_bring_an_existing_http_api_runs_as_printed() {
    use toolmesh_system_tests::readme::{bridge_block_policy, bridge_block_runs};
    let dir = temp_dir("readme-bridge-openapi");
    let policy = dir.join("policy.toml");
    std::fs::write(&policy, bridge_block_policy()).unwrap();
    let (_app, app_addr) = bookshop(0);
    let (_serve, addr) = serve(&["--policy", policy.to_str().unwrap()]);
    let called = bridge_block_runs(
        "Bring an existing HTTP API",
        dir.path(),
        &addr,
        &[("127.0.0.1:8000", &app_addr)],
        READY,
    )
    .await;
    assert!(called.contains("Dune"), "{called}");
}
