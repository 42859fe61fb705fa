//! The deployment serves: the chart (default values, and values-ha.yaml)
//! and the kustomize base are rendered with the real `helm` and `kubectl`
//! and what they describe runs on loopback as real processes
//! (tests/support/loopback_cluster/: every replica's exact command, args
//! and env, mounted ConfigMaps and Secrets, Services and NetworkPolicies).
//! The user's side follows the NOTES (or deploy/README.md for the base):
//! the Secret of tokens their command creates, the agent token they say to
//! read, the gRPC and MCP addresses they give. Then every probe passes as
//! the kubelet checks it, an agent lists and calls a tool over gRPC (the
//! `toolmesh` CLI, and each dispatcher replica) and over the MCP door
//! (Streamable HTTP, under each Host name a client uses), anonymous callers
//! and foreign Hosts are refused, the metrics endpoints the monitors name
//! answer, and in the HA render (a real three-member etcd from the
//! StatefulSet's own command) a registry replica killed with SIGKILL
//! changes nothing for callers while the mesh keeps learning: an executor
//! started after the kill is listed and called through every dispatcher.
//! A dispatcher that cannot read snapshots never turns ready and fails the
//! run at once, naming the registry's refusal.

#[path = "support/loopback_cluster/mod.rs"]
mod loopback_cluster;
#[path = "support/network_policy.rs"]
mod network_policy;
#[path = "support/render.rs"]
mod render;
mod support;

use loopback_cluster::{Cluster, ControlPlane, http};
use render::*;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;
use support::*;
use toolmesh_testkit::until;

/// The namespace everything is "installed" in.
const NAMESPACE: &str = "toolmesh-run";
const RELEASE: &str = "toolmesh";

/// A token as `openssl rand -hex 32` makes it (the NOTES' command).
fn random_token() -> String {
    let mut bytes = [0u8; 32];
    std::io::Read::read_exact(
        &mut std::fs::File::open("/dev/urandom").expect("/dev/urandom"),
        &mut bytes,
    )
    .expect("random bytes");
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The Secret a user creates: `keys` each with a fresh random token.
fn tokens_secret(keys: &[&str]) -> BTreeMap<String, String> {
    keys.iter()
        .map(|k| ((*k).to_owned(), random_token()))
        .collect()
}

/// The `kubectl … create secret generic NAME --from-literal=KEY=… …`
/// command of the NOTES: NAME and the KEYs.
fn notes_secret_command(notes: &str) -> (String, Vec<String>) {
    let start = notes
        .find("create secret generic ")
        .expect("the NOTES say how to create the token Secret");
    let command: String = notes[start..]
        .lines()
        .take_while(|l| !l.trim().is_empty())
        .collect::<Vec<_>>()
        .join(" ");
    let secret = command
        .split_whitespace()
        .nth(3)
        .expect("the Secret's name")
        .to_owned();
    let keys = command
        .split_whitespace()
        .filter_map(|w| w.strip_prefix("--from-literal="))
        .map(|w| w.split('=').next().unwrap_or_default().to_owned())
        .collect();
    (secret, keys)
}

/// The Secret and key the NOTES read the agent token from.
fn notes_agent_token(notes: &str) -> (String, String) {
    let line = notes
        .lines()
        .find(|l| l.contains("TOKEN=$(kubectl"))
        .expect("the NOTES say how to read the agent token");
    let words: Vec<&str> = line.split_whitespace().collect();
    let secret = words
        .iter()
        .position(|w| *w == "secret")
        .map(|i| words[i + 1])
        .expect("get secret NAME");
    let key = line
        .split_once("{.data.")
        .and_then(|(_, rest)| rest.split_once('}'))
        .map(|(key, _)| key)
        .expect("jsonpath {.data.KEY}");
    (secret.to_owned(), key.to_owned())
}

/// The value after `label` on a line of the NOTES (up to a space).
fn notes_value<'a>(notes: &'a str, label: &str) -> &'a str {
    notes
        .lines()
        .find_map(|l| l.trim().strip_prefix(label))
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("the NOTES give {label:?}"))
}

