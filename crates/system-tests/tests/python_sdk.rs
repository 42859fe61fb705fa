//! The Python executor SDK (sdk/python) as a user runs it: installed with
//! `pip install ./sdk/python` in a fresh virtualenv
//! (scripts/prepare/python-sdk.sh), its executor (tests/python/sdk_tools.py)
//! a real process registered with a real `toolmesh serve`. The mesh lists
//! the schema the SDK made from type hints and enforces it; tool errors,
//! unexpected exceptions, async tools, deadlines, cancellation and progress
//! pass through the dispatcher; Execute without the registered token is
//! refused; a restarted registry gets the tools again; SIGTERM drains. The
//! committed gRPC stubs are checked against proto/, and the SDK's own unit
//! tests run against the installed package.

use serde_json::json;
use std::path::PathBuf;
use std::process::{Command, Output};
use std::time::Duration;
use tonic::transport::Channel;
use toolmesh::pb::{
    CallContext, ErrorCode, ExecuteRequest, InvokeRequest, ListToolsRequest, RiskLevel, ToolFormat,
    ToolSpec, dispatcher_client::DispatcherClient, executor_client::ExecutorClient,
    invoke_event::Event,
};
use toolmesh_system_tests::*;
use toolmesh_testkit::patient;

/// The interpreter at `var`, which scripts/prepare/python-sdk.sh exports.
fn prepared_python(var: &str) -> PathBuf {
    let python = std::env::var_os(var).map(PathBuf::from).unwrap_or_else(|| {
        panic!("{var} is not set: run the tests with scripts/test, whose scripts/prepare/python-sdk.sh installs sdk/python into target/venv-sdk")
    });
    assert!(
        python.exists(),
        "{} does not exist: run scripts/prepare/python-sdk.sh again",
        python.display()
    );
    python
}

/// The python of the virtualenv with `pip install ./sdk/python` done.
fn sdk_python() -> PathBuf {
    prepared_python("TOOLMESH_TEST_PYTHON_SDK")
}

