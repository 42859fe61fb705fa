//! Fallbacks with real processes: a tool the policy gives a stand-in
//! (`[[fallbacks]]`) is answered by it — marked so for the model and in
//! the audit log — when it keeps answering UNAVAILABLE, is disabled, or has
//! no healthy executor; a stand-in that might refuse the tool's arguments
//! is never used; and a tool that must not run twice falls back only when
//! the call provably never reached its executor.

use std::time::Duration;
use toolmesh::pb::{ErrorCode, InvokeResponse};
use toolmesh_system_tests::*;

const POLICY: &str = r#"
[auth]
allow_anonymous = true
anonymous = { principal = "anonymous", tenant = "dev", roles = ["agent", "admin", "executor"] }

[[grants]]
name = "everything"
tools = ["*"]

[[fallbacks]]
tool = "acc_lookup"
fallback = "acc_lookup_mirror"

[[fallbacks]]
tool = "acc_charge"
fallback = "acc_charge_mirror"

# acc_echo's arguments are not acc_lookup_mirror's: never paired.
[[fallbacks]]
tool = "acc_echo"
fallback = "acc_lookup_mirror"
"#;

struct Mesh {
    _serve: Proc,
    acceptance: Proc,
    _mirror: Proc,
    addr: String,
    ledger: std::path::PathBuf,
    audit: std::path::PathBuf,
    _dir: TempDir,
}

/// `serve` under the policy above, the acceptance executor answering
/// UNAVAILABLE for `unavailable` (a long lease: a killed one stays
/// registered, unhealthy) and the mirror, both writing one ledger.
async fn start(label: &str, unavailable: &str) -> Mesh {
    let dir = temp_dir(label);
    let policy = dir.path().join("policy.toml");
    std::fs::write(&policy, POLICY).unwrap();
    let (ledger, audit) = (
        dir.path().join("ledger.jsonl"),
        dir.path().join("audit.jsonl"),
    );
    let (serve, addr) = serve(&[
        "--policy",
        policy.to_str().unwrap(),
        "--audit",
        audit.to_str().unwrap(),
    ]);
    let ledger_arg = ledger.to_str().unwrap();
    let acceptance = example(
        "acceptance",
        &addr,
        &[
            "--ttl-ms",
            "60000",
            "--ledger",
            ledger_arg,
            "--unavailable",
            unavailable,
        ],
    );
    let mirror = example("mirror", &addr, &["--ledger", ledger_arg]);
    let names = [
        "acc_lookup",
        "acc_charge",
        "acc_lookup_mirror",
        "acc_charge_mirror",
    ];
    until_listed(&mut dispatcher(&addr), &names, Duration::from_secs(10)).await;
    Mesh {
        _serve: serve,
        acceptance,
        _mirror: mirror,
        addr,
        ledger,
        audit,
        _dir: dir,
    }
}

impl Mesh {
    async fn call(&self, tool: &str, arguments: &str) -> InvokeResponse {
        invoke(&mut dispatcher(&self.addr), tool, arguments, None).await
    }

    /// Executions of `tool` in the ledger.
    fn executions(&self, tool: &str) -> usize {
        let text = std::fs::read_to_string(&self.ledger).unwrap_or_default();
        text.lines()
            .filter(|l| l.contains(&format!("\"tool\":\"{tool}\"")))
            .count()
    }
}

fn output(response: &InvokeResponse) -> String {
    response
        .result
        .as_ref()
        .map(|r| r.output.clone())
        .unwrap_or_default()
}

fn fallback_of(response: &InvokeResponse) -> Option<String> {
    response
        .result
        .as_ref()?
        .metadata
        .get("toolmesh.fallback")
        .cloned()
}

