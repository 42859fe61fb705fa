//! The deployment files render and agree with the binaries. `kubectl
//! kustomize deploy/kubernetes` and `helm template deploy/helm/toolmesh`
//! (with and without TLS, metrics and persistence) are rendered with the
//! real tools (scripts/prepare/kube-tools.sh installs them), then checked:
//! every flag a container passes is one its subcommand takes and every
//! `TOOLMESH_*` variable one it reads (`toolmesh SUB --help`), probes are
//! native gRPC probes on the port `--health-listen` opens asking the
//! service names the servers report (`toolmesh::grpc` constants), the
//! termination grace period is above `--grace-ms`, executors advertise
//! their pod IP on the port they listen on, Services target declared ports,
//! dispatchers are replicated, spread, budgeted and offered headless, the
//! policy loads, names a dispatcher caller and gives anonymous callers no
//! dispatcher or admin role, dispatchers and executors take their tokens
//! from the Secret, a dispatcher with the token the chart's policy names
//! turns ready, and the chart renders what the kustomize base does.

mod support;

use serde::Deserialize;
use serde_json::Value;
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::process::Command;
use support::*;
use toolmesh::grpc::{
    DISPATCHER_LIVENESS_SERVICE, EXECUTOR_HEALTH_SERVICE, REGISTRY_HEALTH_SERVICE,
};

/// The repository's root.
fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The tool named by `var`, which scripts/prepare/kube-tools.sh exports.
fn prepared_tool(var: &str) -> PathBuf {
    let path = std::env::var_os(var).map(PathBuf::from).unwrap_or_else(|| {
        panic!("{var} is not set: run the tests with scripts/test, whose scripts/prepare/kube-tools.sh installs helm and kubectl and exports {var}")
    });
    assert!(
        path.exists(),
        "{var}={} does not exist: run scripts/prepare/kube-tools.sh again",
        path.display()
    );
    path
}

/// The tokens the chart is rendered for (their hashes go in the values).
const DISPATCHER_TOKEN: &str = "tok-chart-dispatcher";
const EXECUTOR_TOKEN: &str = "tok-chart-executor";
const AGENT_TOKEN: &str = "tok-chart-agent";

/// The hex SHA-256 of `token`, as `auth.tokenSha256.*` takes it.
fn sha256_hex(token: &str) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(token.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Runs `command` and parses its standard output as YAML documents.
fn render(mut command: Command) -> Vec<Value> {
    let out = command.output().expect("run the renderer");
    assert!(
        out.status.success(),
        "{command:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).expect("UTF-8 manifests");
    serde_yaml::Deserializer::from_str(&text)
        .map(|document| Value::deserialize(document).expect("valid YAML"))
        .filter(|document| !document.is_null())
        .collect()
}

fn kustomize() -> Vec<Value> {
    let mut command = Command::new(prepared_tool("TOOLMESH_TEST_KUBECTL"));
    command
        .arg("kustomize")
        .arg(root().join("deploy/kubernetes"));
    render(command)
}

/// `helm template` of the chart with `sets` and nothing else.
fn helm_command(sets: &[&str]) -> Command {
    let mut command = Command::new(prepared_tool("TOOLMESH_TEST_HELM"));
    command
        .args(["template", "toolmesh"])
        .arg(root().join("deploy/helm/toolmesh"));
    for set in sets {
        command.args(["--set", set]);
    }
    command
}

/// The chart rendered with `sets` and the hashes of the test's tokens.
fn helm(sets: &[&str]) -> Vec<Value> {
    let tokens = [
        ("dispatcher", DISPATCHER_TOKEN),
        ("executor", EXECUTOR_TOKEN),
        ("agent", AGENT_TOKEN),
    ]
    .map(|(key, token)| format!("auth.tokenSha256.{key}={}", sha256_hex(token)));
    let mut all: Vec<&str> = tokens.iter().map(String::as_str).collect();
    all.extend_from_slice(sets);
    render(helm_command(&all))
}

fn kind<'a>(objects: &'a [Value], kind: &str) -> impl Iterator<Item = &'a Value> {
    objects.iter().filter(move |o| o["kind"] == kind)
}

fn name(object: &Value) -> &str {
    object["metadata"]["name"].as_str().unwrap_or_default()
}

/// Whether every label of `selector` is on `labels`.
fn selects(selector: &Value, labels: &Value) -> bool {
    selector
        .as_object()
        .is_some_and(|s| !s.is_empty() && s.iter().all(|(k, v)| labels.get(k) == Some(v)))
}

