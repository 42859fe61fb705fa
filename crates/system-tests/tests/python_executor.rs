//! The Python executor example (examples/python/executor.py) as a real
//! process against a real mesh: stubs generated from proto/ with
//! grpcio-tools into a temp dir, `toolmesh serve` with a policy that admits
//! executors by token, and calls through the dispatcher — a result, a tool
//! error, a deadline, health, registering again after a registry restart,
//! and a SIGTERM drain that finishes the call in flight and deregisters.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;
use tonic::transport::Channel;
use toolmesh::pb::{CallContext, ErrorCode, InvokeRequest, dispatcher_client::DispatcherClient};
use toolmesh_system_tests::*;

/// The virtualenv python that scripts/prepare/python-executor.sh exports.
fn python() -> PathBuf {
    let python = std::env::var_os("TOOLMESH_TEST_PYTHON_EXECUTOR").map(PathBuf::from).unwrap_or_else(|| {
        panic!("TOOLMESH_TEST_PYTHON_EXECUTOR is not set: run the tests with scripts/test, whose scripts/prepare/python-executor.sh builds target/venv-executor from examples/python/requirements.txt")
    });
    assert!(
        python.exists(),
        "{} does not exist: run scripts/prepare/python-executor.sh again",
        python.display()
    );
    python
}

/// Generates the toolmesh.v1 Python stubs into `out` with grpcio-tools.
fn generate_stubs(python: &Path, out: &Path) {
    let root = repo_root();
    let protos: Vec<PathBuf> = std::fs::read_dir(root.join("proto/toolmesh/v1"))
        .expect("proto/toolmesh/v1")
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|path| path.extension().is_some_and(|e| e == "proto"))
        .collect();
    let out_flag = |flag: &str| format!("--{flag}={}", out.display());
    let status = Command::new(python)
        .args(["-m", "grpc_tools.protoc"])
        .arg(format!("-I{}", root.join("proto").display()))
        .args([out_flag("python_out"), out_flag("grpc_python_out")])
        .args(&protos)
        .status()
        .expect("run grpc_tools.protoc");
    assert!(status.success(), "generating the Python stubs failed");
}

/// A dispatcher client at `addr`, once it lists the Python executor's tools.
async fn listing_python_tools(addr: &str) -> DispatcherClient<Channel> {
    let mut client = dispatcher(addr);
    let tools = ["get_order", "echo_after"];
    until_listed(&mut client, &tools, Duration::from_secs(10)).await;
    client
}

