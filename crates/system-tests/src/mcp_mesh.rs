//! A mesh for the MCP tests: a node (registry + dispatcher + `/mcp`) under
//! a policy with an agent, an admin and an executor token, and one
//! in-process executor whose tools cover what the MCP door must show:
//! success with structured data, a broken output contract, a call that
//! waits to be cancelled, a tool that reports its progress, a HIGH-risk
//! tool, a tool only admins see, and 1,000 more for pagination.

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Notify;
use toolmesh_executor::{
    CallCx, Executor, RiskLevel, ServeOptions, Tool, ToolFailure, ToolInfo, ToolOutput,
};
use toolmesh_node::{NodeConfig, Role, Running};
use toolmesh_testkit::policy::{Caller, PolicyBuilder};

/// The agent's token.
pub const AGENT: &str = "tok-agent";
/// The admin's token.
pub const ADMIN: &str = "tok-admin";
const EXECUTOR: &str = "tok-exec";
/// Tools `bulk_0000` … `bulk_0999`.
pub const BULK: usize = 1_000;
/// The agent's tools besides the bulk ones: echo, liar, wait, steps, wipe.
pub const VISIBLE: usize = 5;

/// acme's agent (its tools and the bulk ones), admin and approver alice
/// (every tool), and the executor; HIGH-risk calls need an approval.
fn mesh_policy() -> String {
    PolicyBuilder::new()
        .no_anonymous()
        .caller(
            Caller::token(AGENT, "agent")
                .tenant("acme")
                .roles(&["agent"]),
        )
        .caller(
            Caller::token(ADMIN, "alice")
                .tenant("acme")
                .roles(&["admin", "approver"]),
        )
        .caller(Caller::token(EXECUTOR, "tests").roles(&["executor"]))
        .grant(
            "agents",
            &["agent"],
            &["echo", "liar", "wait", "steps", "wipe", "bulk_*"],
        )
        .grant("admins", &["admin"], &["*"])
        .then("[approval]\napprover_roles = [\"approver\"]\nrequire_for_risk = \"HIGH\"\n")
        .build_toml()
}

/// Arguments of `echo` and `liar`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct TextArgs {
    /// What to answer.
    text: String,
}

/// No arguments.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct NoArgs {}

fn text_output_schema() -> serde_json::Value {
    json!({
        "type": "object",
        "properties": {"text": {"type": "string"}},
        "required": ["text"],
        "additionalProperties": false
    })
}

/// Answers `{"text": …}`, keeping its output contract.
struct Echo;
impl Tool for Echo {
    type Args = TextArgs;
    fn info(&self) -> ToolInfo {
        ToolInfo::new("echo", "1.0.0", "Answers the text it is given.")
            .read_only(true)
            .idempotent(true)
            .owner("tests")
            .output_schema(&text_output_schema())
    }
    async fn call(&self, args: TextArgs, _: CallCx) -> Result<ToolOutput, ToolFailure> {
        Ok(ToolOutput::text(format!("echo: {}", args.text)).with_data(json!({"text": args.text})))
    }
}

/// Declares `text` a string and answers a number: breaks its contract.
struct Liar;
impl Tool for Liar {
    type Args = TextArgs;
    fn info(&self) -> ToolInfo {
        ToolInfo::new("liar", "1.0.0", "Answers data off its own output schema.")
            .output_schema(&text_output_schema())
    }
    async fn call(&self, _: TextArgs, _: CallCx) -> Result<ToolOutput, ToolFailure> {
        Ok(ToolOutput::text("42").with_data(json!({"text": 42})))
    }
}

/// Waits until cancelled, telling the test when it starts and when the
/// cancellation reached it.
struct Wait {
    started: Arc<Notify>,
    cancelled: Arc<Notify>,
}
impl Tool for Wait {
    type Args = NoArgs;
    fn info(&self) -> ToolInfo {
        ToolInfo::new("wait", "1.0.0", "Waits up to 30 s, or until cancelled.")
            .timeout(Duration::from_secs(30))
    }
    async fn call(&self, _: NoArgs, cx: CallCx) -> Result<ToolOutput, ToolFailure> {
        self.started.notify_one();
        tokio::select! {
            () = cx.cancelled() => {
                self.cancelled.notify_one();
                Err(ToolFailure::new("cancelled"))
            }
            () = tokio::time::sleep(Duration::from_secs(30)) => Ok(ToolOutput::text("waited")),
        }
    }
}

