//! End to end over real OS processes on 127.0.0.1: `toolmesh serve` plus
//! example executors, driven through the Dispatcher's gRPC API and the CLI.

use std::time::{Duration, Instant};
use tonic::transport::Channel;
use tonic_health::pb::{
    HealthCheckRequest, health_check_response::ServingStatus, health_client::HealthClient,
};
use toolmesh::pb::dispatcher_client::DispatcherClient;
use toolmesh::pb::{ErrorCode, ListToolsRequest, ToolFormat};
use toolmesh_system_tests::*;

async fn tool_status(addr: &str, tool: &str) -> Result<i32, tonic::Code> {
    let mut health = HealthClient::new(
        toolmesh_transport::channel(addr, &toolmesh_transport::Tls::none()).unwrap(),
    );
    health
        .check(HealthCheckRequest {
            service: toolmesh_transport::tool_health_service(tool),
        })
        .await
        .map(|r| r.into_inner().status)
        .map_err(|s| s.code())
}

/// Serve + an executor: tools are listed sorted, a call succeeds once on one
/// executor, and OpenAI export carries the schema as parameters.
#[tokio::test]
async fn list_and_invoke() {
    let mesh = acceptance(&[], &[]).await;
    let mut client = mesh.client.clone();
    assert_eq!(listed(&mut client).await.unwrap(), ACCEPTANCE_TOOLS);

    let response = invoke(&mut client, "acc_echo", r#"{"message":"hello"}"#, None).await;
    assert_eq!(code(&response), 0, "{}", message(&response));
    let result = response.result.unwrap();
    assert!(result.output.contains("hello"), "{}", result.output);
    assert_eq!(response.attempts, 1);
    assert!(
        response.executor_id.starts_with("acceptance"),
        "{}",
        response.executor_id
    );
    assert!(!response.call_id.is_empty());
    assert_eq!(response.tool_version, "1.0.0");

    let openai = client
        .list_tools(ListToolsRequest {
            format: ToolFormat::Openai as i32,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let value: serde_json::Value = serde_json::from_str(&openai.formatted).unwrap();
    let echo = value
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["function"]["name"] == "acc_echo")
        .expect("acc_echo exported");
    assert_eq!(echo["type"], "function");
    assert_eq!(echo["function"]["parameters"]["type"], "object");
    assert!(
        echo["function"]["parameters"]["required"]
            .as_array()
            .unwrap()
            .contains(&serde_json::json!("message"))
    );
}

/// Invalid arguments are refused by the dispatcher with every failing path
/// named, and the executor never sees them (its ledger stays empty).
#[tokio::test]
async fn invalid_arguments_never_reach_the_executor() {
    let (_serve, addr) = serve(&[]);
    let (dir, _exec, mut client) = acceptance_with_ledger(&addr, "invalid", "acc_charge").await;
    let ledger_path = dir.join("ledger.jsonl");

    let cases = [
        (r#"{"account": "a"}"#, "cents"),
        (r#"{"account": 5, "cents": 0}"#, "/account"),
        (r#"{"account": "a", "cents": 10, "extra": true}"#, "extra"),
        ("{not json", "not valid JSON"),
        ("[1, 2]", "object"),
    ];
    for (arguments, expected) in cases {
        let response = invoke(&mut client, "acc_charge", arguments, None).await;
        assert_eq!(
            code(&response),
            ErrorCode::InvalidArguments as i32,
            "{arguments}"
        );
        assert!(
            message(&response).contains(expected),
            "{arguments}: {}",
            message(&response)
        );
        assert_eq!(response.attempts, 0, "{arguments}: no attempt sent");
    }
    let both = invoke(
        &mut client,
        "acc_charge",
        r#"{"account": 5, "cents": 0}"#,
        None,
    )
    .await;
    let text = message(&both);
    assert!(
        text.contains("/account") && text.contains("/cents"),
        "{text}"
    );
    assert!(
        ledger(&ledger_path).is_empty(),
        "executor ran a refused call"
    );

    let ok = invoke(
        &mut client,
        "acc_charge",
        r#"{"account": "a", "cents": 5}"#,
        None,
    )
    .await;
    assert_eq!(code(&ok), 0, "{}", message(&ok));
    let lines = ledger(&ledger_path);
    assert_eq!(lines.len(), 1);
    assert_eq!(lines[0]["call_id"], ok.call_id.as_str());
}

/// An unknown name gets NOT_FOUND with close names; a bad version names the
/// served ones.
#[tokio::test]
async fn unknown_tool_gets_a_suggestion() {
    let mesh = acceptance(&[], &[]).await;
    let mut client = mesh.client.clone();
    let response = invoke(&mut client, "acc_ech", "{}", None).await;
    assert_eq!(code(&response), ErrorCode::NotFound as i32);
    assert!(
        message(&response).contains("did you mean \"acc_echo\""),
        "{}",
        message(&response)
    );
    let response = invoke(&mut client, "acc_echo@7", r#"{"message":"x"}"#, None).await;
    assert_eq!(code(&response), ErrorCode::NotFound as i32);
    assert!(
        message(&response).contains("1.0.0"),
        "{}",
        message(&response)
    );
}

/// A call past the tool's timeout, or past the caller's deadline, ends with
/// DEADLINE_EXCEEDED in time; a panicking tool is EXECUTOR_FAILED and the
/// executor keeps serving.
#[tokio::test]
async fn timeouts_and_panics() {
    let mesh = acceptance(&[], &[]).await;
    let mut client = mesh.client.clone();

    // acc_sleep declares a 1 s timeout.
    let started = Instant::now();
    let response = invoke(&mut client, "acc_sleep", r#"{"ms": 5000}"#, None).await;
    let took = started.elapsed();
    assert_eq!(
        code(&response),
        ErrorCode::DeadlineExceeded as i32,
        "{}",
        message(&response)
    );
    assert!(
        // Cut at the declared 1 s, not at the tool's 5 s (a loaded machine
        // may add a second or two to the cut).
        took >= Duration::from_millis(950) && took < Duration::from_millis(3500),
        "{took:?}"
    );

    let started = Instant::now();
    let response = invoke(
        &mut client,
        "acc_sleep",
        r#"{"ms": 5000}"#,
        Some(Duration::from_millis(200)),
    )
    .await;
    let took = started.elapsed();
    assert_eq!(
        code(&response),
        ErrorCode::DeadlineExceeded as i32,
        "{}",
        message(&response)
    );
    // The deadline plus scheduling slack on two loaded cores.
    assert!(took < Duration::from_millis(350), "{took:?}");

    let response = invoke(&mut client, "acc_panic", "{}", None).await;
    assert_eq!(
        code(&response),
        ErrorCode::ExecutorFailed as i32,
        "{}",
        message(&response)
    );
    assert_eq!(response.attempts, 1, "a panic is not retried");
    let response = invoke(&mut client, "acc_echo", r#"{"message":"still here"}"#, None).await;
    assert_eq!(code(&response), 0, "{}", message(&response));
}

/// kill -9 of the only executor: its tools leave ListTools within the lease
/// TTL plus a small margin, Invoke says UNAVAILABLE, and the tool's health
/// turns NOT_SERVING.
#[tokio::test]
async fn killed_executor_is_de_exposed() {
    let mut mesh = acceptance(&[], &["--ttl-ms", "1000"]).await;
    let (addr, mut client) = (mesh.addr.clone(), mesh.client.clone());
    // The health service follows the snapshot on its own task: listed first,
    // SERVING a moment later.
    eventually("acc_echo SERVING", Duration::from_secs(2), || {
        let addr = addr.clone();
        async move {
            (tool_status(&addr, "acc_echo").await == Ok(ServingStatus::Serving as i32))
                .then_some(())
        }
    })
    .await;

    let killed = Instant::now();
    mesh.exec.kill9();
    eventually("acc_echo de-exposed", Duration::from_millis(1500), || {
        let mut client = client.clone();
        async move {
            let names = listed(&mut client).await?;
            (!names.iter().any(|n| n == "acc_echo")).then_some(())
        }
    })
    .await;
    println!("kill -9 -> de-exposed in {:?}", killed.elapsed());

    let response = invoke(&mut client, "acc_echo", r#"{"message":"x"}"#, None).await;
    assert_eq!(
        code(&response),
        ErrorCode::Unavailable as i32,
        "{}",
        message(&response)
    );
    eventually("acc_echo NOT_SERVING", Duration::from_secs(2), || {
        let addr = addr.clone();
        async move {
            (tool_status(&addr, "acc_echo").await == Ok(ServingStatus::NotServing as i32))
                .then_some(())
        }
    })
    .await;
    assert_eq!(
        tool_status(&addr, "no_such_tool").await,
        Err(tonic::Code::NotFound)
    );
}

/// An executor that stops leaves no row behind, whoever it is: one ended by
/// SIGTERM (it deregisters) and one by SIGKILL (its lease runs out) are,
/// past their lease, in neither `toolmesh health` nor the admin page's
/// state, while the executor still running keeps its rows.
#[tokio::test]
async fn stopped_executors_leave_no_health_rows() {
    let (serve, addr) = serve(&["--admin-listen", "127.0.0.1:0"]);
    let admin = admin_addr(&serve);
    let short = ["--ttl-ms", "1000"];
    let _knowledge = example("knowledge", &addr, &[]);
    let accounts = example("accounts", &addr, &short);
    let mut support = example("support", &addr, &short);
    let mut client = dispatcher(&addr);
    let stopped = [
        "get_user_info",
        "get_current_time",
        "create_ticket",
        "send_email",
    ];
    until_listed(&mut client, &["search_kb"], Duration::from_secs(30)).await;
    until_listed(&mut client, &stopped, Duration::from_secs(30)).await;
    let rows = move || {
        let (addr, admin) = (addr.clone(), admin.clone());
        async move {
            let health =
                tokio::task::spawn_blocking(move || cli_as(&addr, "", &["health", "--json"]))
                    .await
                    .unwrap();
            let health: serde_json::Value = serde_json::from_slice(&health.stdout).ok()?;
            let (status, state) = tokio::task::spawn_blocking(move || {
                toolmesh_testkit::http(
                    &admin,
                    "GET",
                    "/api/state",
                    &[("authorization", "Bearer dev-approver")],
                    "",
                )
            })
            .await
            .unwrap();
            assert_eq!(status, 200, "{state}");
            let state: serde_json::Value = serde_json::from_str(&state).unwrap();
            let names = |rows: &serde_json::Value, key: &str| -> Vec<(String, String)> {
                rows.as_array()
                    .into_iter()
                    .flatten()
                    .map(|row| {
                        let field = |f: &str| row[f].as_str().unwrap_or_default().to_owned();
                        (
                            field(key),
                            field(if key == "tool" { "status" } else { "health" }),
                        )
                    })
                    .collect()
            };
            Some((
                names(&health["tools"], "tool"),
                names(&state["tools"], "name"),
            ))
        }
    };
    let (health, state) = rows().await.expect("toolmesh health --json");
    for name in stopped {
        assert!(
            health.iter().any(|(n, _)| n == name),
            "{name} in {health:?}"
        );
        assert!(state.iter().any(|(n, _)| n == name), "{name} in {state:?}");
    }

    accounts.signal(libc::SIGTERM);
    support.kill9();
    let (health, state) = eventually(
        "the stopped executors' rows gone from toolmesh health and the admin page",
        Duration::from_secs(60),
        || async {
            let (health, state) = rows().await?;
            let gone = |rows: &[(String, String)]| {
                !rows.iter().any(|(n, _)| stopped.contains(&n.as_str()))
            };
            (gone(&health) && gone(&state)).then_some((health, state))
        },
    )
    .await;
    let serving = ("search_kb".to_owned(), "SERVING".to_owned());
    assert!(health.contains(&serving), "{health:?}");
    assert!(state.contains(&serving), "{state:?}");
}

/// Restarting the registry process: the executor registers again by itself
/// and calls work.
#[tokio::test]
async fn executor_re_registers_after_registry_restart() {
    let (mut serve1, addr) = serve(&[]);
    let _exec = example("acceptance", &addr, &["--ttl-ms", "1000"]);
    let mut client = dispatcher(&addr);
    until_listed(&mut client, &["acc_echo"], Duration::from_secs(10)).await;

    serve1.kill9();
    let _serve2 = restart_on("serve", &["serve", "--listen", &addr]);
    let mut client = dispatcher(&addr);
    until_listed(&mut client, &["acc_echo"], Duration::from_secs(5)).await;
    let response = invoke(&mut client, "acc_echo", r#"{"message":"again"}"#, None).await;
    assert_eq!(code(&response), 0, "{}", message(&response));
}

/// The CLI: `tools`, `call` (output, error code and exit status), `health`.
#[tokio::test]
async fn cli_commands() {
    let mesh = acceptance(&[], &[]).await;
    let addr = mesh.addr.clone();
    let run = |args: &[&str]| {
        std::process::Command::new(toolmesh_bin())
            .args(args)
            .env("TOOLMESH_SERVER", &addr)
            .output()
            .expect("run toolmesh")
    };
    let out = run(&["tools"]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("acc_echo") && text.contains("IDEMPOTENT"),
        "{text}"
    );

    let out = run(&["tools", "--json"]);
    let value: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        value["tools"].as_array().unwrap().len(),
        ACCEPTANCE_TOOLS.len()
    );

    let out = run(&["call", "acc_echo", r#"{"message":"from the cli"}"#]);
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("from the cli"));

    let out = run(&["call", "acc_echo", r#"{"message": 1}"#]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("INVALID_ARGUMENTS") && err.contains("/message"),
        "{err}"
    );

    let out = run(&["health", "acc_echo"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("SERVING"));
    let out = run(&["health", "nope"]);
    assert_eq!(out.status.code(), Some(1));

    let out = run(&["snapshot", "--json"]);
    let value: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(value["version"].as_u64().unwrap() >= 1);

    let out = std::process::Command::new(toolmesh_bin())
        .args(["tools", "--server", "127.0.0.1:1"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(69), "unreachable server exits 69");
}

/// SIGTERM on `serve`: a call in flight finishes, new connections are
/// refused, and the process exits 0 within its grace period.
#[tokio::test]
async fn serve_drains_on_sigterm() {
    let (mut serve, addr) = serve(&["--grace-ms", "3000"]);
    let (dir, _exec, client) = acceptance_with_ledger(&addr, "drain", "acc_sleep").await;
    let ledger_path = dir.join("ledger.jsonl");
    let in_flight = {
        let mut client = client.clone();
        tokio::spawn(async move { invoke(&mut client, "acc_sleep", r#"{"ms": 800}"#, None).await })
    };
    until_sleeping(&ledger_path).await;
    let termed = Instant::now();
    serve.signal(libc::SIGTERM);
    serve.wait_for_line("draining in-flight calls", Duration::from_secs(5));
    // Soon after, a new client gets nothing from the draining server.
    eventually(
        "new connections refused while draining",
        Duration::from_secs(2),
        || {
            let addr = addr.clone();
            async move {
                let mut late = tonic::Request::new(toolmesh::pb::ListToolsRequest::default());
                late.set_timeout(Duration::from_millis(200));
                let channel =
                    toolmesh_transport::channel(&addr, &toolmesh_transport::Tls::none()).ok()?;
                toolmesh::pb::dispatcher_client::DispatcherClient::new(channel)
                    .list_tools(late)
                    .await
                    .is_err()
                    .then_some(())
            }
        },
    )
    .await;
    let response = in_flight.await.unwrap();
    assert_eq!(
        code(&response),
        0,
        "the in-flight call finished: {}",
        message(&response)
    );
    let exit = serve.wait_exit(toolmesh_testkit::patient(Duration::from_secs(4)));
    assert!(
        exit.is_some_and(|s| s.success()),
        "exited cleanly: {exit:?}"
    );
    assert!(
        termed.elapsed() < Duration::from_secs(8),
        "once the call ended, before the 10 s grace ran out"
    );
}

/// The acceptance example registered with `addr`, writing its ledger in a
/// temp dir labelled `label`, once `tool` is listed: the dir, the example
/// and a client of the dispatcher.
async fn acceptance_with_ledger(
    addr: &str,
    label: &str,
    tool: &str,
) -> (TempDir, Proc, DispatcherClient<Channel>) {
    let dir = temp_dir(label);
    let ledger = dir.join("ledger.jsonl");
    let example = example("acceptance", addr, &["--ledger", ledger.to_str().unwrap()]);
    let mut client = dispatcher(addr);
    until_listed(&mut client, &[tool], Duration::from_secs(10)).await;
    (dir, example, client)
}

/// Until the fixture's `acc_sleep` has written its ledger line, which it
/// does as it starts: a call is then in flight.
async fn until_sleeping(ledger_path: &std::path::Path) {
    eventually("acc_sleep running", Duration::from_secs(5), || {
        let started = ledger(ledger_path).iter().any(|l| l["tool"] == "acc_sleep");
        std::future::ready(started.then_some(()))
    })
    .await;
}

/// SIGTERM on `serve` with its MCP door: a `tools/call` in flight at the
/// door finishes with its result (the door's connections, served on the
/// gRPC lanes, drain before the lanes stop), and the process exits 0.
#[tokio::test]
async fn serve_drains_mcp_calls_on_sigterm() {
    let (mut serve, addr, mcp_url) = serve_with_mcp_door(&["--grace-ms", "3000"]);
    let (dir, _exec, _client) = acceptance_with_ledger(&addr, "drain-mcp", "acc_sleep").await;
    let ledger_path = dir.join("ledger.jsonl");
    let door = mcp_url
        .trim_start_matches("http://")
        .trim_end_matches("/mcp")
        .to_owned();
    let in_flight = tokio::task::spawn_blocking(move || {
        toolmesh_testkit::http(
            &door,
            "POST",
            "/mcp",
            &[
                ("content-type", "application/json"),
                ("accept", "application/json, text/event-stream"),
                ("mcp-protocol-version", "2025-11-25"),
            ],
            r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"acc_sleep","arguments":{"ms":800}}}"#,
        )
    });
    until_sleeping(&ledger_path).await;
    serve.signal(libc::SIGTERM);
    serve.wait_for_line("draining in-flight calls", Duration::from_secs(5));
    let (status, wire) = in_flight.await.unwrap();
    assert_eq!(status, 200, "{wire}");
    assert!(
        wire.contains(r#""id":3"#) && wire.contains(r#""result""#),
        "the call's answer: {wire}"
    );
    assert!(!wire.contains(r#""isError":true"#), "{wire}");
    let exit = serve.wait_exit(toolmesh_testkit::patient(Duration::from_secs(4)));
    assert!(
        exit.is_some_and(|s| s.success()),
        "exited cleanly: {exit:?}"
    );
}

/// `toolmesh example` listening on a wildcard without --advertise refuses
/// to start (exit 64, naming the address and --advertise); with
/// TOOLMESH_ADVERTISE it registers that address, which the registry
/// publishes in its snapshot.
#[tokio::test]
async fn example_advertises_a_reachable_address() {
    let (_serve, addr) = serve(&[]);
    let out = std::process::Command::new(toolmesh_bin())
        .args(["example", "knowledge", "--registry", &addr])
        .args(["--listen", "0.0.0.0:0"])
        .env_remove("TOOLMESH_ADVERTISE")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(64), "{stderr}");
    for part in ["0.0.0.0:0", "--advertise", "TOOLMESH_ADVERTISE"] {
        assert!(stderr.contains(part), "{part:?} missing from: {stderr}");
    }

    let mut command = std::process::Command::new(toolmesh_bin());
    command
        .args(["example", "knowledge", "--registry", &addr])
        .args(["--listen", "0.0.0.0:0"])
        .env("TOOLMESH_ADVERTISE", "127.0.0.1:1");
    let _exec = Proc::spawn("example knowledge", command);
    let snapshot = eventually("the advertised endpoint", Duration::from_secs(10), || {
        let addr = addr.clone();
        async move {
            let out = std::process::Command::new(toolmesh_bin())
                .args(["snapshot", "--json", "--server", &addr])
                .output()
                .ok()?;
            let text = String::from_utf8_lossy(&out.stdout).into_owned();
            text.contains("127.0.0.1:1").then_some(text)
        }
    })
    .await;
    assert!(!snapshot.contains("0.0.0.0"), "{snapshot}");
}

/// `--serve-threads 2`: two serve threads (thread per core), each with its
/// own executor connections; the connections are handed to both threads,
/// which both serve calls; the port stays the process' own (a second
/// process asking for it is refused); SIGTERM stops both threads cleanly.
#[tokio::test]
async fn serve_threads_share_the_port() {
    let mut mesh = acceptance(&["--serve-threads", "2", "--grace-ms", "2000"], &[]).await;
    // On-CPU time of each serve thread, in ns (`schedstat`), by name.
    let lanes = |pid: i32| -> std::collections::BTreeMap<String, u64> {
        std::fs::read_dir(format!("/proc/{pid}/task"))
            .unwrap()
            .flatten()
            .filter_map(|task| {
                let name = std::fs::read_to_string(task.path().join("comm")).ok()?;
                let name = name.trim().to_owned();
                let ran = std::fs::read_to_string(task.path().join("schedstat")).ok()?;
                let ran = ran.split_whitespace().next()?.parse().ok()?;
                name.starts_with("serve-lane-").then_some((name, ran))
            })
            .collect()
    };
    let before = lanes(mesh.serve.pid());
    assert_eq!(
        before.keys().collect::<Vec<_>>(),
        ["serve-lane-1", "serve-lane-2"]
    );
    let mut calls = tokio::task::JoinSet::new();
    for i in 0..16 {
        // A channel per task: a connection of its own.
        let mut client = dispatcher(&mesh.addr);
        calls.spawn(async move {
            for j in 0..3 {
                let text = format!("c{i}-{j}");
                let arguments = serde_json::json!({ "message": text }).to_string();
                let deadline = Some(Duration::from_secs(10));
                let response = invoke(&mut client, "acc_echo", &arguments, deadline).await;
                assert_eq!(code(&response), 0, "{}", message(&response));
                assert!(response.result.unwrap().output.contains(&text));
            }
        });
    }
    while let Some(done) = calls.join_next().await {
        done.unwrap();
    }
    let after = lanes(mesh.serve.pid());
    for (lane, ran) in &before {
        assert!(
            after[lane] > *ran,
            "{lane} served no call: {before:?} -> {after:?}"
        );
    }
    let second = std::process::Command::new(toolmesh_bin())
        .args(["serve", "--listen", &mesh.addr, "--serve-threads", "2"])
        .output()
        .unwrap();
    assert!(!second.status.success(), "a second serve took the port too");
    let said = String::from_utf8_lossy(&second.stderr);
    assert!(said.contains(&mesh.addr), "{said}");
    mesh.serve.signal(libc::SIGTERM);
    let exit = mesh
        .serve
        .wait_exit(toolmesh_testkit::patient(Duration::from_secs(5)));
    assert!(
        exit.is_some_and(|s| s.success()),
        "exited cleanly: {exit:?}"
    );
}
