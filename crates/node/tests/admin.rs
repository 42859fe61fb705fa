//! The admin listener against what an attacker would try: reads without a
//! credential, another tenant's approvals, a form posted from another page
//! (CSRF), an operator forging an admin's form, framing, a rebound DNS name
//! (Host), plaintext where TLS is configured, and garbage in every header
//! and body; and what its admin forms and figures do.

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;
use std::net::SocketAddr;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use toolmesh::pb::{CallContext, InvokeRequest, dispatcher_client::DispatcherClient};
use toolmesh_executor::{
    CallCx, Executor, RiskLevel, ServeOptions, Tool, ToolFailure, ToolInfo, ToolOutput,
};
use toolmesh_node::{NodeConfig, Role, Running};
use toolmesh_testkit::policy::{Caller, PolicyBuilder};
use toolmesh_testkit::{TempDir, with_token};

/// Agents of acme and globex, acme's approver alice (an operator), the
/// admin ops, the executor and a dispatcher; HIGH-risk calls need an
/// approval.
fn admin_policy() -> String {
    PolicyBuilder::new()
        .no_anonymous()
        .caller(
            Caller::token("tok-acme-agent", "acme-bot")
                .tenant("acme")
                .roles(&["agent"]),
        )
        .caller(
            Caller::token("tok-globex-agent", "globex-bot")
                .tenant("globex")
                .roles(&["agent"]),
        )
        .caller(
            Caller::token("tok-acme-approver", "alice")
                .tenant("acme")
                .roles(&["approver", "operator"]),
        )
        .caller(
            Caller::token("tok-ops", "ops")
                .tenant("ops")
                .roles(&["admin"]),
        )
        .caller(Caller::token("tok-exec", "tests").roles(&["executor"]))
        .caller(Caller::token("tok-dispatcher", "dispatcher-1").roles(&["dispatcher"]))
        .grant("agents", &["agent"], &["wipe", "echo", "flaky"])
        .then("[approval]\napprover_roles = [\"approver\"]\nrequire_for_risk = \"HIGH\"\n")
        .build_toml()
}

/// No arguments.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct NoArgs {}

/// HIGH risk: needs an approval.
struct Wipe;
impl Tool for Wipe {
    type Args = NoArgs;
    fn info(&self) -> ToolInfo {
        ToolInfo::new("wipe", "1.0.0", "Wipes everything.").risk(RiskLevel::High)
    }
    async fn call(&self, _: NoArgs, _: CallCx) -> Result<ToolOutput, ToolFailure> {
        Ok(ToolOutput::text("wiped"))
    }
}

/// Granted to nobody: hidden from every agent.
struct Hidden;
impl Tool for Hidden {
    type Args = NoArgs;
    fn info(&self) -> ToolInfo {
        ToolInfo::new("hidden_tool", "1.0.0", "Nobody may list this.")
    }
    async fn call(&self, _: NoArgs, _: CallCx) -> Result<ToolOutput, ToolFailure> {
        Ok(ToolOutput::text("hidden"))
    }
}

/// Answers at once.
struct Echo;
impl Tool for Echo {
    type Args = NoArgs;
    fn info(&self) -> ToolInfo {
        ToolInfo::new("echo", "1.0.0", "Answers ok.")
    }
    async fn call(&self, _: NoArgs, _: CallCx) -> Result<ToolOutput, ToolFailure> {
        Ok(ToolOutput::text("ok"))
    }
}

/// Always fails as a tool that cannot run here (UNAVAILABLE).
struct Flaky;
impl Tool for Flaky {
    type Args = NoArgs;
    fn info(&self) -> ToolInfo {
        ToolInfo::new("flaky", "1.0.0", "Always fails.")
    }
    async fn call(&self, _: NoArgs, _: CallCx) -> Result<ToolOutput, ToolFailure> {
        Err(ToolFailure::unavailable("its backend is down"))
    }
}

/// A node with an admin listener under [`admin_policy`], and an executor of
/// `wipe`, `hidden_tool`, `echo` and `flaky` registered with it.
struct Mesh {
    node: Running,
    admin: SocketAddr,
    dir: TempDir,
    _stop_executor: tokio::sync::oneshot::Sender<()>,
}

