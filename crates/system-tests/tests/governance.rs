//! Governance end to end over real processes: caller identity and
//! projection, forged calls to hidden tools, approvals (asked, approved,
//! single use, bound to the arguments, expired), rate limits, session
//! preconditions with the file tools, audit records, disable/enable across a
//! registry restart, and pinned snapshots.

use std::path::Path;
use std::time::Duration;
use tonic::transport::Channel;
use toolmesh::pb::{
    ApproveRequest, CallContext, ErrorCode, GetSnapshotRequest, InvokeRequest, InvokeResponse,
    ListApprovalsRequest, ListToolsRequest, dispatcher_client::DispatcherClient,
    governance_client::GovernanceClient,
};
use toolmesh_system_tests::*;

fn governed_policy() -> String {
    acme_policy()
        .grant(
            "agents: echo, charge and the file tools",
            &["agent"],
            &["acc_echo", "acc_charge", "*_file", "list_files"],
        )
        .then(
            r#"[approval]
approver_roles = ["approver"]
ttl_secs = 2
require_for_risk = "HIGH"
require_for_tools = ["acc_charge"]

[[limits]]
tool = "acc_echo"
per = "caller"
rate_per_sec = 0.5
burst = 3
"#,
        )
        .build_toml()
}

struct Governed {
    serve: Proc,
    _examples: Vec<Proc>,
    addr: String,
    ledger: std::path::PathBuf,
    audit: std::path::PathBuf,
    files: std::path::PathBuf,
    _dir: TempDir,
}

fn start(label: &str) -> Governed {
    let dir = temp_dir(label);
    let policy = dir.join("policy.toml");
    std::fs::write(&policy, governed_policy()).unwrap();
    let (ledger, audit, files) = (
        dir.join("ledger.jsonl"),
        dir.join("audit.jsonl"),
        dir.join("files"),
    );
    std::fs::create_dir_all(&files).unwrap();
    std::fs::write(files.join("notes.txt"), "one two two three\n").unwrap();
    let (serve, addr) = serve(&[
        "--policy",
        policy.to_str().unwrap(),
        "--audit",
        audit.to_str().unwrap(),
    ]);
    let acceptance = example(
        "acceptance",
        &addr,
        &["--token", "tok-exec", "--ledger", ledger.to_str().unwrap()],
    );
    let file_tools = example(
        "files",
        &addr,
        &[
            "--token",
            "tok-exec",
            "--files-root",
            files.to_str().unwrap(),
        ],
    );
    Governed {
        serve,
        _examples: vec![acceptance, file_tools],
        addr,
        ledger,
        audit,
        files,
        _dir: dir,
    }
}

async fn call(
    client: &mut DispatcherClient<Channel>,
    token: &str,
    tool: &str,
    arguments: &str,
    session: &str,
    approval: &str,
) -> InvokeResponse {
    let request = InvokeRequest {
        tool: tool.into(),
        arguments: arguments.into(),
        context: Some(CallContext {
            session_id: session.into(),
            ..Default::default()
        }),
        approval_id: approval.into(),
        ..Default::default()
    };
    invoke_with_token(client, request, Some(token)).await
}

async fn listed_as(
    client: &mut DispatcherClient<Channel>,
    token: Option<&str>,
) -> Result<Vec<String>, tonic::Code> {
    client
        .list_tools(with_token(ListToolsRequest::default(), token))
        .await
        .map(|r| r.into_inner().tools.into_iter().map(|t| t.name).collect())
        .map_err(|s| s.code())
}

async fn wait_registered(client: &mut DispatcherClient<Channel>) {
    eventually("tools registered", Duration::from_secs(10), || {
        let mut client = client.clone();
        async move {
            let names = listed_as(&mut client, Some("tok-agent")).await.ok()?;
            (names.len() == 6).then_some(())
        }
    })
    .await;
}

fn audit_lines(path: &Path) -> Vec<serde_json::Value> {
    ledger(path)
}