fn strings(value: &Value) -> Vec<&str> {
    value
        .as_array()
        .map(|items| items.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

/// The value of `--flag=VALUE` in `args`.
fn flag<'a>(args: &[&'a str], flag: &str) -> Option<&'a str> {
    let prefix = format!("{flag}=");
    args.iter().find_map(|a| a.strip_prefix(prefix.as_str()))
}

/// The port of a `host:port` value.
fn port_of(address: &str) -> u64 {
    address
        .rsplit_once(':')
        .and_then(|(_, p)| p.parse().ok())
        .unwrap_or_else(|| panic!("{address:?} has no port"))
}

/// `toolmesh SUBCOMMAND --help`, once per subcommand.
#[derive(Default)]
struct Help(HashMap<String, String>);

impl Help {
    fn of(&mut self, subcommand: &str) -> &str {
        self.0.entry(subcommand.to_owned()).or_insert_with(|| {
            let out = Command::new(toolmesh_bin())
                .args([subcommand, "--help"])
                .output()
                .expect("run toolmesh --help");
            assert!(out.status.success(), "toolmesh {subcommand} --help failed");
            String::from_utf8(out.stdout).expect("UTF-8 help")
        })
    }
}

/// The health service the liveness probe of a `subcommand` process asks.
fn liveness_service(subcommand: &str) -> &'static str {
    match subcommand {
        "registry" => REGISTRY_HEALTH_SERVICE,
        "dispatcher" => DISPATCHER_LIVENESS_SERVICE,
        "example" => EXECUTOR_HEALTH_SERVICE,
        other => panic!("the manifests run `toolmesh {other}`, which no check here knows"),
    }
}

