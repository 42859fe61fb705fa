//! The deployment serves: the chart (default values, and values-ha.yaml)
//! and the kustomize base are rendered with the real `helm` and `kubectl`
//! and what they describe runs on loopback as real processes
//! (the support library's loopback_cluster: every replica's exact command, args
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
//! run at once, naming the registry's refusal. Every shell block of
//! deploy/README.md runs as printed, what needs a cluster through stand-ins
//! that render it (and the installs then run here as above).

use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;
use toolmesh_system_tests::loopback_cluster::{Cluster, ControlPlane, http};
use toolmesh_system_tests::render::*;
use toolmesh_system_tests::*;
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
fn service_hosts(mcp: &str, namespace: &str) -> Vec<String> {
    let (service, port) = mcp.rsplit_once(':').expect("host:port");
    vec![
        mcp.to_owned(),
        format!("{service}.{namespace}:{port}"),
        format!("{service}.{namespace}.svc.cluster.local:{port}"),
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
    check_agent(&cluster, &agent, &service_hosts(&agent.mcp, NAMESPACE)).await;
}

/// Workload identity (auth.workloadIdentity), installed as deploy/README.md
/// says ("Workload identity": the Secret of the agents' token, the issuer
/// read from the cluster, the install; rendered here): no pod reads an
/// executor or dispatcher token from the Secret, which holds only the
/// agents' token. Executors register and dispatchers follow the registry
/// with the projected service-account tokens the kubelet mints for their
/// accounts, which the rendered policy pins to their roles; the servers
/// fetch the cluster's keys from the API server with their own account's
/// token and the cluster CA. The mesh then serves agents as with static
/// tokens.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn chart_with_workload_identity_serves() {
    let plane = ControlPlane::start().await;
    let shell = ReaderShell::new(&plane.issuer);
    shell
        .run(&deploy_readme("Workload identity: no executor or dispatcher token")[0])
        .await;
    let (
        Installed {
            objects,
            agent,
            secrets,
        },
        notes,
    ) = installed_by(&shell);
    let (_, keys) = notes_secret_command(&notes);
    assert_eq!(
        keys,
        ["agent"],
        "the NOTES' Secret holds the agents' token alone"
    );
    assert!(
        policy_of(&objects).contains(&format!("issuer = \"{}\"", plane.issuer)),
        "the policy trusts the issuer the cluster names"
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
    let mut cluster = Cluster::new("default", objects, secrets).await;
    cluster.control_plane = Some(plane);
    start_ready(&mut cluster, |_| true).await;
    cluster.check_probes().await;
    check_agent(&cluster, &agent, &service_hosts(&agent.mcp, "default")).await;
}

/// The kustomize base as deploy/README.md installs it: the Secret and
/// `sha` of "Credentials", then its overlay (the policy's placeholder
/// hashes replaced by the Secret's) made and applied (rendered here) by
/// the README's own commands; step 3 of the Helm install, the same for
/// kustomize, calls it, as does every client of the agent's checks.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn kustomize_base_with_its_overlay_serves() {
    let shell = ReaderShell::new("https://kubernetes.default.svc.cluster.local");
    shell.run(&deploy_readme("Credentials")[0]).await;
    let kubernetes = deploy_readme("Kubernetes");
    let overlay = &kubernetes[1];
    assert!(
        overlay.contains("kubectl apply -k"),
        "the second block under Kubernetes is the kustomize one"
    );
    let printed = shell.run(overlay).await;
    assert!(printed.contains("rendered"), "{printed}");
    let objects = shell.applied();
    let secrets = shell.secrets();
    let tokens = &secrets["toolmesh-tokens"];
    let policy = policy_of(&objects);
    for key in ["dispatcher", "executor", "agent"] {
        assert!(
            policy.contains(&sha256_hex(&tokens[key])),
            "the overlay's policy names the {key} token"
        );
    }
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
    let mut cluster = Cluster::new(NAMESPACE, objects, secrets).await;
    start_ready(&mut cluster, |_| true).await;
    cluster.check_probes().await;
    check_agent(&cluster, &agent, &service_hosts(&agent.mcp, NAMESPACE)).await;
    let printed = shell.run(&forwarded(&cluster, &kubernetes[0])).await;
    assert!(printed.matches("[KB-101]").count() >= 2, "{printed}");
}

