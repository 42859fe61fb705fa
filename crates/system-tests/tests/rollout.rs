//! Rollouts (canaries) end to end over real processes: a share of 2,000
//! distinct callers gets the canary, each caller stays on its version and
//! sees that version's schema, `toolmesh rollout set/promote/abort/status`
//! work and survive a registry restart, the audit log records every
//! decision, and a failing canary aborts itself through a dispatcher that
//! follows the registry.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use tonic::transport::Channel;
use toolmesh::pb::{
    CallContext, ExplainRequest, InvokeRequest, ListToolsRequest, ToolFormat,
    dispatcher_client::DispatcherClient, governance_client::GovernanceClient,
};
use toolmesh_system_tests::*;

/// Callers in the share test.
const CALLERS: usize = 2_000;
/// Calls each caller makes in the stickiness check.
const CALLS_EACH: usize = 50;

/// A policy of `callers` agents `tok-N` (principal `p-N`, tenant acme), an
/// admin, an executor and a dispatcher token; anonymous callers are agents
/// of tenant dev.
fn policy(callers: usize) -> String {
    let mut policy = PolicyBuilder::new()
        .anonymous("anonymous", "dev", &["agent"])
        .caller(
            Caller::token("tok-admin", "ops")
                .tenant("acme")
                .roles(&["admin", "agent"]),
        )
        .caller(Caller::token("tok-exec", "acc-team").roles(&["executor"]))
        .caller(Caller::token("tok-dispatcher", "dispatcher-1").roles(&["dispatcher"]))
        .grant("agents", &["agent"], &["*"]);
    for i in 0..callers {
        policy = policy.caller(
            Caller::token(&format!("tok-{i}"), &format!("p-{i}"))
                .tenant("acme")
                .roles(&["agent"]),
        );
    }
    policy.build_toml()
}

/// `serve` under [`policy`]`(callers)` with acc_echo 1.0.0 and 2.0.0
/// registered and listed; kept running while it lives.
struct TwoVersions {
    _dir: TempDir,
    _serve: Proc,
    _executors: [Proc; 2],
    addr: String,
    client: DispatcherClient<Channel>,
}

async fn two_versions(label: &str, callers: usize) -> TwoVersions {
    let dir = temp_dir(label);
    let policy_path = dir.join("policy.toml");
    std::fs::write(&policy_path, policy(callers)).unwrap();
    let (serve, addr) = serve(&["--policy", policy_path.to_str().unwrap()]);
    let executors = [
        executor_at(&addr, "1.0.0", &[]),
        executor_at(&addr, "2.0.0", &[]),
    ];
    let mut client = dispatcher(&addr);
    until_listed(&mut client, &["acc_echo"], Duration::from_secs(10)).await;
    TwoVersions {
        _dir: dir,
        _serve: serve,
        _executors: executors,
        addr,
        client,
    }
}