/// Checks every Deployment's containers against the binary; `known_flags`
/// lets a render use flags this build lacks (none but the metrics render).
fn check_containers(objects: &[Value], help: &mut Help) {
    let deployments: Vec<&Value> = kind(objects, "Deployment").collect();
    assert!(deployments.len() >= 3, "registry, dispatcher, executor");
    for deployment in deployments {
        let pod = &deployment["spec"]["template"]["spec"];
        let what = name(deployment);
        for container in pod["containers"].as_array().expect("containers") {
            let args = strings(&container["args"]);
            let subcommand = args.first().copied().unwrap_or_default();
            let text = help.of(subcommand).to_owned();
            for arg in args.iter().filter(|a| a.starts_with("--")) {
                let flag = arg.split('=').next().unwrap_or(arg);
                assert!(
                    text.contains(&format!("{flag} ")) || text.contains(&format!("{flag}\n")),
                    "{what}: `toolmesh {subcommand}` takes no {flag}"
                );
            }
            for env in container["env"].as_array().into_iter().flatten() {
                let var = env["name"].as_str().unwrap_or_default();
                if var.starts_with("TOOLMESH_") {
                    // `[env: VAR]` where clap hides the value (tokens).
                    assert!(
                        text.contains(&format!("[env: {var}="))
                            || text.contains(&format!("[env: {var}]")),
                        "{what}: `toolmesh {subcommand}` reads no {var}"
                    );
                }
            }
            let ports: BTreeMap<&str, u64> = container["ports"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|p| {
                    (
                        p["name"].as_str().unwrap_or_default(),
                        p["containerPort"].as_u64().unwrap_or_default(),
                    )
                })
                .collect();
            let listen = flag(&args, "--listen").expect("--listen");
            assert_eq!(
                ports.get("grpc"),
                Some(&port_of(listen)),
                "{what}: grpc port"
            );
            let health = port_of(flag(&args, "--health-listen").expect("--health-listen"));
            assert_eq!(ports.get("health"), Some(&health), "{what}: health port");
            for (probe, service) in [
                ("livenessProbe", liveness_service(subcommand)),
                ("readinessProbe", ""),
            ] {
                let grpc = &container[probe]["grpc"];
                assert_eq!(
                    grpc["port"].as_u64(),
                    Some(health),
                    "{what}: {probe} on the health port, numeric"
                );
                assert_eq!(
                    grpc["service"].as_str(),
                    Some(service),
                    "{what}: {probe} service"
                );
            }
            let grace_ms =
                flag(&args, "--grace-ms").map_or(10_000, |g| g.parse().expect("--grace-ms"));
            let grace_s = pod["terminationGracePeriodSeconds"]
                .as_u64()
                .expect("terminationGracePeriodSeconds");
            assert!(
                grace_s * 1000 > grace_ms,
                "{what}: {grace_s} s is not above --grace-ms={grace_ms}"
            );
            let requests = &container["resources"]["requests"];
            assert!(
                requests["cpu"].is_string() && requests["memory"].is_string(),
                "{what}: resource requests"
            );
            if subcommand == "example" {
                let advertise = flag(&args, "--advertise").expect("executors advertise");
                assert_eq!(
                    advertise,
                    format!("$(POD_IP):{}", port_of(listen)),
                    "{what}"
                );
                let pod_ip = container["env"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .find(|e| e["name"] == "POD_IP")
                    .expect("POD_IP");
                assert_eq!(
                    pod_ip["valueFrom"]["fieldRef"]["fieldPath"], "status.podIP",
                    "{what}"
                );
            }
        }
    }
}

/// Services target named ports that the pods they select declare;
/// dispatchers run ≥ 2 replicas, spread, with a PodDisruptionBudget and a
/// headless Service.
fn check_wiring(objects: &[Value]) {
    let pods: Vec<(&Value, Vec<&str>)> = kind(objects, "Deployment")
        .map(|d| {
            let template = &d["spec"]["template"];
            let ports = template["spec"]["containers"]
                .as_array()
                .into_iter()
                .flatten()
                .flat_map(|c| c["ports"].as_array().into_iter().flatten())
                .filter_map(|p| p["name"].as_str())
                .collect();
            (&template["metadata"]["labels"], ports)
        })
        .collect();
    for service in kind(objects, "Service") {
        let selected: Vec<&Vec<&str>> = pods
            .iter()
            .filter(|(labels, _)| selects(&service["spec"]["selector"], labels))
            .map(|(_, ports)| ports)
            .collect();
        assert!(
            !selected.is_empty(),
            "Service {} selects no pod",
            name(service)
        );
        for port in service["spec"]["ports"].as_array().expect("ports") {
            let target = port["targetPort"].as_str().expect("a named targetPort");
            assert!(
                selected.iter().all(|ports| ports.contains(&target)),
                "Service {}: pods declare no port {target}",
                name(service)
            );
        }
    }
    let dispatcher = kind(objects, "Deployment")
        .find(|d| {
            strings(&d["spec"]["template"]["spec"]["containers"][0]["args"]).first()
                == Some(&"dispatcher")
        })
        .expect("a dispatcher Deployment");
    let labels = &dispatcher["spec"]["template"]["metadata"]["labels"];
    assert!(dispatcher["spec"]["replicas"].as_u64() >= Some(2));
    let spread = dispatcher["spec"]["template"]["spec"]["topologySpreadConstraints"].as_array();
    assert!(spread.is_some_and(|s| {
        s.iter()
            .all(|c| selects(&c["labelSelector"]["matchLabels"], labels))
    }));
    assert!(
        kind(objects, "PodDisruptionBudget")
            .any(|p| selects(&p["spec"]["selector"]["matchLabels"], labels)),
        "a PodDisruptionBudget covers the dispatchers"
    );
    assert!(
        kind(objects, "Service")
            .any(|s| s["spec"]["clusterIP"] == "None" && selects(&s["spec"]["selector"], labels)),
        "a headless Service selects the dispatchers"
    );
}

/// The policy file a render ships.
fn policy_text(objects: &[Value]) -> &str {
    kind(objects, "ConfigMap")
        .find_map(|c| c["data"]["policy.toml"].as_str())
        .expect("a ConfigMap with policy.toml")
}

/// The policy a render ships, written to a file in `dir`.
fn policy_file(objects: &[Value], dir: &Path) -> PathBuf {
    let path = dir.join("policy.toml");
    std::fs::write(&path, policy_text(objects)).unwrap();
    path
}

/// The policy a render ships loads in a real server.
fn check_policy(objects: &[Value]) {
    let dir = temp_dir("deploy-policy");
    let path = policy_file(objects, dir.path());
    let serve = Proc::toolmesh(
        "serve",
        &[
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--policy",
            path.to_str().unwrap(),
        ],
    );
    serve.listen_addr();
}

/// The `secretKeyRef` of the variable `var` of `container`, which must not
/// be optional (a missing token must stop the pod, not start it without one).
fn secret_ref<'a>(container: &'a Value, var: &str) -> &'a Value {
    let env = container["env"].as_array().into_iter().flatten();
    let found = env
        .into_iter()
        .find(|e| e["name"] == var)
        .unwrap_or_else(|| panic!("{var} is not set: {container}"));
    let reference = &found["valueFrom"]["secretKeyRef"];
    assert!(reference.is_object(), "{var} comes from a Secret: {found}");
    assert_ne!(reference["optional"], true, "{var} is not optional");
    reference
}

