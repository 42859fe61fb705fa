//! The operator's view with the real Prometheus tools: the alert rules
//! (deploy/monitoring, the chart's PrometheusRule) pass `promtool check
//! rules` and their unit tests; a registry on etcd, a dispatcher and an
//! executor answer `/metrics` in the format asked for, and their scrapes
//! pass `promtool check metrics`; docs/operations.md's table names every family
//! they export and every metric the dashboard and the rules read; a real
//! Prometheus on loopback scrapes the running mesh, answers every dashboard
//! query, shows the called tool's rate, and fires an alert once the tool's
//! executor is killed; the approval backlog grows and empties as a ticket
//! waits and is approved; with TLS on, Prometheus scrapes HTTPS admin
//! listeners that require client certificates as the chart's monitors
//! say, and a plain scrape fails. Needs `prometheus` and `promtool`
//! (scripts/prepare/prometheus.sh), `etcd` (scripts/prepare/etcd.sh) and,
//! for the chart, `helm` (scripts/prepare/kube-tools.sh).

use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;
use toolmesh_procs::EtcdCluster;
use toolmesh_system_tests::render::{
    containers, helm_template_command, kind, sha256_hex, strings, toolmesh_workload,
};
use toolmesh_system_tests::*;
use toolmesh_testkit::until;

/// The rules file users load (`rule_files:`).
const RULES: &str = "deploy/monitoring/toolmesh-rules.yaml";
/// The one source of the rules, in the chart (`.Files.Get`).
const CHART_RULES: &str = "deploy/helm/toolmesh/files/toolmesh-rules.yaml";
/// The rules' unit tests (`promtool test rules`).
const RULES_TESTS: &str = "deploy/monitoring/toolmesh-rules.test.yaml";
/// The Grafana dashboard.
const DASHBOARD: &str = "deploy/monitoring/toolmesh-dashboard.json";
/// The token a node's `/metrics` is read with (the development policy's
/// approver, an admin); executors ask for none.
const READER: &str = "dev-approver";
/// What a scraper that reads only the text format asks for.
const TEXT_ACCEPT: &str = "text/plain; version=0.0.4";
/// What Prometheus 2.x sends when it scrapes.
const PROMETHEUS_ACCEPT: &str = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";

fn promtool() -> PathBuf {
    prepared("TOOLMESH_TEST_PROMTOOL", "prometheus.sh")
}

/// Runs promtool with `args` (and `stdin`); its output, or a panic with it
/// when promtool does not succeed.
fn promtool_ok(args: &[&str], stdin: Option<&str>) -> String {
    use std::io::Write;
    let mut child = Command::new(promtool())
        .args(args)
        .current_dir(repo_root())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run promtool");
    let mut input = child.stdin.take().expect("promtool's stdin");
    input
        .write_all(stdin.unwrap_or_default().as_bytes())
        .expect("feed promtool");
    drop(input);
    let out = child.wait_with_output().expect("promtool's output");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "promtool {args:?} failed:\n{text}\ninput:\n{}",
        stdin.unwrap_or_default()
    );
    text
}

/// A YAML file of the repository, as JSON values.
fn yaml(path: &str) -> Value {
    let text = std::fs::read_to_string(repo_root().join(path)).expect("read the YAML file");
    serde_yaml::from_str(&text).expect("valid YAML")
}

/// Every rule of a rules document (`groups[].rules[]`).
fn rules_of(document: &Value) -> Vec<&Value> {
    document["groups"]
        .as_array()
        .expect("groups")
        .iter()
        .flat_map(|g| g["rules"].as_array().expect("rules").iter())
        .collect()
}

fn dashboard() -> Value {
    let text = std::fs::read_to_string(repo_root().join(DASHBOARD)).expect("read the dashboard");
    serde_json::from_str(&text).expect("the dashboard is JSON")
}

/// Every panel of the dashboard with queries, and its queries' `expr`.
fn dashboard_queries(dashboard: &Value) -> Vec<(String, Vec<String>)> {
    dashboard["panels"]
        .as_array()
        .expect("panels")
        .iter()
        .filter(|p| p["type"] != "row")
        .map(|p| {
            let exprs = p["targets"]
                .as_array()
                .expect("a panel with targets")
                .iter()
                .map(|t| t["expr"].as_str().expect("a PromQL expr").to_owned())
                .collect();
            (p["title"].as_str().expect("a title").to_owned(), exprs)
        })
        .collect()
}

