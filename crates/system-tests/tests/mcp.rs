//! The MCP front door end to end, with real clients: rmcp's client over
//! Streamable HTTP and over the stdio bridge (`toolmesh mcp`, a real
//! process), and the official Python `mcp` client.

use rmcp::model::ProgressNotificationParam;
use rmcp::model::{
    CacheScope, CallToolRequestParams, CallToolResult, ClientConfig, PaginatedRequestParams,
    ProtocolVersion, RequestMetaObject, ServerNotification, SubscriptionFilter,
};
use rmcp::service::NotificationContext;
use rmcp::service::RunningService;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{ClientHandler, ClientLifecycleMode, ClientServiceExt, RoleClient};
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use toolmesh_system_tests::mcp_mesh::{ADMIN, AGENT, BULK, Mesh, VISIBLE};
use toolmesh_system_tests::{Caller, PolicyBuilder};

type Client = RunningService<RoleClient, ClientConfig>;

/// An rmcp client of `url` on the 2026-07-28 revision (stateless).
async fn client(url: &str, token: Option<&str>) -> Result<Client, String> {
    client_with(ClientConfig::default(), url, token).await
}

/// [`client`] with `handler` for what the server sends it.
async fn client_with<H: ClientHandler>(
    handler: H,
    url: &str,
    token: Option<&str>,
) -> Result<RunningService<RoleClient, H>, String> {
    // reqwest's rustls (built with the bridge's features) runs on the
    // process's crypto provider: ring, as everywhere in the mesh.
    let _ = tokio_rustls::rustls::crypto::ring::default_provider().install_default();
    let mut config = StreamableHttpClientTransportConfig::with_uri(url.to_owned());
    if let Some(token) = token {
        config = config.auth_header(token);
    }
    handler
        .serve_with_lifecycle(
            StreamableHttpClientTransport::from_config(config),
            ClientLifecycleMode::Discover {
                preferred_versions: vec![ProtocolVersion::V_2026_07_28],
            },
        )
        .await
        .map_err(|e| e.to_string())
}

/// Every page of the listing: the tools and how many pages it took.
async fn list_all(client: &Client) -> (Vec<rmcp::model::Tool>, usize) {
    let (mut tools, mut pages, mut cursor) = (Vec::new(), 0, None);
    loop {
        let page = client
            .list_tools(Some(PaginatedRequestParams::default().with_cursor(cursor)))
            .await
            .unwrap();
        pages += 1;
        assert_eq!(page.cache_scope, Some(CacheScope::Private));
        assert!(page.ttl_ms.is_some());
        tools.extend(page.tools);
        match page.next_cursor {
            Some(next) => cursor = Some(next),
            None => return (tools, pages),
        }
    }
}

fn names(tools: &[rmcp::model::Tool]) -> Vec<String> {
    tools.iter().map(|t| t.name.to_string()).collect()
}

async fn call<H: ClientHandler>(
    client: &RunningService<RoleClient, H>,
    tool: &str,
    arguments: Value,
) -> Result<CallToolResult, String> {
    let mut params = CallToolRequestParams::new(tool.to_owned());
    params.arguments = arguments.as_object().cloned();
    client.call_tool(params).await.map_err(|e| e.to_string())
}