/// The policy a render ships.
fn policy_of(objects: &[Value]) -> String {
    kind(objects, "ConfigMap")
        .find_map(|c| c["data"]["policy.toml"].as_str())
        .expect("a ConfigMap with policy.toml")
        .to_owned()
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
    check_agent(&cluster, &agent, &service_hosts(&agent.mcp, NAMESPACE)).await;
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

// deploy/README.md's shell blocks, run as printed. A block that needs a
// cluster cannot run here (no API server, no kubelet, no container
// engine): its `kubectl` and `helm` are stand-ins that keep what a cluster
// would keep and render what it would run, with the same flags, and the
// rendered objects then run on loopback like every render above.

/// The file whose blocks run here.
const DEPLOY_README: &str = "deploy/README.md";

/// Every sh block of deploy/README.md, by heading, and how many: each is
/// run by a test below, and a new block fails this list until it is.
const DEPLOY_README_BLOCKS: [(&str, usize); 8] = [
    ("The processes", 1),
    ("Kubernetes", 2),
    ("High availability", 1),
    ("Helm", 1),
    ("Credentials", 1),
    ("Workload identity: no executor or dispatcher token", 1),
    ("The image", 1),
    ("Three registry replicas on etcd", 1),
];

/// The sh blocks of deploy/README.md under `heading`, as printed.
fn deploy_readme(heading: &str) -> Vec<String> {
    toolmesh_system_tests::readme::blocks_under_in(DEPLOY_README, heading, "sh")
        .into_iter()
        .map(|b| b.text)
        .collect()
}

/// A reader's shell on a machine without a cluster or a container engine:
/// in a directory where `deploy/` is the repository's, with this build's
/// `toolmesh` and stand-ins for `kubectl`, `helm` and `docker` on PATH.
/// What needs no cluster runs for real (`kubectl kustomize`, `helm
/// template`); what does is kept or rendered instead: `kubectl create
/// secret generic` keeps the Secret (which `kubectl get secret … -o
/// jsonpath={.data.KEY}` reads back, base64 as the API server gives it),
/// `helm install` renders with the same flags (`--dry-run=client`), `kubectl
/// apply -k DIR` renders DIR (`kubectl kustomize`), `kubectl port-forward` is
/// recorded (the test forwards), `kubectl get --raw
/// /.well-known/openid-configuration` names the cluster's issuer, and
/// `docker build` records its arguments. Anything else fails.
struct ReaderShell {
    dir: toolmesh_system_tests::TempDir,
    path: std::ffi::OsString,
}

impl ReaderShell {
    fn new(issuer: &str) -> ReaderShell {
        let dir = temp_dir("reader-shell");
        std::os::unix::fs::symlink(repo_root().join("deploy"), dir.join("deploy")).unwrap();
        let path = toolmesh_system_tests::readme::toolmesh_on_path(dir.path());
        let state = dir.join("cluster");
        std::fs::create_dir_all(state.join("secrets")).unwrap();
        let kubectl = format!(
            r#"#!/bin/sh
state='{state}'
case "$1 $2" in
"create secret")
    [ "$3" = generic ] || {{ echo "kubectl (test stand-in): $*" >&2; exit 97; }}
    name=$4; shift 4
    mkdir "$state/secrets/$name" || {{ echo "Error: secrets \"$name\" already exists" >&2; exit 1; }}
    for arg in "$@"; do
        case "$arg" in
        --from-literal=*) kv=${{arg#--from-literal=}}; printf %s "${{kv#*=}}" >"$state/secrets/$name/${{kv%%=*}}" ;;
        *) echo "kubectl (test stand-in): $arg" >&2; exit 97 ;;
        esac
    done
    echo "secret/$name created" ;;
"get secret")
    key=$(printf %s "$5" | sed -n 's/^jsonpath={{\.data\.\(.*\)}}$/\1/p')
    [ "$4" = -o ] && [ -n "$key" ] && [ $# = 5 ] || {{ echo "kubectl (test stand-in): $*" >&2; exit 97; }}
    base64 -w0 <"$state/secrets/$3/$key" ;;
"get --raw")
    [ "$3" = /.well-known/openid-configuration ] || exit 97
    printf '{{"issuer":"%s"}}\n' '{issuer}' ;;
"apply -k")
    '{kubectl}' kustomize "$3" >"$state/applied.yaml" && echo "rendered $3 (no cluster here)" ;;
"port-forward "*) echo "$*" >>"$state/port-forwards" ;;
"kustomize "*) exec '{kubectl}' "$@" ;;
*) echo "kubectl (test stand-in): $* needs a cluster" >&2; exit 97 ;;
esac
"#,
            state = state.display(),
            kubectl = prepared_tool("TOOLMESH_TEST_KUBECTL").display(),
        );
        let helm = format!(
            r#"#!/bin/sh
case "$1" in
install) shift; exec '{helm}' install "$@" --dry-run=client --output json >'{state}/release.json' ;;
template|lint) exec '{helm}' "$@" ;;
*) echo "helm (test stand-in): $* needs a cluster" >&2; exit 97 ;;
esac
"#,
            helm = prepared_tool("TOOLMESH_TEST_HELM").display(),
            state = state.display(),
        );
        let docker = format!(
            "#!/bin/sh\nprintf '%s\\n' \"$@\" >'{}/docker'\n",
            state.display()
        );
        for (name, script) in [("kubectl", kubectl), ("helm", helm), ("docker", docker)] {
            let file = dir.join("bin").join(name);
            std::fs::write(&file, script).unwrap();
            let mut permissions = std::fs::metadata(&file).unwrap().permissions();
            std::os::unix::fs::PermissionsExt::set_mode(&mut permissions, 0o755);
            std::fs::set_permissions(&file, permissions).unwrap();
        }
        ReaderShell { dir, path }
    }

    /// Runs `script` (lines a reader types, in one shell) to the end; what
    /// it printed. It must succeed.
    async fn run(&self, script: &str) -> String {
        let (script, dir, path) = (
            script.to_owned(),
            self.dir.path().to_owned(),
            self.path.clone(),
        );
        let out = tokio::task::spawn_blocking(move || {
            let out = toolmesh_system_tests::readme::shell(
                &format!("set -e\n{script}"),
                &dir,
                &path,
                &[],
            );
            (script, out)
        })
        .await
        .expect("the shell");
        let (script, out) = out;
        let printed = toolmesh_system_tests::readme::text(&out.stdout);
        assert!(
            out.status.success(),
            "{script}\nfailed: {printed}\n{}",
            toolmesh_system_tests::readme::text(&out.stderr)
        );
        printed
    }

    fn state(&self, file: &str) -> PathBuf {
        self.dir.join("cluster").join(file)
    }

    /// The Secrets created (name → key → value).
    fn secrets(&self) -> BTreeMap<String, BTreeMap<String, String>> {
        std::fs::read_dir(self.state("secrets"))
            .unwrap()
            .map(|secret| {
                let secret = secret.unwrap();
                let keys = std::fs::read_dir(secret.path())
                    .unwrap()
                    .map(|key| {
                        let key = key.unwrap();
                        let value = std::fs::read_to_string(key.path()).unwrap();
                        (key.file_name().to_string_lossy().into_owned(), value)
                    })
                    .collect();
                (secret.file_name().to_string_lossy().into_owned(), keys)
            })
            .collect()
    }

    /// What `helm install` would have created, and its notes.
    fn release(&self) -> Install {
        let text = std::fs::read_to_string(self.state("release.json")).expect("helm install ran");
        let release: Value = serde_json::from_str(&text).expect("helm's JSON");
        Install {
            objects: documents(release["manifest"].as_str().expect("a manifest")),
            notes: release["info"]["notes"].as_str().expect("notes").to_owned(),
        }
    }

    /// What `kubectl apply -k` would have applied.
    fn applied(&self) -> Vec<Value> {
        documents(&std::fs::read_to_string(self.state("applied.yaml")).expect("kubectl apply ran"))
    }
}