/// Who may do what in a render: its policy names a caller with the role
/// `dispatcher` (by token or certificate) and gives anonymous callers no
/// `dispatcher` or `admin` role (the roles it gives them are returned);
/// dispatchers take `TOOLMESH_REGISTRY_TOKEN` and executors
/// `TOOLMESH_TOKEN` from one Secret (keys `dispatcher` and `executor`).
fn check_credentials(objects: &[Value]) -> Vec<String> {
    let policy: Value = toml::from_str(policy_text(objects)).expect("the policy is TOML");
    let callers = policy["callers"].as_array().into_iter().flatten();
    assert!(
        callers
            .into_iter()
            .any(|c| strings(&c["roles"]).contains(&"dispatcher")
                && (c["token_sha256"].is_string() || c["tls_name"].is_string())),
        "the policy names a dispatcher caller: {policy}"
    );
    let auth = &policy["auth"];
    let anonymous: Vec<String> = if auth["allow_anonymous"] == true {
        strings(&auth["anonymous"]["roles"])
            .into_iter()
            .map(str::to_owned)
            .collect()
    } else {
        Vec::new()
    };
    for role in ["dispatcher", "admin"] {
        assert!(
            !anonymous.iter().any(|r| r == role),
            "anonymous callers get no role {role}: {auth}"
        );
    }
    let mut secrets = Vec::new();
    for deployment in kind(objects, "Deployment") {
        let container = &deployment["spec"]["template"]["spec"]["containers"][0];
        let (var, key) = match strings(&container["args"]).first().copied() {
            Some("dispatcher") => ("TOOLMESH_REGISTRY_TOKEN", "dispatcher"),
            Some("example") => ("TOOLMESH_TOKEN", "executor"),
            _ => continue,
        };
        let reference = secret_ref(container, var);
        assert_eq!(reference["key"], key, "{}: {var}", name(deployment));
        secrets.push(reference["name"].clone());
    }
    assert!(secrets.len() >= 2, "a dispatcher and an executor");
    assert!(
        secrets.windows(2).all(|w| w[0] == w[1]),
        "one Secret holds the tokens: {secrets:?}"
    );
    anonymous
}

/// A registry on the render's policy refuses a dispatcher with the
/// executor's token (it stays not ready and says so) and lets the one with
/// the dispatcher token (whose hash the chart was given) read: it turns ready.
async fn check_dispatcher_token_admitted(objects: &[Value]) {
    let dir = temp_dir("deploy-credentials");
    let path = policy_file(objects, dir.path());
    let (_registry, registry_addr) = registry(&["--policy", path.to_str().unwrap()]);
    let (refused, refused_addr) =
        dispatcher_for(&registry_addr, &["--registry-token", EXECUTOR_TOKEN]);
    refused.wait_for_line("registry refused", std::time::Duration::from_secs(30));
    let not_serving = tonic_health::pb::health_check_response::ServingStatus::NotServing as i32;
    assert_eq!(health_status(&refused_addr, "").await, not_serving);
    let (_dispatcher, addr) =
        dispatcher_for(&registry_addr, &["--registry-token", DISPATCHER_TOKEN]);
    let serving = tonic_health::pb::health_check_response::ServingStatus::Serving as i32;
    eventually(
        "the chart's dispatcher token reads snapshots",
        std::time::Duration::from_secs(10),
        || {
            let addr = addr.clone();
            async move { (health_status(&addr, "").await == serving).then_some(()) }
        },
    )
    .await;
}

/// The kustomize base: containers agree with the binary, objects are wired,
/// the policy loads.
#[tokio::test]
async fn kustomize_base_matches_the_binaries() {
    let objects = kustomize();
    check_containers(&objects, &mut Help::default());
    check_wiring(&objects);
    check_policy(&objects);
    assert_eq!(check_credentials(&objects), Vec::<String>::new());
}