/// `toolmesh ARGS…` against `addr` as the admin; its stdout, or a panic
/// with its stderr.
fn cli(addr: &str, args: &[&str]) -> String {
    let out = cli_as(addr, "tok-admin", args);
    assert!(
        out.status.success(),
        "toolmesh {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `toolmesh rollout status --json`, parsed.
fn status(addr: &str) -> serde_json::Value {
    serde_json::from_str(&cli(addr, &["rollout", "status", "--json"])).expect("status JSON")
}

/// The acceptance executor at `version` registering with `addr`.
fn executor_at(addr: &str, version: &str, extra: &[&str]) -> Proc {
    let mut args = vec![
        "--token",
        "tok-exec",
        "--ttl-ms",
        "1000",
        "--tool-version",
        version,
    ];
    args.extend_from_slice(extra);
    example("acceptance", addr, &args)
}

/// What one caller sees of `acc_echo`: the version listed (and whether its
/// schema has `shout`, which only 2.x has) and the version each call ran.
async fn seen(
    client: &mut DispatcherClient<Channel>,
    token: &str,
    calls: usize,
) -> (String, bool, Vec<String>) {
    let listing = client
        .list_tools(with_token(
            ListToolsRequest {
                format: ToolFormat::Native as i32,
                ..Default::default()
            },
            Some(token),
        ))
        .await
        .expect("ListTools")
        .into_inner();
    let spec = listing
        .tools
        .into_iter()
        .find(|t| t.name == "acc_echo")
        .expect("acc_echo listed");
    let mut ran = Vec::with_capacity(calls);
    for _ in 0..calls {
        let request = InvokeRequest {
            tool: "acc_echo".into(),
            arguments: r#"{"message":"hi"}"#.into(),
            ..Default::default()
        };
        let response = invoke_with_token(client, request, Some(token)).await;
        assert_eq!(code(&response), 0, "{}", message(&response));
        ran.push(response.tool_version);
    }
    (spec.version, spec.input_schema.contains("shout"), ran)
}

/// Every caller's view, from `workers` concurrent clients: caller index →
/// the version it was listed and ran (each call on the listed version).
async fn views(addr: &str, callers: usize, calls: usize) -> HashMap<usize, String> {
    let workers = 8;
    let mut tasks = tokio::task::JoinSet::new();
    for w in 0..workers {
        let mut client = dispatcher(addr);
        tasks.spawn(async move {
            let mut mine = Vec::new();
            for i in (w..callers).step_by(workers) {
                let (listed, shout, ran) = seen(&mut client, &format!("tok-{i}"), calls).await;
                assert_eq!(
                    shout,
                    listed.starts_with('2'),
                    "caller {i}: the listed schema is {listed}'s"
                );
                assert!(
                    ran.iter().all(|v| *v == listed),
                    "caller {i} listed {listed}, ran {ran:?}"
                );
                mine.push((i, listed));
            }
            mine
        });
    }
    let mut all = HashMap::new();
    while let Some(done) = tasks.join_next().await {
        all.extend(done.expect("a worker"));
    }
    all
}

fn canary_count(views: &HashMap<usize, String>) -> usize {
    views.values().filter(|v| *v == "2.0.0").count()
}

/// The rollout of acc_echo in a status answer.
fn echo_rollout(status: &serde_json::Value) -> serde_json::Value {
    status["rollouts"]
        .as_array()
        .and_then(|all| all.iter().find(|r| r["tool"] == "acc_echo"))
        .cloned()
        .unwrap_or_else(|| panic!("no acc_echo rollout in {status}"))
}

/// A rollout at 20 % routes 20 % ± 3 points of 2,000 callers, each on one
/// version across 50 calls with that version's schema listed; a bigger
/// share keeps every canary caller; explain and the result say which
/// version and why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_share_of_callers_gets_the_canary() {
    let mesh = two_versions("rollout-share", CALLERS).await;
    let (addr, mut client) = (mesh.addr.clone(), mesh.client.clone());

    let started = cli(
        &addr,
        &["rollout", "start", "acc_echo@2.0.0", "--percent", "20"],
    );
    assert!(
        started.contains("acc_echo@2.0.0: active at 20% of callers"),
        "{started}"
    );
    let timer = Instant::now();
    let at_20 = views(&addr, CALLERS, CALLS_EACH).await;
    let took = timer.elapsed();
    let canary = canary_count(&at_20);
    println!(
        "{canary} of {CALLERS} callers on the canary at 20% ({} calls in {took:?})",
        CALLERS * (CALLS_EACH + 1)
    );
    assert!(
        (340..=460).contains(&canary),
        "{canary} of {CALLERS} at 20%"
    );

    cli(&addr, &["rollout", "set", "acc_echo", "--percent", "50"]);
    let at_50 = views(&addr, CALLERS, 1).await;
    let canary = canary_count(&at_50);
    assert!(
        (940..=1060).contains(&canary),
        "{canary} of {CALLERS} at 50%"
    );
    for (i, version) in &at_20 {
        if version == "2.0.0" {
            assert_eq!(at_50[i], "2.0.0", "caller {i} left the canary when it grew");
        }
    }

    let in_canary = at_50
        .iter()
        .find(|(_, v)| *v == "2.0.0")
        .map(|(i, _)| *i)
        .unwrap();
    let token = format!("tok-{in_canary}");
    let response = invoke_with_token(
        &mut client,
        InvokeRequest {
            tool: "acc_echo".into(),
            arguments: r#"{"message":"hi","shout":true}"#.into(),
            ..Default::default()
        },
        Some(&token),
    )
    .await;
    assert_eq!(
        response.result.as_ref().unwrap().output,
        "HI",
        "{response:?}"
    );
    let metadata = &response.result.as_ref().unwrap().metadata;
    assert_eq!(metadata["toolmesh.version"], "2.0.0");
    assert_eq!(metadata["toolmesh.rollout"], "canary");
    assert_eq!(metadata["toolmesh.rollout_percent"], "50");
    let explained = GovernanceClient::new(
        toolmesh_transport::channel(&addr, &toolmesh_transport::Tls::none()).unwrap(),
    )
    .explain(with_token(
        ExplainRequest {
            tool: "acc_echo".into(),
            ..Default::default()
        },
        Some(&token),
    ))
    .await
    .unwrap()
    .into_inner();
    assert_eq!(explained.tool_version, "2.0.0");
    assert!(
        explained.rollout.contains("rolled out to 50% of callers")
            && explained.rollout.contains("gets canary acc_echo@2.0.0"),
        "{}",
        explained.rollout
    );
    let pinned = invoke_with_token(
        &mut client,
        InvokeRequest {
            tool: "acc_echo@1.0.0".into(),
            arguments: r#"{"message":"hi"}"#.into(),
            ..Default::default()
        },
        Some(&token),
    )
    .await;
    assert_eq!(
        pinned.tool_version, "1.0.0",
        "a named version bypasses the rollout"
    );

    let refused = cli_as(
        &addr,
        "tok-1",
        &["rollout", "set", "acc_echo", "--percent", "90"],
    );
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        !refused.status.success() && stderr.contains("\"admin\"") && stderr.contains("rollouts"),
        "{stderr}"
    );
}