impl Mesh {
    async fn start() -> Mesh {
        let dir = TempDir::new("admin").unwrap();
        let policy = dir.path().join("policy.toml");
        std::fs::write(&policy, admin_policy()).unwrap();
        let node = toolmesh_node::start(
            Role::Serve {
                default_ttl: Duration::from_secs(10),
            },
            &NodeConfig {
                listen: ([127, 0, 0, 1], 0).into(),
                admin_listen: Some("127.0.0.1:0".into()),
                policy: Some(policy),
                ..NodeConfig::default()
            },
        )
        .await
        .unwrap();
        let bound = Executor::new("admin-tests")
            .tool(Wipe)
            .tool(Hidden)
            .tool(Echo)
            .tool(Flaky)
            .bind(ServeOptions {
                token: Some("tok-exec".into()),
                ..ServeOptions::new(node.addr.to_string())
            })
            .await
            .unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(bound.run(async {
            let _ = stopped.await;
        }));
        let dispatcher = node.dispatcher.clone().unwrap();
        toolmesh_testkit::eventually("the tools registered", Duration::from_secs(10), || {
            let n = dispatcher.current_snapshot().name_count();
            async move { (n == 4).then_some(()) }
        })
        .await;
        let admin = node.admin.as_ref().unwrap().addr;
        Mesh {
            node,
            admin,
            dir,
            _stop_executor: stop,
        }
    }

    /// Calls `tool` as the acme agent: the error code of its answer (0: OK).
    async fn call(&self, tool: &str) -> i32 {
        let channel = toolmesh_transport::channel(
            &self.node.addr.to_string(),
            &toolmesh_transport::Tls::none(),
        )
        .unwrap();
        let request = InvokeRequest {
            tool: tool.into(),
            arguments: "{}".into(),
            context: Some(CallContext::default()),
            ..Default::default()
        };
        let answer = DispatcherClient::new(channel)
            .invoke(with_token(request, Some("tok-acme-agent")))
            .await
            .unwrap()
            .into_inner();
        answer.result.unwrap().error.map_or(0, |e| e.code)
    }

    /// Calls `wipe` as `token`'s agent: the id of the approval it asks for.
    async fn ask_approval(&self, token: &str) -> String {
        let channel = toolmesh_transport::channel(
            &self.node.addr.to_string(),
            &toolmesh_transport::Tls::none(),
        )
        .unwrap();
        let request = InvokeRequest {
            tool: "wipe".into(),
            arguments: "{}".into(),
            context: Some(CallContext::default()),
            ..Default::default()
        };
        let answer = DispatcherClient::new(channel)
            .invoke(with_token(request, Some(token)))
            .await
            .unwrap()
            .into_inner();
        let error = answer.result.unwrap().error.expect("an approval is asked");
        assert!(!error.approval_id.is_empty(), "{}", error.message);
        error.approval_id
    }
}

/// One HTTP answer: status, head (lowercased) and body.
struct Answer {
    status: u16,
    head: String,
    body: String,
}

impl Answer {
    fn parse(raw: &str) -> Option<Answer> {
        let (head, body) = raw.split_once("\r\n\r\n")?;
        let status = head.split_whitespace().nth(1)?.parse().ok()?;
        Some(Answer {
            status,
            head: head.to_ascii_lowercase(),
            body: body.to_owned(),
        })
    }

    /// The value of header `name` (lowercase).
    fn header(&self, name: &str) -> Option<&str> {
        self.head
            .lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
            .map(str::trim)
    }

    fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("{e}: {}", self.body))
    }
}