fn text(result: &CallToolResult) -> String {
    serde_json::to_value(&result.content).unwrap()[0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// The text of an isError result, checked to read `CODE: …` and to carry
/// the code in structuredContent.
fn tool_error(result: &CallToolResult, code: &str) -> String {
    let message = text(result);
    assert_eq!(result.is_error, Some(true), "{message}");
    assert!(message.starts_with(&format!("{code}: ")), "{message}");
    assert_eq!(result.structured_content.as_ref().unwrap()["code"], code);
    message
}

/// tools/list is the caller's projection: sorted, in the dispatcher's pages
/// of at most 1,000 with a cursor (1,005 tools are two), private with a ttl;
/// hidden tools are left out; the MCP shape carries schemas, hints and
/// toolmesh's facts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lists_the_callers_projection_in_pages() {
    let mesh = Mesh::start().await;
    let agent = client(&mesh.url, Some(AGENT)).await.unwrap();
    let (tools, pages) = list_all(&agent).await;
    let listed = names(&tools);
    assert_eq!(
        listed.len(),
        BULK + VISIBLE,
        "bulk + echo, liar, wait, steps, wipe"
    );
    assert!(pages >= BULK / toolmesh_mcp::PAGE_SIZE, "{pages} pages");
    assert!(listed.windows(2).all(|w| w[0] < w[1]), "sorted, no repeats");
    assert!(
        !listed.contains(&"secret".to_owned()),
        "hidden from the agent"
    );
    let echo = tools.iter().find(|t| t.name == "echo").unwrap();
    let annotations = echo.annotations.clone().unwrap();
    assert_eq!(annotations.read_only_hint, Some(true));
    assert_eq!(annotations.idempotent_hint, Some(true));
    assert_eq!(annotations.destructive_hint, Some(false));
    assert!(echo.output_schema.is_some());
    let meta = serde_json::to_value(&echo.meta).unwrap();
    assert_eq!(meta["toolmesh/version"], "1.0.0");
    assert_eq!(meta["toolmesh/owner"], "tests");
    let wipe = tools.iter().find(|t| t.name == "wipe").unwrap();
    assert_eq!(
        wipe.annotations.clone().unwrap().destructive_hint,
        Some(true)
    );

    let admin = client(&mesh.url, Some(ADMIN)).await.unwrap();
    assert!(names(&list_all(&admin).await.0).contains(&"secret".to_owned()));
    mesh.node.stop(Duration::from_secs(1)).await.unwrap();
}

/// Without a token (the policy admits no anonymous callers) the endpoint
/// answers 401 with the RFC 9728 resource-metadata hint, and the metadata
/// document is served; an unknown token is 401 with invalid_token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unauthenticated_requests_get_401_with_resource_metadata() {
    let mesh = Mesh::start().await;
    let addr = mesh.node.mcp_addr.unwrap();
    let body = r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#;
    let post = |auth: &str| {
        format!(
            "POST /mcp HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\n{auth}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
    };
    let anonymous = http(addr, &post("")).await;
    assert!(anonymous.starts_with("HTTP/1.1 401"), "{anonymous}");
    let challenge = format!(
        "www-authenticate: Bearer resource_metadata=\"http://{addr}/.well-known/oauth-protected-resource/mcp\""
    );
    assert!(
        anonymous.to_lowercase().contains(&challenge.to_lowercase()),
        "{anonymous}"
    );
    assert!(
        anonymous.contains("no bearer token"),
        "says what is missing: {anonymous}"
    );
    let unknown = http(addr, &post("Authorization: Bearer nope\r\n")).await;
    assert!(
        unknown.starts_with("HTTP/1.1 401") && unknown.contains("invalid_token"),
        "{unknown}"
    );
    let metadata = http(
        addr,
        &format!("GET /.well-known/oauth-protected-resource/mcp HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"),
    )
    .await;
    assert!(metadata.starts_with("HTTP/1.1 200"), "{metadata}");
    assert!(
        metadata.contains(&format!("\"resource\":\"http://{addr}/mcp\"")),
        "{metadata}"
    );
    assert!(client(&mesh.url, None).await.is_err());
    mesh.node.stop(Duration::from_secs(1)).await.unwrap();
}

/// The MCP door validates `Origin` (the transport spec's MUST): a browser
/// page of another site is refused with 403 before authentication, a page
/// of the door's own host passes, a request without Origin (any
/// non-browser client) passes; and a `Host` outside the allow-list is
/// refused on the metadata document too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn origins_of_other_sites_are_refused() {
    let mesh = Mesh::start().await;
    let addr = mesh.node.mcp_addr.unwrap();
    let body = r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#;
    let post = |extra: &str| {
        format!(
            "POST /mcp HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nMCP-Protocol-Version: 2025-11-25\r\nAuthorization: Bearer {AGENT}\r\n{extra}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
    };
    let evil = http(addr, &post("Origin: http://evil.example\r\n")).await;
    assert!(evil.starts_with("HTTP/1.1 403"), "{evil}");
    assert!(
        evil.contains("--mcp-allowed-origins"),
        "says what to change: {evil}"
    );
    let null = http(addr, &post("Origin: null\r\n")).await;
    assert!(null.starts_with("HTTP/1.1 403"), "{null}");
    let own = http(addr, &post(&format!("Origin: http://{addr}\r\n"))).await;
    assert!(own.starts_with("HTTP/1.1 200"), "{own}");
    let none = http(addr, &post("")).await;
    assert!(none.starts_with("HTTP/1.1 200"), "{none}");
    let rebound = http(
        addr,
        "GET /.well-known/oauth-protected-resource/mcp HTTP/1.1\r\nHost: evil.example\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert!(rebound.starts_with("HTTP/1.1 403"), "{rebound}");
    mesh.node.stop(Duration::from_secs(1)).await.unwrap();
}

/// One HTTP/1.1 exchange on a fresh connection; the whole answer.
async fn http(addr: std::net::SocketAddr, request: &str) -> String {
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await.unwrap();
    answer
}

/// tools/call is one Invoke: success carries text and structuredContent;
/// invalid arguments and a broken output contract are isError results
/// naming the paths; unknown and hidden names are invalid params worded
/// alike ("did you mean" only offers visible names).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_map_results_and_errors() {
    let mesh = Mesh::start().await;
    let agent = client(&mesh.url, Some(AGENT)).await.unwrap();
    let ok = call(&agent, "echo", json!({"text": "hi"})).await.unwrap();
    assert_eq!(ok.is_error, Some(false));
    assert_eq!(text(&ok), "echo: hi");
    assert_eq!(ok.structured_content, Some(json!({"text": "hi"})));

    let invalid = call(&agent, "echo", json!({"text": 5})).await.unwrap();
    assert!(tool_error(&invalid, "INVALID_ARGUMENTS").contains("/text"));
    let broken = call(&agent, "liar", json!({"text": "x"})).await.unwrap();
    assert!(tool_error(&broken, "EXECUTOR_FAILED").contains("at /text"));

    let unknown = call(&agent, "ecoh", json!({})).await.unwrap_err();
    assert!(unknown.contains("did you mean \"echo\""), "{unknown}");
    assert!(
        unknown.contains("-32602") || unknown.to_lowercase().contains("invalid"),
        "{unknown}"
    );
    // A hidden name is answered word for word as one that does not exist.
    let hidden = call(&agent, "secret", json!({})).await.unwrap_err();
    let absent = call(&agent, "zzzzzz", json!({})).await.unwrap_err();
    assert_eq!(
        hidden.replace("secret", "NAME"),
        absent.replace("zzzzzz", "NAME")
    );
    assert!(
        !hidden.contains("1.0.0"),
        "nothing about the hidden tool: {hidden}"
    );
    let near_hidden = call(&agent, "secrat", json!({})).await.unwrap_err();
    assert!(
        !near_hidden.contains("did you mean"),
        "hidden names are not offered: {near_hidden}"
    );
    mesh.node.stop(Duration::from_secs(1)).await.unwrap();
}

/// A HIGH-risk call answers APPROVAL_REQUIRED with the id and what to do;
/// once an approver grants it, the same call with the id in
/// `_meta.toolmesh/approval_id` runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approval_round_trip() {
    let mesh = Mesh::start().await;
    let agent = client(&mesh.url, Some(AGENT)).await.unwrap();
    let asked = call(&agent, "wipe", json!({})).await.unwrap();
    let message = tool_error(&asked, "APPROVAL_REQUIRED");
    assert!(message.contains(toolmesh_mcp::APPROVAL_META), "{message}");
    let id = asked.structured_content.as_ref().unwrap()["approval_id"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(!id.is_empty());
    mesh.approve(&id).await;
    let mut params = CallToolRequestParams::new("wipe");
    params.arguments = Some(Default::default());
    let mut meta = RequestMetaObject::new();
    meta.insert(toolmesh_mcp::APPROVAL_META.into(), json!(id));
    params.meta = Some(meta);
    let done = agent.call_tool(params).await.unwrap();
    assert_eq!(done.is_error, Some(false), "{}", text(&done));
    assert_eq!(text(&done), "wiped");
    mesh.node.stop(Duration::from_secs(1)).await.unwrap();
}

/// A client that gives up on a call (its request stream closes) cancels it
/// end to end: the executor's tool sees the cancellation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_a_call_reaches_the_executor() {
    let mesh = Mesh::start().await;
    let agent = client(&mesh.url, Some(AGENT)).await.unwrap();
    let started = mesh.wait_started.notified();
    let cancelled = mesh.wait_cancelled.notified();
    let pending = tokio::spawn(async move {
        let _ = call(&agent, "wait", json!({})).await;
        agent
    });
    tokio::time::timeout(toolmesh_testkit::patient(Duration::from_secs(10)), started)
        .await
        .expect("the tool started");
    pending.abort();
    tokio::time::timeout(
        toolmesh_testkit::patient(Duration::from_secs(10)),
        cancelled,
    )
    .await
    .expect("the cancellation reached the tool");
    mesh.node.stop(Duration::from_secs(1)).await.unwrap();
}