/// Where an agent reaches the mesh, and with what.
struct Agent {
    token: String,
    /// The NOTES, whose commands for the user's machine are run too.
    notes: Option<String>,
    /// `host:port` of the gRPC door, as a client in the cluster names it.
    grpc: String,
    /// `host:port` of the MCP door, as a client in the cluster names it.
    mcp: String,
}

/// A release as the user made it.
struct Installed {
    objects: Vec<Value>,
    agent: Agent,
    /// The Secrets the user created (name → key → value).
    secrets: BTreeMap<String, BTreeMap<String, String>>,
}

/// The chart installed as its NOTES say: the Secret their command makes
/// (fresh tokens), the install with its tokens' hashes, and the agent's
/// side read from the NOTES.
fn install_chart(values: &[PathBuf], sets: &[&str]) -> Installed {
    install_chart_with(values, sets, &["dispatcher", "executor", "agent"])
}

/// As [`install_chart`], the Secret holding the tokens `keys` (those the
/// NOTES' command must create).
fn install_chart_with(values: &[PathBuf], sets: &[&str], keys: &[&str]) -> Installed {
    let tokens = tokens_secret(keys);
    let mut all: Vec<String> = tokens
        .iter()
        .map(|(key, token)| format!("auth.tokenSha256.{key}={}", sha256_hex(token)))
        .collect();
    all.extend(sets.iter().map(|s| (*s).to_owned()));
    let install = helm_install(RELEASE, NAMESPACE, values, &all);
    let (secret, mut keys) = notes_secret_command(&install.notes);
    keys.sort();
    assert_eq!(
        keys,
        tokens.keys().cloned().collect::<Vec<_>>(),
        "the NOTES' Secret holds the keys the chart reads"
    );
    let (agent_secret, agent_key) = notes_agent_token(&install.notes);
    assert_eq!(agent_secret, secret);
    let agent = Agent {
        token: tokens[&agent_key].clone(),
        notes: Some(install.notes.clone()),
        grpc: notes_value(&install.notes, "- gRPC: ").to_owned(),
        mcp: notes_value(&install.notes, "- MCP (Streamable HTTP): ")
            .strip_prefix("http://")
            .and_then(|u| u.strip_suffix("/mcp"))
            .expect("http://HOST:PORT/mcp")
            .to_owned(),
    };
    Installed {
        objects: install.objects,
        agent,
        secrets: BTreeMap::from([(secret, tokens)]),
    }
}

/// `toolmesh ARGS…` as a user runs it: whether it succeeded, and what it
/// printed (stdout, then stderr).
async fn cli(args: &[&str]) -> (bool, String) {
    let out = tokio::process::Command::new(toolmesh_testkit::toolmesh_bin())
        .args(args)
        .env_remove("TOOLMESH_TOKEN")
        .env_remove("TOOLMESH_SERVER")
        .output()
        .await
        .expect("run the toolmesh CLI");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// One MCP request to the door at `addr` sent with `Host: host` and the
/// bearer `token`; the status and body.
async fn mcp(addr: &str, host: &str, token: Option<&str>, request: Value) -> (u16, String) {
    let auth = token.map(|t| format!("Bearer {t}"));
    let mut headers = vec![
        ("Host", host),
        ("Content-Type", "application/json"),
        ("Accept", "application/json, text/event-stream"),
        ("MCP-Protocol-Version", "2025-11-25"),
    ];
    if let Some(auth) = &auth {
        headers.push(("Authorization", auth));
    }
    http(addr, "POST", "/mcp", &headers, &request.to_string())
        .await
        .unwrap_or_else(|e| panic!("MCP at {addr}: {e}"))
}

fn search(id: u64) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
           "params": {"name": "search_kb", "arguments": {"query": "reset password"}}})
}