/// The lines of `block` from the one that starts `kubectl port-forward`
/// on, with each forwarded `127.0.0.1:PORT` replaced by where `cluster`
/// forwards it: the Service's port, reached from outside the cluster as a
/// port-forward does. The rest of the block is the user's side.
fn forwarded(cluster: &Cluster, block: &str) -> String {
    let at = block
        .find("kubectl port-forward")
        .expect("the block forwards a port");
    let rest = &block[at..];
    let line = rest.lines().next().unwrap();
    let words: Vec<&str> = line.split_whitespace().filter(|w| *w != "&").collect();
    let service = words[2].strip_prefix("svc/").expect("svc/NAME");
    let mut filled = rest.to_owned();
    for port in &words[3..] {
        let local = cluster.dial(None, &format!("{service}:{port}"));
        filled = filled.replace(&format!("127.0.0.1:{port}"), &local);
    }
    filled
}

/// A release installed as deploy/README.md says, from what the reader's
/// shell kept: the rendered objects, the Secrets, and the agent's side
/// read from the NOTES.
fn installed_by(shell: &ReaderShell) -> (Installed, String) {
    let Install { objects, notes } = shell.release();
    let secrets = shell.secrets();
    let (secret, key) = notes_agent_token(&notes);
    let agent = Agent {
        token: secrets[&secret][&key].clone(),
        notes: Some(notes.clone()),
        grpc: notes_value(&notes, "- gRPC: ").to_owned(),
        mcp: notes_value(&notes, "- MCP (Streamable HTTP): ")
            .strip_prefix("http://")
            .and_then(|u| u.strip_suffix("/mcp"))
            .expect("http://HOST:PORT/mcp")
            .to_owned(),
    };
    let installed = Installed {
        objects,
        agent,
        secrets,
    };
    (installed, notes)
}