/// `method path` with `headers` and `body`; `Host` is `addr` unless given.
fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> String {
    let mut out = format!("{method} {path} HTTP/1.1\r\n");
    if !headers.iter().any(|(n, _)| n.eq_ignore_ascii_case("host")) {
        out.push_str(&format!("Host: {addr}\r\n"));
    }
    for (name, value) in headers {
        out.push_str(&format!("{name}: {value}\r\n"));
    }
    if method == "POST" {
        out.push_str("Content-Type: application/x-www-form-urlencoded\r\n");
    }
    out.push_str(&format!(
        "Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    ));
    out
}

/// One exchange in plaintext.
async fn send(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> Answer {
    let raw = request(addr, method, path, headers, body);
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream.write_all(raw.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).await.unwrap();
    let answer = String::from_utf8_lossy(&answer);
    Answer::parse(&answer).unwrap_or_else(|| panic!("not HTTP: {answer}"))
}

/// Logs in with `token`: the session cookie (`name=value`) and the page's CSRF token.
async fn log_in(addr: SocketAddr, token: &str) -> (String, String) {
    let answer = send(addr, "POST", "/login", &[], &format!("token={token}")).await;
    assert_eq!(answer.status, 303, "{}", answer.body);
    let cookie = answer.header("set-cookie").expect("a session cookie");
    let pair = cookie.split(';').next().unwrap().trim().to_owned();
    let page = send(addr, "GET", "/", &[("cookie", &pair)], "").await;
    assert_eq!(page.status, 200, "{}", page.body);
    let csrf = page
        .body
        .split("name=csrf value=\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .expect("the page's forms carry a CSRF token")
        .to_owned();
    (pair, csrf)
}

/// Reads need the token of an admin or operator: without one, the page is
/// a login form (401), the JSON and the metrics are 401; an agent's token
/// is 403. A reader sees every tool (the hidden one too), but only the
/// approvals Governance.ListApprovals would list for it: an approver its
/// own tenant's, an admin who approves nothing none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_need_a_reader_and_approvals_follow_list_approvals() {
    let mesh = Mesh::start().await;
    let admin = mesh.admin;
    let page = send(admin, "GET", "/", &[], "").await;
    assert_eq!(page.status, 401, "{}", page.body);
    assert!(page.body.contains("<form id=login"), "{}", page.body);
    assert!(!page.body.contains("hidden_tool"), "{}", page.body);
    for path in ["/api/state", "/metrics"] {
        let answer = send(admin, "GET", path, &[], "").await;
        assert_eq!(answer.status, 401, "{path}: {}", answer.body);
        assert_eq!(answer.json()["error"], "unauthorized", "{path}");
        assert!(
            answer.body.contains("operator"),
            "says which role: {}",
            answer.body
        );
        assert!(!answer.body.contains("hidden_tool"), "{path}");
    }
    let agent = send(
        admin,
        "GET",
        "/api/state",
        &[("authorization", "Bearer tok-acme-agent")],
        "",
    )
    .await;
    assert_eq!(agent.status, 403, "{}", agent.body);

    let acme = mesh.ask_approval("tok-acme-agent").await;
    let globex = mesh.ask_approval("tok-globex-agent").await;
    let state_of = |token: &'static str| async move {
        let auth = format!("Bearer {token}");
        let answer = send(admin, "GET", "/api/state", &[("authorization", &auth)], "").await;
        assert_eq!(answer.status, 200, "{token}: {}", answer.body);
        answer.json()
    };
    let ids = |state: &Value| -> Vec<String> {
        state["approvals"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a["id"].as_str().unwrap().to_owned())
            .collect()
    };
    let approver = state_of("tok-acme-approver").await;
    assert_eq!(ids(&approver), vec![acme.clone()], "not globex's {globex}");
    let tools: Vec<&str> = approver["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert!(tools.contains(&"hidden_tool"), "{tools:?}");
    let ops = state_of("tok-ops").await;
    assert!(ids(&ops).is_empty(), "{ops}");

    let metrics = send(
        admin,
        "GET",
        "/metrics",
        &[("authorization", "Bearer tok-ops")],
        "",
    )
    .await;
    assert_eq!(metrics.status, 200, "{}", metrics.body);
    assert!(metrics.body.contains("toolmesh_"), "{}", metrics.body);
    mesh.node.stop(Duration::from_secs(1)).await.unwrap();
}

/// Logging in sets an `HttpOnly; SameSite=Strict; Path=/` cookie holding a
/// random id, not the token; approve/deny posts need the session's CSRF
/// token: none or another session's is 403; the right one decides;
/// logging out ends the session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_and_csrf() {
    let mesh = Mesh::start().await;
    let admin = mesh.admin;
    let wrong = send(admin, "POST", "/login", &[], "token=tok-nope").await;
    assert_eq!(wrong.status, 401, "{}", wrong.body);
    assert!(wrong.body.contains("not known"), "{}", wrong.body);
    let agent = send(admin, "POST", "/login", &[], "token=tok-acme-agent").await;
    assert_eq!(agent.status, 403, "{}", agent.body);

    let raw = send(admin, "POST", "/login", &[], "token=tok-acme-approver").await;
    let cookie = raw.header("set-cookie").unwrap().to_owned();
    for part in ["httponly", "samesite=strict", "path=/"] {
        assert!(cookie.contains(part), "{cookie}");
    }
    assert!(!cookie.contains("secure"), "plaintext: no Secure: {cookie}");
    assert!(
        !cookie.contains("tok-"),
        "the token is not in the cookie: {cookie}"
    );
    let id = cookie
        .split(';')
        .next()
        .unwrap()
        .trim_start_matches("toolmesh_admin=");
    assert_eq!(id.len(), 64, "256 random bits: {cookie}");

    let id_a = mesh.ask_approval("tok-acme-agent").await;
    let (mine, csrf) = log_in(admin, "tok-acme-approver").await;
    let (_, other_csrf) = log_in(admin, "tok-acme-approver").await;
    assert_ne!(csrf, other_csrf);
    let page = send(admin, "GET", "/", &[("cookie", &mine)], "").await;
    assert!(
        page.body.contains(&format!("id=\"approval-{id_a}\"")),
        "{}",
        page.body
    );

    let decide = |csrf: String| {
        let cookie = mine.clone();
        let id = id_a.clone();
        async move {
            let form = format!("id={id}&decision=approve&csrf={csrf}");
            send(
                admin,
                "POST",
                "/approvals/decide",
                &[("cookie", &cookie)],
                &form,
            )
            .await
        }
    };
    for forged in [String::new(), other_csrf.clone(), "0".repeat(64)] {
        let refused = decide(forged).await;
        assert_eq!(refused.status, 403, "{}", refused.body);
        assert!(refused.body.contains("CSRF"), "{}", refused.body);
    }
    let decided = decide(csrf.clone()).await;
    assert_eq!(decided.status, 303, "{}", decided.body);
    assert_eq!(
        decided.header("location"),
        Some(format!("/?decided={id_a}").as_str())
    );

    let out = send(
        admin,
        "POST",
        "/logout",
        &[("cookie", &mine)],
        &format!("csrf={csrf}"),
    )
    .await;
    assert_eq!(out.status, 303, "{}", out.body);
    let after = send(admin, "GET", "/api/state", &[("cookie", &mine)], "").await;
    assert_eq!(after.status, 401, "{}", after.body);
    mesh.node.stop(Duration::from_secs(1)).await.unwrap();
}

/// Every admin answer (refusals and `/metrics` included) forbids framing,
/// sniffing, referrers and caching, with a CSP that loads nothing but the
/// page itself; the page refers to nothing off the listener.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_forbid_framing_and_load_nothing_else() {
    let mesh = Mesh::start().await;
    let admin = mesh.admin;
    let (session, _) = log_in(admin, "tok-acme-approver").await;
    let mut answers = Vec::new();
    for (path, headers) in [
        ("/", vec![]),
        ("/", vec![("cookie", session.as_str())]),
        ("/login", vec![]),
        ("/api/state", vec![("cookie", session.as_str())]),
        ("/metrics", vec![("authorization", "Bearer tok-ops")]),
        ("/nowhere", vec![]),
        ("/", vec![("host", "evil.example")]),
    ] {
        answers.push((path, send(admin, "GET", path, &headers, "").await));
    }
    for (path, answer) in &answers {
        let csp = answer.header("content-security-policy").unwrap_or_default();
        for directive in [
            "default-src 'none'",
            "style-src 'self' 'unsafe-inline'",
            "frame-ancestors 'none'",
        ] {
            assert!(csp.contains(directive), "{path}: {csp}");
        }
        for (name, value) in [
            ("x-frame-options", "deny"),
            ("x-content-type-options", "nosniff"),
            ("referrer-policy", "no-referrer"),
            ("cache-control", "no-store"),
        ] {
            assert_eq!(answer.header(name), Some(value), "{path}: {}", answer.head);
        }
    }
    let page = &answers[1].1;
    assert_eq!(page.status, 200);
    for outside in ["http:", "https:", "//", "<script", "src="] {
        assert!(!page.body.contains(outside), "{outside}: {}", page.body);
    }
    mesh.node.stop(Duration::from_secs(1)).await.unwrap();
}

/// The admin listener answers only loopback `Host` names by default (a
/// rebound DNS name is 403), and a form posted from another site's page
/// (`Origin`) is 403 before its token is looked at; an executor's admin
/// listener checks `Host` the same way and still serves its metrics.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_and_origin_are_checked() {
    let mesh = Mesh::start().await;
    let admin = mesh.admin;
    let port = admin.port();
    let rebound = format!("evil.example:{port}");
    let refused = send(
        admin,
        "GET",
        "/api/state",
        &[("host", &rebound), ("authorization", "Bearer tok-ops")],
        "",
    )
    .await;
    assert_eq!(refused.status, 403, "{}", refused.body);
    assert!(
        refused.body.contains("--admin-allowed-hosts"),
        "{}",
        refused.body
    );
    let localhost = format!("localhost:{port}");
    let ok = send(
        admin,
        "GET",
        "/api/state",
        &[("host", &localhost), ("authorization", "Bearer tok-ops")],
        "",
    )
    .await;
    assert_eq!(ok.status, 200, "{}", ok.body);
    let cross_site = send(
        admin,
        "POST",
        "/login",
        &[("origin", "http://evil.example")],
        "token=tok-ops",
    )
    .await;
    assert_eq!(cross_site.status, 403, "{}", cross_site.body);
    assert!(cross_site.header("set-cookie").is_none());

    let bound = Executor::new("admin-exec")
        .tool(Wipe)
        .bind(ServeOptions {
            admin_listen: Some("127.0.0.1:0".into()),
            ..ServeOptions::default()
        })
        .await
        .unwrap();
    let exec_admin = bound.admin_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(bound.run(async {
        let _ = stopped.await;
    }));
    let scraped = send(exec_admin, "GET", "/metrics", &[], "").await;
    assert_eq!(scraped.status, 200, "{}", scraped.body);
    let rebound = send(
        exec_admin,
        "GET",
        "/metrics",
        &[("host", "evil.example")],
        "",
    )
    .await;
    assert_eq!(rebound.status, 403, "{}", rebound.body);
    let _ = stop.send(());
    mesh.node.stop(Duration::from_secs(1)).await.unwrap();
}