/// Arguments of `steps`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct StepsArgs {
    /// How many steps (1 to 20).
    #[schemars(range(min = 1, max = 20))]
    n: u32,
}

/// Takes `n` steps of 20 ms, reporting "step i of n" after each.
struct Steps;
impl Tool for Steps {
    type Args = StepsArgs;
    fn info(&self) -> ToolInfo {
        ToolInfo::new("steps", "1.0.0", "Takes steps, reporting its progress.")
            .streams_progress(true)
    }
    async fn call(&self, args: StepsArgs, cx: CallCx) -> Result<ToolOutput, ToolFailure> {
        for i in 1..=args.n {
            tokio::time::sleep(Duration::from_millis(20)).await;
            let message = format!("step {i} of {}", args.n);
            cx.progress()
                .report(i.into(), Some(args.n.into()), message)
                .await;
        }
        Ok(ToolOutput::text(format!("{} steps", args.n)))
    }
}

/// HIGH risk: needs an approval.
struct Wipe;
impl Tool for Wipe {
    type Args = NoArgs;
    fn info(&self) -> ToolInfo {
        ToolInfo::new("wipe", "1.0.0", "Wipes everything (irreversible).").risk(RiskLevel::High)
    }
    async fn call(&self, _: NoArgs, _: CallCx) -> Result<ToolOutput, ToolFailure> {
        Ok(ToolOutput::text("wiped"))
    }
}

/// Granted to admins only.
struct Secret;
impl Tool for Secret {
    type Args = NoArgs;
    fn info(&self) -> ToolInfo {
        ToolInfo::new("secret", "1.0.0", "Only admins see this.")
    }
    async fn call(&self, _: NoArgs, _: CallCx) -> Result<ToolOutput, ToolFailure> {
        Ok(ToolOutput::text("secret"))
    }
}

/// One of the [`BULK`] tools.
struct Bulk(usize);
impl Tool for Bulk {
    type Args = NoArgs;
    fn info(&self) -> ToolInfo {
        ToolInfo::new(format!("bulk_{:04}", self.0), "1.0.0", "One of many.")
    }
    async fn call(&self, _: NoArgs, _: CallCx) -> Result<ToolOutput, ToolFailure> {
        Ok(ToolOutput::text("ok"))
    }
}

/// A node serving MCP, and its executor.
pub struct Mesh {
    /// The node (registry + dispatcher + `/mcp`).
    pub node: Running,
    /// `http://127.0.0.1:PORT/mcp`.
    pub url: String,
    /// The gRPC address (for the stdio bridge, approvals and switches).
    pub grpc: String,
    /// Notified when `wait` starts.
    pub wait_started: Arc<Notify>,
    /// Notified when `wait` sees its cancellation.
    pub wait_cancelled: Arc<Notify>,
    _dir: toolmesh_testkit::TempDir,
    _stop_executor: tokio::sync::oneshot::Sender<()>,
}

impl Mesh {
    /// Starts the node and the executor and waits until every tool is listed.
    pub async fn start() -> Mesh {
        Mesh::start_with(toolmesh_mcp::ToolSearch::default()).await
    }

    /// [`start`](Mesh::start) with `/mcp` in the tool search mode `search`.
    pub async fn start_with(search: toolmesh_mcp::ToolSearch) -> Mesh {
        let dir = toolmesh_testkit::TempDir::new("mcp").unwrap();
        let policy = dir.path().join("policy.toml");
        std::fs::write(&policy, mesh_policy()).unwrap();
        let config = NodeConfig {
            listen: ([127, 0, 0, 1], 0).into(),
            mcp_listen: Some(([127, 0, 0, 1], 0).into()),
            mcp_tool_search: search,
            policy: Some(policy),
            ..NodeConfig::default()
        };
        let node = toolmesh_node::start(
            Role::Serve {
                default_ttl: Duration::from_secs(10),
            },
            &config,
        )
        .await
        .unwrap();
        let grpc = node.addr.to_string();
        let url = format!("http://{}/mcp", node.mcp_addr.expect("MCP is on"));
        let (wait_started, wait_cancelled) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
        let mut executor = Executor::new("mcp-tests")
            .tool(Echo)
            .tool(Liar)
            .tool(Wait {
                started: wait_started.clone(),
                cancelled: wait_cancelled.clone(),
            })
            .tool(Steps)
            .tool(Wipe)
            .tool(Secret);
        for i in 0..BULK {
            executor = executor.tool(Bulk(i));
        }
        let bound = executor
            .bind(ServeOptions {
                token: Some(EXECUTOR.into()),
                ..ServeOptions::new(grpc.clone())
            })
            .await
            .unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(bound.run(async {
            let _ = stopped.await;
        }));
        let dispatcher = node.dispatcher.clone().unwrap();
        toolmesh_testkit::eventually("every tool is listed", Duration::from_secs(10), || {
            let n = dispatcher.current_snapshot().name_count();
            async move { (n == BULK + VISIBLE + 1).then_some(()) }
        })
        .await;
        Mesh {
            node,
            url,
            grpc,
            wait_started,
            wait_cancelled,
            _dir: dir,
            _stop_executor: stop,
        }
    }