/// A deadline the client gives in `_meta` (`toolmesh/timeout_ms`) bounds
/// the whole call: a tool that takes longer ends with DEADLINE_EXCEEDED
/// and is told to stop; a deadline that is no positive whole number of
/// milliseconds is refused as invalid params.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deadline_in_meta_bounds_the_call() {
    let mesh = Mesh::start().await;
    let agent = client(&mesh.url, Some(AGENT)).await.unwrap();
    let with_deadline = |deadline: Value| {
        let mut params = CallToolRequestParams::new("wait");
        params.arguments = Some(Default::default());
        let mut meta = RequestMetaObject::new();
        meta.insert(toolmesh_mcp::TIMEOUT_META.into(), deadline);
        params.meta = Some(meta);
        params
    };
    let cancelled = mesh.wait_cancelled.notified();
    // The tool waits 30 s; the call's own deadline is 300 ms.
    let answered = tokio::time::timeout(
        toolmesh_testkit::patient(Duration::from_secs(10)),
        agent.call_tool(with_deadline(json!(300))),
    )
    .await
    .expect("the call ended at its deadline, not the tool's")
    .unwrap();
    tool_error(&answered, "DEADLINE_EXCEEDED");
    tokio::time::timeout(
        toolmesh_testkit::patient(Duration::from_secs(10)),
        cancelled,
    )
    .await
    .expect("the tool was told to stop");
    for bad in [json!("soon"), json!(0), json!(-5)] {
        let refused = agent.call_tool(with_deadline(bad.clone())).await;
        let message = refused.expect_err("refused").to_string();
        assert!(
            message.contains("positive whole number"),
            "{bad}: {message}"
        );
    }
    mesh.node.stop(Duration::from_secs(1)).await.unwrap();
}