/// `tool`'s row in `/api/state` read with `token`.
async fn tool_state(admin: SocketAddr, token: &str, tool: &str) -> Value {
    let auth = format!("Bearer {token}");
    let answer = send(admin, "GET", "/api/state", &[("authorization", &auth)], "").await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    let state = answer.json();
    state["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == tool)
        .unwrap_or_else(|| panic!("{tool} not in {state}"))
        .clone()
}

/// The newest change of the feed whose text is `what`, once it names who
/// made it.
async fn change_by(admin: SocketAddr, what: &str) -> Value {
    toolmesh_testkit::eventually(
        &format!("{what:?} in the feed with its author"),
        Duration::from_secs(10),
        || async move {
            let answer = send(
                admin,
                "GET",
                "/api/state",
                &[("authorization", "Bearer tok-ops")],
                "",
            )
            .await;
            let state = answer.json();
            state["changes"]
                .as_array()?
                .iter()
                .find(|c| c["what"] == what && !c["by"].is_null())
                .cloned()
        },
    )
    .await
}

/// Disable and enable forms act for admins only, through the registry:
/// the operator's session sees no form and its forged post is refused
/// (403) even with its own CSRF token; an admin's post without its CSRF
/// token is refused; a disable without a reason or of an unknown tool is
/// refused with what to fix; a disable is in force for agents when it is
/// answered, and the feed names the admin with a timestamp; an admin's
/// bearer token enables again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn switch_forms_are_for_admins_and_act_through_the_registry() {
    let mesh = Mesh::start().await;
    let admin = mesh.admin;
    let (ops, ops_csrf) = log_in(admin, "tok-ops").await;
    let (alice, alice_csrf) = log_in(admin, "tok-acme-approver").await;
    let page = send(admin, "GET", "/", &[("cookie", &ops)], "").await;
    assert!(page.body.contains("action=/tools/disable"), "{}", page.body);
    let page = send(admin, "GET", "/", &[("cookie", &alice)], "").await;
    assert!(!page.body.contains("action=/tools/"), "{}", page.body);
    assert!(page.body.contains("id=read-only"), "{}", page.body);

    let post = |cookie: String, path: &'static str, form: String| async move {
        send(admin, "POST", path, &[("cookie", &cookie)], &form).await
    };
    let forged = post(
        alice.clone(),
        "/tools/disable",
        format!("tool=echo&reason=x&csrf={alice_csrf}"),
    )
    .await;
    assert_eq!(forged.status, 403, "{}", forged.body);
    assert!(forged.body.contains("&quot;admin&quot;"), "{}", forged.body);
    for csrf in [String::new(), alice_csrf.clone()] {
        let refused = post(
            ops.clone(),
            "/tools/disable",
            format!("tool=echo&reason=x&csrf={csrf}"),
        )
        .await;
        assert_eq!(refused.status, 403, "{}", refused.body);
        assert!(refused.body.contains("CSRF"), "{}", refused.body);
    }
    let no_reason = post(
        ops.clone(),
        "/tools/disable",
        format!("tool=echo&reason=+&csrf={ops_csrf}"),
    )
    .await;
    assert_eq!(no_reason.status, 400, "{}", no_reason.body);
    assert!(no_reason.body.contains("say why"), "{}", no_reason.body);
    let unknown = post(
        ops.clone(),
        "/tools/disable",
        format!("tool=nope&reason=x&csrf={ops_csrf}"),
    )
    .await;
    assert_eq!(unknown.status, 404, "{}", unknown.body);
    assert_eq!(mesh.call("echo").await, 0, "nothing was switched yet");

    let disabled = post(
        ops.clone(),
        "/tools/disable",
        format!("tool=echo&reason=incident+7&csrf={ops_csrf}"),
    )
    .await;
    assert_eq!(disabled.status, 303, "{}", disabled.body);
    assert_eq!(
        mesh.call("echo").await,
        toolmesh::pb::ErrorCode::Disabled as i32,
        "in force when answered"
    );
    let row = tool_state(admin, "tok-ops", "echo").await;
    assert_eq!(row["disabled"], "incident 7", "{row}");
    assert_eq!(row["health"], "NOT_SERVING", "{row}");
    let change = change_by(admin, "echo disabled: incident 7").await;
    assert_eq!(change["by"], "ops", "{change}");
    let at = change["at"].as_str().unwrap();
    assert!(at.len() == 24 && at.ends_with('Z'), "RFC 3339: {at}");
    assert!(
        change["at_ms"].as_u64().unwrap() > 1_700_000_000_000,
        "{change}"
    );
    assert!(change["snapshot_version"].as_u64().unwrap() > 0, "{change}");
    let page = send(admin, "GET", "/", &[("cookie", &ops)], "").await;
    assert!(page.body.contains("action=/tools/enable"), "{}", page.body);

    let operator_bearer = send(
        admin,
        "POST",
        "/tools/enable",
        &[("authorization", "Bearer tok-acme-approver")],
        "tool=echo",
    )
    .await;
    assert_eq!(operator_bearer.status, 403, "{}", operator_bearer.body);
    let enabled = send(
        admin,
        "POST",
        "/tools/enable",
        &[("authorization", "Bearer tok-ops")],
        "tool=echo",
    )
    .await;
    assert_eq!(enabled.status, 303, "{}", enabled.body);
    assert_eq!(mesh.call("echo").await, 0);
    let change = change_by(admin, "echo enabled").await;
    assert_eq!(change["by"], "ops", "{change}");

    let bad = post(
        ops.clone(),
        "/rollouts/decide",
        format!("tool=echo&action=explode&csrf={ops_csrf}"),
    )
    .await;
    assert_eq!(bad.status, 400, "{}", bad.body);
    let none = post(
        ops.clone(),
        "/rollouts/decide",
        format!("tool=echo&action=promote&csrf={ops_csrf}"),
    )
    .await;
    assert_eq!(none.status, 404, "no rollout: {}", none.body);
    mesh.node.stop(Duration::from_secs(1)).await.unwrap();
}