fn text(output: &Output) -> String {
    format!(
        "{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// The stubs in sdk/python/src/toolmesh/v1 are what the pinned
/// grpcio-tools makes of proto/toolmesh/v1 now: a proto change without
/// regenerating them fails here, saying how to regenerate.
#[test]
fn committed_stubs_match_the_protos() {
    let output = Command::new(prepared_python("TOOLMESH_TEST_PYTHON_SDK_GEN"))
        .arg(repo_root().join("sdk/python/generate_stubs.py"))
        .arg("--check")
        .output()
        .expect("run generate_stubs.py --check");
    assert!(output.status.success(), "{}", text(&output));
    assert!(
        text(&output).contains("12 stubs"),
        "three files per proto, four protos: {}",
        text(&output)
    );
}

/// The SDK's unit tests (schema from type hints, refused definitions,
/// argument checks, result encoding, error mapping, deadlines, refused
/// serve configurations) pass against the installed package, not the
/// source tree.
#[test]
fn sdk_unit_tests_pass_against_the_installed_package() {
    let dir = temp_dir("python-sdk-unit");
    let output = Command::new(sdk_python())
        .args(["-m", "unittest", "discover", "-v", "-s"])
        .arg(repo_root().join("sdk/python/tests"))
        .current_dir(dir.path())
        // No __pycache__ written into the source tree.
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .output()
        .expect("run the SDK's unit tests");
    assert!(output.status.success(), "{}", text(&output));
    let report = text(&output);
    assert!(
        report.contains("OK") && !report.contains("Ran 0 tests"),
        "{report}"
    );
    let imported = Command::new(sdk_python())
        .args(["-c", "import toolmesh; print(toolmesh.__file__)"])
        .current_dir(dir.path())
        .output()
        .expect("locate the installed package");
    assert!(
        text(&imported).contains("site-packages"),
        "the tests ran the installed package: {}",
        text(&imported)
    );
}

const TOOLS: [&str; 5] = [
    "cancel_order",
    "count",
    "get_order",
    "slow_echo",
    "wait_for_cancel",
];

/// `toolmesh serve` with a policy that admits executors by token, and the
/// SDK executor registered with it (registry and token from the
/// environment, as `serve` reads them), its tools listed.
struct Mesh {
    serve: Proc,
    addr: String,
    policy: PathBuf,
    exec: Proc,
    exec_addr: String,
    client: DispatcherClient<Channel>,
    _dir: TempDir,
}

/// The SDK executor tests/python/sdk_tools.py, run in `dir`, registering
/// with `registry` by the orders team's token (both from the environment,
/// as `serve` reads them).
fn sdk_tools(dir: &TempDir, registry: &str) -> Command {
    let mut command = Command::new(sdk_python());
    command
        .arg(python_script("sdk_tools.py"))
        .current_dir(dir.path())
        .env("TOOLMESH_REGISTRY", registry)
        .env("TOOLMESH_TOKEN", "tok-orders")
        .env_remove("TOOLMESH_ADVERTISE")
        .env("PYTHONUNBUFFERED", "1");
    command
}

async fn mesh(label: &str) -> Mesh {
    let dir = temp_dir(label);
    let policy = dir.join("policy.toml");
    std::fs::write(&policy, orders_team_policy()).unwrap();
    let (serve, addr) = serve(&["--policy", policy.to_str().unwrap()]);
    // The token from a file (read at each registry call), as a projected
    // service-account token is mounted.
    let token_file = dir.join("token");
    std::fs::write(&token_file, "tok-orders\n").unwrap();
    let mut command = sdk_tools(&dir, &addr);
    command
        .env_remove("TOOLMESH_TOKEN")
        .env("TOOLMESH_TOKEN_FILE", &token_file);
    let exec = Proc::spawn("python sdk executor", command);
    let exec_addr = exec.listen_addr();
    exec.wait_for_line("registered as orders-py-", patient(Duration::from_secs(10)));
    let mut client = dispatcher(&addr);
    until_listed(&mut client, &TOOLS, Duration::from_secs(10)).await;
    Mesh {
        serve,
        addr,
        policy,
        exec,
        exec_addr,
        client,
        _dir: dir,
    }
}

/// The listed spec of `name`.
async fn spec(client: &mut DispatcherClient<Channel>, name: &str) -> ToolSpec {
    client
        .list_tools(ListToolsRequest {
            format: ToolFormat::Native as i32,
            ..Default::default()
        })
        .await
        .expect("ListTools")
        .into_inner()
        .tools
        .into_iter()
        .find(|t| t.name == name)
        .unwrap_or_else(|| panic!("{name} is not listed"))
}

fn json_of(text: &str) -> serde_json::Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
}

/// Listed with the schema made from type hints and the decorator's
/// arguments; the dispatcher enforces that schema (naming the path);
/// results, tool errors, an exception whose text stays in the executor's
/// log, an async tool, deadlines and a caller going away seen by sync and
/// async tools, progress on InvokeStream, health, and Execute refused
/// without the registered token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sdk_executor_serves_through_the_mesh() {
    let mesh = mesh("python-sdk-calls").await;
    let (exec, exec_addr, mut client) = (&mesh.exec, &mesh.exec_addr, mesh.client.clone());
    let wait = patient(Duration::from_secs(10));

    let get_order = spec(&mut client, "get_order").await;
    assert_eq!(
        get_order.description,
        "Look up one order by id: its status and item count."
    );
    assert_eq!(
        json_of(&get_order.input_schema),
        json!({
            "type": "object",
            "additionalProperties": false,
            "properties": {
                "order_id": {"type": "string", "description": "The order id, e.g. o_1001", "pattern": "^o_[0-9]+$"}
            },
            "required": ["order_id"]
        })
    );
    assert_eq!(
        json_of(&get_order.output_schema),
        json!({
            "type": "object",
            "properties": {"status": {"type": "string"}, "items": {"type": "integer"}},
            "required": ["status", "items"]
        })
    );
    assert_eq!(get_order.risk, RiskLevel::Low as i32);
    assert!(get_order.idempotent);
    assert_eq!(get_order.timeout_ms, 2000);
    assert_eq!(get_order.tags, ["orders", "read"]);
    assert_eq!(get_order.owner, "orders-team");
    assert!(!get_order.streams_progress);
    let cancel_order = spec(&mut client, "cancel_order").await;
    assert_eq!(cancel_order.risk, RiskLevel::Medium as i32);
    assert!(!cancel_order.idempotent);
    assert_eq!(
        json_of(&cancel_order.input_schema)["required"],
        json!(["order_id"]),
        "a parameter with a default is optional"
    );
    assert!(
        spec(&mut client, "count").await.streams_progress,
        "a tool taking a Context streams"
    );

    // A sync tool: its return value as data and text; a ToolError.
    let found = invoke(&mut client, "get_order", r#"{"order_id": "o_1001"}"#, None).await;
    assert_eq!(code(&found), 0, "{}", message(&found));
    let result = found.result.unwrap();
    assert_eq!(
        json_of(&result.data),
        json!({"status": "shipped", "items": 2})
    );
    assert_eq!(json_of(&result.output), json_of(&result.data));
    let missing = invoke(&mut client, "get_order", r#"{"order_id": "o_9"}"#, None).await;
    assert_eq!(
        code(&missing),
        ErrorCode::ToolError as i32,
        "{}",
        message(&missing)
    );
    assert_eq!(
        message(&missing),
        "order o_9 not found; order ids look like o_1001"
    );
    assert!(!missing.result.unwrap().error.unwrap().retryable);

    // The generated schema is the one the dispatcher checks.
    for (arguments, path) in [
        (r#"{"order_id": 5}"#, "at /order_id"),
        (r#"{"order_id": "1001"}"#, "at /order_id"),
        (r#"{"order_id": "o_1", "note": "x"}"#, "note"),
        (r#"{}"#, "order_id"),
    ] {
        let refused = invoke(&mut client, "get_order", arguments, None).await;
        assert_eq!(
            code(&refused),
            ErrorCode::InvalidArguments as i32,
            "{arguments}: {}",
            message(&refused)
        );
        assert!(
            message(&refused).contains(path),
            "{arguments}: {}",
            message(&refused)
        );
        assert_eq!(refused.attempts, 0, "refused before any executor");
    }

    // An unexpected exception: EXECUTOR_FAILED, its text only in the log.
    let broke = invoke(
        &mut client,
        "cancel_order",
        r#"{"order_id": "o_1001"}"#,
        None,
    )
    .await;
    assert_eq!(
        code(&broke),
        ErrorCode::ExecutorFailed as i32,
        "{}",
        message(&broke)
    );
    assert!(
        message(&broke).contains("failed with an unexpected error")
            && !message(&broke).contains("hunter2"),
        "{}",
        message(&broke)
    );
    exec.wait_for_line("password hunter2 expired", wait);

    // An async tool.
    let echoed = invoke(
        &mut client,
        "slow_echo",
        r#"{"text": "hi", "delay_ms": 10}"#,
        None,
    )
    .await;
    assert_eq!(code(&echoed), 0, "{}", message(&echoed));
    assert_eq!(echoed.result.unwrap().output, "hi");

    // Deadlines: the async tool is cancelled, the sync one sees it.
    let late = invoke(
        &mut client,
        "slow_echo",
        r#"{"text": "late", "delay_ms": 30000}"#,
        Some(Duration::from_millis(300)),
    )
    .await;
    assert_eq!(
        code(&late),
        ErrorCode::DeadlineExceeded as i32,
        "{}",
        message(&late)
    );
    exec.wait_for_line("slow_echo cancelled: late", wait);
    let late = invoke(
        &mut client,
        "wait_for_cancel",
        r#"{"label": "deadline", "seconds": 30}"#,
        Some(Duration::from_millis(300)),
    )
    .await;
    assert_eq!(
        code(&late),
        ErrorCode::DeadlineExceeded as i32,
        "{}",
        message(&late)
    );
    exec.wait_for_line("wait_for_cancel saw the cancellation: deadline", wait);

    // A caller that goes away cancels the call it made.
    for (tool, arguments, started, cancelled) in [
        (
            "wait_for_cancel",
            r#"{"label": "gone", "seconds": 50}"#,
            "wait_for_cancel started: gone",
            "wait_for_cancel saw the cancellation: gone",
        ),
        (
            "slow_echo",
            r#"{"text": "gone", "delay_ms": 50000}"#,
            "slow_echo started: gone",
            "slow_echo cancelled: gone",
        ),
    ] {
        let mut caller = client.clone();
        let call =
            tokio::spawn(async move { try_invoke(&mut caller, tool, arguments, None).await });
        exec.wait_for_line(started, wait);
        call.abort();
        exec.wait_for_line(cancelled, wait);
    }

    // Progress, by InvokeStream.
    let mut events = client
        .invoke_stream(InvokeRequest {
            tool: "count".into(),
            arguments: r#"{"to": 3}"#.into(),
            ..Default::default()
        })
        .await
        .expect("InvokeStream RPC")
        .into_inner();
    let mut progress = Vec::new();
    let done = loop {
        match events
            .message()
            .await
            .expect("a stream event")
            .and_then(|e| e.event)
        {
            Some(Event::Progress(p)) => progress.push((p.progress, p.total, p.message)),
            Some(Event::Done(done)) => break done,
            other => panic!("expected progress or the response, got {other:?}"),
        }
    };
    assert_eq!(code(&done), 0, "{}", message(&done));
    assert_eq!(json_of(&done.result.unwrap().data), json!({"counted": 3}));
    assert_eq!(
        progress,
        [1.0, 2.0, 3.0].map(|n| (n, 3.0, format!("{n} of 3")))
    );

    // Health, and Execute for dispatchers only.
    for service in ["", toolmesh_transport::EXECUTOR_HEALTH_SERVICE] {
        assert_eq!(
            health_status(exec_addr, service).await,
            tonic_health::ServingStatus::Serving as i32,
            "{service:?}"
        );
    }
    let channel = toolmesh_transport::channel(exec_addr, &toolmesh_transport::Tls::none()).unwrap();
    for token in [None, Some("tok-orders")] {
        let direct = ExecutorClient::new(channel.clone())
            .execute(with_token(
                ExecuteRequest {
                    tool: "get_order".into(),
                    arguments: r#"{"order_id": "o_1001"}"#.into(),
                    ..Default::default()
                },
                token,
            ))
            .await
            .expect_err("Execute without the execute token is refused");
        assert_eq!(direct.code(), tonic::Code::Unauthenticated, "{direct:?}");
        assert!(
            direct.message().contains("through a dispatcher"),
            "{direct:?}"
        );
    }
}

/// Registers again when a restarted registry answers its heartbeat
/// NOT_FOUND — with the token its token file holds by then (rotated while
/// the registry was away) — and on SIGTERM finishes the call in flight,
/// deregisters (its tools leave the listing) and exits 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sdk_executor_registers_again_and_drains() {
    let Mesh {
        mut serve,
        addr,
        policy,
        mut exec,
        _dir,
        ..
    } = mesh("python-sdk-lease").await;
    let wait = patient(Duration::from_secs(10));

    serve.kill9();
    // The token is rotated: the restarted registry knows only the new one.
    std::fs::write(
        &policy,
        orders_team_policy().replace("tok-orders", "tok-orders-2"),
    )
    .unwrap();
    std::fs::write(_dir.join("token"), "tok-orders-2").unwrap();
    let policy = policy.to_str().unwrap();
    let _serve = restart_on("serve", &["serve", "--listen", &addr, "--policy", policy]);
    exec.wait_for_line("registering again", wait);
    let mut client = dispatcher(&addr);
    until_listed(&mut client, &TOOLS, Duration::from_secs(10)).await;

    let mut in_flight_client = client.clone();
    let in_flight = tokio::spawn(async move {
        let request = InvokeRequest {
            tool: "slow_echo".into(),
            arguments: r#"{"text": "made it", "delay_ms": 1000}"#.into(),
            context: Some(CallContext {
                session_id: "drain".into(),
                ..Default::default()
            }),
            ..Default::default()
        };
        in_flight_client
            .invoke(request)
            .await
            .expect("invoke RPC")
            .into_inner()
    });
    exec.wait_for_line("slow_echo started: made it", wait);
    exec.signal(libc::SIGTERM);
    exec.wait_for_line("deregistered lease", wait);
    eventually("the SDK's tools unlisted", Duration::from_secs(10), || {
        let mut client = client.clone();
        async move {
            let names = listed(&mut client).await?;
            (!names.iter().any(|n| n == "get_order")).then_some(())
        }
    })
    .await;
    let finished = in_flight.await.unwrap();
    assert_eq!(code(&finished), 0, "{}", message(&finished));
    assert_eq!(finished.result.unwrap().output, "made it");
    let status = exec
        .wait_exit(patient(Duration::from_secs(10)))
        .expect("the executor exits after draining");
    assert!(status.success(), "{status:?}");
    exec.wait_for_line("drained", wait);
}

/// With mutual TLS everywhere, the SDK executor (its certificate, CA and
/// client CA from the `TOOLMESH_TLS_*` variables, as every toolmesh
/// process reads them) registers over TLS, is called by the dispatcher over
/// TLS, and refuses a caller without a client certificate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sdk_executor_over_mutual_tls() {
    let dir = temp_dir("python-sdk-tls");
    let (ca, cert, key) = toolmesh_testkit::pki(&dir, "mesh");
    let policy = dir.join("policy.toml");
    std::fs::write(&policy, orders_team_policy()).unwrap();
    let mut serve_cmd = Command::new(toolmesh_bin());
    serve_cmd
        .args(["serve", "--listen", "127.0.0.1:0", "--policy"])
        .arg(&policy);
    tls_env(&mut serve_cmd, &ca, Some((&cert, &key)), Some(&ca));
    let serve = Proc::spawn("serve", serve_cmd);
    let addr = serve.listen_addr();

    let mut exec_cmd = sdk_tools(&dir, &addr);
    tls_env(&mut exec_cmd, &ca, Some((&cert, &key)), Some(&ca));
    let exec = Proc::spawn("python sdk executor", exec_cmd);
    let exec_addr = exec.listen_addr();
    exec.wait_for_line("registered as orders-py-", patient(Duration::from_secs(10)));

    let call = |args: &[&str]| {
        let mut command = Command::new(toolmesh_bin());
        command.args(args).args(["--server", &addr]);
        tls_env(&mut command, &ca, Some((&cert, &key)), None);
        command.output().expect("run toolmesh")
    };
    let answered = eventually("get_order called over TLS", Duration::from_secs(10), || {
        let out = call(&["call", "get_order", r#"{"order_id": "o_1001"}"#]);
        async move {
            out.status
                .success()
                .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
        }
    })
    .await;
    assert!(answered.contains("shipped"), "{answered}");

    // The executor itself requires a client certificate.
    let channel = tonic::transport::Endpoint::from_shared(format!("https://{exec_addr}"))
        .unwrap()
        .tls_config(tonic::transport::ClientTlsConfig::new().ca_certificate(
            tonic::transport::Certificate::from_pem(std::fs::read(&ca).unwrap()),
        ))
        .unwrap()
        .connect()
        .await;
    // Refused by TLS itself, before the execute-token check could answer.
    if let Ok(channel) = channel {
        let mut executor = ExecutorClient::new(channel);
        match executor.execute(ExecuteRequest::default()).await {
            Ok(answer) => panic!("answered without a client certificate: {answer:?}"),
            // The connection itself fails (how depends on when the
            // server's alert arrives), never an answer from the executor.
            Err(status) => assert!(
                std::error::Error::source(&status)
                    .is_some_and(|cause| cause.is::<tonic::transport::Error>()),
                "{status:?}"
            ),
        }
    }
}

/// An SDK executor stays in the mesh for 95 s of calls with the real
/// default settings on both sides: no health change, no new snapshot, no
/// failed call (it used to drop out every ~40 s on grpcio's ping limit).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sdk_executor_stays_in_the_mesh() {
    let mut mesh = mesh("python-sdk-keepalive").await;
    let args = r#"{"order_id": "o_1001"}"#;
    stays_in_the_mesh(
        &mesh.serve,
        &mut mesh.client,
        "get_order",
        args,
        Duration::from_secs(95),
    )
    .await;
}

/// An SDK executor whose token the registry does not know is told so,
/// with the fix, after a first attempt that met no registry at all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sdk_executor_with_an_unknown_token_hears_why() {
    let dir = temp_dir("python-sdk-unknown-token");
    let policy = dir.join("policy.toml");
    std::fs::write(&policy, orders_team_policy()).unwrap();
    let policy = policy.to_str().unwrap();
    let (mut gone, addr) = serve(&["--policy", policy]);
    gone.kill9();
    let mut command = sdk_tools(&dir, &addr);
    command.env("TOOLMESH_TOKEN", "tok-stale");
    let exec = Proc::spawn("python sdk executor", command);
    let patience = patient(Duration::from_secs(10));
    exec.wait_for_line("until it answers", patience);
    let _serve = restart_on("serve", &["serve", "--listen", &addr, "--policy", policy]);
    let told = exec.wait_for_line("does not accept this executor's token", patience);
    assert!(told.contains("TOOLMESH_TOKEN"), "{told}");
}