/// Registers with its token, answers through the dispatcher (a result with
/// data, also by InvokeStream though it implements no ExecuteStream, a
/// TOOL_ERROR that is not retryable, DEADLINE_EXCEEDED), serves
/// grpc.health.v1, registers again when a restarted registry answers its
/// heartbeat NOT_FOUND, and on SIGTERM finishes the call in flight,
/// deregisters (its tools leave the listing) and exits 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_executor_serves_through_the_mesh_and_drains() {
    let python = python();
    let dir = temp_dir("python-executor");
    let stubs = dir.join("stubs");
    std::fs::create_dir_all(&stubs).unwrap();
    generate_stubs(&python, &stubs);
    let policy = dir.join("policy.toml");
    std::fs::write(&policy, orders_team_policy()).unwrap();
    let policy = policy.to_str().unwrap();
    let (mut serve1, addr) = serve(&["--policy", policy]);

    let script = repo_root().join("examples/python/executor.py");
    let mut command = Command::new(&python);
    command
        .arg(&script)
        .args([
            "--registry",
            &addr,
            "--token",
            "tok-orders",
            "--ttl-ms",
            "2000",
        ])
        .env("PYTHONPATH", &stubs)
        .env("PYTHONUNBUFFERED", "1");
    let mut exec = Proc::spawn("python executor", command);
    let exec_addr = exec.listen_addr();
    exec.wait_for_line("registered as orders-py-", Duration::from_secs(10));
    let mut client = listing_python_tools(&addr).await;

    let found = invoke(&mut client, "get_order", r#"{"order_id": "o_1001"}"#, None).await;
    assert_eq!(code(&found), 0, "{}", message(&found));
    let result = found.result.unwrap();
    assert_eq!(result.output, "order o_1001 is shipped");
    let data: serde_json::Value = serde_json::from_str(&result.data).unwrap();
    assert_eq!(data["items"], 2);

    // It implements Execute only and its specs do not say streams_progress:
    // InvokeStream of its tool answers just the response.
    let mut events = client
        .invoke_stream(InvokeRequest {
            tool: "get_order".into(),
            arguments: r#"{"order_id": "o_1001"}"#.into(),
            ..Default::default()
        })
        .await
        .expect("InvokeStream RPC")
        .into_inner();
    let only = events.message().await.unwrap().and_then(|e| e.event);
    match only {
        Some(toolmesh::pb::invoke_event::Event::Done(done)) => {
            assert_eq!(code(&done), 0, "{}", message(&done));
            assert_eq!(done.result.unwrap().output, "order o_1001 is shipped");
        }
        other => panic!("expected the response alone, got {other:?}"),
    }
    assert!(events.message().await.unwrap().is_none());

    let missing = invoke(&mut client, "get_order", r#"{"order_id": "o_9"}"#, None).await;
    assert_eq!(code(&missing), ErrorCode::ToolError as i32);
    assert!(
        message(&missing).contains("order o_9 not found; order ids look like o_1001"),
        "{}",
        message(&missing)
    );
    assert!(!missing.result.unwrap().error.unwrap().retryable);

    let late = invoke(
        &mut client,
        "echo_after",
        r#"{"text": "late", "delay_ms": 5000}"#,
        Some(Duration::from_millis(300)),
    )
    .await;
    assert_eq!(
        code(&late),
        ErrorCode::DeadlineExceeded as i32,
        "{}",
        message(&late)
    );

    let channel =
        toolmesh_transport::channel(&exec_addr, &toolmesh_transport::Tls::none()).unwrap();
    // Only dispatchers (holding the token it registered) may call it.
    let direct = toolmesh::pb::executor_client::ExecutorClient::new(channel.clone())
        .execute(toolmesh::pb::ExecuteRequest {
            tool: "get_order".into(),
            arguments: r#"{"order_id": "o_1001"}"#.into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(direct.code(), tonic::Code::Unauthenticated, "{direct:?}");
    let mut health = tonic_health::pb::health_client::HealthClient::new(channel);
    for service in ["", toolmesh_transport::EXECUTOR_HEALTH_SERVICE] {
        let request = tonic_health::pb::HealthCheckRequest {
            service: service.into(),
        };
        let status = health.check(request).await.unwrap().into_inner().status;
        assert_eq!(
            status,
            tonic_health::ServingStatus::Serving as i32,
            "{service:?}"
        );
    }

    // A new registry does not know the lease: the heartbeat is answered
    // NOT_FOUND and the executor registers again.
    serve1.kill9();
    let _serve2 = restart_on("serve", &["serve", "--listen", &addr, "--policy", policy]);
    exec.wait_for_line("registering again", Duration::from_secs(10));
    let client = listing_python_tools(&addr).await;

    let mut in_flight_client = client.clone();
    let in_flight = tokio::spawn(async move {
        let request = InvokeRequest {
            tool: "echo_after".into(),
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
    exec.wait_for_line("(session drain): echo_after", Duration::from_secs(10));
    exec.signal(libc::SIGTERM);
    exec.wait_for_line("deregistered lease", Duration::from_secs(5));
    eventually("the Python tools unlisted", Duration::from_secs(5), || {
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
        .wait_exit(toolmesh_testkit::patient(Duration::from_secs(10)))
        .expect("the executor exits after draining");
    assert!(status.success(), "{status:?}");
}

/// An executor served by grpcio with its default settings (which refuse
/// client pings more often than every 5 minutes while nothing is sent)
/// stays in the mesh for 95 s of calls: the mesh's keepalive toward
/// executors is what gRPC servers permit by default, so no health watch
/// or call connection is closed with `too_many_pings`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grpcio_executor_with_default_settings_stays_in_the_mesh() {
    let python = python();
    let dir = temp_dir("python-executor-keepalive");
    let stubs = dir.join("stubs");
    std::fs::create_dir_all(&stubs).unwrap();
    generate_stubs(&python, &stubs);
    let policy = dir.join("policy.toml");
    std::fs::write(&policy, orders_team_policy()).unwrap();
    let (serve, addr) = serve(&["--policy", policy.to_str().unwrap()]);
    let script = repo_root().join("examples/python/executor.py");
    let mut command = Command::new(&python);
    command
        .arg(&script)
        .args(["--registry", &addr, "--token", "tok-orders"])
        .env("PYTHONPATH", &stubs)
        .env("PYTHONUNBUFFERED", "1");
    let exec = Proc::spawn("python executor", command);
    exec.wait_for_line("registered as orders-py-", Duration::from_secs(10));
    let mut client = listing_python_tools(&addr).await;
    let args = r#"{"order_id": "o_1001"}"#;
    stays_in_the_mesh(
        &serve,
        &mut client,
        "get_order",
        args,
        Duration::from_secs(95),
    )
    .await;
}