/// The page's figures come from the dispatcher's own counters: after
/// calls, a tool's row counts them; after failing calls, its errors; the
/// p95 is there once there were calls.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rows_count_the_last_minute_of_calls() {
    let mesh = Mesh::start().await;
    let admin = mesh.admin;
    let quiet = tool_state(admin, "tok-acme-approver", "echo").await;
    assert_eq!(quiet["calls"]["calls"], 0, "{quiet}");
    assert!(quiet["calls"]["p95_ms"].is_null(), "{quiet}");
    for _ in 0..5 {
        assert_eq!(mesh.call("echo").await, 0);
    }
    for _ in 0..3 {
        assert_ne!(mesh.call("flaky").await, 0);
    }
    let echo = tool_state(admin, "tok-acme-approver", "echo").await;
    assert_eq!(echo["calls"]["calls"], 5, "{echo}");
    assert_eq!(echo["calls"]["errors"], 0, "{echo}");
    assert!(echo["calls"]["p95_ms"].as_f64().unwrap() > 0.0, "{echo}");
    assert_eq!(echo["calls"]["window_s"], 60, "{echo}");
    assert_eq!(echo["healthy_instances"], 1, "{echo}");
    let flaky = tool_state(admin, "tok-acme-approver", "flaky").await;
    assert_eq!(flaky["calls"]["calls"], 3, "{flaky}");
    assert_eq!(flaky["calls"]["errors"], 3, "{flaky}");
    assert_eq!(flaky["calls"]["error_rate"], 1.0, "{flaky}");
    let (session, _) = log_in(admin, "tok-acme-approver").await;
    let page = send(admin, "GET", "/", &[("cookie", &session)], "").await;
    assert!(
        page.body.contains("data-calls=3 data-errors=3"),
        "{}",
        page.body
    );
    mesh.node.stop(Duration::from_secs(1)).await.unwrap();
}