/// Anonymous callers go by session: the same session gets the same
/// version on ListTools and Invoke.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anonymous_callers_stick_by_session() {
    let mesh = two_versions("rollout-sessions", 0).await;
    let (addr, mut client) = (mesh.addr.clone(), mesh.client.clone());
    cli(
        &addr,
        &["rollout", "start", "acc_echo@2.0.0", "--percent", "30"],
    );
    // The snapshot carries the rollout, and `toolmesh snapshot` shows it.
    let shown = cli(&addr, &["snapshot"]);
    assert!(
        shown.contains("rollout acc_echo@2.0.0: active at 30% of callers"),
        "{shown}"
    );
    let json: serde_json::Value =
        serde_json::from_str(&cli(&addr, &["snapshot", "--json"])).unwrap();
    assert_eq!(json["rollouts"][0]["canary_version"], "2.0.0", "{json}");
    let mut canary = 0;
    for s in 0..200 {
        let context = Some(CallContext {
            session_id: format!("run-{s}"),
            ..Default::default()
        });
        let listing = client
            .list_tools(ListToolsRequest {
                context: context.clone(),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        let listed = listing
            .tools
            .iter()
            .find(|t| t.name == "acc_echo")
            .unwrap()
            .version
            .clone();
        for _ in 0..3 {
            let response = client
                .invoke(InvokeRequest {
                    tool: "acc_echo".into(),
                    arguments: r#"{"message":"hi"}"#.into(),
                    context: context.clone(),
                    ..Default::default()
                })
                .await
                .unwrap()
                .into_inner();
            assert_eq!(response.tool_version, listed, "session run-{s}");
        }
        canary += usize::from(listed == "2.0.0");
    }
    assert!(
        (35..=85).contains(&canary),
        "{canary} of 200 sessions at 30%"
    );
    let sessionless = invoke(&mut client, "acc_echo", r#"{"message":"hi"}"#, None).await;
    assert_eq!(sessionless.tool_version, "1.0.0", "no session: stable");
}

/// The version every listed caller `tok-0..n` gets now.
async fn versions_of(addr: &str, n: usize) -> Vec<String> {
    views(addr, n, 1).await.into_values().collect()
}

/// Abort and promote through the CLI, each surviving a registry restart
/// (embedded store, data dir), each in the audit log.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abort_and_promote_survive_restarts() {
    let dir = temp_dir("rollout-restart");
    let policy_path = dir.join("policy.toml");
    std::fs::write(&policy_path, policy(100)).unwrap();
    let (data, audit) = (dir.join("data"), dir.join("audit.jsonl"));
    let args = |addr: &str| -> Vec<String> {
        [
            "serve",
            "--listen",
            addr,
            "--policy",
            policy_path.to_str().unwrap(),
            "--data-dir",
            data.to_str().unwrap(),
            "--audit",
            audit.to_str().unwrap(),
        ]
        .map(str::to_owned)
        .to_vec()
    };
    let first_args = args("127.0.0.1:0");
    let first_args: Vec<&str> = first_args.iter().map(String::as_str).collect();
    let mut serve1 = Proc::toolmesh("serve", &first_args);
    let addr = serve1.listen_addr();
    let _v1 = executor_at(&addr, "1.0.0", &[]);
    let _v2 = executor_at(&addr, "2.0.0", &[]);
    let mut client = dispatcher(&addr);
    until_listed(&mut client, &["acc_echo"], Duration::from_secs(10)).await;
    cli(
        &addr,
        &[
            "rollout",
            "start",
            "acc_echo@2.0.0",
            "--percent",
            "40",
            "--tenants",
            "acme",
        ],
    );
    let aborted = cli(
        &addr,
        &["rollout", "abort", "acc_echo", "--reason", "latency up"],
    );
    assert!(
        aborted.contains("aborted at 40%") && aborted.contains("latency up"),
        "{aborted}"
    );
    assert!(
        versions_of(&addr, 100).await.iter().all(|v| v == "1.0.0"),
        "aborted: all stable"
    );

    serve1.kill9();
    let restart = args(&addr);
    let restart: Vec<&str> = restart.iter().map(String::as_str).collect();
    let mut serve2 = restart_on("serve", &restart);
    let mut client = dispatcher(&addr);
    until_listed(&mut client, &["acc_echo"], Duration::from_secs(10)).await;
    eventually(
        "both versions registered again",
        Duration::from_secs(10),
        || async {
            let out = cli(&addr, &["rollout", "status", "--json"]);
            let status: serde_json::Value = serde_json::from_str(&out).ok()?;
            let rollout = echo_rollout(&status);
            (rollout["canary_exposed"] == true && rollout["stable_version"] == "1.0.0")
                .then_some(())
        },
    )
    .await;
    let kept = echo_rollout(&status(&addr));
    assert_eq!(
        (kept["state"].as_str(), kept["reason"].as_str()),
        (Some("aborted"), Some("latency up")),
        "{kept}"
    );
    assert!(
        versions_of(&addr, 100).await.iter().all(|v| v == "1.0.0"),
        "still aborted after the restart"
    );

    cli(
        &addr,
        &["rollout", "start", "acc_echo@2.0.0", "--percent", "10"],
    );
    let promoted = cli(&addr, &["rollout", "promote", "acc_echo"]);
    assert!(promoted.contains("promoted"), "{promoted}");
    serve2.kill9();
    let _serve3 = restart_on("serve", &restart);
    let mut client = dispatcher(&addr);
    until_listed(&mut client, &["acc_echo"], Duration::from_secs(10)).await;
    eventually(
        "2.0.0 for everyone after the promotion",
        Duration::from_secs(10),
        || async {
            // Until 2.0.0's executor has registered again a caller may be
            // listed 1.0.0 and, a moment later, run 2.0.0: wait for it.
            let status: serde_json::Value =
                serde_json::from_str(&cli(&addr, &["rollout", "status", "--json"])).ok()?;
            if echo_rollout(&status)["canary_exposed"] != true {
                return None;
            }
            versions_of(&addr, 100)
                .await
                .iter()
                .all(|v| v == "2.0.0")
                .then_some(())
        },
    )
    .await;
    assert_eq!(echo_rollout(&status(&addr))["state"], "promoted");
    let kinds: Vec<String> = std::fs::read_to_string(&audit)
        .unwrap()
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|r| {
            r["kind"]
                .as_str()
                .is_some_and(|k| k.starts_with("rollout_"))
        })
        .map(|r| {
            format!(
                "{} {} {}",
                r["kind"].as_str().unwrap(),
                r["caller"].as_str().unwrap(),
                r["rollout"]["percent"]
            )
        })
        .collect();
    assert_eq!(
        kinds,
        [
            "rollout_started ops 40.0",
            "rollout_aborted ops 40.0",
            "rollout_started ops 10.0",
            "rollout_promoted ops 10.0"
        ]
    );
}