/// A client that keeps the progress notifications it hears.
#[derive(Clone, Default)]
struct Heard(Arc<Mutex<Vec<ProgressNotificationParam>>>);

impl ClientHandler for Heard {
    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        self.0.lock().unwrap().push(params);
    }
}

/// A `tools/call` carrying a `progressToken` (rmcp's client sends one with
/// every request) hears the tool's progress as `notifications/progress` with
/// that token, then gets the result; on the wire every notification comes
/// before the result, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn progress_reaches_the_client_as_notifications() {
    let mesh = Mesh::start().await;
    let heard = Heard::default();
    let agent = client_with(heard.clone(), &mesh.url, Some(AGENT))
        .await
        .unwrap();
    let done = call(&agent, "steps", json!({"n": 3})).await.unwrap();
    assert_eq!(done.is_error, Some(false), "{}", text(&done));
    assert_eq!(text(&done), "3 steps");
    // rmcp hands each notification to the handler in a task of its own.
    toolmesh_testkit::until("three reports", Duration::from_secs(5), || {
        heard.0.lock().unwrap().len() >= 3
    })
    .await;
    let mut reports = heard.0.lock().unwrap().clone();
    reports.sort_by(|a, b| a.progress.total_cmp(&b.progress));
    let seen: Vec<(f64, Option<f64>, Option<String>)> = reports
        .iter()
        .map(|p| (p.progress, p.total, p.message.clone()))
        .collect();
    let expected: Vec<(f64, Option<f64>, Option<String>)> = (1..=3)
        .map(|i| (f64::from(i), Some(3.0), Some(format!("step {i} of 3"))))
        .collect();
    assert_eq!(seen, expected);
    assert!(
        reports
            .windows(2)
            .all(|w| w[0].progress_token == w[1].progress_token),
        "one token: the call's"
    );

    let addr = mesh.node.mcp_addr.unwrap().to_string();
    let body = json!({
        "jsonrpc": "2.0", "id": 7, "method": "tools/call",
        "params": {"name": "steps", "arguments": {"n": 3}, "_meta": {"progressToken": "p-7"}},
    })
    .to_string();
    let (status, wire) = tokio::task::spawn_blocking(move || {
        let bearer = format!("Bearer {AGENT}");
        toolmesh_testkit::http(
            &addr,
            "POST",
            "/mcp",
            &[
                ("content-type", "application/json"),
                ("accept", "application/json, text/event-stream"),
                ("mcp-protocol-version", "2025-11-25"),
                ("authorization", &bearer),
            ],
            &body,
        )
    })
    .await
    .unwrap();
    assert_eq!(status, 200, "{wire}");
    let at = |needle: &str| {
        wire.find(needle)
            .unwrap_or_else(|| panic!("{needle} not in\n{wire}"))
    };
    let notes: Vec<usize> = (1..=3)
        .map(|i| at(&format!("\"message\":\"step {i} of 3\"")))
        .collect();
    assert!(notes.windows(2).all(|w| w[0] < w[1]), "in order:\n{wire}");
    assert!(wire.contains("\"progressToken\":\"p-7\""), "{wire}");
    assert!(notes[2] < at("3 steps"), "before the result:\n{wire}");
    mesh.node.stop(Duration::from_secs(1)).await.unwrap();
}

/// A subscriber hears `notifications/tools/list_changed` when its own
/// projection changes (a tool it sees is disabled), and not when a tool
/// it cannot see changes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_changed_only_when_the_callers_projection_changes() {
    let mesh = Mesh::start().await;
    let agent = client(&mesh.url, Some(AGENT)).await.unwrap();
    let mut subscription = agent
        .listen(SubscriptionFilter::builder().tools_list_changed().build())
        .await
        .unwrap();
    mesh.disable("secret").await;
    let quiet = tokio::time::timeout(Duration::from_millis(800), subscription.next()).await;
    assert!(
        quiet.is_err(),
        "a hidden tool's switch says nothing: {quiet:?}"
    );
    mesh.disable("echo").await;
    let heard = tokio::time::timeout(
        toolmesh_testkit::patient(Duration::from_secs(5)),
        subscription.next(),
    )
    .await
    .expect("a notification within 5 s")
    .unwrap();
    assert!(
        matches!(
            heard,
            Some(ServerNotification::ToolListChangedNotification(_))
        ),
        "{heard:?}"
    );
    let (tools, _) = list_all(&agent).await;
    assert!(!names(&tools).contains(&"echo".to_owned()));
    mesh.node.stop(Duration::from_secs(1)).await.unwrap();
}