/// The words of a shell command line as sh splits them: quotes removed,
/// `$TOKEN` replaced by `token` outside single quotes.
fn shell_words(line: &str, token: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word: Option<String> = None;
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            ' ' | '\t' => words.extend(word.take()),
            '\'' => word
                .get_or_insert_default()
                .extend(chars.by_ref().take_while(|&c| c != '\'')),
            '"' => {
                let quoted: String = chars.by_ref().take_while(|&c| c != '"').collect();
                word.get_or_insert_default()
                    .push_str(&quoted.replace("$TOKEN", token));
            }
            '$' if chars.as_str().starts_with("TOKEN") => {
                word.get_or_insert_default().push_str(token);
                chars.nth("TOKEN".len() - 1);
            }
            c => word.get_or_insert_default().push(c),
        }
    }
    words.extend(word);
    words
}

/// What the answer to a NOTES command `line` shows: search_kb's answer to a
/// call of it, else the tool's name in a listing.
fn shows(line: &str) -> &'static str {
    if line.contains("search_kb") {
        "KB-101"
    } else {
        "search_kb"
    }
}

/// Runs the NOTES' commands for the user's machine as the user would (the
/// agent token in `$TOKEN`): `kubectl port-forward svc/NAME PORT…` forwards
/// 127.0.0.1:PORT to the Service's PORT, then each `toolmesh …` and `curl
/// …` must succeed: a listing shows the chart's tool, a call of search_kb
/// its answer.
async fn follow_notes(cluster: &Cluster, notes: &str, token: &str) {
    let block = notes
        .split_once("From your machine")
        .map(|(_, rest)| rest)
        .expect("the NOTES say how to call from the user's machine");
    let lines: Vec<String> = block
        .lines()
        .skip(1)
        .skip_while(|l| l.trim().is_empty())
        .take_while(|l| !l.trim().is_empty())
        .collect::<Vec<_>>()
        .join("\n")
        .replace("\\\n", " ")
        .lines()
        .map(str::to_owned)
        .collect();
    let mut forwards: BTreeMap<String, String> = BTreeMap::new();
    for line in &lines {
        let words = shell_words(line, token);
        let words: Vec<&str> = words
            .iter()
            .map(String::as_str)
            .filter(|w| *w != "&")
            .collect();
        match words.first().copied() {
            Some("kubectl") => {
                let at = words
                    .iter()
                    .position(|w| *w == "port-forward")
                    .expect("port-forward");
                let service = words[at + 1].strip_prefix("svc/").expect("svc/NAME");
                for port in &words[at + 2..] {
                    let local = format!("127.0.0.1:{port}");
                    forwards.insert(local, cluster.dial(None, &format!("{service}:{port}")));
                }
            }
            Some("toolmesh") => {
                let args: Vec<&str> = words[1..]
                    .iter()
                    .map(|w| forwards.get(*w).map_or(*w, String::as_str))
                    .collect();
                let (ok, out) = cli(&args).await;
                assert!(ok && out.contains(shows(line)), "{line}: {out}");
            }
            Some("curl") => {
                let url = words
                    .iter()
                    .find(|w| w.starts_with("http://"))
                    .expect("a URL");
                let (authority, path) = url["http://".len()..].split_once('/').expect("a path");
                let flag_values = |flag: &str| -> Vec<&str> {
                    words
                        .windows(2)
                        .filter(|w| w[0] == flag)
                        .map(|w| w[1])
                        .collect()
                };
                let mut headers: Vec<(&str, &str)> = vec![("Host", authority)];
                for header in flag_values("-H") {
                    let (name, value) = header.split_once(": ").expect("NAME: VALUE");
                    headers.push((name, value));
                }
                let body = flag_values("-d");
                let method = if body.is_empty() { "GET" } else { "POST" };
                let addr = forwards.get(authority).expect("a forwarded port");
                let (status, out) = http(
                    addr,
                    method,
                    &format!("/{path}"),
                    &headers,
                    body.first().copied().unwrap_or_default(),
                )
                .await
                .unwrap_or_else(|e| panic!("{line}: {e}"));
                assert!(
                    status == 200 && out.contains(shows(line)),
                    "{line}: {status} {out}"
                );
            }
            other => panic!("the NOTES run {other:?}, which this test does not know: {line}"),
        }
    }
    assert!(!forwards.is_empty() && lines.len() >= 3, "{lines:?}");
}