/// The metric names an expression reads (`toolmesh_*`, `process_*`), with a
/// histogram's `_bucket` / `_sum` / `_count` taken off.
fn metric_names(expr: &str) -> BTreeSet<String> {
    expr.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|word| word.starts_with("toolmesh_") || word.starts_with("process_"))
        .map(|word| {
            ["_bucket", "_sum", "_count"]
                .iter()
                .find_map(|suffix| word.strip_suffix(suffix))
                .unwrap_or(word)
                .to_owned()
        })
        .collect()
}

/// The metric names the metrics table of docs/operations.md lists.
fn readme_metrics() -> BTreeSet<String> {
    let readme = std::fs::read_to_string(repo_root().join("docs/operations.md"))
        .expect("read docs/operations.md");
    readme
        .lines()
        .filter_map(|line| line.strip_prefix("| `"))
        .filter_map(|rest| rest.split('`').next())
        .filter(|name| name.starts_with("toolmesh_") || name.starts_with("process_"))
        .map(str::to_owned)
        .collect()
}

/// The chart rendered with `sets` and token hashes.
fn chart(sets: &[&str]) -> Vec<Value> {
    let hashes: Vec<String> = ["dispatcher", "executor", "agent"]
        .iter()
        .map(|role| format!("auth.tokenSha256.{role}={}", sha256_hex(role)))
        .collect();
    let mut all: Vec<&str> = hashes.iter().map(String::as_str).collect();
    all.extend_from_slice(sets);
    render::render(helm_template_command(&all))
}

/// The rules pass `promtool check rules`; the plain file is the chart's
/// file (one source); the unit tests pass, and every alert has one in
/// which it fires.
#[test]
fn rules_pass_promtool_and_their_unit_tests() {
    assert_eq!(
        std::fs::canonicalize(repo_root().join(RULES)).expect("the rules file"),
        std::fs::canonicalize(repo_root().join(CHART_RULES)).expect("the chart's rules file"),
        "{RULES} must point at {CHART_RULES}, the one source of the rules"
    );
    let rules = yaml(RULES);
    let alerts: BTreeSet<&str> = rules_of(&rules)
        .iter()
        .map(|r| r["alert"].as_str().expect("every rule is an alert"))
        .collect();
    let checked = promtool_ok(&["check", "rules", RULES], None);
    assert!(
        checked.contains(&format!("SUCCESS: {} rules found", alerts.len())),
        "{checked}"
    );
    let tested = promtool_ok(&["test", "rules", RULES_TESTS], None);
    assert!(tested.contains("SUCCESS"), "{tested}");
    let tests = yaml(RULES_TESTS);
    let fired: BTreeSet<&str> = tests["tests"]
        .as_array()
        .expect("tests")
        .iter()
        .flat_map(|t| t["alert_rule_test"].as_array().expect("alert tests").iter())
        .filter(|t| t["exp_alerts"].as_array().is_some_and(|a| !a.is_empty()))
        .map(|t| t["alertname"].as_str().expect("an alertname"))
        .collect();
    assert_eq!(
        fired, alerts,
        "every alert needs a unit test where it fires"
    );
}

/// With `metrics.prometheusRule.enabled` the chart renders exactly the rules
/// file as a PrometheusRule's spec (with the labels asked for), which
/// promtool accepts; without it, no PrometheusRule; asked for without
/// `metrics.enabled` (nothing would serve the metrics the rules read), the
/// chart refuses to render and says to set both, rather than render
/// nothing.
#[test]
fn the_chart_renders_the_rules_as_a_prometheus_rule() {
    let mut alone = helm_template_command(&[
        &format!("auth.tokenSha256.dispatcher={}", sha256_hex("dispatcher")),
        &format!("auth.tokenSha256.executor={}", sha256_hex("executor")),
        "metrics.prometheusRule.enabled=true",
    ]);
    let refused = alone.output().expect("run helm");
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        !refused.status.success() && stderr.contains("needs metrics.enabled=true"),
        "the rule without metrics.enabled is refused: {stderr}{}",
        String::from_utf8_lossy(&refused.stdout)
    );
    let render = |extra: &[&str]| -> Vec<Value> {
        let mut sets = vec!["metrics.enabled=true"];
        sets.extend_from_slice(extra);
        kind(&chart(&sets), "PrometheusRule").cloned().collect()
    };
    assert!(render(&[]).is_empty(), "no PrometheusRule unless asked for");
    let rendered = render(&[
        "metrics.prometheusRule.enabled=true",
        "metrics.prometheusRule.labels.release=monitoring",
    ]);
    let [rule] = rendered.as_slice() else {
        panic!("one PrometheusRule expected, got {rendered:?}");
    };
    assert_eq!(rule["apiVersion"], "monitoring.coreos.com/v1");
    assert_eq!(rule["metadata"]["labels"]["release"], "monitoring");
    assert_eq!(
        rule["spec"],
        yaml(RULES),
        "the PrometheusRule is the rules file"
    );
    let dir = temp_dir("prometheus-rule");
    let spec = dir.path().join("spec.yaml");
    std::fs::write(&spec, serde_yaml::to_string(&rule["spec"]).unwrap()).unwrap();
    promtool_ok(&["check", "rules", spec.to_str().unwrap()], None);
}