/// deploy/README.md's sh blocks are the ones the tests below run.
#[test]
fn every_deploy_readme_block_is_run() {
    let mut found: BTreeMap<String, usize> = BTreeMap::new();
    for block in toolmesh_system_tests::readme::blocks_in(DEPLOY_README) {
        if block.lang == "sh" {
            *found.entry(block.heading).or_default() += 1;
        }
    }
    let run: BTreeMap<String, usize> = DEPLOY_README_BLOCKS
        .iter()
        .map(|(heading, n)| ((*heading).to_owned(), *n))
        .collect();
    assert_eq!(
        found, run,
        "every sh block of {DEPLOY_README} is run by a test"
    );
}

/// "Kubernetes", with Helm, as printed: the Secret created, the chart
/// installed with its hashes (rendered here), and the user's side — the
/// port-forward, the agent token read from the Secret, the MCP call with
/// curl and the gRPC call with `toolmesh call` — answered by the release
/// running on loopback.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn deploy_readme_helm_install_runs_as_printed() {
    let block = &deploy_readme("Kubernetes")[0];
    let shell = ReaderShell::new("https://kubernetes.default.svc.cluster.local");
    let at = block.find("kubectl port-forward").expect("step 3");
    shell.run(&block[..at]).await;
    let (installed, _) = installed_by(&shell);
    let mut cluster = Cluster::new("default", installed.objects, installed.secrets).await;
    start_ready(&mut cluster, |_| true).await;
    cluster.check_probes().await;
    let printed = shell.run(&forwarded(&cluster, block)).await;
    assert!(
        printed.contains(r#""isError":false"#) && printed.matches("[KB-101]").count() >= 2,
        "curl and toolmesh call each answer: {printed}"
    );
}