/// `toolmesh mcp --server ADDR --token T` (a real process) serves the same
/// MCP over stdio, calling the dispatcher by gRPC as T.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stdio_bridge_serves_the_same_tools() {
    let mesh = Mesh::start().await;
    let mut command = tokio::process::Command::new(toolmesh_testkit::toolmesh_bin());
    command.args(["mcp", "--server", &mesh.grpc, "--token", AGENT]);
    let bridge = ClientConfig::default()
        .serve_with_lifecycle(
            TokioChildProcess::new(command).unwrap(),
            ClientLifecycleMode::Discover {
                preferred_versions: vec![ProtocolVersion::V_2026_07_28],
            },
        )
        .await
        .unwrap();
    let (tools, pages) = list_all(&bridge).await;
    assert_eq!(tools.len(), BULK + VISIBLE);
    assert!(pages > 1);
    let ok = call(&bridge, "echo", json!({"text": "via stdio"}))
        .await
        .unwrap();
    assert_eq!(ok.structured_content, Some(json!({"text": "via stdio"})));
    let hidden = call(&bridge, "secret", json!({})).await.unwrap_err();
    let absent = call(&bridge, "zzzzzz", json!({})).await.unwrap_err();
    assert_eq!(
        hidden.replace("secret", "NAME"),
        absent.replace("zzzzzz", "NAME")
    );
    bridge.cancel().await.unwrap();
    mesh.node.stop(Duration::from_secs(1)).await.unwrap();
}

/// The official Python client (`mcp`, pinned in tests/python/requirements.txt)
/// runs tests/python/mcp_client.py against the endpoint and the stdio
/// bridge; the approval is granted here when the script asks for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn official_python_client() {
    let mesh = Mesh::start().await;
    let passed = mesh.run_python("mcp_client.py").await;
    for check in [
        "401 without token",
        "projection",
        "pagination",
        "call success",
        "tool error",
        "invalid arguments",
        "unknown name",
        "hidden name",
        "approval",
        "cancellation",
        "progress",
        "list_changed",
        "stdio bridge",
    ] {
        assert!(
            passed.iter().any(|p| p == check),
            "{check} not passed: {passed:?}"
        );
    }
    mesh.node.stop(Duration::from_secs(1)).await.unwrap();
}

/// With the node's --tls-cert and --tls-key, `/mcp` is HTTPS (ALPN h2 or
/// http/1.1): a client trusting the CA lists the tools; its URL says https.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_over_tls_with_the_nodes_certificate() {
    let dir = toolmesh_testkit::TempDir::new("mcp-tls").unwrap();
    let (ca, cert, key) = toolmesh_testkit::pki(&dir, "node");
    let files = toolmesh_transport::TlsFiles {
        cert: Some(cert),
        key: Some(key),
        ..Default::default()
    };
    let node = toolmesh_node::start(
        toolmesh_node::Role::Serve {
            default_ttl: Duration::from_secs(10),
        },
        &toolmesh_node::NodeConfig {
            listen: ([127, 0, 0, 1], 0).into(),
            mcp_listen: Some(([127, 0, 0, 1], 0).into()),
            mcp_allowed_hosts: vec!["*".into()],
            tls: toolmesh_transport::Tls::from_files(&files).unwrap(),
            ..toolmesh_node::NodeConfig::default()
        },
    )
    .await
    .unwrap();
    let addr = node.mcp_addr.unwrap();
    assert_eq!(node.mcp_url().unwrap(), format!("https://{addr}/mcp"));

    let answer = tools_list_over_tls(addr, &ca, None).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.contains(r#""tools":[]"#), "{answer}");
    node.stop(Duration::from_secs(1)).await.unwrap();
}

/// With a client CA, the client certificate is an identity on `/mcp` as on
/// gRPC: a policy that admits no anonymous caller lets a client in by the
/// certificate's `tls_name`, with no bearer token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_client_certificate_is_an_identity() {
    let dir = toolmesh_testkit::TempDir::new("mcp-mtls").unwrap();
    let (ca, cert, key) = toolmesh_testkit::pki(&dir, "node");
    let policy = dir.join("policy.toml");
    std::fs::write(
        &policy,
        PolicyBuilder::new()
            .no_anonymous()
            .caller(Caller::tls_name("localhost", "cert-agent").roles(&["agent"]))
            .build_toml(),
    )
    .unwrap();
    let files = toolmesh_transport::TlsFiles {
        cert: Some(cert.clone()),
        key: Some(key.clone()),
        client_ca: Some(ca.clone()),
        ..Default::default()
    };
    let node = toolmesh_node::start(
        toolmesh_node::Role::Serve {
            default_ttl: Duration::from_secs(10),
        },
        &toolmesh_node::NodeConfig {
            listen: ([127, 0, 0, 1], 0).into(),
            mcp_listen: Some(([127, 0, 0, 1], 0).into()),
            mcp_allowed_hosts: vec!["*".into()],
            tls: toolmesh_transport::Tls::from_files(&files).unwrap(),
            policy: Some(policy),
            ..toolmesh_node::NodeConfig::default()
        },
    )
    .await
    .unwrap();
    let addr = node.mcp_addr.unwrap();

    let answer = tools_list_over_tls(addr, &ca, Some((&cert, &key))).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.contains(r#""tools":[]"#), "{answer}");
    node.stop(Duration::from_secs(1)).await.unwrap();
}

