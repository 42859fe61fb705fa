//! The support library of the system tests (`tests/*.rs` of this package): the `toolmesh` binary as real OS processes on 127.0.0.1 port 0, gRPC clients, polling instead of sleeps, the README's snippets, the deployment files rendered and run on loopback, and an in-process mesh for the MCP door.

pub mod loopback_cluster;
pub mod mcp_mesh;
pub mod network_policy;
pub mod readme;
pub mod render;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;
use tonic::transport::Channel;
use toolmesh::pb::{
    CallContext, InvokeRequest, InvokeResponse, ListToolsRequest, ToolFormat,
    dispatcher_client::DispatcherClient,
};
pub use toolmesh_testkit::{
    TempDir, eventually, example_bin, fixture_bin, toolmesh_bin, with_token,
};

pub use toolmesh_procs::Proc;
pub use toolmesh_testkit::policy::{Caller, PolicyBuilder};

/// The tests' side of [`Proc`]: started from a `std` command with stdout
/// and stderr lines to wait on (stderr echoed with `TOOLMESH_TEST_LOGS`),
/// and waits that panic with a message instead of returning errors.
pub trait TestProc: Sized {
    /// Starts `toolmesh ARGS…`.
    fn toolmesh(name: &str, args: &[&str]) -> Self;
    /// Starts `command`.
    fn spawn(name: &str, command: Command) -> Self;
    /// Waits for a line of its output (stdout or logs) containing `needle`.
    fn wait_for_line(&self, needle: &str, timeout: Duration) -> String;
    /// The address from its "listening on ADDR" line.
    fn listen_addr(&self) -> String;
    /// SIGKILL and reap.
    fn kill9(&mut self);
}

/// The dispatcher token of every registry a test runs without `--policy`.
pub const DEV_DISPATCHER_TOKEN: &str = "tok-dev-dispatcher";

impl TestProc for Proc {
    fn toolmesh(name: &str, args: &[&str]) -> Proc {
        let mut command = Command::new(toolmesh_bin());
        command.args(args);
        // Registries run without --policy admit separate dispatchers with
        // this token (no anonymous caller is a dispatcher); a flag wins.
        command
            .env("TOOLMESH_DEV_DISPATCHER_TOKEN", DEV_DISPATCHER_TOKEN)
            .env("TOOLMESH_REGISTRY_TOKEN", DEV_DISPATCHER_TOKEN);
        Proc::spawn(name, command)
    }

    fn spawn(name: &str, command: Command) -> Proc {
        let echo = std::env::var_os("TOOLMESH_TEST_LOGS").is_some();
        toolmesh_procs::Spawn::new(name, command)
            .stdout_lines()
            .stderr(toolmesh_procs::Stderr::Lines { echo })
            .start()
            .unwrap_or_else(|e| panic!("{e}"))
    }

    fn wait_for_line(&self, needle: &str, timeout: Duration) -> String {
        self.wait_line(needle, timeout)
            .unwrap_or_else(|e| panic!("{}: {e}", self.name()))
    }

    fn listen_addr(&self) -> String {
        self.address(Duration::from_secs(30))
            .unwrap_or_else(|e| panic!("{}: {e}", self.name()))
    }

    fn kill9(&mut self) {
        self.kill_blocking();
    }
}

/// acme's agent: `tok-agent`, principal support-bot.
pub fn acme_agent() -> Caller {
    Caller::token("tok-agent", "support-bot")
        .tenant("acme")
        .roles(&["agent"])
}

/// A policy with no anonymous caller and the tenant acme's agent
/// (`tok-agent`), approver and admin (`tok-approver`, alice) and executor
/// (`tok-exec`, acceptance-team); grants, approvals and the rest follow.
pub fn acme_policy() -> PolicyBuilder {
    PolicyBuilder::new()
        .no_anonymous()
        .caller(acme_agent())
        .caller(
            Caller::token("tok-approver", "alice")
                .tenant("acme")
                .roles(&["approver", "admin"]),
        )
        .caller(
            Caller::token("tok-exec", "acceptance-team")
                .tenant("acme")
                .roles(&["executor"]),
        )
}