/// Explain tells a caller whether a rollout covers it, never which other
/// tenants and principals it covers or who changed it; an admin learns it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explain_keeps_rollout_filters_from_callers() {
    let mesh = two_versions("rollout-filters", 2).await;
    let addr = mesh.addr.clone();
    cli(
        &addr,
        &[
            "rollout",
            "start",
            "acc_echo@2.0.0",
            "--percent",
            "100",
            "--principals",
            "vip-ceo",
        ],
    );
    let explain = |token: &'static str, caller: Option<&'static str>| {
        let addr = addr.clone();
        async move {
            let mut request = with_token(
                ExplainRequest {
                    tool: "acc_echo".into(),
                    caller_token: caller.unwrap_or_default().into(),
                    ..Default::default()
                },
                Some(token),
            );
            request.set_timeout(Duration::from_secs(30));
            GovernanceClient::new(
                toolmesh_transport::channel(&addr, &toolmesh_transport::Tls::none()).unwrap(),
            )
            .explain(request)
            .await
            .unwrap()
            .into_inner()
            .rollout
        }
    };
    let told = explain("tok-0", None).await;
    assert!(
        told.contains("does not cover this caller") && !told.contains("vip-ceo"),
        "{told}"
    );
    let operator = explain("tok-admin", Some("tok-0")).await;
    assert!(operator.contains("vip-ceo"), "{operator}");
}

