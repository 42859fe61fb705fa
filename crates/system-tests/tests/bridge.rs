//! `toolmesh bridge mcp` against MCP servers no one here wrote, every part
//! a real process: the reference `server-everything` and
//! `server-filesystem` (npm, pinned by scripts/prepare/npm-mcp.sh) over
//! stdio, and a server written with the official Python SDK
//! (tests/python/mcp_server.py) over stdio and Streamable HTTP. Their tools
//! are listed and called through the dispatcher (gRPC) and through the MCP
//! door with the official Python client (tests/python/bridge_client.py);
//! errors, progress, cancellation, `tools/list_changed`, a server dying
//! mid-call, approvals, hidden tools and credentials are each exercised.

use std::path::Path;
use std::process::Command;
use std::time::Duration;
use toolmesh::pb::{
    ApproveRequest, ErrorCode, InvokeRequest, ListToolsRequest, RiskLevel, ToolFormat, ToolSpec,
    governance_client::GovernanceClient, invoke_event,
};
use toolmesh_system_tests::*;
use toolmesh_testkit::pki;

/// Generous: a Node or Python server takes a moment to start on a loaded box.
const READY: Duration = Duration::from_secs(30);

/// `toolmesh serve` (development policy) with its MCP door.
struct Mesh {
    _serve: Proc,
    addr: String,
    mcp_url: String,
}

impl Mesh {
    fn start() -> Mesh {
        let (serve, addr, mcp_url) = serve_with_mcp_door(&[]);
        Mesh {
            _serve: serve,
            addr,
            mcp_url,
        }
    }

    fn client(
        &self,
    ) -> toolmesh::pb::dispatcher_client::DispatcherClient<tonic::transport::Channel> {
        dispatcher(&self.addr)
    }

    /// The native specs listed now, by name.
    async fn specs(&self) -> Vec<ToolSpec> {
        self.client()
            .list_tools(ListToolsRequest {
                format: ToolFormat::Native as i32,
                ..Default::default()
            })
            .await
            .expect("ListTools")
            .into_inner()
            .tools
    }

    /// Waits until `name` is not listed (its tools de-exposed).
    async fn until_unlisted(&self, name: &str) {
        let client = self.client();
        eventually(&format!("{name} no longer listed"), READY, || {
            let mut client = client.clone();
            async move {
                let listed = listed(&mut client).await?;
                (!listed.iter().any(|l| l == name)).then_some(())
            }
        })
        .await;
    }
}

/// `toolmesh bridge mcp --registry REGISTRY ARGS…` with `env` added,
/// started and listening.
fn bridge(registry: &str, args: &[&str], env: &[(&str, &str)]) -> Proc {
    let mut command = Command::new(toolmesh_bin());
    command
        .args(["bridge", "mcp", "--registry", registry])
        .args(args)
        .envs(env.iter().copied());
    let proc = Proc::spawn("bridge", command);
    proc.listen_addr();
    proc
}

/// The command of an npm MCP server scripts/prepare/npm-mcp.sh installed.
fn npm_server(var: &str) -> String {
    std::env::var(var).unwrap_or_else(|_| {
        panic!("{var} is not set: run the tests with scripts/test (scripts/prepare/npm-mcp.sh installs the pinned MCP servers)")
    })
}

fn python() -> String {
    test_python().display().to_string()
}

/// tests/python/mcp_server.py.
fn python_server() -> String {
    python_script("mcp_server.py").display().to_string()
}

/// The Python SDK server over HTTP on `port` (0: a free one), writing its
/// events to `events`; and the port it listens on.
fn python_http(port: u16, events: &Path) -> (Proc, u16) {
    python_listening("http", port, events, &[])
}

/// [`python_http`] over `scheme` (`http`, or `https` with the TLS_CERT and
/// TLS_KEY files `env` names).
fn python_listening(scheme: &str, port: u16, events: &Path, env: &[(&str, &Path)]) -> (Proc, u16) {
    let mut command = Command::new(test_python());
    command
        .arg(python_server())
        .args([scheme, &port.to_string()])
        .env("EVENTS", events)
        .envs(env.iter().copied());
    let proc = Proc::spawn("python mcp server", command);
    let addr = proc.listen_addr();
    let port = addr
        .rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no port in {addr}"));
    (proc, port)
}