/// A dispatcher that follows a registry elsewhere has no registry to act
/// through: an admin sees why and no form, and a post is refused saying
/// where to act.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_without_registry_shows_where_to_act() {
    let mesh = Mesh::start().await;
    let policy = mesh.dir.path().join("policy.toml");
    let follower = toolmesh_node::start(
        Role::Dispatcher {
            registry: mesh.node.addr.to_string(),
            token: Some("tok-dispatcher".into()),
        },
        &NodeConfig {
            listen: ([127, 0, 0, 1], 0).into(),
            admin_listen: Some("127.0.0.1:0".into()),
            policy: Some(policy),
            ..NodeConfig::default()
        },
    )
    .await
    .unwrap();
    let admin = follower.admin.as_ref().unwrap().addr;
    let (ops, csrf) = log_in(admin, "tok-ops").await;
    let page = send(admin, "GET", "/", &[("cookie", &ops)], "").await;
    assert!(!page.body.contains("action=/tools/"), "{}", page.body);
    assert!(page.body.contains("runs no registry"), "{}", page.body);
    let refused = send(
        admin,
        "POST",
        "/tools/disable",
        &[("cookie", &ops)],
        &format!("tool=echo&reason=x&csrf={csrf}"),
    )
    .await;
    assert_eq!(refused.status, 404, "{}", refused.body);
    assert!(
        refused.body.contains("toolmesh disable"),
        "{}",
        refused.body
    );
    follower.stop(Duration::from_secs(1)).await.unwrap();
    mesh.node.stop(Duration::from_secs(1)).await.unwrap();
}