/// An MCP `tools/list` over HTTPS to `addr`, trusting `ca` and presenting
/// `client` (certificate, key) when given: the raw HTTP/1.1 answer.
async fn tools_list_over_tls(
    addr: std::net::SocketAddr,
    ca: &std::path::Path,
    client: Option<(&std::path::Path, &std::path::Path)>,
) -> String {
    let body = r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#;
    let request = format!(
        "POST /mcp HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nMCP-Protocol-Version: 2025-11-25\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    toolmesh_testkit::https::exchange(addr, ca, client, &request)
        .await
        .unwrap()
}

/// One `POST /mcp` as AGENT on revision 2025-11-25 with `accept` (none:
/// no header) and a JSON body: the status, the Content-Type and the body.
async fn post(mesh: &Mesh, accept: Option<&str>, body: &str) -> (u16, String, String) {
    post_as(mesh, "2025-11-25", accept, body).await
}

/// [`post`] on revision `version`.
async fn post_as(
    mesh: &Mesh,
    version: &str,
    accept: Option<&str>,
    body: &str,
) -> (u16, String, String) {
    let addr = mesh.node.mcp_addr.unwrap();
    let accept = accept.map_or(String::new(), |a| format!("Accept: {a}\r\n"));
    let answer = http(
        addr,
        &format!(
            "POST /mcp HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n{accept}MCP-Protocol-Version: {version}\r\nAuthorization: Bearer {AGENT}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        ),
    )
    .await;
    let (head, body) = answer.split_once("\r\n\r\n").unwrap_or((&answer, ""));
    let status = head[9..12].parse().unwrap();
    let content_type = head
        .lines()
        .find_map(|l| {
            l.to_lowercase()
                .strip_prefix("content-type:")
                .map(|v| v.trim().to_owned())
        })
        .unwrap_or_default();
    (status, content_type, body.to_owned())
}

/// The JSON body of an answer.
fn json_body(body: &str) -> Value {
    serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {body}"))
}

/// A `tools/call` whose arguments repeat a key is refused on every door
/// in the same words, naming the key: gRPC answers INVALID_ARGUMENTS, MCP
/// over HTTP and over the stdio bridge invalid params (rmcp would have
/// kept the last value and run the call).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repeated_argument_keys_are_refused_alike_on_every_door() {
    let mesh = Mesh::start().await;
    let arguments = r#"{"text":"harmless","text":"harmful"}"#;

    let channel =
        toolmesh_transport::channel(&mesh.grpc, &toolmesh_transport::Tls::none()).unwrap();
    let mut grpc = toolmesh::pb::dispatcher_client::DispatcherClient::new(channel);
    let mut request = tonic::Request::new(toolmesh::pb::InvokeRequest {
        tool: "echo".into(),
        arguments: arguments.into(),
        ..Default::default()
    });
    toolmesh_transport::set_bearer(request.metadata_mut(), AGENT);
    let refused = grpc.invoke(request).await.unwrap().into_inner();
    let grpc_words = refused.result.unwrap().error.unwrap().message;
    assert!(
        grpc_words.contains(r#"repeat the key "text""#),
        "{grpc_words}"
    );

    let call = |id: u32| {
        format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"echo","arguments":{arguments}}}}}"#
        )
    };
    let (status, _, body) =
        post(&mesh, Some("application/json, text/event-stream"), &call(5)).await;
    assert_eq!(status, 200, "{body}");
    let answer = json_body(&body);
    assert_eq!(answer["id"], 5, "{answer}");
    assert_eq!(answer["error"]["code"], -32602, "{answer}");
    assert_eq!(answer["error"]["message"], json!(grpc_words));

    let mut bridge = tokio::process::Command::new(toolmesh_testkit::toolmesh_bin())
        .args(["mcp", "--server", &mesh.grpc, "--token", AGENT])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stdin = bridge.stdin.take().unwrap();
    let initialize = json!({
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
    });
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let lines = format!("{initialize}\n{initialized}\n{}\n", call(9));
    stdin.write_all(lines.as_bytes()).await.unwrap();
    let mut out =
        tokio::io::AsyncBufReadExt::lines(tokio::io::BufReader::new(bridge.stdout.take().unwrap()));
    let answer = tokio::time::timeout(toolmesh_testkit::patient(Duration::from_secs(10)), async {
        loop {
            let line = out.next_line().await.unwrap().expect("the bridge answers");
            let message: Value = serde_json::from_str(&line).unwrap();
            if message["id"] == 9 {
                return message;
            }
        }
    })
    .await
    .expect("the bridge answered the call");
    assert_eq!(answer["error"]["code"], -32602, "{answer}");
    assert_eq!(answer["error"]["message"], json!(grpc_words));
    drop(stdin);
    mesh.node.stop(Duration::from_secs(1)).await.unwrap();
}