/// The lines the Python server wrote to `events` so far.
fn events(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// Waits until the Python server wrote `line` to `events` `times` times.
async fn until_event(path: &Path, line: &str, times: usize) {
    let what = format!("{times}x {line:?} in {}", path.display());
    eventually(&what, READY, || {
        let seen = events(path).iter().filter(|l| l.starts_with(line)).count();
        std::future::ready((seen >= times).then_some(()))
    })
    .await
}

/// The error code of a response, as the enum.
fn output(response: &toolmesh::pb::InvokeResponse) -> String {
    response
        .result
        .as_ref()
        .map(|r| r.output.clone())
        .unwrap_or_default()
}

/// The reference `server-everything` over stdio: its tools listed with the
/// risk, idempotency and version its annotations and serverInfo give;
/// called through the dispatcher (text, structured data checked against its
/// output schema, arguments checked against its input schema, progress by
/// InvokeStream) and through the MCP door with the Python client.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reference_everything_server_over_stdio() {
    let mesh = Mesh::start();
    let everything = npm_server("TOOLMESH_TEST_MCP_EVERYTHING");
    let _bridge = bridge(
        &mesh.addr,
        &["--timeout-ms", "30000", "--", &everything],
        &[],
    );
    let mut client = mesh.client();
    let wanted = [
        "echo",
        "get-sum",
        "get-structured-content",
        "trigger-long-running-operation",
    ];
    until_listed(&mut client, &wanted, READY).await;

    let specs = mesh.specs().await;
    let spec = |name: &str| {
        specs
            .iter()
            .find(|s| s.name == name)
            .unwrap_or_else(|| panic!("{name} in {specs:?}"))
            .clone()
    };
    let echo = spec("echo");
    assert_eq!(
        (echo.version.as_str(), echo.risk),
        ("2.0.0", RiskLevel::Low as i32)
    );
    assert!(
        echo.idempotent && echo.read_only && echo.timeout_ms == 30_000,
        "{echo:?}"
    );
    let toggle = spec("toggle-simulated-logging");
    assert_eq!(
        toggle.risk,
        RiskLevel::Medium as i32,
        "no destructive hint, not read-only"
    );
    assert!(!toggle.idempotent);

    let sum = invoke(&mut client, "get-sum", r#"{"a": 2, "b": 3}"#, None).await;
    assert_eq!(
        output(&sum),
        "The sum of 2 and 3 is 5.",
        "{}",
        message(&sum)
    );
    let weather = invoke(
        &mut client,
        "get-structured-content",
        r#"{"location": "Chicago"}"#,
        None,
    )
    .await;
    assert_eq!(code(&weather), 0, "{}", message(&weather));
    let data: serde_json::Value =
        serde_json::from_str(&weather.result.as_ref().unwrap().data).expect("data is JSON");
    assert!(data["temperature"].is_number(), "{data}");
    let invalid = invoke(&mut client, "get-sum", r#"{"a": "two", "b": 3}"#, None).await;
    assert_eq!(
        error_code(&invalid),
        ErrorCode::InvalidArguments,
        "{}",
        message(&invalid)
    );
    assert!(message(&invalid).contains("/a"), "{}", message(&invalid));

    let streamed = stream(
        &mut client,
        "trigger-long-running-operation",
        r#"{"duration": 1, "steps": 3}"#,
        None,
    )
    .await;
    let reports: Vec<&str> = streamed
        .progress
        .iter()
        .map(|p| p.split_whitespace().next().unwrap_or_default())
        .collect();
    assert_eq!(reports, ["1/3", "2/3", "3/3"], "{streamed:?}");
    let done = streamed.done.expect("a response");
    assert_eq!(code(&done), 0, "{}", message(&done));
    assert!(output(&done).contains("Steps: 3"), "{}", output(&done));

    python_door(
        "everything",
        &mesh.mcp_url,
        &[],
        &["listed", "call", "structured content", "progress"],
    );
}

/// Content that is not text passes through unchanged: server-everything's
/// image, resource links, embedded resources (text and blob) and annotated
/// blocks reach a gRPC caller as typed parts (the image's PNG bytes, each
/// link's URI and name), with `output` describing each in a line, and reach
/// an MCP client through the door block for block as the server itself
/// answers them (the official Python client compares both).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn content_blocks_pass_through_unchanged() {
    use toolmesh::pb::content_part::Part;
    let mesh = Mesh::start();
    let everything = npm_server("TOOLMESH_TEST_MCP_EVERYTHING");
    let _bridge = bridge(&mesh.addr, &["--", &everything], &[]);
    let mut client = mesh.client();
    until_listed(
        &mut client,
        &[
            "get-tiny-image",
            "get-resource-links",
            "get-resource-reference",
        ],
        READY,
    )
    .await;

    let image = invoke(&mut client, "get-tiny-image", "{}", None).await;
    assert_eq!(code(&image), 0, "{}", message(&image));
    let result = image.result.unwrap();
    let kinds: Vec<&str> = result
        .parts
        .iter()
        .map(|p| match &p.part {
            Some(Part::Text(_)) => "text",
            Some(Part::Image(_)) => "image",
            _ => "other",
        })
        .collect();
    assert_eq!(kinds, ["text", "image", "text"], "{:?}", result.parts);
    let Some(Part::Image(png)) = &result.parts[1].part else {
        unreachable!()
    };
    assert_eq!(png.mime_type, "image/png");
    assert!(
        png.data.starts_with(b"\x89PNG\r\n\x1a\n"),
        "PNG bytes, not base64"
    );
    assert_eq!(
        result.output,
        format!(
            "Here's the image you requested:\n[image image/png, {} bytes]\nThe image above is the MCP logo.",
            png.data.len()
        )
    );

    let links = invoke(&mut client, "get-resource-links", r#"{"count": 2}"#, None).await;
    let result = links.result.unwrap();
    let links: Vec<(String, String)> = result
        .parts
        .iter()
        .filter_map(|p| match &p.part {
            Some(Part::ResourceLink(link)) => Some((link.uri.clone(), link.name.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(links.len(), 2, "{:?}", result.parts);
    assert!(
        links.iter().all(|(uri, _)| uri.starts_with("demo://")),
        "{links:?}"
    );
    assert!(
        result.output.contains("[resource link demo://"),
        "{}",
        result.output
    );

    python_door(
        "content",
        &mesh.mcp_url,
        &[("EVERYTHING", &everything)],
        &[
            "content get-tiny-image",
            "content get-resource-links",
            "content get-resource-reference",
            "content get-annotated-message",
        ],
    );
}

/// The reference `server-filesystem` over stdio on a temporary directory:
/// a read answers the file's text, a missing file is a TOOL_ERROR with the
/// server's own message, and `write_file` (destructiveHint) is HIGH risk:
/// it needs an approval, and runs once granted. The same through the MCP
/// door.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reference_filesystem_server_over_stdio() {
    let dir = temp_dir("bridge-filesystem");
    let root_dir = std::fs::canonicalize(dir.path()).unwrap();
    std::fs::write(root_dir.join("hello.txt"), "hello from disk").unwrap();
    let root_text = root_dir.display().to_string();
    let mesh = Mesh::start();
    let filesystem = npm_server("TOOLMESH_TEST_MCP_FILESYSTEM");
    let _bridge = bridge(&mesh.addr, &["--", &filesystem, &root_text], &[]);
    let mut client = mesh.client();
    until_listed(
        &mut client,
        &["read_text_file", "write_file", "list_directory"],
        READY,
    )
    .await;
    let write_spec = mesh
        .specs()
        .await
        .into_iter()
        .find(|s| s.name == "write_file")
        .unwrap();
    assert_eq!(
        write_spec.risk,
        RiskLevel::High as i32,
        "destructiveHint: true"
    );

    let path = |name: &str| root_dir.join(name).display().to_string();
    let args = |name: &str| serde_json::json!({"path": path(name)}).to_string();
    let read = invoke(&mut client, "read_text_file", &args("hello.txt"), None).await;
    assert_eq!(code(&read), 0, "{}", message(&read));
    assert!(
        output(&read).contains("hello from disk"),
        "{}",
        output(&read)
    );
    let missing = invoke(&mut client, "read_text_file", &args("nope.txt"), None).await;
    assert_eq!(
        error_code(&missing),
        ErrorCode::ToolError,
        "{}",
        message(&missing)
    );
    assert!(
        message(&missing).contains("ENOENT"),
        "{}",
        message(&missing)
    );

    let write = serde_json::json!({"path": path("new.txt"), "content": "written through toolmesh"})
        .to_string();
    let request = |approval: &str| InvokeRequest {
        tool: "write_file".into(),
        arguments: write.clone(),
        approval_id: approval.to_owned(),
        ..Default::default()
    };
    let asked = invoke_with_token(&mut client, request(""), None).await;
    assert_eq!(
        error_code(&asked),
        ErrorCode::ApprovalRequired,
        "{}",
        message(&asked)
    );
    assert!(
        !root_dir.join("new.txt").exists(),
        "nothing written before the approval"
    );
    let id = asked.result.unwrap().error.unwrap().approval_id;
    GovernanceClient::new(
        toolmesh_transport::channel(&mesh.addr, &toolmesh_transport::Tls::none()).unwrap(),
    )
    .approve(with_token(
        ApproveRequest { id: id.clone() },
        Some("dev-approver"),
    ))
    .await
    .expect("approve");
    let written = invoke_with_token(&mut client, request(&id), None).await;
    assert_eq!(code(&written), 0, "{}", message(&written));
    assert_eq!(
        std::fs::read_to_string(root_dir.join("new.txt")).unwrap(),
        "written through toolmesh"
    );

    python_door(
        "filesystem",
        &mesh.mcp_url,
        &[("DIR", &root_text)],
        &["call", "tool error", "approval"],
    );
}

/// A Python SDK server over Streamable HTTP: a tool `--tools` leaves out is
/// never listed nor callable; the server sees the bridge's own credentials
/// (`--bearer-env`, `--header`), never the agent's token; its progress
/// reaches InvokeStream in order; a tool error,
/// an approval and a cancellation (deadline passed: `notifications/cancelled`
/// reaches the server) pass through; a tool added at runtime joins after
/// `tools/list_changed` (seen through the MCP door); and when the server
/// dies mid-call the call is EXECUTOR_FAILED, its tools leave the listing
/// and the bridge's health is NOT_SERVING until the server is back on its
/// port.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_sdk_server_over_streamable_http() {
    let dir = temp_dir("bridge-python-http");
    let events_file = dir.join("events");
    let (mut server, port) = python_http(0, &events_file);
    let url = format!("http://127.0.0.1:{port}/mcp");
    let mesh = Mesh::start();
    let exposed = "greet,wipe,fail,whoami,slow,die,add_tool,added_*";
    let bridge_proc = bridge(
        &mesh.addr,
        &[
            "--url",
            &url,
            "--bearer-env",
            "PY_MCP_TOKEN",
            "--header",
            "X-Team: blue",
            "--tools",
            exposed,
        ],
        &[("PY_MCP_TOKEN", "bridge-secret")],
    );
    let bridge_addr = bridge_proc.listen_addr();
    let mut client = mesh.client();
    until_listed(&mut client, &["greet", "whoami", "slow", "die"], READY).await;

    // Hidden: never listed, unknown when called.
    assert!(
        !listed(&mut client)
            .await
            .unwrap()
            .contains(&"secret".to_owned())
    );
    let secret = invoke(&mut client, "secret", "{}", None).await;
    assert_eq!(
        error_code(&secret),
        ErrorCode::NotFound,
        "{}",
        message(&secret)
    );

    // The server sees the bridge's credentials, not the agent's.
    let whoami = InvokeRequest {
        tool: "whoami".into(),
        arguments: "{}".into(),
        ..Default::default()
    };
    let seen = invoke_with_token(&mut client, whoami, Some("dev-approver")).await;
    assert_eq!(code(&seen), 0, "{}", message(&seen));
    let seen: serde_json::Value = serde_json::from_str(&output(&seen)).unwrap();
    assert_eq!(
        seen["headers"]["authorization"], "Bearer bridge-secret",
        "{seen}"
    );
    assert_eq!(seen["headers"]["x-team"], "blue", "{seen}");
    assert!(!seen.to_string().contains("dev-approver"), "{seen}");

    // The server's notifications/progress (on the POST's SSE stream) reach
    // InvokeStream in order, as a stdio server's do.
    let streamed = stream(&mut client, "slow", r#"{"seconds": 0.3}"#, None).await;
    assert_eq!(
        streamed.progress,
        ["1/3 step 1 of 3", "2/3 step 2 of 3", "3/3 step 3 of 3"],
        "{streamed:?}"
    );
    assert_eq!(output(&streamed.done.unwrap()), "slept 0.3");

    let failed = invoke(&mut client, "fail", r#"{"why": "because"}"#, None).await;
    assert_eq!(error_code(&failed), ErrorCode::ToolError);
    assert!(
        message(&failed).contains("failed on purpose: because"),
        "{}",
        message(&failed)
    );
    let wipe = invoke(&mut client, "wipe", r#"{"target": "prod"}"#, None).await;
    assert_eq!(
        error_code(&wipe),
        ErrorCode::ApprovalRequired,
        "{}",
        message(&wipe)
    );

    // The caller's deadline passes: the server is told to stop.
    let slow = try_invoke(
        &mut client,
        "slow",
        r#"{"seconds": 60}"#,
        Some(Duration::from_secs(5)),
    )
    .await;
    match &slow {
        Ok(response) => assert_eq!(error_code(response), ErrorCode::DeadlineExceeded),
        Err(status) => assert_eq!(status.code(), tonic::Code::DeadlineExceeded),
    }
    until_event(&events_file, "slow cancelled", 1).await;

    // A tool added at runtime, through the MCP door.
    python_door("python", &mesh.mcp_url, &[], &["hidden", "list_changed"]);
    until_listed(&mut client, &["added_by_door"], READY).await;

    // Dies mid-call: the call fails, the tools leave, health says so.
    let died = invoke(&mut client, "die", "{}", None).await;
    assert_eq!(
        error_code(&died),
        ErrorCode::ExecutorFailed,
        "{}",
        message(&died)
    );
    assert!(
        message(&died).contains("went away while running die"),
        "{}",
        message(&died)
    );
    mesh.until_unlisted("greet").await;
    assert_eq!(health_status(&bridge_addr, "").await, 2, "NOT_SERVING");
    server.wait_exit(READY);

    // Back on its port: the bridge reconnects and the tools return.
    let (_server, _) = python_http(port, &events_file);
    until_listed(&mut client, &["greet"], READY).await;
    let greeted = invoke(&mut client, "greet", r#"{"name": "again"}"#, None).await;
    assert_eq!(output(&greeted), "hello, again", "{}", message(&greeted));
    assert_eq!(health_status(&bridge_addr, "").await, 1, "SERVING");
}

/// An MCP server over HTTPS with a private CA: the bridge started without
/// `--url-ca` refuses its certificate, saying so, and exits UNAVAILABLE;
/// with `--url-ca` it bridges the tools, the bridge's credentials passing
/// over TLS, and a call goes through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_sdk_server_over_https() {
    let dir = temp_dir("bridge-python-https");
    let (ca, cert, key) = pki(&dir, "upstream");
    let events_file = dir.join("events");
    let (_server, port) = python_listening(
        "https",
        0,
        &events_file,
        &[("TLS_CERT", &cert), ("TLS_KEY", &key)],
    );
    let url = format!("https://localhost:{port}/mcp");
    let mesh = Mesh::start();

    let untrusted = Command::new(toolmesh_bin())
        .args(["bridge", "mcp", "--registry", &mesh.addr, "--url", &url])
        .output()
        .expect("run the bridge");
    let stderr = String::from_utf8_lossy(&untrusted.stderr);
    assert_eq!(untrusted.status.code(), Some(69), "{stderr}");
    let said = stderr
        .lines()
        .find(|line| line.starts_with("error:"))
        .unwrap_or_else(|| panic!("no error line in {stderr}"));
    assert!(
        said.contains(&url)
            && said.contains("invalid peer certificate")
            && said.contains("--url-ca"),
        "{said}"
    );

    let ca = ca.display().to_string();
    let _bridge = bridge(
        &mesh.addr,
        &[
            "--url",
            &url,
            "--url-ca",
            &ca,
            "--bearer-env",
            "PY_MCP_TOKEN",
            "--tools",
            "greet,whoami",
        ],
        &[("PY_MCP_TOKEN", "bridge-secret")],
    );
    let mut client = mesh.client();
    until_listed(&mut client, &["greet", "whoami"], READY).await;
    let greeted = invoke(&mut client, "greet", r#"{"name": "tls"}"#, None).await;
    assert_eq!(output(&greeted), "hello, tls", "{}", message(&greeted));
    let seen = invoke(&mut client, "whoami", "{}", None).await;
    let seen: serde_json::Value = serde_json::from_str(&output(&seen)).unwrap();
    assert_eq!(
        seen["headers"]["authorization"], "Bearer bridge-secret",
        "{seen}"
    );
}

/// An MCP server over HTTPS that requires a client certificate: the bridge
/// without one is refused in the handshake, exits UNAVAILABLE and says to
/// give `--url-cert` and `--url-key`; with the certificate its CA issued
/// it bridges the tools and a call goes through; a certificate without its
/// key is a usage error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_sdk_server_over_https_with_a_client_certificate() {
    let dir = temp_dir("bridge-python-mtls");
    let (ca, cert, key) = pki(&dir, "upstream");
    let (client_ca, client_cert, client_key) = pki(&dir, "bridge");
    let events_file = dir.join("events");
    let (_server, port) = python_listening(
        "https",
        0,
        &events_file,
        &[
            ("TLS_CERT", &cert),
            ("TLS_KEY", &key),
            ("TLS_CLIENT_CA", &client_ca),
        ],
    );
    let url = format!("https://localhost:{port}/mcp");
    let mesh = Mesh::start();
    let ca = ca.display().to_string();
    let (client_cert, client_key) = (
        client_cert.display().to_string(),
        client_key.display().to_string(),
    );
    let run = |extra: &[&str]| {
        Command::new(toolmesh_bin())
            .args(["bridge", "mcp", "--registry", &mesh.addr, "--url", &url])
            .args(["--url-ca", &ca])
            .args(extra)
            .output()
            .expect("run the bridge")
    };

    let refused = run(&[]);
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(69), "{stderr}");
    let said = stderr
        .lines()
        .find(|line| line.starts_with("error:"))
        .unwrap_or_else(|| panic!("no error line in {stderr}"));
    assert!(
        said.contains(&url) && said.contains("--url-cert") && said.contains("--url-key"),
        "{said}"
    );

    let half = run(&["--url-cert", &client_cert]);
    let stderr = String::from_utf8_lossy(&half.stderr);
    assert!(!half.status.success(), "{stderr}");
    assert!(stderr.contains("--url-key"), "{stderr}");

    let _bridge = bridge(
        &mesh.addr,
        &[
            "--url",
            &url,
            "--url-ca",
            &ca,
            "--url-cert",
            &client_cert,
            "--url-key",
            &client_key,
            "--tools",
            "greet",
        ],
        &[],
    );
    let mut client = mesh.client();
    until_listed(&mut client, &["greet"], READY).await;
    let greeted = invoke(&mut client, "greet", r#"{"name": "mtls"}"#, None).await;
    assert_eq!(output(&greeted), "hello, mtls", "{}", message(&greeted));
}

/// An upstream that speaks only MCP 2026-07-28 (it refuses `initialize`):
/// the bridge opens with `server/discover` and never sends `initialize`,
/// lists and calls its tools, relays a call's progress, and a tool the
/// upstream adds at runtime joins the mesh once the upstream tells the
/// bridge's `subscriptions/listen` stream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_of_the_2026_07_28_revision_alone() {
    let dir = temp_dir("bridge-python-modern");
    let events_file = dir.join("events");
    let (_server, port) =
        python_listening("http", 0, &events_file, &[("MODERN_ONLY", Path::new("1"))]);
    let url = format!("http://127.0.0.1:{port}/mcp");
    let mesh = Mesh::start();
    let _bridge = bridge(
        &mesh.addr,
        &["--url", &url, "--tools", "greet,slow,add_tool,added_*"],
        &[],
    );
    let mut client = mesh.client();
    until_listed(&mut client, &["greet", "slow", "add_tool"], READY).await;

    let greeted = invoke(&mut client, "greet", r#"{"name": "2026"}"#, None).await;
    assert_eq!(output(&greeted), "hello, 2026", "{}", message(&greeted));
    let streamed = stream(&mut client, "slow", r#"{"seconds": 0.3}"#, None).await;
    assert_eq!(
        streamed.progress,
        ["1/3 step 1 of 3", "2/3 step 2 of 3", "3/3 step 3 of 3"],
        "{streamed:?}"
    );

    let added = invoke(&mut client, "add_tool", r#"{"name": "added_later"}"#, None).await;
    assert_eq!(output(&added), "added added_later", "{}", message(&added));
    until_listed(&mut client, &["added_later"], READY).await;
    let echoed = invoke(&mut client, "added_later", r#"{"text": "hi"}"#, None).await;
    assert_eq!(output(&echoed), "added_later: hi", "{}", message(&echoed));
    assert!(
        !events(&events_file)
            .iter()
            .any(|e| e == "refused initialize"),
        "the bridge sent initialize: {:?}",
        events(&events_file)
    );
}

/// A Python SDK server over stdio that lists its tools two per page: every
/// page is listed; calls in flight together each get their own answer;
/// progress arrives by InvokeStream in order; a caller that
/// goes away mid-call gets the server told (`notifications/cancelled`); a
/// JSON-RPC error is EXECUTOR_FAILED with the server's code and text; the
/// child never sees the bridge's TOOLMESH_* environment; and when it dies
/// mid-call the call is EXECUTOR_FAILED and the bridge starts it again,
/// its tools callable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_sdk_server_over_stdio() {
    let dir = temp_dir("bridge-python-stdio");
    let events_file = dir.join("events");
    let events_text = events_file.display().to_string();
    let mesh = Mesh::start();
    let (python, script) = (python(), python_server());
    let _bridge = bridge(
        &mesh.addr,
        &["--", &python, &script, "stdio"],
        &[
            ("EVENTS", &events_text),
            ("PAGE_SIZE", "2"),
            ("TOOLMESH_BRIDGE_TEST_MARK", "must-not-reach-the-upstream"),
        ],
    );
    let mut client = mesh.client();
    let every = [
        "add_tool", "broken", "die", "fail", "greet", "secret", "slow", "whoami", "wipe",
    ];
    until_listed(&mut client, &every, READY).await;

    let broken = invoke(&mut client, "broken", "{}", None).await;
    assert_eq!(
        error_code(&broken),
        ErrorCode::ExecutorFailed,
        "{}",
        message(&broken)
    );
    assert!(
        message(&broken).contains("JSON-RPC error -32603: internal trouble"),
        "{}",
        message(&broken)
    );

    let seen = invoke(&mut client, "whoami", "{}", None).await;
    let seen: serde_json::Value = serde_json::from_str(&output(&seen)).unwrap();
    assert_eq!(
        seen["env"],
        serde_json::json!({}),
        "no TOOLMESH_* variable: {seen}"
    );
    let first_pid = seen["pid"].as_i64().unwrap();

    // Calls in flight at once, answered around a slow one still running,
    // each get their own answer.
    let slow = tokio::spawn({
        let mut client = client.clone();
        async move { invoke(&mut client, "slow", r#"{"seconds": 0.5}"#, None).await }
    });
    let mut greetings = tokio::task::JoinSet::new();
    for i in 0..40 {
        let mut client = client.clone();
        greetings.spawn(async move {
            let arguments = format!(r#"{{"name": "caller {i}"}}"#);
            (
                i,
                output(&invoke(&mut client, "greet", &arguments, None).await),
            )
        });
    }
    while let Some(greeting) = greetings.join_next().await {
        let (i, greeting) = greeting.expect("a greeting");
        assert_eq!(greeting, format!("hello, caller {i}"));
    }
    assert_eq!(output(&slow.await.expect("the slow call")), "slept 0.5");

    let streamed = stream(&mut client, "slow", r#"{"seconds": 0.3}"#, None).await;
    assert_eq!(
        streamed.progress,
        ["1/3 step 1 of 3", "2/3 step 2 of 3", "3/3 step 3 of 3"],
        "{streamed:?}"
    );
    assert_eq!(output(&streamed.done.unwrap()), "slept 0.3");

    // The caller reads one report and goes away.
    let request = InvokeRequest {
        tool: "slow".into(),
        arguments: r#"{"seconds": 60}"#.into(),
        ..Default::default()
    };
    let mut events = client
        .invoke_stream(request)
        .await
        .expect("InvokeStream")
        .into_inner();
    let first = events.message().await.expect("a stream").expect("an event");
    assert!(
        matches!(first.event, Some(invoke_event::Event::Progress(_))),
        "{first:?}"
    );
    drop(events);
    until_event(&events_file, "slow cancelled", 1).await;

    let died = invoke(&mut client, "die", "{}", None).await;
    assert_eq!(
        error_code(&died),
        ErrorCode::ExecutorFailed,
        "{}",
        message(&died)
    );
    until_event(&events_file, "started", 2).await;
    let again = eventually("greet answers after the restart", READY, || {
        let mut client = client.clone();
        async move {
            let answer = invoke(&mut client, "greet", r#"{"name": "back"}"#, None).await;
            (code(&answer) == 0).then_some(answer)
        }
    })
    .await;
    assert_eq!(output(&again), "hello, back");
    let seen = invoke(&mut client, "whoami", "{}", None).await;
    let seen: serde_json::Value = serde_json::from_str(&output(&seen)).unwrap();
    assert_ne!(seen["pid"].as_i64().unwrap(), first_pid, "a new process");
}

/// An upstream tool whose name the mesh cannot carry stops the bridge at
/// start (exit 64) with a message naming it and the `--rename` that fixes
/// it; with that `--rename` the tool joins under the new name and calls
/// reach it under its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_name_the_mesh_cannot_carry_needs_a_rename() {
    let mesh = Mesh::start();
    let (python, script) = (python(), python_server());
    let refused = Command::new(toolmesh_bin())
        .args([
            "bridge",
            "mcp",
            "--registry",
            &mesh.addr,
            "--",
            &python,
            &script,
            "stdio",
        ])
        .env("EXTRA_TOOL", "files.read")
        .output()
        .expect("run the bridge");
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(64), "{stderr}");
    assert!(
        stderr.contains("\"files.read\"") && stderr.contains("--rename 'files.read=files_read'"),
        "{stderr}"
    );

    let _bridge = bridge(
        &mesh.addr,
        &[
            "--rename",
            "files.read=files_read",
            "--",
            &python,
            &script,
            "stdio",
        ],
        &[("EXTRA_TOOL", "files.read")],
    );
    let mut client = mesh.client();
    until_listed(&mut client, &["files_read", "greet"], READY).await;
    let read = invoke(&mut client, "files_read", "{}", None).await;
    assert_eq!(output(&read), "extra", "{}", message(&read));
}

/// `toolmesh up --bridge 'NAME=-- COMMAND ARGS'` runs a bridge beside the
/// examples: the banner names it, its tools join the example's, and the
/// server it starts sees neither the run's registration token nor any
/// other TOOLMESH_* variable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn up_runs_bridges_beside_the_examples() {
    let dir = temp_dir("bridge-up");
    let bridge = format!("py=-- {} {} stdio", python(), python_server());
    let (_up, printed) = up(
        &dir,
        &[
            "--listen",
            "127.0.0.1:0",
            "--no-default-examples",
            "--examples",
            "accounts",
            "--bridge",
            &bridge,
        ],
    );
    let line = banner_after(&printed, "bridge py");
    assert!(
        line.starts_with("pid ") && line.contains("mcp_server.py stdio"),
        "{line}"
    );
    let addr = banner_after(&printed, "registry + dispatcher")
        .split_whitespace()
        .next()
        .unwrap()
        .to_owned();
    let mut client = dispatcher(&addr);
    until_listed(&mut client, &["greet", "whoami", "get_user_info"], READY).await;
    let greeted = invoke(&mut client, "greet", r#"{"name": "up"}"#, None).await;
    assert_eq!(output(&greeted), "hello, up", "{}", message(&greeted));
    let seen = invoke(&mut client, "whoami", "{}", None).await;
    let seen: serde_json::Value = serde_json::from_str(&output(&seen)).unwrap();
    assert_eq!(seen["env"], serde_json::json!({}), "{seen}");
}

/// README's "Bring an existing MCP server" runs as printed: `toolmesh up
/// --bridge …` (on a free port) and the call after it, then the bridge
/// beside a running mesh (the README's address and `$TOKEN` filled in with
/// this run's) and its call, each line by `sh` in a directory where `npx`
/// finds the pinned servers without the network; the versions it names are
/// the ones scripts/prepare/npm-mcp.sh installs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readme_bring_an_existing_mcp_server_runs_as_printed() {
    use toolmesh_system_tests::readme::{blocks_under, shell, text, toolmesh_on_path};
    let blocks = blocks_under("Bring an existing MCP server", "sh");
    assert_eq!(
        blocks.len(),
        2,
        "an `up --bridge` block and a `bridge mcp` block"
    );
    let pins = std::fs::read_to_string(repo_root().join("scripts/prepare/npm-mcp.sh")).unwrap();
    for block in &blocks {
        for word in block.text.split_whitespace() {
            let word = word.trim_matches(|c| c == '\'' || c == '"');
            if let Some(package) = word.strip_prefix("@modelcontextprotocol/") {
                assert!(
                    pins.contains(word) && package.contains('@'),
                    "{word} is not what scripts/prepare/npm-mcp.sh pins"
                );
            }
        }
    }

    let prefix = std::env::var("TOOLMESH_TEST_NPM_PREFIX").expect(
        "TOOLMESH_TEST_NPM_PREFIX is not set: run the tests with scripts/test (scripts/prepare/npm-mcp.sh)",
    );
    let dir = TempDir::new_in(Path::new(&prefix), "readme-bridge").unwrap();
    std::fs::write(dir.join("notes.txt"), "from the README test").unwrap();
    let path = toolmesh_on_path(dir.path());
    // npx resolves the pinned versions below the prefix; never fetches.
    let offline = ("npm_config_offline", "true");
    let long_running = |name: &str, line: &str, env: &[(&str, &str)]| {
        let mut command = Command::new("sh");
        command
            .args(["-c", &format!("exec {line}")])
            .current_dir(dir.path())
            .env("PATH", &path)
            .envs(env.iter().copied());
        for var in CLIENT_ENV {
            command.env_remove(var);
        }
        Proc::spawn(name, command)
    };
    let lines = |block: &toolmesh_system_tests::readme::Block| -> Vec<String> {
        block
            .text
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(str::to_owned)
            .collect()
    };

    let first = lines(&blocks[0]);
    assert!(first[0].starts_with("toolmesh up "), "{first:?}");
    let up = long_running(
        "up",
        &format!("{} --listen 127.0.0.1:0", first[0]),
        &[offline],
    );
    up.wait_for_line("Press ctrl-c to stop.", READY * 2);
    let printed = up.lines_read();
    let addr = banner_after(&printed, "registry + dispatcher")
        .split_whitespace()
        .next()
        .unwrap()
        .to_owned();
    let token = banner_after(&printed, "an MCP server")
        .split_whitespace()
        .find_map(|w| w.strip_prefix("TOOLMESH_TOKEN="))
        .unwrap_or_else(|| panic!("no token in {printed:#?}"))
        .to_owned();
    let env = [
        ("TOOLMESH_SERVER", addr.as_str()),
        ("TOKEN", token.as_str()),
        offline,
    ];
    let sum = shell(&first[1], dir.path(), &path, &env);
    assert!(
        sum.status.success(),
        "{}\n{}",
        text(&sum.stdout),
        text(&sum.stderr)
    );
    assert!(
        text(&sum.stdout).contains("sum of 2 and 3 is 5"),
        "{}",
        text(&sum.stdout)
    );

    let second = lines(&blocks[1]);
    let bridge_line = second[0].replace("127.0.0.1:7070", &addr);
    let bridge = long_running("readme bridge", &bridge_line, &env);
    bridge.listen_addr();
    let listed = eventually("the README's call answers", READY, || {
        let output = shell(&second[1], dir.path(), &path, &env);
        std::future::ready(output.status.success().then_some(output))
    })
    .await;
    assert!(
        text(&listed.stdout).contains("notes.txt"),
        "{}",
        text(&listed.stdout)
    );
}

/// `--owner TEAM --owner-tag` tags every bridged tool `owner:TEAM` beside
/// its owner, so a policy grant that names only that tag covers them: an
/// agent granted `tags = ["owner:py-team"]` lists and calls them. Without
/// `--owner` the flag is refused, naming what it needs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn owner_tag_lets_a_grant_cover_the_owners_tools() {
    let dir = temp_dir("bridge-owner-tag");
    let policy = dir.join("policy.toml");
    std::fs::write(
        &policy,
        acme_policy()
            .then(
                r#"
[[grants]]
name = "agents: whatever py-team answers for"
roles = ["agent"]
tags = ["owner:py-team"]
"#,
            )
            .build_toml(),
    )
    .unwrap();
    let (_serve, addr) = serve(&["--policy", policy.to_str().unwrap()]);
    let (python, script) = (python(), python_server());

    let refused = Command::new(toolmesh_bin())
        .args(["bridge", "mcp", "--registry", &addr, "--owner-tag", "--"])
        .args([&python, &script, "stdio"])
        .output()
        .expect("run the bridge");
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success(), "{stderr}");
    assert!(stderr.contains("--owner <OWNER>"), "{stderr}");

    let _bridge = bridge(
        &addr,
        &[
            "--token",
            "tok-exec",
            "--owner",
            "py-team",
            "--owner-tag",
            "--tag",
            "mcp",
            "--tools",
            "greet,whoami",
            "--",
            &python,
            &script,
            "stdio",
        ],
        &[],
    );
    let client = dispatcher(&addr);
    let agent_specs = || {
        let mut client = client.clone();
        async move {
            let request = ListToolsRequest {
                format: ToolFormat::Native as i32,
                ..Default::default()
            };
            client
                .list_tools(with_token(request, Some("tok-agent")))
                .await
                .ok()
                .map(|r| r.into_inner().tools)
        }
    };
    let specs = eventually("the agent lists py-team's tools", READY, || async {
        agent_specs().await.filter(|specs| specs.len() == 2)
    })
    .await;
    for spec in &specs {
        assert_eq!(spec.owner, "py-team", "{spec:?}");
        assert_eq!(spec.tags, ["mcp", "owner:py-team"], "{spec:?}");
    }
    let greet = InvokeRequest {
        tool: "greet".into(),
        arguments: r#"{"name": "team"}"#.into(),
        ..Default::default()
    };
    let greeted = invoke_with_token(&mut client.clone(), greet, Some("tok-agent")).await;
    assert_eq!(output(&greeted), "hello, team", "{}", message(&greeted));
}