/// The dashboard: unique panel ids, panels inside the 24-column grid, a
/// Prometheus data source variable every query uses, and the tool variable.
#[test]
fn the_dashboard_is_well_formed() {
    let dashboard = dashboard();
    let panels = dashboard["panels"].as_array().expect("panels");
    let ids: BTreeSet<i64> = panels.iter().map(|p| p["id"].as_i64().unwrap()).collect();
    assert_eq!(ids.len(), panels.len(), "panel ids are unique");
    for panel in panels {
        let grid = &panel["gridPos"];
        let (x, w) = (grid["x"].as_i64().unwrap(), grid["w"].as_i64().unwrap());
        assert!(x >= 0 && w > 0 && x + w <= 24, "{panel}");
        if panel["type"] == "row" {
            continue;
        }
        assert_eq!(panel["datasource"]["uid"], "${datasource}", "{panel}");
        let targets = panel["targets"].as_array().expect("targets");
        let refs: BTreeSet<&str> = targets
            .iter()
            .map(|t| t["refId"].as_str().unwrap())
            .collect();
        assert_eq!(refs.len(), targets.len(), "refIds are unique in {panel}");
    }
    let variables = dashboard["templating"]["list"]
        .as_array()
        .expect("variables");
    let named = |name: &str| variables.iter().find(|v| v["name"] == name);
    assert_eq!(
        named("datasource").expect("datasource")["query"],
        "prometheus"
    );
    assert!(named("tool").expect("tool")["allValue"].is_string());
    let titles: Vec<String> = dashboard_queries(&dashboard)
        .into_iter()
        .map(|(t, _)| t)
        .collect();
    for wanted in [
        "Calls per second by tool",
        "Error rate by tool",
        "p95 call latency by tool",
        "Healthy executors by tool version",
        "Approval backlog",
        "Registry and etcd",
        "Snapshot lag (versions behind the newest registry)",
    ] {
        assert!(titles.iter().any(|t| t == wanted), "{wanted} in {titles:?}");
    }
}

/// A dashboard query as Grafana sends it: its variables replaced (the
/// tool variable by its "All" value, the rate interval by `rate_interval`).
fn as_grafana_sends(expr: &str, dashboard: &Value, rate_interval: &str) -> String {
    let all_tools = dashboard["templating"]["list"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == "tool")
        .and_then(|v| v["allValue"].as_str())
        .expect("the tool variable's allValue");
    expr.replace("$__rate_interval", rate_interval)
        .replace("$tool", all_tools)
}