/// JSON-RPC over HTTP: a body that is not JSON is 400 with a parse error
/// (`id: null`), JSON that is no JSON-RPC message 400 with an invalid
/// request; an Accept of JSON alone, `*/*` or none is served (JSON only,
/// even for a call that reports progress), SSE alone gets SSE, and an
/// Accept allowing neither is 406 saying what to send.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_door_speaks_json_rpc_over_http() {
    let mesh = Mesh::start().await;
    let list = r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#;

    let (status, content_type, body) = post(&mesh, Some("*/*"), r#"{"jsonrpc":"2.0","#).await;
    assert_eq!(
        (status, content_type.as_str()),
        (400, "application/json"),
        "{body}"
    );
    let parse = json_body(&body);
    assert_eq!(parse["error"]["code"], -32700, "{parse}");
    assert!(
        parse["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("Parse error")
    );
    assert_eq!(parse["id"], Value::Null);
    assert_eq!(parse["jsonrpc"], "2.0");

    let (status, _, body) = post(&mesh, Some("*/*"), r#"{"hello":"world"}"#).await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(json_body(&body)["error"]["code"], -32600, "{body}");

    for accept in [
        Some("application/json"),
        Some("*/*"),
        Some("application/*"),
        None,
    ] {
        let (status, content_type, body) = post(&mesh, accept, list).await;
        assert_eq!(status, 200, "{accept:?}: {body}");
        assert_eq!(content_type, "application/json", "{accept:?}");
        assert!(json_body(&body)["result"]["tools"].is_array(), "{body}");
    }

    let steps = r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"steps","arguments":{"n":3},"_meta":{"progressToken":"p"}}}"#;
    let (status, content_type, body) = post(&mesh, Some("application/json"), steps).await;
    assert_eq!(
        (status, content_type.as_str()),
        (200, "application/json"),
        "{body}"
    );
    let done = json_body(&body);
    assert_eq!(done["id"], 3);
    assert_eq!(done["result"]["content"][0]["text"], "3 steps", "{done}");

    let (status, content_type, body) = post(&mesh, Some("text/event-stream"), list).await;
    assert_eq!(
        (status, content_type.as_str()),
        (200, "text/event-stream"),
        "{body}"
    );
    assert!(body.contains("data: {"), "{body}");
    let repeated = r#"{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"echo","arguments":{"text":"a","text":"b"}}}"#;
    let (status, content_type, body) = post(&mesh, Some("text/event-stream"), repeated).await;
    assert_eq!(
        (status, content_type.as_str()),
        (200, "text/event-stream"),
        "{body}"
    );
    assert!(
        body.contains("data: {") && body.contains("-32602"),
        "{body}"
    );

    let (status, _, body) = post(&mesh, Some("text/html"), list).await;
    assert_eq!(status, 406, "{body}");
    assert!(
        json_body(&body)["error"]["message"]
            .as_str()
            .unwrap()
            .contains("send Accept: application/json"),
        "{body}"
    );
    mesh.node.stop(Duration::from_secs(1)).await.unwrap();
}

/// The stateless HTTP door has no stream to announce a change on before
/// 2026-07-28: its `initialize` answer does not claim `listChanged` (a
/// 2026-07-28 client subscribes instead, see above).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_initialize_does_not_claim_list_changed() {
    let mesh = Mesh::start().await;
    for version in ["2025-06-18", "2025-11-25"] {
        let initialize = json!({
            "jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": version, "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
        });
        let (status, _, body) = post_as(
            &mesh,
            version,
            Some("application/json"),
            &initialize.to_string(),
        )
        .await;
        assert_eq!(status, 200, "{body}");
        let answer = json_body(&body);
        assert_eq!(answer["result"]["protocolVersion"], version, "{answer}");
        let tools = &answer["result"]["capabilities"]["tools"];
        assert!(tools.is_object(), "{answer}");
        assert_eq!(tools.get("listChanged"), None, "{version}: {answer}");
    }
    mesh.node.stop(Duration::from_secs(1)).await.unwrap();
}

/// A client that keeps count of the `tools/list_changed` it hears.
#[derive(Clone, Default)]
struct ListChanges(Arc<std::sync::atomic::AtomicUsize>);

impl ClientHandler for ListChanges {
    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }
}

/// The stdio bridge keeps the `listChanged` it claims on the revisions
/// with `initialize`: when a tool the caller sees is disabled, the client
/// hears `notifications/tools/list_changed` unasked, and lists again
/// without it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stdio_bridge_announces_list_changed() {
    let mesh = Mesh::start().await;
    let mut command = tokio::process::Command::new(toolmesh_testkit::toolmesh_bin());
    command.args(["mcp", "--server", &mesh.grpc, "--token", AGENT]);
    let heard = ListChanges::default();
    let bridge = heard
        .clone()
        .serve_with_lifecycle(
            TokioChildProcess::new(command).unwrap(),
            ClientLifecycleMode::Initialize,
        )
        .await
        .unwrap();
    let info = bridge.peer_info().expect("initialized");
    assert_eq!(
        info.capabilities
            .tools
            .as_ref()
            .and_then(|t| t.list_changed),
        Some(true),
        "the bridge claims listChanged"
    );
    assert!(names(&bridge.list_all_tools().await.unwrap()).contains(&"echo".to_owned()));
    mesh.disable("echo").await;
    toolmesh_testkit::until(
        "tools/list_changed over stdio",
        Duration::from_secs(10),
        || heard.0.load(std::sync::atomic::Ordering::SeqCst) > 0,
    )
    .await;
    assert!(!names(&bridge.list_all_tools().await.unwrap()).contains(&"echo".to_owned()));
    bridge.cancel().await.unwrap();
    mesh.node.stop(Duration::from_secs(1)).await.unwrap();
}