/// The chart, by default and with TLS and persistence: containers agree
/// with the binary, objects are wired, the policy loads, and the default
/// render runs the same containers and replicas as the kustomize base.
#[tokio::test]
async fn helm_chart_matches_the_binaries_and_the_base() {
    let mut help = Help::default();
    let default = helm(&[]);
    check_containers(&default, &mut help);
    check_wiring(&default);
    check_policy(&default);
    assert_eq!(check_credentials(&default), Vec::<String>::new());
    check_dispatcher_token_admitted(&default).await;
    let open = helm(&["auth.allowAnonymousAgents=true"]);
    assert_eq!(check_credentials(&open), ["agent"]);
    check_policy(&open);

    let tls = helm(&["tls.enabled=true", "registry.persistence.enabled=true"]);
    check_containers(&tls, &mut help);
    check_wiring(&tls);
    for deployment in kind(&tls, "Deployment") {
        let env = &deployment["spec"]["template"]["spec"]["containers"][0]["env"];
        let names: Vec<&str> = env
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|e| e["name"].as_str())
            .collect();
        assert!(
            names.contains(&"TOOLMESH_TLS_CLIENT_CA"),
            "{}: mTLS",
            name(deployment)
        );
    }
    assert_eq!(kind(&tls, "PersistentVolumeClaim").count(), 1);

    let base = kustomize();
    let shape = |objects: &[Value]| -> BTreeMap<String, Value> {
        kind(objects, "Deployment")
            .map(|d| {
                let spec = &d["spec"]["template"]["spec"];
                let container = &spec["containers"][0];
                let same = serde_json::json!({
                    "replicas": d["spec"]["replicas"],
                    "grace": spec["terminationGracePeriodSeconds"],
                    "args": container["args"],
                    "ports": container["ports"],
                    "liveness": container["livenessProbe"],
                    "readiness": container["readinessProbe"],
                    "resources": container["resources"],
                    "securityContext": container["securityContext"],
                });
                (name(d).to_owned(), same)
            })
            .collect()
    };
    assert_eq!(
        shape(&default),
        shape(&base),
        "the chart renders what the base does"
    );
}

/// Without the hashes of the dispatcher and executor tokens the chart does
/// not render (its policy would serve no tool), and says how to make them;
/// a value that is no SHA-256 is refused as well.
#[test]
fn helm_without_token_hashes_says_how_to_make_them() {
    let executor = format!("auth.tokenSha256.executor={}", sha256_hex(EXECUTOR_TOKEN));
    for (sets, wrong) in [
        (
            vec![executor.clone()],
            "auth.tokenSha256.dispatcher is empty",
        ),
        (
            vec![
                executor,
                "auth.tokenSha256.dispatcher=not-a-hash".to_owned(),
            ],
            "is \"not-a-hash\", not the 64 hex digits",
        ),
    ] {
        let sets: Vec<&str> = sets.iter().map(String::as_str).collect();
        let out = helm_command(&sets).output().expect("run helm");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{sets:?} rendered");
        for needle in [
            wrong,
            "kubectl create secret generic toolmesh-tokens",
            "sha256sum",
        ] {
            assert!(stderr.contains(needle), "{needle:?} in {stderr}");
        }
    }
}

/// With metrics on, registry and dispatcher Services expose the `admin`
/// port (9090) their pods declare, and a ServiceMonitor and a PodMonitor
/// scrape `admin`; the containers' flags (`--admin-listen` among them)
/// are ones the binaries take.
#[test]
fn helm_metrics_are_scraped_on_the_admin_port() {
    let objects = helm(&["metrics.enabled=true"]);
    check_containers(&objects, &mut Help::default());
    check_wiring(&objects);
    let monitors: Vec<&Value> = kind(&objects, "ServiceMonitor")
        .chain(kind(&objects, "PodMonitor"))
        .collect();
    assert_eq!(monitors.len(), 2);
    for monitor in monitors {
        let endpoints = monitor["spec"]["endpoints"]
            .as_array()
            .or_else(|| monitor["spec"]["podMetricsEndpoints"].as_array())
            .expect("endpoints");
        assert!(
            endpoints.iter().all(|e| e["port"] == "admin"),
            "{}",
            name(monitor)
        );
    }
    for service in kind(&objects, "Service").filter(|s| s["spec"]["clusterIP"] != "None") {
        let admin = service["spec"]["ports"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|p| p["name"] == "admin");
        assert_eq!(
            admin.map(|p| &p["port"]),
            Some(&Value::from(9090)),
            "{}",
            name(service)
        );
    }
}