/// `text` percent-encoded for a URL query.
fn url_encoded(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// A running Prometheus on loopback.
struct Prometheus {
    _proc: Proc,
    addr: String,
    _dir: TempDir,
}

impl Prometheus {
    /// Starts Prometheus scraping `targets` (job, `host:port`, bearer
    /// token) every second and evaluating `rules` (a file's text) every
    /// second; waits until it is ready.
    async fn start(targets: &[(&str, &str, Option<&str>)], rules: &str) -> Prometheus {
        let jobs: Vec<Value> = targets
            .iter()
            .map(|(job, target, token)| {
                let mut job = scrape_job(job, target);
                if let Some(token) = token {
                    job["authorization"] = json!({"credentials": token});
                }
                job
            })
            .collect();
        Prometheus::start_jobs(&jobs, rules).await
    }

    /// Starts Prometheus with the scrape configs `jobs`, scraping every
    /// second and evaluating `rules` (a file's text) every second; waits
    /// until it is ready.
    async fn start_jobs(jobs: &[Value], rules: &str) -> Prometheus {
        let dir = temp_dir("prometheus");
        std::fs::write(dir.path().join("rules.yaml"), rules).unwrap();
        let config = json!({
            "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
            "rule_files": ["rules.yaml"],
            "scrape_configs": jobs,
        });
        std::fs::write(
            dir.path().join("prometheus.yml"),
            serde_yaml::to_string(&config).unwrap(),
        )
        .unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let addr = format!("127.0.0.1:{port}");
        let mut command = Command::new(prepared("TOOLMESH_TEST_PROMETHEUS", "prometheus.sh"));
        command
            .arg(format!(
                "--config.file={}",
                dir.path().join("prometheus.yml").display()
            ))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address={addr}"))
            .current_dir(dir.path());
        let proc = Proc::spawn("prometheus", command);
        let prometheus = Prometheus {
            _proc: proc,
            addr,
            _dir: dir,
        };
        until("Prometheus ready", Duration::from_secs(30), || {
            prometheus
                .get("/-/ready")
                .is_some_and(|(status, _)| status == 200)
        })
        .await;
        prometheus
    }

    /// `GET path`, or `None` while nothing listens.
    fn get(&self, path: &str) -> Option<(u16, String)> {
        toolmesh_testkit::try_http(&self.addr, "GET", path, &[], "").ok()
    }

    /// The result of the instant query `expr`; panics when Prometheus
    /// refuses it.
    fn query(&self, expr: &str) -> Vec<Value> {
        let (status, body) = self
            .get(&format!("/api/v1/query?query={}", url_encoded(expr)))
            .expect("Prometheus answers");
        let answer: Value = serde_json::from_str(&body).expect("a JSON answer");
        assert!(
            status == 200 && answer["status"] == "success",
            "Prometheus refused {expr}: {body}"
        );
        answer["data"]["result"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    }

    /// The alerts Prometheus holds now (pending or firing).
    fn alerts(&self) -> Vec<Value> {
        let (_, body) = self.get("/api/v1/alerts").expect("Prometheus answers");
        let answer: Value = serde_json::from_str(&body).expect("a JSON answer");
        answer["data"]["alerts"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    }
}

/// A sample's value as a number.
fn value_of(sample: &Value) -> f64 {
    sample["value"][1]
        .as_str()
        .and_then(|v| v.parse().ok())
        .unwrap_or(f64::NAN)
}

/// `/metrics` of `addr` with `accept` (none: no header), read as `token`:
/// the content type and the body.
fn scrape(addr: &str, accept: Option<&str>, token: Option<&str>) -> (String, String) {
    let bearer = token.map(|t| format!("Bearer {t}"));
    let mut headers = Vec::new();
    if let Some(accept) = accept {
        headers.push(("accept", accept));
    }
    if let Some(bearer) = &bearer {
        headers.push(("authorization", bearer.as_str()));
    }
    let (status, head, body) =
        toolmesh_testkit::http_with_head(addr, "GET", "/metrics", &headers, "");
    assert_eq!(status, 200, "{addr}: {body}");
    let content_type = head
        .lines()
        .find_map(|l| {
            let (name, value) = l.split_once(':')?;
            name.eq_ignore_ascii_case("content-type")
                .then(|| value.trim().to_owned())
        })
        .expect("a content type");
    (content_type, body)
}

/// The families a text-format scrape declares (`# TYPE NAME …`).
fn families(text: &str) -> BTreeSet<String> {
    text.lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_owned)
        .collect()
}

/// A mesh on etcd (registry, dispatcher, the acceptance executor, each with
/// its admin listener), scraped by promtool and by a real Prometheus:
///
/// 1. Each answers the Prometheus text format by default and OpenMetrics to
///    Prometheus' `Accept`; each text scrape passes `promtool check
///    metrics` and carries the `process_*` families and
///    `toolmesh_build_info` with its role.
/// 2. The metrics table (docs/operations.md) lists every toolmesh family scraped and every
///    metric the dashboard and the rules read.
/// 3. Prometheus, loading the rules (with `for:` cut to 1s), answers every
///    dashboard query; while `acc_echo` is called, the dashboard's per-tool
///    rate shows it above 0; no alert is pending or firing.
/// 4. The executor killed, ToolmeshToolWithoutHealthyExecutor fires for
///    `acc_echo`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_prometheus_scrapes_a_mesh_and_fires_an_alert() {
    let etcd = EtcdCluster::start(1)
        .await
        .unwrap_or_else(|e| panic!("this test needs etcd: {e}"));
    let store = etcd.store_url();
    let admin = ["--admin-listen", "127.0.0.1:0"];
    let (registry_proc, registry) =
        toolmesh_system_tests::registry(&["--store", &store, "--admin-listen", "127.0.0.1:0"]);
    let registry_admin = admin_addr(&registry_proc);
    let (dispatcher_proc, dispatcher) = dispatcher_for(&registry, &admin);
    let dispatcher_admin = admin_addr(&dispatcher_proc);
    let mut executor = example(
        "acceptance",
        &registry,
        &["--admin-listen", "127.0.0.1:0", "--ttl-ms", "1000"],
    );
    let executor_admin = admin_addr(&executor);
    let mut client = toolmesh_system_tests::dispatcher(&dispatcher);
    until_listed(&mut client, &ACCEPTANCE_TOOLS, Duration::from_secs(30)).await;
    let echo = |i: usize| format!(r#"{{"message":"{i}"}}"#);
    let ok = invoke(&mut client, "acc_echo", &echo(0), None).await;
    assert_eq!(code(&ok), 0, "{}", message(&ok));

    // 1. Both formats, promtool on the text, process and build metrics.
    let targets = [
        ("registry", registry_admin.as_str(), Some(READER)),
        ("dispatcher", dispatcher_admin.as_str(), Some(READER)),
        ("executor", executor_admin.as_str(), None),
    ];
    let mut scraped = BTreeSet::new();
    for (role, addr, token) in targets {
        let (content_type, text) = scrape(addr, Some(TEXT_ACCEPT), token);
        assert!(
            content_type.starts_with("text/plain; version=0.0.4"),
            "{role}: {content_type}"
        );
        assert!(!text.contains("# EOF"), "{role}: {text}");
        promtool_ok(&["check", "metrics"], Some(&text));
        let build = format!(
            "toolmesh_build_info{{version=\"{}\",role=\"{role}\"}} 1",
            env!("CARGO_PKG_VERSION")
        );
        assert!(
            text.lines().any(|l| l == build),
            "{build} in {role}:\n{text}"
        );
        let found = families(&text);
        for process in [
            "process_cpu_seconds_total",
            "process_resident_memory_bytes",
            "process_virtual_memory_bytes",
            "process_open_fds",
            "process_max_fds",
            "process_start_time_seconds",
        ] {
            assert!(found.contains(process), "{process} in {role}:\n{text}");
        }
        let (content_type, open) = scrape(addr, Some(PROMETHEUS_ACCEPT), token);
        assert!(
            content_type.starts_with("application/openmetrics-text; version=1.0.0"),
            "{role}: {content_type}"
        );
        assert!(open.ends_with("# EOF\n"), "{role}: {open}");
        scraped.extend(found);
    }
    for wanted in [
        "toolmesh_registry_tool_instances",
        "toolmesh_registry_etcd_leader",
        "toolmesh_registry_approvals_pending",
        "toolmesh_dispatcher_calls_total",
        "toolmesh_executor_executions_total",
    ] {
        assert!(scraped.contains(wanted), "{wanted} in {scraped:?}");
    }

    // 2. The metrics table, against the scrapes, the dashboard and the rules.
    let listed = readme_metrics();
    for family in &scraped {
        assert!(
            listed.contains(family),
            "the metrics table of docs/operations.md lacks {family}"
        );
    }
    let dashboard = dashboard();
    let rules = yaml(RULES);
    let exprs: Vec<String> = dashboard_queries(&dashboard)
        .into_iter()
        .flat_map(|(_, exprs)| exprs)
        .chain(
            rules_of(&rules)
                .iter()
                .map(|r| r["expr"].as_str().unwrap().to_owned()),
        )
        .collect();
    for expr in &exprs {
        for name in metric_names(expr) {
            assert!(
                listed.contains(&name),
                "{name} (read by {expr}) is not in the metrics table of docs/operations.md"
            );
        }
    }

    // 3. Prometheus scrapes the mesh and evaluates the rules every second.
    let mut fast = rules.clone();
    for group in fast["groups"].as_array_mut().unwrap() {
        for rule in group["rules"].as_array_mut().unwrap() {
            rule["for"] = Value::from("1s");
        }
    }
    let prometheus = Prometheus::start(&targets, &serde_yaml::to_string(&fast).unwrap()).await;
    until("every target scraped", Duration::from_secs(60), || {
        let up = prometheus.query("up == 1");
        up.len() == targets.len()
    })
    .await;
    // Every dashboard query parses and runs (a refusal panics naming it).
    for (_, exprs) in dashboard_queries(&dashboard) {
        for expr in exprs {
            prometheus.query(&as_grafana_sends(&expr, &dashboard, "15s"));
        }
    }
    let (_, per_tool) = dashboard_queries(&dashboard)
        .into_iter()
        .find(|(title, _)| title == "Calls per second by tool")
        .expect("the per-tool rate panel");
    let per_tool = as_grafana_sends(&per_tool[0], &dashboard, "15s");
    let mut call = 1;
    let (prom, per_tool) = (&prometheus, per_tool.as_str());
    let rate = eventually(
        "a per-tool rate above 0 for acc_echo",
        Duration::from_secs(60),
        || {
            call += 1;
            let request = echo(call);
            let mut client = client.clone();
            async move {
                let ok = invoke(&mut client, "acc_echo", &request, None).await;
                assert_eq!(code(&ok), 0, "{}", message(&ok));
                tokio::time::sleep(Duration::from_millis(200)).await;
                prom.query(per_tool)
                    .iter()
                    .find(|s| s["metric"]["tool"] == "acc_echo")
                    .map(value_of)
                    .filter(|v| *v > 0.0)
            }
        },
    )
    .await;
    assert!(rate.is_finite(), "{rate}");
    let quiet = prometheus.alerts();
    assert!(
        quiet.is_empty(),
        "a healthy mesh raises no alert: {quiet:?}"
    );

    // 4. The only executor of acc_echo killed: the alert fires for it.
    executor.kill9();
    let alert = eventually(
        "ToolmeshToolWithoutHealthyExecutor firing for acc_echo",
        Duration::from_secs(60),
        || {
            let found = prometheus.alerts().into_iter().find(|a| {
                a["labels"]["alertname"] == "ToolmeshToolWithoutHealthyExecutor"
                    && a["labels"]["tool"] == "acc_echo"
                    && a["state"] == "firing"
            });
            std::future::ready(found)
        },
    )
    .await;
    assert_eq!(alert["labels"]["severity"], "critical", "{alert}");
    assert_eq!(
        alert["annotations"]["summary"], "Tool acc_echo has no healthy executor",
        "{alert}"
    );
}

/// A policy in which every call of `acc_charge` needs an approval.
fn approval_policy() -> String {
    acme_policy()
        .grant("agents charge", &["agent"], &["acc_charge"])
        .then("[approval]\napprover_roles = [\"approver\"]\nrequire_for_tools = [\"acc_charge\"]\n")
        .build_toml()
}

/// The approval backlog, end to end: none at first; a call that needs an
/// approval makes one pending ticket whose wait grows; approved, none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_approval_backlog_is_counted() {
    use toolmesh::pb::{ApproveRequest, CallContext, ErrorCode, InvokeRequest};
    let dir = temp_dir("backlog");
    let policy = dir.path().join("policy.toml");
    std::fs::write(&policy, approval_policy()).unwrap();
    let (serve, addr) = serve(&[
        "--policy",
        policy.to_str().unwrap(),
        "--admin-listen",
        "127.0.0.1:0",
    ]);
    let node_admin = admin_addr(&serve);
    let _exec = example("acceptance", &addr, &["--token", "tok-exec"]);
    let backlog = |series: &str| {
        let (_, text) = scrape(&node_admin, None, Some("tok-approver"));
        sample(&text, series)
    };
    assert_eq!(backlog("toolmesh_registry_approvals_pending"), Some(0.0));
    assert_eq!(
        backlog("toolmesh_registry_approval_oldest_pending_seconds"),
        Some(0.0)
    );
    let client = toolmesh_system_tests::dispatcher(&addr);
    let charge = InvokeRequest {
        tool: "acc_charge".into(),
        arguments: r#"{"account": "acme-1", "cents": 500}"#.into(),
        context: Some(CallContext::default()),
        ..Default::default()
    };
    let asked = eventually("acc_charge answering", Duration::from_secs(30), || {
        let mut client = client.clone();
        let request = with_token(charge.clone(), Some("tok-agent"));
        async move {
            let response = client.invoke(request).await.ok()?.into_inner();
            (code(&response) == ErrorCode::ApprovalRequired as i32).then_some(response)
        }
    })
    .await;
    let id = asked.result.unwrap().error.unwrap().approval_id;
    // Counted every few seconds: the ticket shows up, and its wait grows.
    let first = eventually(
        "one pending approval counted",
        Duration::from_secs(30),
        || {
            let counted = backlog("toolmesh_registry_approvals_pending") == Some(1.0);
            std::future::ready(
                counted
                    .then(|| backlog("toolmesh_registry_approval_oldest_pending_seconds"))
                    .flatten(),
            )
        },
    )
    .await;
    until("the wait to grow", Duration::from_secs(30), || {
        backlog("toolmesh_registry_approval_oldest_pending_seconds").is_some_and(|w| w > first)
    })
    .await;
    let mut governance = toolmesh::pb::governance_client::GovernanceClient::new(
        toolmesh_transport::channel(&addr, &toolmesh_transport::Tls::none()).unwrap(),
    );
    governance
        .approve(with_token(ApproveRequest { id }, Some("tok-approver")))
        .await
        .unwrap();
    until(
        "no pending approval counted",
        Duration::from_secs(30),
        || {
            backlog("toolmesh_registry_approvals_pending") == Some(0.0)
                && backlog("toolmesh_registry_approval_oldest_pending_seconds") == Some(0.0)
        },
    )
    .await;
}

/// A scrape config of one static `target`.
fn scrape_job(job: &str, target: &str) -> Value {
    json!({"job_name": job, "static_configs": [{"targets": [target]}]})
}

/// The scrape config the Prometheus Operator makes of a ServiceMonitor's
/// or PodMonitor's `endpoint` for `target`: its path, scheme and
/// tlsConfig, each Secret key read from the file `secret_file(NAME, KEY)`
/// (where the operator mounts it). A field no case here knows fails the
/// test, so a monitor cannot say more than Prometheus is told.
fn operator_job(
    job: &str,
    endpoint: &Value,
    target: &str,
    secret_file: impl Fn(&str, &str) -> PathBuf,
) -> Value {
    let mut config = scrape_job(job, target);
    for (field, value) in endpoint.as_object().expect("an endpoint") {
        match field.as_str() {
            // The port picks the target; the test scrapes every second.
            "port" | "interval" => {}
            "path" => config["metrics_path"] = value.clone(),
            "scheme" => config["scheme"] = value.clone(),
            "tlsConfig" => {
                let mut tls = serde_json::Map::new();
                for (key, value) in value.as_object().expect("a tlsConfig") {
                    let (file, selector) = match key.as_str() {
                        "ca" => ("ca_file", &value["secret"]),
                        "cert" => ("cert_file", &value["secret"]),
                        "keySecret" => ("key_file", value),
                        "serverName" => {
                            tls.insert("server_name".into(), value.clone());
                            continue;
                        }
                        other => panic!("tlsConfig.{other}: not translated here"),
                    };
                    let (Some(name), Some(key)) =
                        (selector["name"].as_str(), selector["key"].as_str())
                    else {
                        panic!("tlsConfig.{key} names no Secret key: {value}");
                    };
                    tls.insert(file.into(), json!(secret_file(name, key)));
                }
                config["tls_config"] = tls.into();
            }
            other => panic!("endpoint field {other}: not translated here ({endpoint})"),
        }
    }
    config
}

/// The scrape endpoint of a rendered monitor (ServiceMonitor or PodMonitor).
fn monitor_endpoint<'a>(objects: &'a [Value], monitor_kind: &str) -> &'a Value {
    let monitor = kind(objects, monitor_kind)
        .next()
        .unwrap_or_else(|| panic!("a {monitor_kind}"));
    let endpoints = monitor["spec"]["endpoints"]
        .as_array()
        .or_else(|| monitor["spec"]["podMetricsEndpoints"].as_array())
        .expect("endpoints");
    assert_eq!(endpoints.len(), 1, "{monitor}");
    &endpoints[0]
}