/// Anonymous callers are agents of tenant dev, `tok-orders` is the
/// executor orders-team, and everyone may use every tool: the policy of the
/// Python executors' tests.
pub fn orders_team_policy() -> String {
    PolicyBuilder::new()
        .anonymous("anonymous", "dev", &["agent"])
        .caller(Caller::token("tok-orders", "orders-team").roles(&["executor"]))
        .grant("everyone: every tool", &[], &["*"])
        .build_toml()
}

/// The environment variables that would stand in for client flags: what
/// `up` prints must work without them.
pub const CLIENT_ENV: [&str; 6] = [
    "TOOLMESH_SERVER",
    "TOOLMESH_TOKEN",
    "TOOLMESH_TLS_CA",
    "TOOLMESH_TLS_CERT",
    "TOOLMESH_TLS_KEY",
    "TOOLMESH_TLS_CLIENT_CA",
];

/// `toolmesh up ARGS…` without the client environment, its logs in
/// `dir/up.log`, until it prints "Press ctrl-c to stop."; with what it
/// printed for people (stdout) by then.
pub fn up(dir: &TempDir, args: &[&str]) -> (Proc, Vec<String>) {
    let mut command = Command::new(toolmesh_bin());
    command.arg("up").args(args);
    for var in CLIENT_ENV {
        command.env_remove(var);
    }
    let up = toolmesh_procs::Spawn::new("up", command)
        .stdout_lines()
        .stderr(toolmesh_procs::Stderr::Log(dir.join("up.log")))
        .start()
        .unwrap_or_else(|e| panic!("{e}"));
    up.wait_for_line("Press ctrl-c to stop.", Duration::from_secs(60));
    let printed = up.lines_read();
    (up, printed)
}

/// What `up` printed after `label` on the banner line that starts with it
/// (trimmed), e.g. the address after "registry + dispatcher".
pub fn banner_after<'a>(printed: &'a [String], label: &str) -> &'a str {
    printed
        .iter()
        .find_map(|line| line.trim_start().strip_prefix(label))
        .map(str::trim)
        .unwrap_or_else(|| panic!("no banner line {label:?} in {printed:#?}"))
}

/// The `host:port` of a process' "admin listening on http(s)://…" line.
pub fn admin_addr(proc: &Proc) -> String {
    let line = proc.wait_for_line("admin listening on http", Duration::from_secs(30));
    line.rsplit("://")
        .next()
        .unwrap_or_default()
        .trim()
        .to_owned()
}

/// The value of the sample `series` (name and labels, exactly as exposed)
/// in a Prometheus text page.
pub fn sample(metrics: &str, series: &str) -> Option<f64> {
    metrics.lines().find_map(|line| {
        let value = line.strip_prefix(series)?.strip_prefix(' ')?;
        value.split_whitespace().next()?.parse().ok()
    })
}

/// The path of a tool a `scripts/prepare/SCRIPT` installs and exports
/// in `var`; panics saying which script to run when it is missing.
pub fn prepared(var: &str, script: &str) -> std::path::PathBuf {
    let path = std::env::var_os(var)
        .filter(|p| !p.is_empty())
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| {
            panic!("{var} is not set: run the tests with scripts/test, whose scripts/prepare/{script} installs it and exports {var}")
        });
    assert!(
        path.exists(),
        "{var}={} does not exist: run scripts/prepare/{script} again",
        path.display()
    );
    path
}

/// `toolmesh serve` on a free port.
pub fn serve(extra: &[&str]) -> (Proc, String) {
    on_free_port("serve", &[], extra)
}

/// `toolmesh registry` on a free port.
pub fn registry(extra: &[&str]) -> (Proc, String) {
    on_free_port("registry", &[], extra)
}