/// Each caller lists only what the policy grants it; a hidden tool named
/// directly is denied and never runs; callers without a valid token are
/// refused; suggestions never leak hidden names; explain names the rule.
#[tokio::test]
async fn projection_and_forged_calls() {
    let mesh = start("projection");
    let mut client = dispatcher(&mesh.addr);
    wait_registered(&mut client).await;
    let agent = listed_as(&mut client, Some("tok-agent")).await.unwrap();
    assert_eq!(
        agent,
        [
            "acc_charge",
            "acc_echo",
            "edit_file",
            "list_files",
            "read_file",
            "write_file"
        ]
    );
    assert_eq!(
        listed_as(&mut client, Some("tok-approver")).await.unwrap(),
        Vec::<String>::new()
    );
    assert_eq!(
        listed_as(&mut client, None).await,
        Err(tonic::Code::Unauthenticated)
    );
    assert_eq!(
        listed_as(&mut client, Some("tok-forged")).await,
        Err(tonic::Code::Unauthenticated)
    );

    // Per-tool health tells a caller only about tools it may see: a hidden
    // tool answers exactly like a name that does not exist.
    let mut health = tonic_health::pb::health_client::HealthClient::new(
        toolmesh_transport::channel(&mesh.addr, &toolmesh_transport::Tls::none()).unwrap(),
    );
    for (token, tool, serving) in [
        (Some("tok-agent"), "acc_echo", true),
        (Some("tok-agent"), "acc_sleep", false),
        (Some("tok-agent"), "no_such_tool", false),
        (None, "acc_echo", false),
    ] {
        let request = tonic_health::pb::HealthCheckRequest {
            service: toolmesh_transport::tool_health_service(tool),
        };
        let answer = health.check(with_token(request, token)).await;
        match answer {
            Ok(status) => {
                assert!(serving, "{token:?} {tool}");
                assert_eq!(
                    status.into_inner().status,
                    tonic_health::ServingStatus::Serving as i32
                );
            }
            Err(status) => {
                assert!(!serving, "{token:?} {tool}: {status:?}");
                assert_eq!(status.code(), tonic::Code::NotFound);
                assert_eq!(status.message(), "service not registered");
            }
        }
    }

    // A hidden name is answered as a name that does not exist: the same
    // code and words (close names only among the caller's tools), so no
    // caller can tell a hidden tool from a missing one.
    let forged = call(&mut client, "tok-agent", "acc_panic", "{}", "", "").await;
    let absent = call(&mut client, "tok-agent", "zzz_absent", "{}", "", "").await;
    assert_eq!(
        code(&forged),
        ErrorCode::NotFound as i32,
        "{}",
        message(&forged)
    );
    assert_eq!(code(&absent), code(&forged));
    assert_eq!(
        message(&forged),
        "no tool named \"acc_panic\"; did you mean \"acc_charge\"?"
    );
    assert_eq!(
        message(&absent),
        "no tool named \"zzz_absent\"; list the tools to see what exists"
    );
    assert_eq!(forged.attempts, 0);
    let unknown = call(&mut client, "tok-agent", "acc_pani", "{}", "", "").await;
    assert_eq!(code(&unknown), ErrorCode::NotFound as i32);
    assert!(
        !message(&unknown).contains("acc_panic"),
        "hidden name leaked: {}",
        message(&unknown)
    );
    assert!(
        ledger(&mesh.ledger)
            .iter()
            .all(|l| l["tool"] != "acc_panic"),
        "a denied call ran"
    );

    // `toolmesh explain TOOL` as `token`, about the caller `about` holds.
    let explain = |token: &str, about: Option<&str>, tool: &str| {
        let mut args = vec!["explain", "--server", &mesh.addr, "--token", token];
        if let Some(about) = about {
            args.extend(["--caller", about]);
        }
        args.push(tool);
        std::process::Command::new(toolmesh_bin())
            .args(args)
            .output()
            .unwrap()
    };
    // Explaining a hidden tool tells an agent what an unknown name does.
    let hidden = explain("tok-agent", None, "acc_panic");
    assert!(!hidden.status.success());
    assert!(
        String::from_utf8_lossy(&hidden.stderr)
            .ends_with("not found: no tool named \"acc_panic\"; did you mean \"acc_charge\"?\n"),
        "{}",
        String::from_utf8_lossy(&hidden.stderr)
    );
    let visible =
        String::from_utf8_lossy(&explain("tok-agent", None, "acc_echo").stdout).to_string();
    assert!(
        visible.contains("VISIBLE") && visible.contains("agents: echo, charge and the file tools"),
        "{visible}"
    );
    // Another token's principal and roles are for admins to learn, not agents.
    let nosy = explain("tok-agent", Some("tok-approver"), "acc_echo");
    assert!(!nosy.status.success());
    let said = String::from_utf8_lossy(&nosy.stderr).to_string();
    assert!(
        said.contains("may not explain another caller") && !said.contains("alice"),
        "{said}"
    );
    let admin = explain("tok-approver", Some("tok-agent"), "acc_echo");
    let shown = String::from_utf8_lossy(&admin.stdout).to_string();
    assert!(
        shown.contains("support-bot") && shown.contains("VISIBLE"),
        "{shown}"
    );
    // An admin still learns why the agent cannot see it.
    let why = explain("tok-approver", Some("tok-agent"), "acc_panic");
    let why = String::from_utf8_lossy(&why.stdout).to_string();
    assert!(why.contains("DENIED"), "{why}");
    let audit = audit_lines(&mesh.audit);
    let denial = audit
        .iter()
        .find(|r| r["kind"] == "denied" && r["tool"] == "acc_panic")
        .expect("denial audited");
    assert_eq!(denial["caller"], "support-bot");
    assert_eq!(denial["outcome"], "PERMISSION_DENIED");
}