/// What deploy/README.md installs on a cluster, rendered as printed:
/// "Credentials" makes the three tokens; "Helm"'s `helm template` renders
/// what `kubectl kustomize deploy/kubernetes` does (the chart's and the
/// base's essentials are equal); "High availability" installs three
/// registries on the bundled etcd and three dispatchers with the
/// Secret's hashes. "The image": no container engine runs here, so
/// `docker build` is checked against what it names instead: the
/// Dockerfile, each `--build-arg` one of its ARGs, the tag the chart's
/// image, the context the repository.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn deploy_readme_renders_what_needs_a_cluster() {
    let shell = ReaderShell::new("https://kubernetes.default.svc.cluster.local");
    let credentials = &deploy_readme("Credentials")[0];
    shell.run(credentials).await;
    let secrets = shell.secrets();
    let tokens = &secrets["toolmesh-tokens"];
    assert_eq!(
        tokens.keys().map(String::as_str).collect::<Vec<_>>(),
        ["agent", "dispatcher", "executor"]
    );
    assert!(tokens.values().all(|t| t.len() == 64), "{tokens:?}");

    let rendered = shell.run(&deploy_readme("Helm")[0]).await;
    assert_renders_alike(&documents(&rendered), &kustomize(&base_dir()));

    let ha = deploy_readme("High availability");
    shell
        .run(&format!(
            "{credentials_sha}\n{}",
            ha[0],
            credentials_sha = sha_line(credentials)
        ))
        .await;
    let objects = shell.release().objects;
    for (workload, replicas) in [("registry", 3), ("dispatcher", 3), ("etcd", 3)] {
        let found = workloads(&objects)
            .find(|w| name(w) == format!("toolmesh-{workload}"))
            .unwrap_or_else(|| panic!("toolmesh-{workload}"));
        assert_eq!(found["spec"]["replicas"], replicas, "{workload}");
    }
    assert!(
        policy_of(&objects).contains(&sha256_hex(&tokens["dispatcher"])),
        "installed with the Secret's hashes"
    );

    // Built in the repository itself (its context and its git revision);
    // nothing is written there.
    let image = &deploy_readme("The image")[0];
    shell
        .run(&format!("cd '{}'\n{image}", repo_root().display()))
        .await;
    let args = std::fs::read_to_string(shell.state("docker")).expect("docker ran");
    let args: Vec<&str> = args.lines().collect();
    assert_eq!(args.first(), Some(&"build"), "{args:?}");
    let value = |flag: &str| -> Vec<&str> {
        args.windows(2)
            .filter(|w| w[0] == flag)
            .map(|w| w[1])
            .collect()
    };
    let dockerfile =
        std::fs::read_to_string(repo_root().join(value("-f")[0])).expect("-f names the Dockerfile");
    for build_arg in value("--build-arg") {
        let (arg, revision) = build_arg.split_once('=').expect("NAME=VALUE");
        assert!(
            dockerfile.lines().any(|l| l.trim() == format!("ARG {arg}")
                || l.trim().starts_with(&format!("ARG {arg}="))),
            "the Dockerfile declares ARG {arg}"
        );
        assert!(!revision.is_empty(), "{arg} has a value");
    }
    let chart: Value =
        serde_yaml::from_str(&std::fs::read_to_string(chart_dir().join("Chart.yaml")).unwrap())
            .unwrap();
    let values: Value =
        serde_yaml::from_str(&std::fs::read_to_string(chart_dir().join("values.yaml")).unwrap())
            .unwrap();
    assert_eq!(
        value("-t"),
        [format!(
            "{}:{}",
            values["image"]["repository"].as_str().unwrap(),
            chart["appVersion"].as_str().unwrap()
        )
        .as_str()],
        "the image the chart runs"
    );
    assert_eq!(args.last(), Some(&"."), "the repository is the context");
}

