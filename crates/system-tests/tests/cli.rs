//! The CLI as a newcomer meets it: every command `toolmesh up` prints runs as printed, client flags before or after the subcommand, `toolmesh health` from one snapshot, arguments from a file or stdin, `--json` everywhere, `tools --watch`, shell completions.

use std::collections::HashMap;
use std::process::{Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use toolmesh::pb::{RegisterRequest, ToolSpec};
use toolmesh_system_tests::*;

/// `toolmesh ARGS…` run to the end, with `stdin` as its input, without
/// the client environment.
fn toolmesh(args: &[&str], stdin: &str) -> Output {
    let mut command = Command::new(toolmesh_bin());
    command.args(args);
    run_with_stdin(command, stdin)
}

fn run_with_stdin(mut command: Command, stdin: &str) -> Output {
    for var in CLIENT_ENV {
        command.env_remove(var);
    }
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start a command");
    let mut input = child.stdin.take().expect("stdin is piped");
    let text = stdin.to_owned();
    let writer = std::thread::spawn(move || {
        use std::io::Write;
        // The command may exit without reading: a broken pipe is fine.
        let _ = input.write_all(text.as_bytes());
    });
    let output = child.wait_with_output().expect("wait for the command");
    writer.join().expect("the stdin writer");
    output
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Fails with the command's output unless it exited with `code`.
fn assert_exit(output: &Output, code: i32, what: &str) {
    assert_eq!(
        output.status.code(),
        Some(code),
        "{what}\nstdout: {}\nstderr: {}",
        text(&output.stdout),
        text(&output.stderr)
    );
}

/// Stdout parsed as JSON, failing with the output when it is not.
fn json_of(output: &Output, what: &str) -> serde_json::Value {
    serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
        panic!(
            "{what}: stdout is not JSON ({e})\nstdout: {}\nstderr: {}",
            text(&output.stdout),
            text(&output.stderr)
        )
    })
}

/// A loopback port, not the default 7070, whose next two ports are free
/// too (`up` serves MCP on --listen + 1 and its admin page on + 2).
fn free_port_triple() -> u16 {
    for _ in 0..100 {
        let first = std::net::TcpListener::bind("127.0.0.1:0").expect("bind loopback");
        let port = first.local_addr().expect("local address").port();
        let free = |by: u16| {
            port.checked_add(by)
                .is_some_and(|p| std::net::TcpListener::bind(("127.0.0.1", p)).is_ok())
        };
        if port != 7070 && free(1) && free(2) {
            return port;
        }
    }
    panic!("no three consecutive free ports on 127.0.0.1");
}

/// `toolmesh up --listen 127.0.0.1:PORT EXTRA…` until it prints its
/// commands; the lines under "Try, in another terminal:".
fn up_and_its_commands(dir: &TempDir, extra: &[&str]) -> (Proc, String, Vec<String>) {
    let addr = format!("127.0.0.1:{}", free_port_triple());
    let mut args = vec!["--listen", addr.as_str()];
    args.extend_from_slice(extra);
    let (up, printed) = up(dir, &args);
    let start = printed
        .iter()
        .position(|l| l.starts_with("Try, in another terminal:"))
        .unwrap_or_else(|| panic!("no \"Try\" lines in: {printed:#?}"));
    let lines: Vec<String> = printed[start + 1..]
        .iter()
        .map(|l| l.trim().to_owned())
        .take_while(|l| !l.is_empty())
        .collect();
    assert!(lines.len() >= 8, "too few commands: {lines:#?}");
    (up, addr, lines)
}

/// Runs each printed line as a POSIX shell would (`sh -c LINE`, in the
/// directory `up` ran in) and asserts it exits 0; every line needs only
/// the toolmesh binary.
fn run_each_as_printed(lines: &[String]) {
    for line in lines {
        let mut shell = Command::new("sh");
        shell.args(["-c", line]);
        let output = run_with_stdin(shell, "");
        assert_exit(&output, 0, &format!("`{line}`, as `up` printed it"));
    }
}