/// What a rendered toolmesh container of `workload` needs for TLS and its
/// admin listener, run on loopback: its `TOOLMESH_TLS_*` variables, each
/// path under the mount of the TLS Secret `secret` moved to `files` (where
/// the test wrote that Secret's keys), and its admin flags other than the
/// address.
fn tls_admin_settings(
    workload: &Value,
    secret: &str,
    files: &Path,
) -> (Vec<(String, PathBuf)>, Vec<String>) {
    let pod = &workload["spec"]["template"]["spec"];
    let container = &containers(workload)[0];
    let volume = pod["volumes"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|v| v["secret"]["secretName"] == secret)
        .unwrap_or_else(|| panic!("the pods mount the Secret {secret}"));
    let mount = container["volumeMounts"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|m| m["name"] == volume["name"])
        .and_then(|m| m["mountPath"].as_str())
        .expect("the TLS volume is mounted");
    let env = container["env"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|e| {
            let var = e["name"].as_str()?;
            let value = e["value"].as_str()?;
            let key = value.strip_prefix(mount)?.trim_start_matches('/');
            var.starts_with("TOOLMESH_TLS_")
                .then(|| (var.to_owned(), files.join(key)))
        })
        .collect::<Vec<_>>();
    assert!(
        env.iter().any(|(var, _)| var == "TOOLMESH_TLS_CLIENT_CA"),
        "client certificates required: {env:?}"
    );
    let admin = strings(&container["args"])
        .into_iter()
        .filter(|a| a.starts_with("--admin-") && !a.starts_with("--admin-listen"))
        .chain(
            strings(&container["args"])
                .into_iter()
                .filter(|a| *a == "--public-metrics"),
        )
        .map(str::to_owned)
        .collect();
    (env, admin)
}