/// The `sha() { … }` line of a block.
fn sha_line(block: &str) -> &str {
    block
        .lines()
        .find(|l| l.starts_with("sha()"))
        .expect("the block defines sha")
}

/// A block of long-running commands as a reader runs it on several hosts,
/// here all on loopback: its variable lines (`NAME=…`, `export …`) run
/// once, in order, and their values go to every command; each command line
/// (continuations joined) runs on the hosts `hosts` gives for the first
/// words it starts with. The addresses a reader fills in for their
/// machines become loopback ports: `HOST:PORT` of a host named in `hosts`
/// on any line, and `0.0.0.0:PORT` on the line of the host it runs on,
/// are one free port of 127.0.0.1 each.
struct Sketch {
    dir: toolmesh_system_tests::TempDir,
    path: std::ffi::OsString,
    env: Vec<(String, String)>,
    /// (host, command line filled in), in the block's order.
    commands: Vec<(String, String)>,
    addresses: BTreeMap<(String, u16), String>,
}

impl Sketch {
    fn plan(block: &str, hosts: &[(&str, &[&str])]) -> Sketch {
        let dir = temp_dir("readme-sketch");
        let path = toolmesh_system_tests::readme::toolmesh_on_path(dir.path());
        let known: Vec<&str> = hosts.iter().flat_map(|(_, h)| h.iter().copied()).collect();
        let mut addresses: BTreeMap<(String, u16), String> = BTreeMap::new();
        let mut fill = |line: &str, on: &str| -> String {
            let mut out = String::new();
            let mut word = String::new();
            for c in line.chars().chain(std::iter::once(' ')) {
                if c.is_ascii_alphanumeric() || ".-:".contains(c) {
                    word.push(c);
                    continue;
                }
                let address = word.rsplit_once(':').and_then(|(host, port)| {
                    let port: u16 = port.parse().ok()?;
                    let host = if host == "0.0.0.0" { on } else { host };
                    known.contains(&host).then(|| {
                        addresses
                            .entry((host.to_owned(), port))
                            .or_insert_with(|| {
                                format!("127.0.0.1:{}", loopback_cluster::free_port())
                            })
                            .clone()
                    })
                });
                out.push_str(address.as_deref().unwrap_or(&word));
                word.clear();
                out.push(c);
            }
            out.pop();
            out
        };
        let joined = block.replace("\\\n", " ");
        let lines: Vec<&str> = joined
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .collect();
        let is_variable = |line: &str| {
            let line = line.strip_prefix("export ").unwrap_or(line);
            line.split_once('=').is_some_and(|(name, _)| {
                !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            })
        };
        let mut script = String::from("set -ea\n");
        let mut names = Vec::new();
        let mut commands = Vec::new();
        for line in lines {
            if is_variable(line) {
                script.push_str(&fill(line, ""));
                script.push('\n');
                let line = line.strip_prefix("export ").unwrap_or(line);
                names.push(line.split_once('=').unwrap().0.to_owned());
                continue;
            }
            let command = line.split(" #").next().unwrap().trim();
            let (_, on) = hosts
                .iter()
                .find(|(start, _)| command.starts_with(start))
                .unwrap_or_else(|| panic!("no host is given for `{command}`"));
            for host in *on {
                commands.push(((*host).to_owned(), fill(command, host)));
            }
        }
        for name in &names {
            script.push_str(&format!("printf '%s\\n' \"${name}\"\n"));
        }
        let out = toolmesh_system_tests::readme::shell(&script, dir.path(), &path, &[]);
        assert!(
            out.status.success(),
            "{script}: {}",
            toolmesh_system_tests::readme::text(&out.stderr)
        );
        let printed = toolmesh_system_tests::readme::text(&out.stdout);
        let env = names
            .into_iter()
            .zip(printed.lines().map(str::to_owned))
            .collect();
        Sketch {
            dir,
            path,
            env,
            commands,
            addresses,
        }
    }