/// The agent's checks: over gRPC (the CLI through the Service, and each
/// dispatcher replica), over MCP under each Host a client sends, the
/// NOTES' own commands, and the refusals of callers without a token and of
/// foreign Hosts.
async fn check_agent(cluster: &Cluster, agent: &Agent, mcp_hosts: &[String]) {
    // A dispatcher is ready once it holds a snapshot; the executors'
    // registrations may reach it a moment later.
    for pod in cluster.pods_running("dispatcher") {
        let client = dispatcher(&cluster.pod_addr(pod, &json!("grpc")));
        let token = agent.token.clone();
        eventually(
            &format!("{} lists search_kb to the agent", cluster.pods[pod].name),
            Duration::from_secs(10),
            || {
                let mut client = client.clone();
                let request = toolmesh::pb::ListToolsRequest::default();
                let request = toolmesh_testkit::with_token(request, Some(&token));
                async move {
                    let tools = client.list_tools(request).await.ok()?.into_inner().tools;
                    tools.iter().any(|t| t.name == "search_kb").then_some(())
                }
            },
        )
        .await;
        let mut client = client.clone();
        let request = toolmesh::pb::InvokeRequest {
            tool: "search_kb".into(),
            arguments: r#"{"query":"refund"}"#.into(),
            ..Default::default()
        };
        let response = invoke_with_token(&mut client, request, Some(&agent.token)).await;
        assert_eq!(
            code(&response),
            0,
            "{}: {}",
            cluster.pods[pod].name,
            message(&response)
        );
    }

    let grpc = cluster.dial(None, &agent.grpc);
    let (ok, listed) = cli(&[
        "tools",
        "--server",
        &grpc,
        "--token",
        &agent.token,
        "--json",
    ])
    .await;
    assert!(ok && listed.contains("\"search_kb\""), "{listed}");
    let (ok, called) = cli(&[
        "call",
        "search_kb",
        r#"{"query":"reset password"}"#,
        "--server",
        &grpc,
        "--token",
        &agent.token,
        "--json",
    ])
    .await;
    assert!(ok && called.contains("KB-101"), "{called}");
    let (ok, anonymous) = cli(&["tools", "--server", &grpc]).await;
    assert!(!ok && anonymous.contains("no bearer token"), "{anonymous}");
    if let Some(notes) = &agent.notes {
        follow_notes(cluster, notes, &agent.token).await;
    }

    let door = cluster.dial(None, &agent.mcp);
    for host in mcp_hosts {
        let (status, init) = mcp(
            &door,
            host,
            Some(&agent.token),
            json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                "protocolVersion": "2025-11-25", "capabilities": {},
                "clientInfo": {"name": "deploy-run", "version": "1"}}}),
        )
        .await;
        assert_eq!(status, 200, "initialize with Host {host}: {init}");
        let (status, tools) = mcp(
            &door,
            host,
            Some(&agent.token),
            json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}),
        )
        .await;
        assert!(status == 200 && tools.contains("\"search_kb\""), "{tools}");
        let (status, result) = mcp(&door, host, Some(&agent.token), search(3)).await;
        assert!(status == 200 && result.contains("KB-101"), "{result}");
    }
    let (status, refused) = mcp(&door, &mcp_hosts[0], None, search(4)).await;
    assert_eq!(status, 401, "no token: {refused}");
    let (status, foreign) = mcp(&door, "evil.example", Some(&agent.token), search(5)).await;
    assert!(
        status == 403 && foreign.contains("--mcp-allowed-hosts"),
        "{foreign}"
    );
}