/// acc_lookup answering UNAVAILABLE, then disabled: the mirror answers and
/// says so; acc_echo, paired with a stand-in that might refuse its
/// arguments, keeps its own failure.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idempotent_tool_falls_back() {
    let mesh = start("fallback-lookup", "acc_lookup,acc_echo").await;
    let answered = mesh.call("acc_lookup", r#"{"key":"k1"}"#).await;
    assert_eq!(code(&answered), 0, "{}", message(&answered));
    assert_eq!(
        fallback_of(&answered).as_deref(),
        Some("acc_lookup_mirror@1.0.0")
    );
    let text = output(&answered);
    assert!(
        text.starts_with("[answered by acc_lookup_mirror@1.0.0 standing in for acc_lookup@1.0.0, which answered UNAVAILABLE]"),
        "{text}"
    );
    assert!(text.ends_with("mirror value of k1"), "{text}");

    let out = std::process::Command::new(toolmesh_bin())
        .args(["disable", "acc_lookup", "--reason", "incident 12"])
        .env("TOOLMESH_SERVER", &mesh.addr)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let disabled = mesh.call("acc_lookup", r#"{"key":"k2"}"#).await;
    assert_eq!(code(&disabled), 0, "{}", message(&disabled));
    assert!(
        output(&disabled).contains("is disabled by an operator (incident 12)"),
        "{}",
        output(&disabled)
    );

    let echo = mesh.call("acc_echo", r#"{"message":"hi"}"#).await;
    assert_eq!(
        code(&echo),
        ErrorCode::Unavailable as i32,
        "{}",
        message(&echo)
    );
    assert_eq!(fallback_of(&echo), None);
    assert_eq!(mesh.executions("acc_lookup_mirror"), 2);

    let explain = |tool: &str| {
        let out = std::process::Command::new(toolmesh_bin())
            .args(["explain", tool])
            .env("TOOLMESH_SERVER", &mesh.addr)
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let lookup = explain("acc_lookup");
    assert!(
        lookup.contains("fallback acc_lookup_mirror@1.0.0 (when"),
        "{lookup}"
    );
    let echo = explain("acc_echo");
    assert!(
        echo.contains("fallback acc_lookup_mirror@1.0.0: never used, acc_lookup_mirror@1.0.0 may refuse arguments acc_echo@1.0.0 accepts"),
        "{echo}"
    );

    let audit = eventually("the fallback audited", Duration::from_secs(5), || async {
        let text = std::fs::read_to_string(&mesh.audit).ok()?;
        text.contains("\"fallback_for\":\"acc_lookup@1.0.0\"")
            .then_some(text)
    })
    .await;
    let line = audit.lines().find(|l| l.contains("fallback_for")).unwrap();
    assert!(line.contains("\"tool\":\"acc_lookup_mirror\""), "{line}");
}

/// acc_charge must not run twice: a call that reached its executor keeps
/// its own failure (the mirror never runs); once the executor is killed
/// the call never reaches it, and the mirror charges, once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn non_idempotent_tool_falls_back_only_unsent() {
    let mesh = start("fallback-charge", "acc_charge").await;
    let charge = r#"{"account":"acme","cents":250}"#;
    let reached = mesh.call("acc_charge", charge).await;
    assert_eq!(
        code(&reached),
        ErrorCode::Unavailable as i32,
        "{}",
        message(&reached)
    );
    assert_eq!(fallback_of(&reached), None);
    assert_eq!(mesh.executions("acc_charge_mirror"), 0);

    mesh.acceptance.kill_now();
    let answered = eventually(
        "acc_charge to fall back",
        Duration::from_secs(10),
        || async {
            let response = mesh.call("acc_charge", charge).await;
            fallback_of(&response).is_some().then_some(response)
        },
    )
    .await;
    assert_eq!(code(&answered), 0, "{}", message(&answered));
    assert!(
        output(&answered).contains("which has no healthy executor"),
        "{}",
        output(&answered)
    );
    assert!(
        output(&answered).ends_with("charged by the mirror"),
        "{}",
        output(&answered)
    );
    assert_eq!(mesh.executions("acc_charge_mirror"), 1);
}