/// Approval end to end: asked, listed, approved by an approver (not the
/// caller), bound to the arguments, single use, and expiring.
#[tokio::test]
async fn approval_flow() {
    let mesh = start("approval");
    let mut client = dispatcher(&mesh.addr);
    wait_registered(&mut client).await;
    let mut governance = GovernanceClient::new(
        toolmesh_transport::channel(&mesh.addr, &toolmesh_transport::Tls::none()).unwrap(),
    );
    let args = r#"{"account": "acme-1", "cents": 500}"#;

    let asked = call(&mut client, "tok-agent", "acc_charge", args, "", "").await;
    assert_eq!(
        code(&asked),
        ErrorCode::ApprovalRequired as i32,
        "{}",
        message(&asked)
    );
    let id = asked
        .result
        .as_ref()
        .unwrap()
        .error
        .as_ref()
        .unwrap()
        .approval_id
        .clone();
    assert!(!id.is_empty());
    assert!(
        message(&asked).contains(&format!("toolmesh approve {id}")),
        "{}",
        message(&asked)
    );
    let again = call(&mut client, "tok-agent", "acc_charge", args, "", "").await;
    assert_eq!(
        again.result.unwrap().error.unwrap().approval_id,
        id,
        "asking again returns the pending approval"
    );

    let pending = governance
        .list_approvals(with_token(ListApprovalsRequest {}, Some("tok-approver")))
        .await
        .unwrap()
        .into_inner()
        .approvals;
    assert!(pending.iter().any(|a| a.id == id && a.tool == "acc_charge"));
    let self_approval = governance
        .approve(with_token(
            ApproveRequest { id: id.clone() },
            Some("tok-agent"),
        ))
        .await;
    assert!(
        self_approval.is_err(),
        "the agent cannot approve its own call"
    );
    let before = call(&mut client, "tok-agent", "acc_charge", args, "", &id).await;
    assert_eq!(
        code(&before),
        ErrorCode::ApprovalRequired as i32,
        "not yet approved"
    );
    governance
        .approve(with_token(
            ApproveRequest { id: id.clone() },
            Some("tok-approver"),
        ))
        .await
        .unwrap();

    let other_args = call(
        &mut client,
        "tok-agent",
        "acc_charge",
        r#"{"account": "acme-1", "cents": 9999}"#,
        "",
        &id,
    )
    .await;
    assert_eq!(
        code(&other_args),
        ErrorCode::ApprovalRequired as i32,
        "bound to the arguments"
    );
    let ran = call(&mut client, "tok-agent", "acc_charge", args, "", &id).await;
    assert_eq!(code(&ran), 0, "{}", message(&ran));
    let reused = call(&mut client, "tok-agent", "acc_charge", args, "", &id).await;
    assert_eq!(
        code(&reused),
        ErrorCode::ApprovalRequired as i32,
        "single use"
    );
    let charges = ledger(&mesh.ledger)
        .into_iter()
        .filter(|l| l["tool"] == "acc_charge")
        .count();
    assert_eq!(charges, 1, "the approved call ran exactly once");

    let args2 = r#"{"account": "acme-2", "cents": 1}"#;
    let asked = call(&mut client, "tok-agent", "acc_charge", args2, "", "").await;
    let id2 = asked.result.unwrap().error.unwrap().approval_id;
    governance
        .approve(with_token(
            ApproveRequest { id: id2.clone() },
            Some("tok-approver"),
        ))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(2300)).await;
    let expired = call(&mut client, "tok-agent", "acc_charge", args2, "", &id2).await;
    assert_eq!(
        code(&expired),
        ErrorCode::ApprovalRequired as i32,
        "expired after 2 s"
    );
    assert!(
        message(&expired).contains(&format!("approval {id2} for acc_charge expired")),
        "refused because it expired, not because it was never approved: {}",
        message(&expired)
    );

    let audit = audit_lines(&mesh.audit);
    for kind in ["approval_requested", "approval_granted", "invoke"] {
        assert!(audit.iter().any(|r| r["kind"] == kind), "{kind} audited");
    }
    let record = audit
        .iter()
        .find(|r| r["kind"] == "invoke" && r["outcome"] == "OK")
        .expect("the approved call is audited");
    for field in [
        "time",
        "call_id",
        "caller",
        "tenant",
        "tool",
        "version",
        "snapshot_version",
        "executor_id",
        "attempts",
        "duration_ms",
    ] {
        assert!(record.get(field).is_some(), "audit field {field}");
    }
    assert_eq!(record["approval_id"], id.as_str());
    assert_eq!(record["arguments_sha256"].as_str().unwrap().len(), 64);
    assert!(
        record.get("arguments").is_none(),
        "raw arguments only for tools that allow it"
    );
}