/// Issue 15: on a port other than the default, every command `up` prints
/// works as printed (client flags before the subcommand), and they name
/// the server; the same flags after the subcommand mean the same.
#[tokio::test]
async fn up_prints_commands_that_work_as_printed() {
    let dir = temp_dir("cli-up");
    let (mut up, addr, lines) = up_and_its_commands(&dir, &[]);
    for line in &lines {
        assert!(
            line.contains(&format!(" --server {addr} ")),
            "names the server before the subcommand: {line}"
        );
    }
    assert!(lines.iter().any(|l| l.ends_with(" health")), "{lines:#?}");
    run_each_as_printed(&lines);

    let before = toolmesh(&["--server", &addr, "--json", "tools"], "");
    let after = toolmesh(&["tools", "--json", "--server", &addr], "");
    assert_exit(&before, 0, "flags before the subcommand");
    assert_exit(&after, 0, "flags after the subcommand");
    assert_eq!(json_of(&before, "tools"), json_of(&after, "tools"));

    up.signal(libc::SIGTERM);
    assert!(
        up.wait_exit(toolmesh_testkit::patient(Duration::from_secs(15)))
            .is_some_and(|s| s.success()),
        "up stops cleanly on SIGTERM"
    );
    // Its logs (and its executors') went to a file: no colour codes there.
    let log = std::fs::read_to_string(dir.join("up.log")).unwrap();
    assert!(log.contains(" INFO ") && !log.contains('\x1b'), "{log}");
}