/// The Host names a client in the namespace sends to the MCP door at
/// `service:port`: short and fully qualified.
fn service_hosts(mcp: &str) -> Vec<String> {
    let (service, port) = mcp.rsplit_once(':').expect("host:port");
    vec![
        mcp.to_owned(),
        format!("{service}.{NAMESPACE}:{port}"),
        format!("{service}.{NAMESPACE}.svc.cluster.local:{port}"),
    ]
}

/// Starts every pod `which` selects and waits until each is ready.
async fn start_ready(cluster: &mut Cluster, which: impl Fn(&loopback_cluster::Pod) -> bool) {
    let before: Vec<usize> = (0..cluster.pods.len())
        .filter(|&p| cluster.is_running(p))
        .collect();
    cluster.start(which);
    for pod in 0..cluster.pods.len() {
        if cluster.is_running(pod) && !before.contains(&pod) {
            cluster.wait_ready(pod).await;
        }
    }
}

/// Every endpoint the ServiceMonitors and PodMonitors name answers with a
/// Prometheus exposition, and each monitor finds toolmesh's metrics.
async fn check_scrapes(cluster: &Cluster) {
    let targets = cluster.scrape_targets();
    let mut found: BTreeMap<String, bool> = BTreeMap::new();
    for (monitor, what, addr, path) in targets {
        let (status, body) = http(&addr, "GET", &path, &[], "")
            .await
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        assert_eq!(status, 200, "{what} {path}: {body}");
        assert!(
            body.contains("# TYPE ") || body.trim_end().ends_with("# EOF"),
            "{what} {path} serves an exposition: {body}"
        );
        *found.entry(monitor).or_default() |= body.contains("# TYPE toolmesh_");
    }
    assert!(
        found.len() >= 2,
        "a ServiceMonitor and a PodMonitor: {found:?}"
    );
    for (monitor, toolmesh) in found {
        assert!(toolmesh, "{monitor} scrapes toolmesh metrics");
    }
}

/// The default chart, as its NOTES tell a new user to install it, serves.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn chart_with_default_values_serves() {
    let Installed {
        objects,
        agent,
        secrets,
    } = install_chart(&[], &[]);
    let mut cluster = Cluster::new(NAMESPACE, objects, secrets).await;
    start_ready(&mut cluster, |_| true).await;
    cluster.check_probes().await;
    check_agent(&cluster, &agent, &service_hosts(&agent.mcp)).await;
}

/// Workload identity (auth.workloadIdentity): no pod reads an executor or
/// dispatcher token from the Secret, which holds only the agents' token.
/// Executors register and dispatchers follow the registry with the
/// projected service-account tokens the kubelet mints for their accounts,
/// which the rendered policy pins to their roles; the servers fetch the
/// cluster's keys from the API server with their own account's token and
/// the cluster CA. The mesh then serves agents as with static tokens.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn chart_with_workload_identity_serves() {
    let plane = ControlPlane::start().await;
    let issuer = format!("auth.workloadIdentity.issuer={}", plane.issuer);
    let Installed {
        objects,
        agent,
        secrets,
    } = install_chart_with(
        &[],
        &["auth.workloadIdentity.enabled=true", &issuer],
        &["agent"],
    );
    let secret_keys: Vec<&str> = objects
        .iter()
        .flat_map(|o| containers(o).iter())
        .flat_map(|c| c["env"].as_array().into_iter().flatten())
        .filter_map(|e| e["valueFrom"]["secretKeyRef"]["key"].as_str())
        .collect();
    assert!(
        !secret_keys
            .iter()
            .any(|k| *k == "executor" || *k == "dispatcher"),
        "pods read no static mesh token: {secret_keys:?}"
    );
    let mut cluster = Cluster::new(NAMESPACE, objects, secrets).await;
    cluster.control_plane = Some(plane);
    start_ready(&mut cluster, |_| true).await;
    cluster.check_probes().await;
    check_agent(&cluster, &agent, &service_hosts(&agent.mcp)).await;
}