/// With the node's TLS files the admin listener speaks HTTPS only, with the
/// client-certificate requirement of every other server: plaintext gets no
/// HTTP answer, HTTPS without a client certificate is refused, HTTPS with
/// one is served; the session cookie is `Secure`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_is_https_with_the_nodes_tls() {
    let dir = TempDir::new("admin-tls").unwrap();
    let (ca, cert, key) = toolmesh_testkit::pki(&dir, "node");
    let files = toolmesh_transport::TlsFiles {
        cert: Some(cert.clone()),
        key: Some(key.clone()),
        client_ca: Some(ca.clone()),
        ..Default::default()
    };
    let node = toolmesh_node::start(
        Role::Serve {
            default_ttl: Duration::from_secs(10),
        },
        &NodeConfig {
            listen: ([127, 0, 0, 1], 0).into(),
            admin_listen: Some("127.0.0.1:0".into()),
            tls: toolmesh_transport::Tls::from_files(&files).unwrap(),
            ..NodeConfig::default()
        },
    )
    .await
    .unwrap();
    let admin = node.admin.as_ref().unwrap().addr;
    let metrics = request(
        admin,
        "GET",
        "/metrics",
        &[
            ("host", "localhost"),
            ("authorization", "Bearer dev-approver"),
        ],
        "",
    );
    let mut plain = tokio::net::TcpStream::connect(admin).await.unwrap();
    plain.write_all(metrics.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(
        toolmesh_testkit::patient(Duration::from_secs(5)),
        plain.read_to_end(&mut answer),
    )
    .await;
    assert!(
        !answer.starts_with(b"HTTP/"),
        "plaintext is not served: {}",
        String::from_utf8_lossy(&answer)
    );
    let anonymous = toolmesh_testkit::https::exchange(admin, &ca, None, &metrics).await;
    assert!(
        anonymous.as_ref().is_err() || anonymous.as_ref().is_ok_and(|a| !a.starts_with("HTTP/")),
        "a client certificate is required: {anonymous:?}"
    );
    let served = toolmesh_testkit::https::exchange(admin, &ca, Some((&cert, &key)), &metrics)
        .await
        .unwrap();
    assert!(served.starts_with("HTTP/1.1 200"), "{served}");
    let login = request(
        admin,
        "POST",
        "/login",
        &[("host", "localhost")],
        "token=dev-approver",
    );
    let logged_in = toolmesh_testkit::https::exchange(admin, &ca, Some((&cert, &key)), &login)
        .await
        .unwrap();
    let answer = Answer::parse(&logged_in).unwrap();
    assert_eq!(answer.status, 303, "{logged_in}");
    assert!(
        answer.header("set-cookie").unwrap().contains("; secure"),
        "{logged_in}"
    );
    node.stop(Duration::from_secs(1)).await.unwrap();
}