/// A canary that fails (UNAVAILABLE on every call) is aborted by the
/// dispatcher that sees it fail — a separate process following the
/// registry — and `rollout status` and the registry's audit log say so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_canary_aborts_itself() {
    let dir = temp_dir("rollout-abort");
    let policy_path = dir.join("policy.toml");
    std::fs::write(&policy_path, policy(0)).unwrap();
    let policy_arg = policy_path.to_str().unwrap();
    let audit = dir.join("registry-audit.jsonl");
    let (_registry, registry_addr) =
        registry(&["--policy", policy_arg, "--audit", audit.to_str().unwrap()]);
    let (_dispatcher, addr) = dispatcher_for(
        &registry_addr,
        &["--registry-token", "tok-dispatcher", "--policy", policy_arg],
    );
    let _v1 = executor_at(&registry_addr, "1.0.0", &[]);
    let _v2 = executor_at(&registry_addr, "2.0.0", &["--unavailable", "acc_echo"]);
    let mut client = dispatcher(&addr);
    until_listed(&mut client, &["acc_echo"], Duration::from_secs(10)).await;
    eventually("2.0.0 registered", Duration::from_secs(10), || async {
        invoke(
            &mut client.clone(),
            "acc_echo@2.0.0",
            r#"{"message":"x"}"#,
            None,
        )
        .await
        .tool_version
        .eq("2.0.0")
        .then_some(())
    })
    .await;
    cli(
        &registry_addr,
        &[
            "rollout",
            "start",
            "acc_echo@2.0.0",
            "--percent",
            "50",
            "--min-calls",
            "10",
            "--max-error-margin",
            "0.2",
        ],
    );
    // Every failed call counts towards the canary's minimum, the probes
    // that wait for the dispatcher to follow the rollout included (on a
    // loaded machine they are many, and some reach the canary).
    let failed = Arc::new(AtomicUsize::new(0));
    eventually(
        "the dispatcher follows the rollout",
        Duration::from_secs(10),
        || async {
            let r = call_in_session(&mut client.clone(), "probe-0").await;
            failed.fetch_add(usize::from(code(&r) != 0), Ordering::Relaxed);
            r.result
                .as_ref()?
                .metadata
                .contains_key("toolmesh.rollout")
                .then_some(())
        },
    )
    .await;
    let started = Instant::now();
    let aborted = eventually(
        "the rollout aborted itself",
        Duration::from_secs(30),
        || {
            let mut client = client.clone();
            let registry_addr = registry_addr.clone();
            let failed = failed.clone();
            async move {
                for s in 0..20 {
                    let response = call_in_session(&mut client, &format!("run-{s}")).await;
                    failed.fetch_add(usize::from(code(&response) != 0), Ordering::Relaxed);
                }
                let rollout = echo_rollout(&status(&registry_addr));
                (rollout["state"] == "aborted").then_some(rollout)
            }
        },
    )
    .await;
    let failed = failed.load(Ordering::Relaxed);
    println!(
        "the canary aborted itself after {failed} failed calls, {:?} after the first",
        started.elapsed()
    );
    assert!(
        failed >= 10,
        "the canary failed {failed} calls before its abort"
    );
    assert_eq!(aborted["automatic"], true, "{aborted}");
    assert_eq!(aborted["changed_by"], "dispatcher-1", "{aborted}");
    let reason = aborted["reason"].as_str().unwrap();
    assert!(
        reason.starts_with("canary acc_echo@2.0.0 failed: its error rate was")
            && reason.contains("20.0-point margin"),
        "{reason}"
    );
    let table = cli(&registry_addr, &["rollout", "status"]);
    assert!(table.contains("aborted (automatic)"), "{table}");
    eventually(
        "every session back on 1.0.0",
        Duration::from_secs(10),
        || {
            let mut client = client.clone();
            async move {
                for s in 0..20 {
                    let response = call_in_session(&mut client, &format!("run-{s}")).await;
                    if code(&response) != 0 || response.tool_version != "1.0.0" {
                        return None;
                    }
                }
                Some(())
            }
        },
    )
    .await;
    let record = std::fs::read_to_string(&audit)
        .unwrap()
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|r| r["kind"] == "rollout_aborted")
        .expect("the abort in the registry's audit log");
    assert_eq!(
        (
            record["caller"].as_str(),
            record["rollout"]["automatic"].as_bool()
        ),
        (Some("dispatcher-1"), Some(true)),
        "{record}"
    );
    assert_eq!(record["reason"].as_str(), Some(reason));
}

/// `acc_echo` as the anonymous caller in session `session`.
async fn call_in_session(
    client: &mut DispatcherClient<Channel>,
    session: &str,
) -> toolmesh::pb::InvokeResponse {
    client
        .invoke(InvokeRequest {
            tool: "acc_echo".into(),
            arguments: r#"{"message":"hi"}"#.into(),
            context: Some(CallContext {
                session_id: session.into(),
                ..Default::default()
            }),
            ..Default::default()
        })
        .await
        .expect("invoke")
        .into_inner()
}