/// The instances of `tool` in the snapshot of the server at `addr`.
fn instances_of(addr: &str, tool: &str) -> usize {
    let output = toolmesh(&["--server", addr, "--json", "snapshot"], "");
    assert_exit(&output, 0, "snapshot");
    let snapshot = json_of(&output, "snapshot");
    snapshot["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|t| t["spec"]["name"] == tool)
        .map(|t| t["instances"].as_array().map_or(0, Vec::len))
        .sum()
}

/// `--examples files` adds the file tools to the default three, and the
/// "another executor" line `up` prints starts a replica that registers
/// with the run's token beside the example `up` started.
#[tokio::test]
async fn up_adds_examples_and_takes_a_printed_replica() {
    let dir = temp_dir("cli-up-examples");
    let (_up, printed) = up(&dir, &["--listen", "127.0.0.1:0", "--examples", "files"]);
    let addr = banner_after(&printed, "registry + dispatcher")
        .split_whitespace()
        .next()
        .expect("an address")
        .to_owned();
    let output = toolmesh(&["--server", &addr, "--json", "tools"], "");
    assert_exit(&output, 0, "tools");
    let tools = json_of(&output, "tools");
    let names: Vec<&str> = tools["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| t["name"].as_str())
        .collect();
    for tool in ["search_kb", "get_user_info", "create_ticket", "read_file"] {
        assert!(names.contains(&tool), "{tool} listed: {names:?}");
    }

    let replica = banner_after(&printed, "another executor").replace("NAME", "knowledge");
    assert_eq!(instances_of(&addr, "search_kb"), 1, "before the replica");
    let mut shell = Command::new("sh");
    shell.args(["-c", &format!("exec env {replica}")]);
    let mut replica_proc = Proc::spawn("replica", shell);
    toolmesh_testkit::until(
        "the replica registered beside the knowledge example",
        Duration::from_secs(30),
        || instances_of(&addr, "search_kb") == 2,
    )
    .await;
    replica_proc.kill9();
}

/// `--no-default-examples` runs only the examples named, and with none
/// named says so and exits 64.
#[test]
fn up_without_examples_is_bad_usage() {
    let output = toolmesh(
        &["up", "--listen", "127.0.0.1:0", "--no-default-examples"],
        "",
    );
    assert_exit(&output, 64, "up with no example");
    assert!(
        text(&output.stderr).contains("--examples"),
        "says how to name some: {}",
        text(&output.stderr)
    );
}

/// With TLS, the printed commands carry the TLS files they need.
#[tokio::test]
async fn up_with_tls_prints_commands_that_work_as_printed() {
    let dir = temp_dir("cli-up-tls");
    let (ca, cert, key) = toolmesh_testkit::pki(&dir, "up");
    let files = [ca, cert, key].map(|p| p.display().to_string());
    let tls = [
        "--tls-ca",
        files[0].as_str(),
        "--tls-cert",
        files[1].as_str(),
        "--tls-key",
        files[2].as_str(),
    ];
    let (_up, _addr, lines) = up_and_its_commands(&dir, &tls);
    assert!(
        lines[0].contains(&format!("--tls-ca {}", files[0])),
        "{lines:#?}"
    );
    run_each_as_printed(&lines);
}

/// Requests a server was sent, by gRPC method path.
#[derive(Clone, Default)]
struct Requests(Arc<Mutex<HashMap<String, usize>>>);

impl Requests {
    fn note(&self, path: &str) {
        *self.0.lock().unwrap().entry(path.to_owned()).or_default() += 1;
    }
    fn of(&self, path: &str) -> usize {
        self.0.lock().unwrap().get(path).copied().unwrap_or(0)
    }
}

const CHECK: &str = "/grpc.health.v1.Health/Check";
const GET_SNAPSHOT: &str = "/toolmesh.v1.Registry/GetSnapshot";

/// A real registry holding `tools` tools (10 per executor; `tool_00000`
/// disabled, the rest exposed) and the real health service, behind a layer
/// that counts the requests they are sent.
async fn counted_registry(
    tools: usize,
) -> (String, Requests, tonic_health::server::HealthReporter) {
    let registry = toolmesh_registry::Registry::new(toolmesh_registry::RegistryConfig {
        watch_health: false,
        default_ttl: Duration::from_secs(300),
        ..Default::default()
    });
    for executor in 0..tools.div_ceil(10) {
        let specs = (executor * 10..(executor * 10 + 10).min(tools)).map(|i| ToolSpec {
            name: format!("tool_{i:05}"),
            version: "1.0.0".into(),
            description: "A tool.".into(),
            input_schema: r#"{"type":"object"}"#.into(),
            ..ToolSpec::default()
        });
        let answer = registry
            .register(
                RegisterRequest {
                    executor_id: format!("e-{executor}"),
                    service: "svc".into(),
                    endpoint: format!("127.0.0.1:{}", 10_000 + executor),
                    tools: specs.collect(),
                    ..RegisterRequest::default()
                },
                "",
            )
            .await
            .unwrap();
        assert!(answer.rejected.is_empty(), "{:?}", answer.rejected);
    }
    registry
        .set_disabled("tool_00000", Some("in this test".into()))
        .await
        .unwrap();
    let (reporter, health) = tonic_health::server::health_reporter();
    // What a dispatcher publishes for a tool it exposes.
    reporter
        .set_service_status(
            toolmesh_transport::tool_health_service("tool_00001"),
            tonic_health::ServingStatus::Serving,
        )
        .await;
    let requests = Requests::default();
    let counted = requests.clone();
    let router = tonic::transport::Server::builder()
        .layer(tower::util::MapRequestLayer::new(
            move |request: tonic::codegen::http::Request<tonic::body::Body>| {
                counted.note(request.uri().path());
                request
            },
        ))
        .add_service(health)
        .add_service(registry.grpc_service());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    tokio::spawn(
        router.serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
    );
    (addr, requests, reporter)
}

/// Issue 15: `toolmesh health` answers for 5,000 tools with two Checks (the
/// server's and its issuers') and one snapshot, not a Check per tool; `health TOOL` still
/// asks the tool's own grpc.health.v1 service.
#[tokio::test]
async fn health_of_every_tool_takes_one_snapshot() {
    let (addr, requests, _health) = counted_registry(5_000).await;

    let output = tokio::task::spawn_blocking({
        let addr = addr.clone();
        move || toolmesh(&["health", "--json", "--server", &addr], "")
    })
    .await
    .unwrap();
    assert_exit(&output, 0, "health");
    let value = json_of(&output, "health --json");
    assert_eq!(value["server"], "SERVING");
    let tools = value["tools"].as_array().expect("a tools array");
    assert_eq!(tools.len(), 5_000);
    assert_eq!(
        tools[0],
        serde_json::json!({"tool": "tool_00000", "status": "NOT_SERVING"})
    );
    assert_eq!(tools[1]["status"], "SERVING");
    assert_eq!(
        requests.of(CHECK),
        2,
        "two Checks in all (the server's and its issuers'), none per tool"
    );
    assert_eq!(requests.of(GET_SNAPSHOT), 1, "one snapshot");

    let output = tokio::task::spawn_blocking(move || {
        toolmesh(&["--server", &addr, "health", "tool_00001"], "")
    })
    .await
    .unwrap();
    assert_exit(&output, 0, "health TOOL");
    assert_eq!(requests.of(CHECK), 3, "one Check for the tool asked");
    assert_eq!(requests.of(GET_SNAPSHOT), 1);
}

/// Issue 15: `call NAME @FILE` and `call NAME -` send what the file or stdin
/// hold; a missing file, an empty one and bad JSON fail with exit 64 before
/// anything is sent, saying what to fix (for JSON: line and column).
#[tokio::test]
async fn call_reads_arguments_from_a_file_or_stdin() {
    let mesh = acceptance(&[], &[]).await;
    let addr = mesh.addr.as_str();
    let dir = temp_dir("cli-args");
    let file = dir.join("args.json");
    std::fs::write(&file, "{\n  \"message\": \"from a file\"\n}\n").unwrap();
    let at_file = format!("@{}", file.display());

    let output = toolmesh(&["--server", addr, "call", "acc_echo", &at_file], "");
    assert_exit(&output, 0, "call @FILE");
    assert!(text(&output.stdout).contains("from a file"));

    let output = toolmesh(
        &["--server", addr, "call", "acc_echo", "-"],
        r#"{"message": "from stdin"}"#,
    );
    assert_exit(&output, 0, "call -");
    assert!(text(&output.stdout).contains("from stdin"));

    let missing = dir.join("missing.json");
    let output = toolmesh(
        &[
            "--server",
            addr,
            "call",
            "acc_echo",
            &format!("@{}", missing.display()),
        ],
        "",
    );
    assert_exit(&output, 64, "a missing file");
    let stderr = text(&output.stderr);
    assert!(
        stderr.contains(&missing.display().to_string()) && stderr.contains("No such file"),
        "{stderr}"
    );

    let bad = dir.join("bad.json");
    std::fs::write(&bad, "{\n  \"message\": \"a\",\n}\n").unwrap();
    let output = toolmesh(
        &[
            "--server",
            addr,
            "call",
            "acc_echo",
            &format!("@{}", bad.display()),
        ],
        "",
    );
    assert_exit(&output, 64, "bad JSON in a file");
    let stderr = text(&output.stderr);
    assert!(
        stderr.contains("bad.json") && stderr.contains("line 3, column 1"),
        "{stderr}"
    );

    let output = toolmesh(&["--server", addr, "call", "acc_echo", "-"], "");
    assert_exit(&output, 64, "empty stdin");
    assert!(text(&output.stderr).contains("empty"));
}

/// Every client command prints JSON with `--json`, in the shape the README
/// gives (approve and deny print one approval, as `approvals` lists them).
#[tokio::test]
async fn every_client_command_prints_json() {
    let mesh = acceptance(&[], &[]).await;
    let addr = mesh.addr.as_str();
    let json = |args: &[&str]| {
        let mut all = vec!["--json", "--server", addr];
        all.extend_from_slice(args);
        let output = toolmesh(&all, "");
        assert_exit(&output, 0, &format!("{args:?}"));
        json_of(&output, &format!("{args:?}"))
    };
    assert_eq!(json(&["tools"])["tools"][0]["name"], "acc_charge");
    let call = json(&["call", "acc_echo", r#"{"message": "hi"}"#]);
    assert!(call["result"]["output"].as_str().unwrap().contains("hi"));
    assert!(call["result"]["error"].is_null());
    assert_eq!(json(&["health"])["server"], "SERVING");
    assert_eq!(
        json(&["health", "acc_echo"]),
        serde_json::json!({"tool": "acc_echo", "status": "SERVING"})
    );
    assert!(json(&["snapshot"])["version"].as_u64().unwrap() >= 1);
    assert_eq!(json(&["explain", "acc_echo"])["tool"], "acc_echo");
    assert!(json(&["approvals"]).is_array());
    let disabled = json(&["disable", "acc_panic", "--reason", "maintenance"]);
    assert_eq!(disabled["tool"], "acc_panic");
    assert_eq!(disabled["disabled"], true);
    assert_eq!(disabled["reason"], "maintenance");
    let enabled = json(&["enable", "acc_panic"]);
    assert_eq!(enabled["disabled"], false);
    assert!(
        enabled["snapshot_version"].as_u64().unwrap()
            > disabled["snapshot_version"].as_u64().unwrap()
    );
}

/// `toolmesh completions SHELL` prints a script naming the subcommands; a
/// client flag given to a command that does not use it is refused (exit 64).
#[test]
fn completions_and_misplaced_flags() {
    for shell in ["bash", "zsh", "fish"] {
        let output = toolmesh(&["completions", shell], "");
        assert_exit(&output, 0, shell);
        let script = text(&output.stdout);
        for word in ["tools", "call", "health", "completions"] {
            assert!(script.contains(word), "{shell}: {word} missing");
        }
    }
    let output = toolmesh(&["up", "--server", "127.0.0.1:7272"], "");
    assert_exit(&output, 64, "up --server");
    assert!(text(&output.stderr).contains("--listen"));
}

/// Exit codes as the README states them: bad usage is 64 whether clap or
/// toolmesh finds it, `--help` is 0, and a server whose address is taken
/// exits 64 saying so once.
#[tokio::test]
async fn usage_errors_exit_64() {
    let output = toolmesh(&["tools", "--no-such-flag"], "");
    assert_exit(&output, 64, "an unknown flag");
    assert!(text(&output.stderr).contains("--no-such-flag"));
    let output = toolmesh(&["call"], "");
    assert_exit(&output, 64, "a missing argument");
    assert_exit(&toolmesh(&["--help"], ""), 0, "--help");

    let mesh = acceptance(&[], &[]).await;
    let output = toolmesh(&["serve", "--listen", &mesh.addr], "");
    assert_exit(&output, 64, "an address in use");
    let said = text(&output.stderr);
    assert_eq!(said.matches("in use").count(), 1, "{said}");
    assert!(said.contains(&mesh.addr), "{said}");
}

/// A server or executor flag whose value is not what it must be (an
/// address, a number) stops the process before it starts anything: exit
/// 64, with the flag named.
#[test]
fn bad_flag_values_exit_64_naming_the_flag() {
    let cases: [(&[&str], &str); 13] = [
        (
            &[
                "dispatcher",
                "--registry",
                "127.0.0.1:1",
                "--listen",
                "nonsense",
            ],
            "--listen",
        ),
        (&["dispatcher", "--registry", "a b"], "--registry"),
        (&["registry", "--health-listen", "nope"], "--health-listen"),
        (&["serve", "--mcp-listen", "nope"], "--mcp-listen"),
        (
            &["serve", "--listen", "127.0.0.1:0", "--admin-listen", "nope"],
            "--admin-listen",
        ),
        (&["serve", "--grace-ms", "soon"], "--grace-ms"),
        (&["registry", "--store", "10.0.0.5:2379"], "--store"),
        (
            &["serve", "--data-dir", "/proc/toolmesh-state"],
            "--data-dir",
        ),
        (&["serve", "--otlp-endpoint", "nope"], "--otlp-endpoint"),
        (&["up", "--listen", "localhost"], "--listen"),
        (&["example", "knowledge", "--listen", "nope"], "--listen"),
        (&["example", "knowledge", "--registry", "a b"], "--registry"),
        (
            &["bridge", "mcp", "--health-listen", "nope", "--", "srv"],
            "--health-listen",
        ),
    ];
    for (args, flag) in cases {
        let output = toolmesh(args, "");
        assert_exit(&output, 64, &args.join(" "));
        let said = text(&output.stderr);
        assert!(said.contains(flag), "{args:?} does not name {flag}: {said}");
    }
}

/// A reader that hangs up (`toolmesh tools | head -1`) ends a client
/// command quietly: no panic, no error.
#[tokio::test]
async fn a_closed_pipe_ends_a_client_command_quietly() {
    let mesh = acceptance(&[], &[]).await;
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let output = Command::new(toolmesh_bin())
        .args(["--server", &mesh.addr, "tools", "--format", "mcp"])
        .stdout(writer)
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    let said = text(&output.stderr);
    assert!(
        !said.contains("panicked") && !said.contains("Broken pipe"),
        "{said}"
    );
    assert!(output.status.success(), "{:?}", output.status);
}

/// A client command pointed at a server that does not speak gRPC says so
/// and exits 69, as for an unreachable one: the MCP door's port (it
/// answered "grpc-status header missing, mapped from HTTP status code
/// 404", exit 1) and a plain HTTP/1 server (it died of SIGPIPE, exit 141,
/// saying nothing).
#[tokio::test]
async fn a_server_that_is_not_grpc_is_named() {
    let (serve, _) = serve(&["--mcp-listen", "127.0.0.1:0"]);
    let url = serve.wait_for_line("MCP listening on ", Duration::from_secs(30));
    let door = url
        .rsplit_once("http://")
        .and_then(|(_, rest)| rest.split_whitespace().next())
        .map(|rest| rest.trim_end_matches("/mcp").to_owned())
        .unwrap_or_else(|| panic!("no MCP address in {url:?}"));
    // An HTTP/1 server, as `python3 -m http.server` answers an HTTP/2 preface.
    let http1 = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let plain = http1.local_addr().unwrap().to_string();
    std::thread::spawn(move || {
        for stream in http1.incoming().flatten() {
            let mut stream = stream;
            let mut buf = [0u8; 1024];
            let _ = std::io::Read::read(&mut stream, &mut buf);
            let _ = std::io::Write::write_all(
                &mut stream,
                b"HTTP/1.0 400 Bad request\r\nContent-Length: 0\r\n\r\n",
            );
        }
    });
    for (server, answered) in [
        (door.as_str(), "it answered HTTP 404"),
        (
            plain.as_str(),
            "it answered HTTP/1.0 400 Bad request, not HTTP/2",
        ),
    ] {
        let output = toolmesh(&["--server", server, "tools"], "");
        assert_exit(&output, 69, server);
        let said = text(&output.stderr);
        assert!(
            said.contains(&format!("{server} is not a toolmesh gRPC server"))
                && said.contains(answered),
            "{said}"
        );
    }
}

/// A model reads at most ~100 characters of a bad value, with its size, on
/// every door: a 120 KB query (search_kb takes at most 500 characters)
/// sent by `call @FILE`, over gRPC and through the MCP door is answered in
/// a short message that says what to fix (it used to quote all of it).
#[tokio::test]
async fn a_huge_bad_value_is_quoted_briefly_on_every_door() {
    let dir = temp_dir("cli-huge-value");
    let (_up, printed) = up(&dir, &["--listen", "127.0.0.1:0"]);
    let first = |label: &str| {
        banner_after(&printed, label)
            .split_whitespace()
            .next()
            .unwrap()
            .to_owned()
    };
    let (addr, mcp_url) = (
        first("registry + dispatcher"),
        first("MCP (Streamable HTTP)"),
    );
    let query = "reset ".repeat(20_000);
    let arguments = serde_json::json!({ "query": query }).to_string();
    let file = dir.join("mid.json");
    std::fs::write(&file, &arguments).unwrap();
    let brief = |door: &str, text: &str| {
        assert!(
            text.contains("at /query: \"reset reset")
                && text.contains("(120,000 characters) is longer than 500 characters"),
            "{door}: {}",
            &text[..text.len().min(2_000)]
        );
        assert!(text.len() < 1_000, "{door}: {} bytes", text.len());
    };

    let output = toolmesh(
        &[
            "--server",
            &addr,
            "call",
            "search_kb",
            &format!("@{}", file.display()),
        ],
        "",
    );
    brief("call @FILE", &text(&output.stderr));

    let answer = invoke(&mut dispatcher(&addr), "search_kb", &arguments, None).await;
    brief("gRPC", &message(&answer));

    let mcp = mcp_url
        .trim_start_matches("http://")
        .trim_end_matches("/mcp");
    let body = serde_json::json!({
        "jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "search_kb", "arguments": {"query": query}},
    })
    .to_string();
    let headers = [
        ("Content-Type", "application/json"),
        ("Accept", "application/json, text/event-stream"),
    ];
    let (status, answer) = toolmesh_testkit::http(mcp, "POST", "/mcp", &headers, &body);
    assert_eq!(status, 200, "{answer}");
    let answer: serde_json::Value = serde_json::from_str(&answer).expect("a JSON-RPC answer");
    assert_eq!(answer["result"]["isError"], true, "{answer}");
    brief(
        "MCP",
        answer["result"]["content"][0]["text"]
            .as_str()
            .unwrap_or_default(),
    );
}

/// `toolmesh mcp` whose stdin closes before any MCP client spoke says
/// that stdin closed and how it is meant to run (it blamed the
/// dispatcher's connection: "toolmesh dispatcher: connection closed").
#[test]
fn mcp_with_stdin_closed_says_so() {
    let output = toolmesh(&["--server", "127.0.0.1:1", "mcp"], "");
    assert_exit(&output, 1, "mcp < /dev/null");
    let said = text(&output.stderr);
    assert!(
        said.contains("stdin closed before an MCP client sent `initialize`")
            && !said.contains("toolmesh dispatcher"),
        "{said}"
    );
}

/// `toolmesh tools --watch` prints the list, then each change of it as it
/// happens: with `--json` one object per message (the list until `synced`,
/// then a disabled tool under `removed` and the enabled one back under
/// `tools`); plain, the table and then a `-` and a `+` line.
#[tokio::test]
async fn tools_watch_prints_changes_as_they_come() {
    use tokio::io::{AsyncBufReadExt, BufReader};
    let mesh = acceptance(&[], &[]).await;
    let watch = |json: bool| {
        let mut args = vec!["--server", mesh.addr.as_str(), "tools", "--watch"];
        if json {
            args.push("--json");
        }
        let mut child = tokio::process::Command::new(toolmesh_bin())
            .args(&args)
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let lines = BufReader::new(child.stdout.take().unwrap()).lines();
        (child, lines)
    };
    let (_json_child, mut json_lines) = watch(true);
    let (_plain_child, mut plain_lines) = watch(false);
    let mut listed = Vec::new();
    loop {
        let message: serde_json::Value =
            serde_json::from_str(&next(&mut json_lines).await).unwrap();
        listed.extend(
            message["tools"]
                .as_array()
                .unwrap()
                .iter()
                .map(|t| t["name"].clone()),
        );
        if message["synced"] == true {
            break;
        }
    }
    assert!(
        listed.contains(&serde_json::json!("acc_panic")),
        "{listed:?}"
    );
    loop {
        if next(&mut plain_lines).await.contains("tools, snapshot") {
            break; // the table's last line
        }
    }
    let addr = mesh.addr.as_str();
    assert_exit(
        &toolmesh(
            &["--server", addr, "disable", "acc_panic", "--reason", "r"],
            "",
        ),
        0,
        "disable",
    );
    let removed: serde_json::Value = serde_json::from_str(&next(&mut json_lines).await).unwrap();
    assert_eq!(
        removed["removed"],
        serde_json::json!(["acc_panic"]),
        "{removed}"
    );
    assert_eq!(removed["tools"], serde_json::json!([]));
    assert!(
        next(&mut plain_lines)
            .await
            .starts_with("- acc_panic (snapshot ")
    );
    assert_exit(
        &toolmesh(&["--server", addr, "enable", "acc_panic"], ""),
        0,
        "enable",
    );
    let back: serde_json::Value = serde_json::from_str(&next(&mut json_lines).await).unwrap();
    assert_eq!(back["tools"][0]["name"], "acc_panic", "{back}");
    assert!(back["synced"] == true && back["removed"] == serde_json::json!([]));
    assert!(next(&mut plain_lines).await.starts_with("+ acc_panic@"));
}

/// The next line a watching `toolmesh` prints, within a patient limit.
async fn next(
    lines: &mut tokio::io::Lines<tokio::io::BufReader<tokio::process::ChildStdout>>,
) -> String {
    tokio::time::timeout(
        toolmesh_testkit::patient(Duration::from_secs(10)),
        lines.next_line(),
    )
    .await
    .expect("a line in time")
    .unwrap()
    .expect("a line")
}