    /// Runs tests/python/`script` (the official Python `mcp` client)
    /// against this mesh and answers what it asks on stdout: "APPROVE <id>"
    /// (granted as the admin) and "AWAIT wait_started|wait_cancelled";
    /// the checks it passed ("PASS <check>"), once it exited successfully.
    pub async fn run_python(&self, script: &str) -> Vec<String> {
        use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
        let python = std::env::var("TOOLMESH_TEST_PYTHON").expect(
            "TOOLMESH_TEST_PYTHON is not set: run scripts/test (scripts/prepare/python.sh makes the venv with the pinned `mcp` client)",
        );
        let mut child = tokio::process::Command::new(python)
            .arg(crate::python_script(script))
            .env("MCP_URL", &self.url)
            .env("TOOLMESH", toolmesh_testkit::toolmesh_bin())
            .env("TOOLMESH_GRPC", &self.grpc)
            .env("AGENT_TOKEN", AGENT)
            .env("ADMIN_TOKEN", ADMIN)
            .env("BULK", BULK.to_string())
            .env("VISIBLE", VISIBLE.to_string())
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let mut stdin = child.stdin.take().unwrap();
        let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
        let mut passed = Vec::new();
        let run = async {
            while let Some(line) = lines.next_line().await.unwrap() {
                if let Some(id) = line.strip_prefix("APPROVE ") {
                    self.approve(id).await;
                    stdin.write_all(b"ok\n").await.unwrap();
                } else if let Some(what) = line.strip_prefix("AWAIT ") {
                    let notify = match what {
                        "wait_started" => &self.wait_started,
                        _ => &self.wait_cancelled,
                    };
                    let seen = tokio::time::timeout(
                        toolmesh_testkit::patient(Duration::from_secs(10)),
                        notify.notified(),
                    )
                    .await;
                    let answer: &[u8] = if seen.is_ok() { b"ok\n" } else { b"timeout\n" };
                    stdin.write_all(answer).await.unwrap();
                } else if let Some(check) = line.strip_prefix("PASS ") {
                    passed.push(check.to_owned());
                } else {
                    println!("python: {line}");
                }
            }
        };
        tokio::time::timeout(toolmesh_testkit::patient(Duration::from_secs(120)), run)
            .await
            .expect("the Python client finished within 2 minutes");
        let status = child.wait().await.unwrap();
        assert!(
            status.success(),
            "the Python client failed ({status}); passed: {passed:?}"
        );
        passed
    }

    /// Grants approval `id` as the admin, over gRPC.
    pub async fn approve(&self, id: &str) {
        let channel =
            toolmesh_transport::channel(&self.grpc, &toolmesh_transport::Tls::none()).unwrap();
        toolmesh::pb::governance_client::GovernanceClient::new(channel)
            .approve(toolmesh_testkit::with_token(
                toolmesh::pb::ApproveRequest { id: id.into() },
                Some(ADMIN),
            ))
            .await
            .unwrap();
    }

    /// Switches `tool` off as the admin, over gRPC.
    pub async fn disable(&self, tool: &str) {
        let channel =
            toolmesh_transport::channel(&self.grpc, &toolmesh_transport::Tls::none()).unwrap();
        toolmesh::pb::registry_client::RegistryClient::new(channel)
            .disable_tool(toolmesh_testkit::with_token(
                toolmesh::pb::DisableToolRequest {
                    tool: tool.into(),
                    reason: "test".into(),
                },
                Some(ADMIN),
            ))
            .await
            .unwrap();
    }
}