/// The kustomize base, with the Secret and the overlay deploy/README.md
/// gives (the policy's placeholder hashes replaced by the Secret's), serves.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn kustomize_base_with_its_overlay_serves() {
    let tokens = tokens_secret(&["dispatcher", "executor", "agent"]);
    let overlay = temp_dir("kustomize-overlay");
    let mut policy = std::fs::read_to_string(base_dir().join("base/policy.toml")).unwrap();
    for (placeholder, key) in [("1", "dispatcher"), ("2", "executor"), ("3", "agent")] {
        let placeholder = format!("{}{placeholder}", "0".repeat(63));
        assert!(
            policy.contains(&placeholder),
            "the base names {key} by {placeholder}"
        );
        policy = policy.replace(&placeholder, &sha256_hex(&tokens[key]));
    }
    std::fs::write(overlay.join("policy.toml"), policy).unwrap();
    std::fs::write(
        overlay.join("kustomization.yaml"),
        format!(
            "resources: [{}]\nconfigMapGenerator:\n  - {{name: toolmesh-policy, behavior: replace, files: [policy.toml]}}\n",
            relative(overlay.path(), &base_dir()).display()
        ),
    )
    .unwrap();
    let objects = kustomize(overlay.path());
    let dispatcher_service = kind(&objects, "Service")
        .find(|s| s["spec"]["clusterIP"] != "None" && name(s).ends_with("dispatcher"))
        .expect("the dispatcher Service");
    let port = |port_name: &str| {
        dispatcher_service["spec"]["ports"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|p| p["name"] == port_name)
            .and_then(|p| p["port"].as_u64())
            .unwrap_or_else(|| panic!("port {port_name}"))
    };
    let agent = Agent {
        token: tokens["agent"].clone(),
        notes: None,
        grpc: format!("{}:{}", name(dispatcher_service), port("grpc")),
        mcp: format!("{}:{}", name(dispatcher_service), port("mcp")),
    };
    let secrets = BTreeMap::from([("toolmesh-tokens".to_owned(), tokens)]);
    let mut cluster = Cluster::new(NAMESPACE, objects, secrets).await;
    start_ready(&mut cluster, |_| true).await;
    cluster.check_probes().await;
    check_agent(&cluster, &agent, &service_hosts(&agent.mcp)).await;
}

/// `to` relative to the directory `from` (both absolute): kustomize takes
/// no absolute path to a base.
fn relative(from: &Path, to: &Path) -> PathBuf {
    let from = from.canonicalize().unwrap();
    let to = to.canonicalize().unwrap();
    let mut path = PathBuf::new();
    for _ in from.components().skip(1) {
        path.push("..");
    }
    path.join(to.strip_prefix("/").unwrap())
}