/// Garbage in Host, Origin, Cookie, Authorization, paths and form bodies
/// never panics the listener (every request gets an HTTP answer below 500)
/// and never reads a protected path, decides an approval or switches a tool
/// or a rollout without a valid session or token.
#[test]
fn garbage_never_panics_nor_passes() {
    use proptest::prelude::*;
    use proptest::test_runner::{Config, TestRunner};
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let mesh = runtime.block_on(Mesh::start());
    let admin = mesh.admin;
    let approval = runtime.block_on(mesh.ask_approval("tok-acme-agent"));
    let text = || prop_oneof!["[ -~]{0,40}", "\\PC{0,12}", Just(String::new())];
    let header_value = move || {
        prop_oneof![
            text(),
            text().prop_map(|t| format!("toolmesh_admin={t}")),
            "[0-9a-f]{64}".prop_map(|h| format!("toolmesh_admin={h}")),
            text().prop_map(|t| format!("Bearer {t}")),
            text().prop_map(|t| format!("http://{t}")),
            Just(format!("localhost:{}", admin.port())),
        ]
    };
    let strategy = (
        prop_oneof![Just("GET"), Just("POST")],
        prop_oneof![
            Just("/".to_owned()),
            Just("/api/state".to_owned()),
            Just("/metrics".to_owned()),
            Just("/approvals/decide".to_owned()),
            Just("/tools/disable".to_owned()),
            Just("/tools/enable".to_owned()),
            Just("/rollouts/decide".to_owned()),
            Just("/logout".to_owned()),
            Just("/login".to_owned()),
            "/[a-z/?=&%]{0,20}",
        ],
        proptest::collection::vec(
            (
                prop_oneof![
                    Just("host"),
                    Just("origin"),
                    Just("cookie"),
                    Just("authorization")
                ],
                header_value(),
            ),
            0..4,
        ),
        prop_oneof![
            text(),
            text().prop_map(move |t| format!("id={approval}&decision=approve&csrf={t}")),
            text().prop_map(|t| format!("tool=echo&reason=x&action=abort&csrf={t}")),
            text().prop_map(|t| format!("token={t}")),
        ],
    );
    let mut runner = TestRunner::new(Config::with_cases(256));
    runner
        .run(&strategy, |(method, path, headers, body)| {
            let headers: Vec<(&str, String)> = headers
                .into_iter()
                .map(|(n, v)| (n, v.replace(['\r', '\n'], "")))
                .collect();
            let borrowed: Vec<(&str, &str)> =
                headers.iter().map(|(n, v)| (*n, v.as_str())).collect();
            let answer = runtime.block_on(send(admin, method, &path, &borrowed, &body));
            prop_assert!(
                answer.status < 500,
                "{method} {path} {headers:?} {body:?}: {}",
                answer.status
            );
            let protected = ["/", "/api/state", "/metrics"].contains(&path.as_str());
            prop_assert!(
                !(protected && answer.status == 200),
                "{method} {path} {headers:?} read without a credential"
            );
            let decides = [
                "/approvals/decide",
                "/tools/disable",
                "/tools/enable",
                "/rollouts/decide",
            ];
            prop_assert!(
                !(decides.contains(&path.as_str()) && answer.status == 303),
                "{path} {headers:?} {body:?} decided without a session"
            );
            Ok(())
        })
        .unwrap();
    runtime
        .block_on(mesh.node.stop(Duration::from_secs(1)))
        .unwrap();
}