/// With `tls.enabled` the admin listeners serve HTTPS and require client
/// certificates. A real Prometheus, configured as the Prometheus Operator
/// does from the chart's ServiceMonitor and PodMonitor (scheme, tlsConfig
/// with the TLS Secret's keys, server name), scrapes a registry and an
/// executor run with the chart's TLS settings: `up == 1`. The same
/// listener scraped plainly, or over HTTPS without a client certificate,
/// is down.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_prometheus_scrapes_tls_admin_listeners_as_the_monitors_say() {
    const SECRET: &str = "toolmesh-tls";
    let objects = chart(&[
        "tls.enabled=true",
        &format!("tls.secretName={SECRET}"),
        "metrics.enabled=true",
        // The test certificates name localhost and 127.0.0.1.
        "metrics.serviceMonitor.tlsServerName=localhost",
    ]);
    let dir = temp_dir("prometheus-tls");
    let (ca, cert, key) = toolmesh_testkit::pki(&dir, "mesh");
    // The Secret's keys as the kubelet and the operator mount them.
    let secret = dir.path().join("secret");
    std::fs::create_dir_all(&secret).unwrap();
    let keys = BTreeMap::from([("ca.crt", &ca), ("tls.crt", &cert), ("tls.key", &key)]);
    for (key, file) in &keys {
        std::fs::copy(file, secret.join(key)).unwrap();
    }

    let start = |workload: &Value, name: &str, args: &[&str]| {
        let (env, admin) = tls_admin_settings(workload, SECRET, &secret);
        let mut command = Command::new(toolmesh_bin());
        command
            .args(args)
            .args(["--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0"])
            .args(admin)
            .envs(env)
            .env("TOOLMESH_DEV_DISPATCHER_TOKEN", DEV_DISPATCHER_TOKEN);
        let proc = Proc::spawn(name, command);
        let addr = proc.listen_addr();
        (admin_addr(&proc), addr, proc)
    };
    let (registry_admin, registry, _registry) = start(
        toolmesh_workload(&objects, "registry"),
        "registry",
        &["registry"],
    );
    let (executor_admin, _, _executor) = start(
        toolmesh_workload(&objects, "example"),
        "executor",
        &["example", "knowledge", "--registry", &registry],
    );

    let secret_file = |name: &str, key: &str| {
        assert_eq!(name, SECRET, "the monitors read the pods' TLS Secret");
        assert!(keys.contains_key(key), "{SECRET} has no key {key}");
        secret.join(key)
    };
    let servers = operator_job(
        "servers",
        monitor_endpoint(&objects, "ServiceMonitor"),
        &registry_admin,
        secret_file,
    );
    let executors = operator_job(
        "executors",
        monitor_endpoint(&objects, "PodMonitor"),
        &executor_admin,
        secret_file,
    );
    for job in [&servers, &executors] {
        assert_eq!(job["scheme"], "https", "{job}");
        assert_eq!(job["tls_config"]["server_name"], "localhost", "{job}");
    }
    let plain = scrape_job("plain", &registry_admin);
    let mut anonymous = servers.clone();
    anonymous["job_name"] = json!("no-client-certificate");
    let tls = anonymous["tls_config"].as_object_mut().unwrap();
    tls.remove("cert_file");
    tls.remove("key_file");

    let prometheus =
        Prometheus::start_jobs(&[servers, executors, plain, anonymous], "groups: []\n").await;
    let up = |job: &str| {
        prometheus
            .query(&format!("up{{job=\"{job}\"}}"))
            .first()
            .map(value_of)
    };
    until(
        "Prometheus scraped every job, with TLS as the monitors say",
        Duration::from_secs(60),
        || {
            up("servers") == Some(1.0)
                && up("executors") == Some(1.0)
                && up("plain").is_some()
                && up("no-client-certificate").is_some()
        },
    )
    .await;
    assert_eq!(up("plain"), Some(0.0), "a plain scrape of HTTPS fails");
    assert_eq!(
        up("no-client-certificate"),
        Some(0.0),
        "the admin listener requires a client certificate"
    );
    let families = prometheus.query("toolmesh_build_info{job=~\"servers|executors\"}");
    assert_eq!(families.len(), 2, "{families:?}");
}