/// Over the per-caller rate, calls get RATE_LIMITED with a retry-after hint
/// and never reach the executor.
#[tokio::test]
async fn rate_limited() {
    let mesh = start("rate");
    let mut client = dispatcher(&mesh.addr);
    wait_registered(&mut client).await;
    let mut codes = Vec::new();
    for i in 0..5 {
        let r = call(
            &mut client,
            "tok-agent",
            "acc_echo",
            &format!(r#"{{"message":"{i}"}}"#),
            "",
            "",
        )
        .await;
        if code(&r) == ErrorCode::RateLimited as i32 {
            assert!(
                r.result
                    .as_ref()
                    .unwrap()
                    .error
                    .as_ref()
                    .unwrap()
                    .retry_after_ms
                    > 0
            );
        }
        codes.push(code(&r));
    }
    assert_eq!(&codes[..3], &[0, 0, 0], "the burst passes");
    assert!(
        codes[3..]
            .iter()
            .all(|c| *c == ErrorCode::RateLimited as i32),
        "{codes:?}"
    );
    let ran = ledger(&mesh.ledger)
        .into_iter()
        .filter(|l| l["tool"] == "acc_echo")
        .count();
    assert_eq!(ran, 3);
}

/// edit_file before read_file in a session is refused with what to call
/// first; after reading the same path it works; the unique-match rule holds.
#[tokio::test]
async fn preconditions_with_file_tools() {
    let mesh = start("preconditions");
    let mut client = dispatcher(&mesh.addr);
    wait_registered(&mut client).await;
    let edit = r#"{"path": "notes.txt", "old_string": "one", "new_string": "1"}"#;
    let refused = call(&mut client, "tok-agent", "edit_file", edit, "s-1", "").await;
    assert_eq!(
        code(&refused),
        ErrorCode::PreconditionFailed as i32,
        "{}",
        message(&refused)
    );
    assert!(
        message(&refused).contains("call read_file on path \"notes.txt\" first"),
        "{}",
        message(&refused)
    );

    let read = call(
        &mut client,
        "tok-agent",
        "read_file",
        r#"{"path": "notes.txt"}"#,
        "s-1",
        "",
    )
    .await;
    assert_eq!(code(&read), 0, "{}", message(&read));
    let other_session = call(&mut client, "tok-agent", "edit_file", edit, "s-2", "").await;
    assert_eq!(code(&other_session), ErrorCode::PreconditionFailed as i32);
    let ambiguous = call(
        &mut client,
        "tok-agent",
        "edit_file",
        r#"{"path": "notes.txt", "old_string": "two", "new_string": "2"}"#,
        "s-1",
        "",
    )
    .await;
    assert_eq!(
        code(&ambiguous),
        ErrorCode::ToolError as i32,
        "{}",
        message(&ambiguous)
    );
    let edited = call(&mut client, "tok-agent", "edit_file", edit, "s-1", "").await;
    assert_eq!(code(&edited), 0, "{}", message(&edited));
    let text = std::fs::read_to_string(mesh.files.join("notes.txt")).unwrap();
    assert_eq!(text, "1 two two three\n");
}

/// `toolmesh disable` takes a tool out (DISABLED with the reason), the
/// switch survives a registry restart, and `toolmesh enable` brings it back;
/// each switch is in the audit log before it is answered (the first
/// process is SIGKILLed right after disabling).
#[tokio::test]
async fn disable_survives_registry_restart() {
    let dir = temp_dir("disable");
    let data = dir.join("data");
    let data_arg = data.to_str().unwrap().to_owned();
    let audit = dir.join("audit.jsonl");
    let audit_arg = audit.to_str().unwrap().to_owned();
    let (mut serve1, addr) = serve(&["--data-dir", &data_arg, "--audit", &audit_arg]);
    let _exec = example("acceptance", &addr, &["--ttl-ms", "1000"]);
    let mut client = dispatcher(&addr);
    until_listed(&mut client, &["acc_echo"], Duration::from_secs(10)).await;
    let cli = |args: &[&str]| {
        std::process::Command::new(toolmesh_bin())
            .args(args)
            .env("TOOLMESH_SERVER", &addr)
            .output()
            .unwrap()
    };
    let out = cli(&["disable", "acc_echo", "--reason", "incident 7"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let disabled = invoke(&mut client, "acc_echo", r#"{"message":"x"}"#, None).await;
    assert_eq!(code(&disabled), ErrorCode::Disabled as i32);
    assert!(
        message(&disabled).contains("incident 7"),
        "{}",
        message(&disabled)
    );
    assert!(
        !listed(&mut client)
            .await
            .unwrap()
            .contains(&"acc_echo".to_owned())
    );

    serve1.kill9();
    let switches = |kind: &str| -> Vec<serde_json::Value> {
        audit_lines(&audit)
            .into_iter()
            .filter(|r| r["kind"] == kind)
            .collect()
    };
    let disabled = switches("tool_disabled");
    assert_eq!(disabled.len(), 1, "{disabled:?}");
    assert_eq!(disabled[0]["tool"], "acc_echo");
    assert_eq!(disabled[0]["reason"], "incident 7");
    assert!(!disabled[0]["caller"].as_str().unwrap_or("").is_empty());
    let _serve2 = restart_on(
        "serve",
        &[
            "serve",
            "--listen",
            &addr,
            "--data-dir",
            &data_arg,
            "--audit",
            &audit_arg,
        ],
    );
    let mut client = dispatcher(&addr);
    until_listed(&mut client, &["acc_charge"], Duration::from_secs(5)).await;
    let still = invoke(&mut client, "acc_echo", r#"{"message":"x"}"#, None).await;
    assert_eq!(
        code(&still),
        ErrorCode::Disabled as i32,
        "disabled across the restart"
    );
    let out = cli(&["enable", "acc_echo"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let back = invoke(&mut client, "acc_echo", r#"{"message":"x"}"#, None).await;
    assert_eq!(code(&back), 0, "{}", message(&back));
    let enabled = switches("tool_enabled");
    assert_eq!(enabled.len(), 1, "{enabled:?}");
    assert_eq!(enabled[0]["tool"], "acc_echo");
}

/// `acc_echo` pinned to snapshot `version`.
async fn echo_pinned(client: &mut DispatcherClient<Channel>, version: u64) -> InvokeResponse {
    client
        .invoke(InvokeRequest {
            tool: "acc_echo".into(),
            arguments: r#"{"message":"pinned"}"#.into(),
            snapshot_version: version,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
}

/// A call pinned to the snapshot a listing returned runs; a pin the
/// dispatcher no longer holds is FAILED_PRECONDITION naming what it holds.
#[tokio::test]
async fn pinned_snapshots() {
    let mesh = acceptance(&[], &[]).await;
    let mut client = mesh.client.clone();
    let version = client
        .list_tools(ListToolsRequest::default())
        .await
        .unwrap()
        .into_inner()
        .snapshot_version;
    let pinned = echo_pinned(&mut client, version).await;
    assert_eq!(code(&pinned), 0);
    assert_eq!(pinned.snapshot_version, version);
    let expired = client
        .invoke(InvokeRequest {
            tool: "acc_echo".into(),
            arguments: r#"{"message":"x"}"#.into(),
            snapshot_version: version + 1000,
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(expired.code(), tonic::Code::FailedPrecondition);
    assert!(
        expired.message().contains("list the tools again"),
        "{}",
        expired.message()
    );

    // A pin fixes the specs, never the kill switch: once an operator
    // disables the tool, the saved version neither lists nor runs it.
    let out = std::process::Command::new(toolmesh_bin())
        .args(["disable", "acc_echo", "--reason", "incident 9"])
        .env("TOOLMESH_SERVER", &mesh.addr)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let pinned = echo_pinned(&mut client, version).await;
    assert_eq!(
        code(&pinned),
        ErrorCode::Disabled as i32,
        "{}",
        message(&pinned)
    );
    let listed: Vec<String> = client
        .list_tools(ListToolsRequest {
            snapshot_version: version,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .tools
        .into_iter()
        .map(|t| t.name)
        .collect();
    assert!(!listed.contains(&"acc_echo".to_owned()), "{listed:?}");
    assert!(listed.contains(&"acc_charge".to_owned()), "{listed:?}");
}

/// An agent that reads an executor's endpoint cannot skip the dispatcher:
/// the executor refuses Execute without the token the registry hands to
/// dispatchers only, while the same call through the dispatcher runs.
#[tokio::test]
async fn executors_accept_calls_from_dispatchers_only() {
    let mesh = acceptance(&[], &[]).await;
    let mut registry = toolmesh::pb::registry_client::RegistryClient::new(
        toolmesh_transport::channel(&mesh.addr, &toolmesh_transport::Tls::none()).unwrap(),
    );
    let echo = |snapshot: toolmesh::pb::Snapshot| {
        snapshot
            .tools
            .iter()
            .find(|t| t.spec.as_ref().is_some_and(|s| s.name == "acc_echo"))
            .map(|t| t.instances[0].clone())
            .unwrap()
    };
    // Under the development policy an anonymous caller reads snapshots as
    // an operator: no execute token, and no say on the approval book.
    let anonymous = echo(
        registry
            .get_snapshot(GetSnapshotRequest::default())
            .await
            .unwrap()
            .into_inner(),
    );
    assert!(anonymous.execute_token.is_empty(), "{anonymous:?}");
    let mut shared = toolmesh::pb::shared_records_client::SharedRecordsClient::new(
        toolmesh_transport::channel(&mesh.addr, &toolmesh_transport::Tls::none()).unwrap(),
    );
    let approve_own = shared
        .compare_and_put(toolmesh::pb::CompareAndPutRequest {
            record: Some(toolmesh::pb::SharedRecord {
                key: "approval/a-1".into(),
                revision: 0,
                value: Some(toolmesh::pb::shared_record::Value::Ticket(
                    toolmesh::pb::ApprovalTicket {
                        id: "a-1".into(),
                        state: toolmesh::pb::ApprovalState::Approved as i32,
                        decided_by: "dev-approver".into(),
                        ..Default::default()
                    },
                )),
            }),
            ttl_ms: 60_000,
        })
        .await
        .unwrap_err();
    assert_eq!(
        approve_own.code(),
        tonic::Code::PermissionDenied,
        "{approve_own:?}"
    );
    let read_book = shared
        .list(toolmesh::pb::ListSharedRecordsRequest {
            prefix: "approval/".into(),
            keys_only: false,
        })
        .await
        .unwrap_err();
    assert_eq!(
        read_book.code(),
        tonic::Code::PermissionDenied,
        "{read_book:?}"
    );
    // The token made for the run's dispatchers reads it.
    let instance = echo(
        registry
            .get_snapshot(with_token(
                GetSnapshotRequest::default(),
                Some(DEV_DISPATCHER_TOKEN),
            ))
            .await
            .unwrap()
            .into_inner(),
    );
    assert_eq!(instance.execute_token.len(), 64);
    let mut executor = toolmesh::pb::executor_client::ExecutorClient::new(
        toolmesh_transport::channel(&instance.endpoint, &toolmesh_transport::Tls::none()).unwrap(),
    );
    let execute = toolmesh::pb::ExecuteRequest {
        tool: "acc_echo".into(),
        arguments: r#"{"message":"direct"}"#.into(),
        ..Default::default()
    };
    for token in [None, Some("a-guess")] {
        let refused = executor
            .execute(with_token(execute.clone(), token))
            .await
            .unwrap_err();
        assert_eq!(refused.code(), tonic::Code::Unauthenticated, "{token:?}");
        assert!(refused.message().contains("through a dispatcher"));
    }
    let with_the_token = executor
        .execute(with_token(execute, Some(&instance.execute_token)))
        .await
        .unwrap()
        .into_inner();
    assert!(with_the_token.result.unwrap().error.is_none());
    let mut client = mesh.client.clone();
    let through = invoke(&mut client, "acc_echo", r#"{"message":"x"}"#, None).await;
    assert_eq!(code(&through), 0, "{}", message(&through));
}

/// Editing the policy file takes effect without a restart; a bad edit is
/// refused and the previous policy stays in force.
#[tokio::test]
async fn policy_reloads_on_change() {
    let mesh = start("reload");
    let mut client = dispatcher(&mesh.addr);
    wait_registered(&mut client).await;
    let policy = mesh._dir.join("policy.toml");
    let wider = governed_policy().replace(
        r#"tools = ["acc_echo", "acc_charge", "*_file", "list_files"]"#,
        r#"tools = ["acc_*", "*_file", "list_files"]"#,
    );
    std::fs::write(&policy, wider).unwrap();
    eventually("the wider grant", Duration::from_secs(5), || {
        let mut client = client.clone();
        async move {
            let names = listed_as(&mut client, Some("tok-agent")).await.ok()?;
            names.contains(&"acc_sleep".to_owned()).then_some(())
        }
    })
    .await;
    std::fs::write(&policy, "[[grants]]\nname = 1\n").unwrap();
    mesh.serve
        .wait_for_line("policy not reloaded", Duration::from_secs(5));
    let names = listed_as(&mut client, Some("tok-agent")).await.unwrap();
    assert!(
        names.contains(&"acc_sleep".to_owned()),
        "the bad file left the last good policy in force"
    );
    // The watcher lives on: the original policy takes effect again.
    std::fs::write(&policy, governed_policy()).unwrap();
    eventually("the original grant", Duration::from_secs(5), || {
        let mut client = client.clone();
        async move {
            let names = listed_as(&mut client, Some("tok-agent")).await.ok()?;
            (!names.contains(&"acc_sleep".to_owned())).then_some(())
        }
    })
    .await;
}

/// Read-your-writes for operator decisions on a `serve` node: once
/// `DisableTool` or `EnableTool` is answered, no listing or call on that
/// node uses the state before it (checked right after each answer, many
/// times over, since the old state showed only now and then).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn decisions_hold_once_answered() {
    let mesh = acceptance(&[], &[]).await;
    let mut registry = toolmesh::pb::registry_client::RegistryClient::new(
        toolmesh_transport::channel(&mesh.addr, &toolmesh_transport::Tls::none()).unwrap(),
    );
    let mut client = mesh.client.clone();
    for round in 0..40 {
        registry
            .disable_tool(toolmesh::pb::DisableToolRequest {
                tool: "acc_echo".into(),
                reason: format!("round {round}"),
            })
            .await
            .unwrap();
        let names = listed(&mut client).await.unwrap();
        assert!(
            !names.iter().any(|n| n == "acc_echo"),
            "round {round}: still listed"
        );
        let after = invoke(&mut client, "acc_echo", r#"{"message":"x"}"#, None).await;
        assert_ne!(
            code(&after),
            0,
            "round {round}: ran after disable was answered"
        );
        registry
            .enable_tool(toolmesh::pb::EnableToolRequest {
                tool: "acc_echo".into(),
            })
            .await
            .unwrap();
        let names = listed(&mut client).await.unwrap();
        assert!(
            names.iter().any(|n| n == "acc_echo"),
            "round {round}: not listed"
        );
        let after = invoke(&mut client, "acc_echo", r#"{"message":"x"}"#, None).await;
        assert_eq!(code(&after), 0, "round {round}: {}", message(&after));
    }
}

/// An executor whose token the registry does not know is told so, with
/// the fix, even when its first attempt met no registry at all (it used to
/// log one transport error and then nothing, forever); the registry logs
/// the refusals it answers, rate-limited.
#[tokio::test]
async fn an_executor_with_an_unknown_token_hears_why() {
    let dir = temp_dir("unknown-executor-token");
    let policy = dir.join("policy.toml");
    std::fs::write(&policy, governed_policy()).unwrap();
    let policy = policy.to_str().unwrap();
    // A port with no registry on it yet.
    let (mut gone, addr) = serve(&["--policy", policy]);
    gone.kill9();
    let exec = example("knowledge", &addr, &["--token", "tok-stale"]);
    let patience = toolmesh_testkit::patient(Duration::from_secs(10));
    exec.wait_for_line("until the registry answers", patience);
    let serve = restart_on("serve", &["serve", "--listen", &addr, "--policy", policy]);
    let told = exec.wait_for_line("does not accept this executor's token", patience);
    assert!(told.contains("TOOLMESH_TOKEN"), "{told}");
    let logged = serve.wait_for_line("refused an executor's registry call", patience);
    assert!(logged.contains("127.0.0.1"), "{logged}");
}