/// `toolmesh dispatcher` on a free port following `registries` (one
/// address, or replicas comma-separated).
pub fn dispatcher_for(registries: &str, extra: &[&str]) -> (Proc, String) {
    on_free_port("dispatcher", &["--registry", registries], extra)
}

/// `toolmesh ROLE --listen 127.0.0.1:0 ARGS… EXTRA…` and where it listens.
fn on_free_port(role: &str, args: &[&str], extra: &[&str]) -> (Proc, String) {
    let mut all = vec![role, "--listen", "127.0.0.1:0"];
    all.extend_from_slice(args);
    all.extend_from_slice(extra);
    let proc = Proc::toolmesh(role, &all);
    let addr = proc.listen_addr();
    (proc, addr)
}

/// `toolmesh ARGS…` started again on the port a killed process held
/// (retrying while the kernel frees it); `args` carry `--listen ADDR`.
pub fn restart_on(name: &str, args: &[&str]) -> Proc {
    for _ in 0..50 {
        let mut proc = Proc::toolmesh(name, args);
        if proc.wait_exit(Duration::from_millis(300)).is_none() {
            proc.listen_addr();
            return proc;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("{name} could not start again with {args:?}");
}

/// `toolmesh example NAME --registry ADDR …`, started and listening; the
/// test fixtures (`acceptance`) run from `toolmesh-fixture` with the same
/// command line.
pub fn example(name: &str, registry: &str, extra: &[&str]) -> Proc {
    let mut args = vec!["example", name, "--registry", registry];
    args.extend_from_slice(extra);
    let mut command = Command::new(example_bin(name));
    command.args(&args);
    let proc = Proc::spawn(&format!("example {name}"), command);
    proc.listen_addr();
    proc
}

/// The acceptance executor's tools.
pub const ACCEPTANCE_TOOLS: [&str; 6] = [
    "acc_charge",
    "acc_echo",
    "acc_lookup",
    "acc_panic",
    "acc_progress",
    "acc_sleep",
];

/// `toolmesh serve` plus the acceptance executor, its tools listed.
pub struct Acceptance {
    /// `toolmesh serve`.
    pub serve: Proc,
    /// The acceptance executor.
    pub exec: Proc,
    /// The address `serve` listens on.
    pub addr: String,
    /// A dispatcher client of `addr`.
    pub client: DispatcherClient<Channel>,
}

/// Starts [`Acceptance`] with extra `serve` and `example` arguments.
pub async fn acceptance(serve_args: &[&str], exec_args: &[&str]) -> Acceptance {
    let (serve, addr) = serve(serve_args);
    let exec = example("acceptance", &addr, exec_args);
    let mut client = dispatcher(&addr);
    until_listed(&mut client, &ACCEPTANCE_TOOLS, Duration::from_secs(10)).await;
    Acceptance {
        serve,
        exec,
        addr,
        client,
    }
}

/// `toolmesh ARGS…` against `addr` with `token`, run to its end.
pub fn cli_as(addr: &str, token: &str, args: &[&str]) -> std::process::Output {
    Command::new(toolmesh_bin())
        .args(args)
        .env("TOOLMESH_SERVER", addr)
        .env("TOOLMESH_TOKEN", token)
        .output()
        .expect("run toolmesh")
}

/// A client for the dispatcher at `addr`.
pub fn dispatcher(addr: &str) -> DispatcherClient<Channel> {
    DispatcherClient::new(
        toolmesh_transport::channel(addr, &toolmesh_transport::Tls::none()).expect("valid address"),
    )
}

/// Names listed by ListTools, or None if the call failed.
pub async fn listed(client: &mut DispatcherClient<Channel>) -> Option<Vec<String>> {
    let response = client
        .list_tools(ListToolsRequest {
            format: ToolFormat::Native as i32,
            ..Default::default()
        })
        .await
        .ok()?;
    Some(
        response
            .into_inner()
            .tools
            .into_iter()
            .map(|t| t.name)
            .collect(),
    )
}

/// Waits until ListTools shows every name in `names`.
pub async fn until_listed(
    client: &mut DispatcherClient<Channel>,
    names: &[&str],
    timeout: Duration,
) {
    eventually(&format!("{names:?} listed"), timeout, || {
        let mut client = client.clone();
        async move {
            let listed = listed(&mut client).await?;
            names
                .iter()
                .all(|n| listed.iter().any(|l| l == n))
                .then_some(())
        }
    })
    .await
}

/// Invokes `tool` with `arguments`, optionally with a deadline.
pub async fn invoke(
    client: &mut DispatcherClient<Channel>,
    tool: &str,
    arguments: &str,
    timeout: Option<Duration>,
) -> InvokeResponse {
    try_invoke(client, tool, arguments, timeout)
        .await
        .expect("invoke RPC")
}

/// [`invoke`], or the status the RPC itself ended with (e.g. the caller's
/// own timer fired before the answer arrived).
pub async fn try_invoke(
    client: &mut DispatcherClient<Channel>,
    tool: &str,
    arguments: &str,
    timeout: Option<Duration>,
) -> Result<InvokeResponse, tonic::Status> {
    let mut request = tonic::Request::new(InvokeRequest {
        tool: tool.to_owned(),
        arguments: arguments.to_owned(),
        context: Some(CallContext {
            caller: "e2e".into(),
            ..Default::default()
        }),
        ..Default::default()
    });
    if let Some(t) = timeout {
        request.set_timeout(t);
    }
    client
        .invoke(request)
        .await
        .map(tonic::Response::into_inner)
}

/// Sends `request` with `token` as its bearer token (none: anonymous).
pub async fn invoke_with_token(
    client: &mut DispatcherClient<Channel>,
    request: InvokeRequest,
    token: Option<&str>,
) -> InvokeResponse {
    client
        .invoke(with_token(request, token))
        .await
        .expect("invoke RPC")
        .into_inner()
}

/// `toolmesh serve ARGS…` on a free port with its MCP door on another:
/// the process, its gRPC address and the door's URL.
pub fn serve_with_mcp_door(extra: &[&str]) -> (Proc, String, String) {
    let mut args = vec!["--mcp-listen", "127.0.0.1:0"];
    args.extend_from_slice(extra);
    let (serve, addr) = serve(&args);
    let line = serve.wait_for_line("MCP listening on ", Duration::from_secs(30));
    let mcp_url = line
        .rsplit("MCP listening on ")
        .next()
        .unwrap_or_default()
        .trim()
        .to_owned();
    (serve, addr, mcp_url)
}

/// Runs tests/python/bridge_client.py SCENARIO against the MCP door at
/// `url`: the official Python client; every check it prints must pass.
pub fn python_door(scenario: &str, url: &str, env: &[(&str, &str)], checks: &[&str]) {
    let output = Command::new(test_python())
        .arg(python_script("bridge_client.py"))
        .arg(scenario)
        .env("MCP_URL", url)
        .envs(env.iter().copied())
        .output()
        .expect("run the Python MCP client");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{scenario}:\n{stdout}\n{stderr}");
    for check in checks {
        assert!(
            stdout.lines().any(|l| l == format!("PASS {check}")),
            "{scenario}: no PASS {check} in\n{stdout}"
        );
    }
}

/// Runs `toolmesh ARGS…`, which must refuse them as bad usage (exit 64),
/// and answers what it wrote on stderr.
pub fn refused_usage(args: &[&str]) -> String {
    let output = std::process::Command::new(toolmesh_bin())
        .args(args)
        .output()
        .expect("run toolmesh");
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert_eq!(output.status.code(), Some(64), "{args:?}: {stderr}");
    stderr
}

/// The error code of a response (0 = success).
pub fn code(response: &InvokeResponse) -> i32 {
    response
        .result
        .as_ref()
        .and_then(|r| r.error.as_ref())
        .map_or(0, |e| e.code)
}

/// The error code of a response as the enum (`Unspecified` on success).
pub fn error_code(response: &InvokeResponse) -> toolmesh::pb::ErrorCode {
    toolmesh::pb::ErrorCode::try_from(code(response))
        .unwrap_or(toolmesh::pb::ErrorCode::Unspecified)
}

/// A successful result's output as JSON, or a panic with the error.
pub fn result_json(response: &InvokeResponse) -> serde_json::Value {
    let result = response.result.as_ref().expect("a result");
    assert_eq!(code(response), 0, "{}", message(response));
    serde_json::from_str(&result.output).unwrap_or_else(|e| panic!("{e}: {}", result.output))
}

/// The error message of a response ("" on success).
pub fn message(response: &InvokeResponse) -> String {
    response
        .result
        .as_ref()
        .and_then(|r| r.error.as_ref())
        .map(|e| e.message.clone())
        .unwrap_or_default()
}

/// The `grpc.health.v1` status of `service` at `addr` (plaintext);
/// panics if the check fails.
pub async fn health_status(addr: &str, service: &str) -> i32 {
    let channel =
        toolmesh_transport::channel(addr, &toolmesh_transport::Tls::none()).expect("valid address");
    let request = tonic_health::pb::HealthCheckRequest {
        service: service.to_owned(),
    };
    match tonic_health::pb::health_client::HealthClient::new(channel)
        .check(request)
        .await
    {
        Ok(response) => response.into_inner().status,
        Err(status) => panic!("health check of {service:?} at {addr}: {status}"),
    }
}

/// The address a process announced with `… health checks on ADDR`
/// (`--health-listen`).
pub fn health_addr(proc: &Proc) -> String {
    let line = proc.wait_for_line("health checks on ", Duration::from_secs(30));
    line.rsplit_once("health checks on ")
        .map(|(_, addr)| addr.trim().to_owned())
        .unwrap_or_else(|| panic!("no address in {line:?}"))
}

/// A fresh temporary directory, removed when the returned guard drops.
pub fn temp_dir(label: &str) -> TempDir {
    TempDir::new(label).expect("create a temp dir")
}

/// Lines of a ledger file (each a JSON object).
pub fn ledger(path: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// The repository's root (where README.md, deploy/ and examples/ are).
pub fn repo_root() -> &'static Path {
    static ROOT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    ROOT.get_or_init(|| {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .ancestors()
            .nth(2)
            .expect("the package sits at crates/system-tests")
            .to_path_buf()
    })
}

/// A Python script of `tests/python/` (the data files beside the tests).
pub fn python_script(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/python")
        .join(name)
}

/// The Python interpreter scripts/prepare/python.sh made (with the pinned
/// `mcp` package).
pub fn test_python() -> std::path::PathBuf {
    std::env::var_os("TOOLMESH_TEST_PYTHON")
        .map(std::path::PathBuf::from)
        .expect("TOOLMESH_TEST_PYTHON is not set: run the tests with scripts/test (scripts/prepare/python.sh makes it)")
}

/// What one InvokeStream delivered, in order.
#[derive(Debug, Default)]
pub struct Streamed {
    /// Each progress report as "progress/total message".
    pub progress: Vec<String>,
    /// Each output chunk.
    pub chunks: Vec<String>,
    /// Every event in arrival order: "progress", "chunk" or "done".
    pub order: Vec<&'static str>,
    /// The response that ended the stream.
    pub done: Option<InvokeResponse>,
}

/// Calls `tool` by InvokeStream (within `timeout`, if any) and gathers every
/// event until the stream ends.
pub async fn stream(
    client: &mut DispatcherClient<Channel>,
    tool: &str,
    arguments: &str,
    timeout: Option<Duration>,
) -> Streamed {
    let mut request = tonic::Request::new(InvokeRequest {
        tool: tool.into(),
        arguments: arguments.into(),
        context: Some(CallContext {
            caller: "streaming".into(),
            ..CallContext::default()
        }),
        ..InvokeRequest::default()
    });
    if let Some(timeout) = timeout {
        request.set_timeout(timeout);
    }
    let mut events = client
        .invoke_stream(request)
        .await
        .expect("InvokeStream RPC")
        .into_inner();
    let mut seen = Streamed::default();
    while let Some(event) = events.message().await.expect("a well-formed stream") {
        assert!(seen.done.is_none(), "nothing follows the response");
        match event.event.expect("a known event") {
            toolmesh::pb::invoke_event::Event::Progress(p) => {
                seen.order.push("progress");
                seen.progress
                    .push(format!("{}/{} {}", p.progress, p.total, p.message));
            }
            toolmesh::pb::invoke_event::Event::Chunk(chunk) => {
                seen.order.push("chunk");
                seen.chunks.push(chunk.text);
            }
            toolmesh::pb::invoke_event::Event::Done(response) => {
                seen.order.push("done");
                seen.done = Some(response);
            }
        }
    }
    seen
}

/// Sets the `TOOLMESH_TLS_*` variables every toolmesh process (and the
/// Python SDK) reads: `ca` to check servers, this process' `cert` and key,
/// and `client_ca` to require client certificates.
pub fn tls_env(
    command: &mut Command,
    ca: &Path,
    cert: Option<(&Path, &Path)>,
    client_ca: Option<&Path>,
) {
    command.env("TOOLMESH_TLS_CA", ca);
    if let Some((cert, key)) = cert {
        command
            .env("TOOLMESH_TLS_CERT", cert)
            .env("TOOLMESH_TLS_KEY", key);
    }
    if let Some(client_ca) = client_ca {
        command.env("TOOLMESH_TLS_CLIENT_CA", client_ca);
    }
}

/// Calls `tool` with `arguments` every 20 ms for `period` while a
/// non-Rust executor serves it, and checks that it stayed in the mesh:
/// every call answered, no new snapshot (each health change makes one) and
/// no "executor health changed" line from `serve`. The period spans several
/// of the keepalive intervals a gRPC server polices (a grpcio executor
/// dropped out every ~40 s on `too_many_pings`).
pub async fn stays_in_the_mesh(
    serve: &Proc,
    client: &mut DispatcherClient<Channel>,
    tool: &str,
    arguments: &str,
    period: Duration,
) {
    let lister = client.clone();
    let version = || {
        let mut client = lister.clone();
        async move {
            client
                .list_tools(ListToolsRequest::default())
                .await
                .expect("ListTools")
                .into_inner()
                .snapshot_version
        }
    };
    let health_changes = || -> Vec<String> {
        serve
            .lines_read()
            .into_iter()
            .filter(|l| l.contains("executor health changed"))
            .collect()
    };
    let (before, changed_before) = (version().await, health_changes().len());
    let started = std::time::Instant::now();
    let mut tick = tokio::time::interval(Duration::from_millis(20));
    let (mut calls, mut failed) = (0u32, Vec::new());
    while started.elapsed() < period {
        tick.tick().await;
        calls += 1;
        match try_invoke(client, tool, arguments, Some(Duration::from_secs(30))).await {
            Ok(response) if code(&response) == 0 => {}
            Ok(response) => failed.push(format!("{}: {}", code(&response), message(&response))),
            Err(status) => failed.push(status.to_string()),
        }
    }
    assert!(
        failed.is_empty(),
        "{} of {calls} calls of {tool} failed: {failed:?}",
        failed.len()
    );
    let logged = &health_changes()[changed_before..];
    assert!(logged.is_empty(), "{logged:#?}");
    assert_eq!(version().await, before, "a snapshot was made meanwhile");
}