/// A TCP relay to a gRPC server whose connections can be cut and refused
/// (a dispatcher going away and coming back, as the bridge sees it).
struct Relay {
    addr: std::net::SocketAddr,
    open: Arc<std::sync::atomic::AtomicBool>,
    connections: Arc<Mutex<Vec<tokio::task::JoinHandle<()>>>>,
}

impl Relay {
    async fn to(target: std::net::SocketAddr) -> Relay {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let relay = Relay {
            addr: listener.local_addr().unwrap(),
            open: Arc::new(std::sync::atomic::AtomicBool::new(true)),
            connections: Arc::default(),
        };
        let (open, connections) = (relay.open.clone(), relay.connections.clone());
        tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                if !open.load(std::sync::atomic::Ordering::SeqCst) {
                    continue; // refused: dropped at once
                }
                connections.lock().unwrap().push(tokio::spawn(async move {
                    if let Ok(mut upstream) = tokio::net::TcpStream::connect(target).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut upstream).await;
                    }
                }));
            }
        });
        relay
    }

    /// Cuts every connection and refuses new ones (`false`), or takes
    /// them again (`true`).
    fn set_open(&self, open: bool) {
        self.open.store(open, std::sync::atomic::Ordering::SeqCst);
        if !open {
            for connection in self.connections.lock().unwrap().drain(..) {
                connection.abort();
            }
        }
    }
}

/// The stdio bridge learns of changes from WatchTools, never by calling
/// ListTools now and then (it used to, every second): while its client
/// asks nothing, no ListTools reaches the dispatcher. When its stream
/// breaks and a change happens meanwhile, the bridge opens the stream
/// again and, comparing the view it is sent, announces the change.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stdio_bridge_watches_without_polling_and_reconnects() {
    use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
    let mesh = Mesh::start().await;
    let list_calls = Arc::new(AtomicUsize::new(0));
    let counted = list_calls.clone();
    let dispatcher = mesh.node.dispatcher.clone().expect("the node dispatches");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let dispatcher_addr = listener.local_addr().unwrap();
    let counting = tonic::transport::Server::builder()
        .layer(tower::util::MapRequestLayer::new(
            move |request: tonic::codegen::http::Request<tonic::body::Body>| {
                if request.uri().path() == "/toolmesh.v1.Dispatcher/ListTools" {
                    counted.fetch_add(1, SeqCst);
                }
                request
            },
        ))
        .add_service(dispatcher.grpc_service());
    tokio::spawn(
        counting.serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
    );
    let relay = Relay::to(dispatcher_addr).await;
    let mut command = tokio::process::Command::new(toolmesh_testkit::toolmesh_bin());
    command.args(["mcp", "--server", &relay.addr.to_string(), "--token", AGENT]);
    let heard = ListChanges::default();
    let bridge = heard
        .clone()
        .serve_with_lifecycle(
            TokioChildProcess::new(command).unwrap(),
            ClientLifecycleMode::Initialize,
        )
        .await
        .unwrap();
    assert!(names(&bridge.list_all_tools().await.unwrap()).contains(&"echo".to_owned()));
    let listed = list_calls.load(SeqCst);
    assert!(listed > 0, "the client's own listing is counted");
    // The old bridge called ListTools every second.
    tokio::time::sleep(Duration::from_millis(3_500)).await;
    assert_eq!(list_calls.load(SeqCst), listed, "no ListTools unasked");

    mesh.disable("wipe").await;
    toolmesh_testkit::until(
        "tools/list_changed over stdio",
        Duration::from_secs(10),
        || heard.0.load(SeqCst) > 0,
    )
    .await;
    assert_eq!(list_calls.load(SeqCst), listed, "heard without ListTools");

    relay.set_open(false);
    mesh.disable("echo").await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before = heard.0.load(SeqCst);
    relay.set_open(true);
    toolmesh_testkit::until(
        "tools/list_changed after the stream came back",
        Duration::from_secs(10),
        || heard.0.load(SeqCst) > before,
    )
    .await;
    assert_eq!(
        list_calls.load(SeqCst),
        listed,
        "resynced without ListTools"
    );
    assert!(!names(&bridge.list_all_tools().await.unwrap()).contains(&"echo".to_owned()));
    bridge.cancel().await.unwrap();
    mesh.node.stop(Duration::from_secs(1)).await.unwrap();
}