/// The HA chart (values-ha.yaml, metrics and an MCP Ingress on) serves on
/// a bundled three-member etcd, its metrics are where the monitors point,
/// and losing the busiest registry replica to SIGKILL fails no call while
/// the mesh keeps changing: an executor started after the kill registers
/// through a surviving replica and every dispatcher calls it; the replica
/// started again turns ready.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn chart_with_ha_values_survives_a_registry_replica() {
    const HOST: &str = "mcp.toolmesh.test";
    let extra = temp_dir("ha-values");
    let late = extra.join("late-executor.yaml");
    // The chart's executor, and one more held back until after the kill.
    std::fs::write(
        &late,
        "executors:\n  - {name: knowledge, example: knowledge, replicas: 2, port: 9001, healthPort: 9002, resources: {requests: {cpu: 50m, memory: 64Mi}}}\n  - {name: accounts, example: accounts, replicas: 1, port: 9001, healthPort: 9002, resources: {requests: {cpu: 50m, memory: 64Mi}}}\n",
    )
    .unwrap();
    let Installed {
        objects,
        agent,
        secrets,
    } = install_chart(
        &[chart_dir().join("values-ha.yaml"), late],
        &[
            "metrics.enabled=true",
            "mcp.ingress.enabled=true",
            &format!("mcp.ingress.host={HOST}"),
        ],
    );
    let mut cluster = Cluster::new(NAMESPACE, objects, secrets).await;
    let held_back = format!("{RELEASE}-executor-accounts");
    assert_eq!(cluster.pods_of(&format!("{RELEASE}-etcd")).len(), 3);
    assert_eq!(cluster.pods_of(&format!("{RELEASE}-registry")).len(), 3);
    start_ready(&mut cluster, |pod| !pod.name.starts_with(&held_back)).await;
    cluster.check_probes().await;
    check_agent(&cluster, &agent, &service_hosts(&agent.mcp)).await;
    let (status, through_ingress) = mcp(
        &cluster.ingress_backend(HOST, "/mcp"),
        HOST,
        Some(&agent.token),
        search(9),
    )
    .await;
    assert!(
        status == 200 && through_ingress.contains("KB-101"),
        "{through_ingress}"
    );
    check_scrapes(&cluster).await;

    // Callers keep calling while a registry replica dies.
    let stop = Arc::new(AtomicBool::new(false));
    let calls = Arc::new(AtomicUsize::new(0));
    let caller = {
        let (stop, calls) = (stop.clone(), calls.clone());
        let mut client = dispatcher(&cluster.dial(None, &agent.grpc));
        let token = agent.token.clone();
        tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                let request = toolmesh::pb::InvokeRequest {
                    tool: "search_kb".into(),
                    arguments: r#"{"query":"two-factor"}"#.into(),
                    ..Default::default()
                };
                let response = invoke_with_token(&mut client, request, Some(&token)).await;
                assert_eq!(code(&response), 0, "a call failed: {}", message(&response));
                calls.fetch_add(1, Ordering::Relaxed);
            }
        })
    };
    until("calls flow", Duration::from_secs(10), || {
        calls.load(Ordering::Relaxed) >= 5
    })
    .await;
    let victim = cluster.busiest(&format!("{RELEASE}-registry"));
    assert!(
        cluster.open_connections(victim) > 0,
        "dispatchers and executors hold connections to {}",
        cluster.pods[victim].name
    );
    cluster.kill9(victim).await;

    start_ready(&mut cluster, |pod| pod.name.starts_with(&held_back)).await;
    for pod in cluster.pods_running("dispatcher") {
        let client = dispatcher(&cluster.pod_addr(pod, &json!("grpc")));
        let token = agent.token.clone();
        eventually(
            &format!(
                "{} calls the executor started after the kill",
                cluster.pods[pod].name
            ),
            Duration::from_secs(20),
            || {
                let mut client = client.clone();
                let token = token.clone();
                async move {
                    let request = toolmesh::pb::InvokeRequest {
                        tool: "get_current_time".into(),
                        arguments: "{}".into(),
                        ..Default::default()
                    };
                    let response = client
                        .invoke(toolmesh_testkit::with_token(request, Some(&token)))
                        .await
                        .ok()?
                        .into_inner();
                    (code(&response) == 0).then_some(())
                }
            },
        )
        .await;
    }
    let before = calls.load(Ordering::Relaxed);
    until(
        "calls go on after the kill",
        Duration::from_secs(10),
        || calls.load(Ordering::Relaxed) >= before + 5,
    )
    .await;
    stop.store(true, Ordering::Relaxed);
    caller.await.expect("no call failed");
    // The kubelet starts the killed container again; it rejoins on etcd.
    let victim_name = cluster.pods[victim].name.clone();
    cluster.start(|pod| pod.name == victim_name);
    for pod in cluster.pods_of(&format!("{RELEASE}-registry")) {
        cluster.wait_ready(pod).await;
    }
}