    /// Starts the commands that begin with `start`, in order.
    fn start(&self, start: &str) -> Vec<Proc> {
        self.commands
            .iter()
            .filter(|(_, command)| command.starts_with(start))
            .map(|(host, command)| {
                let mut sh = std::process::Command::new("sh");
                sh.args(["-c", &format!("exec {command}")])
                    .current_dir(self.dir.path())
                    .env("PATH", &self.path)
                    .envs(self.env.iter().map(|(k, v)| (k, v)));
                for var in CLIENT_ENV {
                    sh.env_remove(var);
                }
                Proc::spawn(&format!("{start} on {host}"), sh)
            })
            .collect()
    }

    /// Where `host:port` of the block is on loopback.
    fn address(&self, host: &str, port: u16) -> &str {
        &self.addresses[&(host.to_owned(), port)]
    }
}

/// A dispatcher at `addr` lists search_kb and a call of it answers.
async fn search_kb_answers(addr: &str) {
    let mut client = dispatcher(addr);
    until_listed(&mut client, &["search_kb"], Duration::from_secs(30)).await;
    let response = invoke(
        &mut client,
        "search_kb",
        r#"{"query":"reset password"}"#,
        None,
    )
    .await;
    assert_eq!(code(&response), 0, "{}", message(&response));
}

/// "The processes" and "Three registry replicas on etcd" as printed, each
/// host's addresses on loopback: a registry, a dispatcher that reads its
/// snapshots with the development token, and an executor advertising the
/// address it is reached on; then three etcd members, three registry
/// replicas on them, a dispatcher following all three and an executor.
/// Either way the dispatcher lists and calls search_kb.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deploy_readme_processes_run_as_printed() {
    let processes = Sketch::plan(
        &deploy_readme("The processes")[0],
        &[
            ("toolmesh registry", &["registry.internal"]),
            ("toolmesh dispatcher", &["dispatcher.internal"]),
            ("toolmesh example", &["10.0.0.7"]),
        ],
    );
    let started: Vec<Proc> = [
        "toolmesh registry",
        "toolmesh dispatcher",
        "toolmesh example",
    ]
    .iter()
    .flat_map(|start| processes.start(start))
    .collect();
    for proc in &started {
        proc.listen_addr();
    }
    search_kb_answers(processes.address("dispatcher.internal", 7080)).await;
    drop(started);

    let replicas = Sketch::plan(
        &deploy_readme("Three registry replicas on etcd")[0],
        &[
            ("etcd --name e1", &["10.0.0.5"]),
            ("etcd --name e2", &["10.0.0.6"]),
            ("etcd --name e3", &["10.0.0.7"]),
            ("toolmesh registry", &["reg-1", "reg-2", "reg-3"]),
            ("toolmesh dispatcher", &["dispatcher.internal"]),
            ("toolmesh example", &["10.0.0.9"]),
        ],
    );
    let etcd = replicas.start("etcd");
    assert_eq!(etcd.len(), 3, "three etcd members");
    for member in ["10.0.0.5", "10.0.0.6", "10.0.0.7"] {
        let client = replicas.address(member, 2379).to_owned();
        until(
            &format!("etcd {member} healthy"),
            Duration::from_secs(30),
            || {
                toolmesh_testkit::try_http(&client, "GET", "/health", &[], "")
                    .is_ok_and(|(status, body)| status == 200 && body.contains("true"))
            },
        )
        .await;
    }
    let registries = replicas.start("toolmesh registry");
    assert_eq!(registries.len(), 3, "a registry on reg-1, reg-2 and reg-3");
    let rest: Vec<Proc> = ["toolmesh dispatcher", "toolmesh example"]
        .iter()
        .flat_map(|start| replicas.start(start))
        .collect();
    for proc in registries.iter().chain(&rest) {
        proc.listen_addr();
    }
    search_kb_answers(replicas.address("dispatcher.internal", 7080)).await;
}
