//! The deployment files render and agree with the binaries. `kubectl
//! kustomize deploy/kubernetes` and `helm template deploy/helm/toolmesh`
//! (with and without TLS, metrics, persistence and high availability) are
//! rendered with the real tools (scripts/prepare/kube-tools.sh installs
//! them), then checked: every flag a container passes is one its subcommand
//! takes and every `TOOLMESH_*` variable one it reads (`toolmesh SUB
//! --help`), probes are native gRPC probes on the port `--health-listen`
//! opens asking the service names the servers report (`toolmesh_transport`
//! constants), the termination grace period is above `--grace-ms`,
//! executors advertise their pod IP on the port they listen on, Services
//! target declared ports, dispatchers are replicated, spread, budgeted and
//! offered headless, the MCP door listens on the port its Service targets
//! and accepts the Service's names, the policy loads, names a dispatcher
//! caller and gives anonymous callers no dispatcher or admin role,
//! dispatchers and executors take their tokens from the Secret, a
//! dispatcher with the token the chart's policy names turns ready, the
//! NetworkPolicies admit exactly the connections the mesh makes, registry
//! replicas need etcd, the bundled etcd keeps a quorum, dispatchers and
//! executors are spread and budgeted, no pod mounts the automatic API
//! token, the image is pinned and labelled, bridges (the chart's
//! `executors[].bridge`, the kustomize components of deploy/kubernetes/bridges)
//! run as executors, and the chart renders what the kustomize base and its
//! overlays (workload identity, HA) do.
//! tests/deploy_run.rs runs what they render.

use serde_json::Value;
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::process::Command;
use toolmesh_system_tests::render::*;
use toolmesh_system_tests::*;
use toolmesh_transport::{
    DISPATCHER_LIVENESS_SERVICE, EXECUTOR_HEALTH_SERVICE, REGISTRY_HEALTH_SERVICE,
};

/// The tokens the chart is rendered for (their hashes go in the values).
const DISPATCHER_TOKEN: &str = "tok-chart-dispatcher";
const EXECUTOR_TOKEN: &str = "tok-chart-executor";
const AGENT_TOKEN: &str = "tok-chart-agent";

fn kustomize_base() -> Vec<Value> {
    kustomize(&base_dir())
}

/// The chart rendered from the `values` file (if any) with `sets` and the
/// hashes of the test's tokens.
fn helm_with(values: Option<&str>, sets: &[&str]) -> Vec<Value> {
    let tokens = [
        ("dispatcher", DISPATCHER_TOKEN),
        ("executor", EXECUTOR_TOKEN),
        ("agent", AGENT_TOKEN),
    ]
    .map(|(key, token)| format!("auth.tokenSha256.{key}={}", sha256_hex(token)));
    let mut all: Vec<&str> = tokens.iter().map(String::as_str).collect();
    all.extend_from_slice(sets);
    let mut command = helm_template_command(&all);
    if let Some(file) = values {
        command.arg("--values").arg(chart_dir().join(file));
    }
    render(command)
}

/// The chart rendered with `sets` and the hashes of the test's tokens.
fn helm(sets: &[&str]) -> Vec<Value> {
    helm_with(None, sets)
}

/// The chart with values-ha.yaml, `sets` and the test's token hashes.
fn helm_ha(sets: &[&str]) -> Vec<Value> {
    helm_with(Some("values-ha.yaml"), sets)
}

/// Why the chart refuses to render with the test's token hashes and `sets`.
fn helm_refusal(sets: &[&str]) -> String {
    let hashes = [
        format!(
            "auth.tokenSha256.dispatcher={}",
            sha256_hex(DISPATCHER_TOKEN)
        ),
        format!("auth.tokenSha256.executor={}", sha256_hex(EXECUTOR_TOKEN)),
    ];
    let mut all: Vec<&str> = hashes.iter().map(String::as_str).collect();
    all.extend_from_slice(sets);
    let out = helm_template_command(&all).output().expect("run helm");
    assert!(!out.status.success(), "{sets:?} rendered");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// `toolmesh SUBCOMMAND --help`, once per subcommand.
#[derive(Default)]
struct Help(HashMap<String, String>);

impl Help {
    fn of(&mut self, subcommand: &str) -> &str {
        self.0.entry(subcommand.to_owned()).or_insert_with(|| {
            let out = Command::new(toolmesh_bin())
                .args(subcommand.split_whitespace())
                .arg("--help")
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
        "example" | "bridge grpc" | "bridge openapi" | "bridge mcp" => EXECUTOR_HEALTH_SERVICE,
        other => panic!("the manifests run `toolmesh {other}`, which no check here knows"),
    }
}

/// Whether `container` runs the toolmesh image (the bundled etcd does not).
fn runs_toolmesh(container: &Value) -> bool {
    container["image"]
        .as_str()
        .is_some_and(|image| image.starts_with("toolmesh:") || image == "toolmesh")
}

/// Checks every toolmesh container of the workloads against the binary.
fn check_containers(objects: &[Value], help: &mut Help) {
    let deployments: Vec<&Value> = kind(objects, "Deployment").collect();
    assert!(deployments.len() >= 3, "registry, dispatcher, executor");
    for deployment in workloads(objects) {
        let pod = &deployment["spec"]["template"]["spec"];
        let what = name(deployment);
        for container in containers(deployment).iter().filter(|c| runs_toolmesh(c)) {
            let args = strings(&container["args"]);
            // `bridge KIND` is a subcommand of two words.
            let words = if args.first() == Some(&"bridge") {
                2
            } else {
                1
            };
            let subcommand = args.get(..words).unwrap_or_default().join(" ");
            let subcommand = subcommand.as_str();
            let text = help.of(subcommand).to_owned();
            // Flags end where `bridge mcp`'s `-- COMMAND ARGS…` begins.
            let flags = args.iter().take_while(|a| **a != "--");
            for arg in flags.filter(|a| a.starts_with("--")) {
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
            if liveness_service(subcommand) == EXECUTOR_HEALTH_SERVICE {
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
    let pods: Vec<(&Value, Vec<&str>)> = workloads(objects)
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
    let dispatcher = toolmesh_workload(objects, "dispatcher");
    let labels = pod_labels(dispatcher);
    assert!(dispatcher["spec"]["replicas"].as_u64() >= Some(2));
    let executors =
        workloads(objects).filter(|w| pod_labels(w)["app.kubernetes.io/component"] == "executor");
    for workload in std::iter::once(dispatcher).chain(executors) {
        check_spread_and_budget(objects, workload);
    }
    assert!(
        kind(objects, "Service")
            .any(|s| s["spec"]["clusterIP"] == "None" && selects(&s["spec"]["selector"], labels)),
        "a headless Service selects the dispatchers"
    );
}

/// The pods of `workload` spread over nodes and zones, and a
/// PodDisruptionBudget covers them.
fn check_spread_and_budget(objects: &[Value], workload: &Value) {
    let labels = pod_labels(workload);
    let spread = workload["spec"]["template"]["spec"]["topologySpreadConstraints"].as_array();
    let keys: Vec<&str> = spread
        .into_iter()
        .flatten()
        .filter(|c| selects(&c["labelSelector"]["matchLabels"], labels))
        .filter_map(|c| c["topologyKey"].as_str())
        .collect();
    assert_eq!(
        keys,
        ["kubernetes.io/hostname", "topology.kubernetes.io/zone"],
        "{}: spread over nodes and zones",
        name(workload)
    );
    assert!(
        kind(objects, "PodDisruptionBudget")
            .any(|p| selects(&p["spec"]["selector"]["matchLabels"], labels)),
        "a PodDisruptionBudget covers {}",
        name(workload)
    );
}

/// No pod gets the API token Kubernetes mounts by default
/// (`automountServiceAccountToken: false`): none calls the Kubernetes API
/// with it. The servers that do read from the API server (the
/// service-account issuer's keys, a policy `[[issuers]]` entry with
/// `jwks_bearer_file`) mount a projected service-account token of their
/// own where that file is.
fn check_api_tokens(objects: &[Value]) {
    let policy: Value = toml::from_str(policy_text(objects)).expect("the policy is TOML");
    let bearer_files: Vec<&str> = policy["issuers"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|i| i["jwks_bearer_file"].as_str())
        .collect();
    for workload in workloads(objects) {
        let pod = &workload["spec"]["template"]["spec"];
        assert_eq!(
            pod["automountServiceAccountToken"],
            false,
            "{}: no automatic API token",
            name(workload)
        );
        for container in containers(workload) {
            if flag(&strings(&container["args"]), "--policy").is_none() {
                continue;
            }
            for file in &bearer_files {
                let (dir, file_name) = file.rsplit_once('/').expect("a path");
                let mount = container["volumeMounts"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .find(|m| m["mountPath"] == *dir)
                    .unwrap_or_else(|| panic!("{}: nothing mounted at {dir}", name(workload)));
                let volume = pod["volumes"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .find(|v| v["name"] == mount["name"])
                    .expect("the mounted volume");
                assert!(
                    volume["projected"]["sources"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .any(|s| s["serviceAccountToken"]["path"] == file_name),
                    "{}: {file} is a projected service-account token: {volume}",
                    name(workload)
                );
            }
        }
    }
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
/// dispatchers take `TOOLMESH_REGISTRY_TOKEN` and executors (bridges
/// too) `TOOLMESH_TOKEN` from one Secret (keys `dispatcher` and
/// `executor`).
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
            Some("example" | "bridge") => ("TOOLMESH_TOKEN", "executor"),
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
/// the MCP door and the NetworkPolicies are there, the policy loads.
#[tokio::test]
async fn kustomize_base_matches_the_binaries() {
    let objects = kustomize_base();
    check_containers(&objects, &mut Help::default());
    check_wiring(&objects);
    check_api_tokens(&objects);
    check_mcp_door(&objects, None);
    check_network_policies(&objects);
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
    check_api_tokens(&default);
    check_mcp_door(&default, None);
    check_network_policies(&default);
    check_policy(&default);
    assert_eq!(check_credentials(&default), Vec::<String>::new());
    check_dispatcher_token_admitted(&default).await;
    let open = helm(&["auth.allowAnonymousAgents=true"]);
    assert_eq!(check_credentials(&open), ["agent"]);
    check_policy(&open);

    let tls = helm(&["tls.enabled=true", "registry.persistence.enabled=true"]);
    check_containers(&tls, &mut help);
    check_wiring(&tls);
    check_api_tokens(&tls);
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

    assert_renders_alike(&helm_placeholders(None, &[]), &kustomize_base());
}

/// The policy's placeholder hashes of the kustomize base (…01 dispatcher,
/// …02 executor, …03 agent), as `auth.tokenSha256.*` values.
/// values-bridges.yaml renders one executor Deployment per bridge kind
/// beside the example, each running `toolmesh bridge KIND` with its flags
/// from the values (checked against the binary as every container is),
/// its own credentials from its `env`, spread and budgeted as executors.
#[test]
fn helm_bridges_run_as_executors() {
    let objects = helm_with(Some("values-bridges.yaml"), &[]);
    check_containers(&objects, &mut Help::default());
    check_wiring(&objects);
    let mut kinds = Vec::new();
    for (what, container) in bridges(&objects) {
        let args = strings(&container["args"]);
        kinds.push(args[1].to_owned());
        let upstream = match args[1] {
            "grpc" => "--target=orders.shop.svc:50051",
            "openapi" => "--spec=http://pets.shop.svc:8000/openapi.json",
            "mcp" => "--url=http://search-mcp.shop.svc:8000/mcp",
            other => panic!("{what}: bridge {other}"),
        };
        assert!(args.contains(&upstream), "{what}: {args:?}");
        if args[1] == "openapi" {
            let token = secret_ref(&container, "PETS_TOKEN");
            assert_eq!(token["name"], "pets-api", "{what}");
        }
    }
    kinds.sort();
    assert_eq!(kinds, ["grpc", "mcp", "openapi"]);
    assert_eq!(check_credentials(&objects), Vec::<String>::new());
    let refused = {
        let out = helm_template_command(&[
            &format!(
                "auth.tokenSha256.dispatcher={}",
                sha256_hex(DISPATCHER_TOKEN)
            ),
            &format!("auth.tokenSha256.executor={}", sha256_hex(EXECUTOR_TOKEN)),
            "executors[0].name=x",
            "executors[0].bridge.kind=soap",
        ])
        .output()
        .expect("run helm");
        assert!(!out.status.success(), "bridge kind soap rendered");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    assert!(refused.contains("grpc, openapi or mcp"), "{refused}");
}

/// The workloads of a render that run `toolmesh bridge KIND`, by name with
/// their container, each checked to be an executor (its component label,
/// admitted to the registry and reached by dispatchers as one), spread and
/// budgeted.
fn bridges(objects: &[Value]) -> Vec<(String, Value)> {
    let dispatcher = component(objects, "dispatcher").expect("a dispatcher");
    let mut found = Vec::new();
    for deployment in workloads(objects) {
        let Some(container) = containers(deployment).first().cloned() else {
            continue;
        };
        if strings(&container["args"]).first() != Some(&"bridge") {
            continue;
        }
        let what = name(deployment).to_owned();
        assert_eq!(
            pod_labels(deployment)["app.kubernetes.io/component"],
            "executor",
            "{what}"
        );
        check_spread_and_budget(objects, deployment);
        if kind(objects, "NetworkPolicy").next().is_some() {
            let grpc = container_port(containers(deployment), &Value::from("grpc"))
                .unwrap_or_else(|| panic!("{what} declares no port grpc"));
            assert!(
                network_policy::admits(objects, Some(pod_labels(dispatcher)), deployment, grpc),
                "dispatchers reach {what}"
            );
            assert!(
                !network_policy::admits(objects, None, deployment, grpc),
                "only the mesh reaches {what}"
            );
        }
        found.push((what, container));
    }
    found
}

/// The overlay deploy/kubernetes/bridges renders the base with the
/// optional components components/bridge-grpc and bridge-openapi: each an
/// executor Deployment running `toolmesh bridge KIND` as the chart's
/// `executors[].bridge` does, its flags and variables checked against the
/// binary as every container's are (`--refresh-secs` among them), probed,
/// advertising its pod IP, spread, budgeted and admitted as an executor,
/// registering with the Secret's executor token and reading its own
/// credentials for the service from a Secret of its own.
#[tokio::test]
async fn kustomize_bridges_run_as_executors() {
    let objects = kustomize(&base_dir().join("bridges"));
    check_containers(&objects, &mut Help::default());
    check_wiring(&objects);
    check_api_tokens(&objects);
    check_network_policies(&objects);
    check_policy(&objects);
    assert_eq!(check_credentials(&objects), Vec::<String>::new());
    let mut kinds = Vec::new();
    for (what, container) in bridges(&objects) {
        let args = strings(&container["args"]);
        kinds.push(args[1].to_owned());
        let (upstream, var, secret) = match args[1] {
            "grpc" => (
                "--target=orders.shop.svc:50051",
                "ORDERS_TOKEN",
                "orders-api",
            ),
            "openapi" => (
                "--spec=http://pets.shop.svc:8000/openapi.json",
                "PETS_TOKEN",
                "pets-api",
            ),
            other => panic!("{what}: bridge {other}"),
        };
        assert!(args.contains(&upstream), "{what}: {args:?}");
        assert!(
            args.contains(&format!("--bearer-env={var}").as_str()),
            "{what}: {args:?}"
        );
        assert_eq!(secret_ref(&container, var)["name"], secret, "{what}");
    }
    kinds.sort();
    assert_eq!(kinds, ["grpc", "openapi"]);
    // The base's objects are there unchanged beside them.
    let base = kustomize_base();
    for object in &base {
        assert!(
            objects.contains(object),
            "{} {} changed by the bridges' components",
            object["kind"],
            name(object)
        );
    }
}

fn placeholder_hashes() -> Vec<String> {
    [("dispatcher", 1), ("executor", 2), ("agent", 3)]
        .iter()
        .map(|(key, n)| format!("auth.tokenSha256.{key}={n:064}"))
        .collect()
}

/// The chart rendered with the `values` file (if any), `sets` and the
/// base's placeholder hashes, so that its policy is the base's.
fn helm_placeholders(values: Option<&str>, sets: &[&str]) -> Vec<Value> {
    let hashes = placeholder_hashes();
    let mut all: Vec<&str> = hashes.iter().map(String::as_str).collect();
    all.extend_from_slice(sets);
    let mut command = helm_template_command(&all);
    if let Some(file) = values {
        command.arg("--values").arg(chart_dir().join(file));
    }
    render(command)
}

/// The kustomize base's variants, overlays beside it, render what the
/// chart renders with the same settings (see [`essentials`]):
/// deploy/kubernetes/workload-identity as `auth.workloadIdentity.enabled`
/// (namespace default, the agent's placeholder hash) and
/// deploy/kubernetes/ha as values-ha.yaml. Both pass the checks the base
/// passes; with workload identity no pod reads a static mesh token, and
/// the servers read the issuer's keys with a projected token, not the
/// automatic one.
#[tokio::test]
async fn kustomize_overlays_render_what_the_chart_does() {
    let mut help = Help::default();
    let identity = kustomize(&base_dir().join("workload-identity"));
    let chart_identity = helm_placeholders(None, &["auth.workloadIdentity.enabled=true"]);
    let ha = kustomize(&base_dir().join("ha"));
    let chart_ha = helm_placeholders(Some("values-ha.yaml"), &[]);
    for objects in [&identity, &chart_identity, &ha, &chart_ha] {
        check_containers(objects, &mut help);
        check_wiring(objects);
        check_network_policies(objects);
        check_api_tokens(objects);
    }
    check_policy(&ha);
    for objects in [&identity, &chart_identity] {
        let secret_keys: Vec<&str> = workloads(objects)
            .flat_map(|w| containers(w).iter())
            .flat_map(|c| c["env"].as_array().into_iter().flatten())
            .filter_map(|e| e["valueFrom"]["secretKeyRef"]["key"].as_str())
            .collect();
        assert!(
            secret_keys.is_empty(),
            "no static mesh token: {secret_keys:?}"
        );
        let policy: Value = toml::from_str(policy_text(objects)).expect("TOML");
        assert!(
            policy["issuers"][0]["jwks_bearer_file"].is_string(),
            "{policy}"
        );
    }
    assert_renders_alike(&chart_identity, &identity);
    assert_renders_alike(&chart_ha, &ha);
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
        let out = helm_template_command(&sets).output().expect("run helm");
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

/// The dispatchers' MCP door: `--mcp-listen` on the container port `mcp`,
/// which the dispatcher Service exposes; `--mcp-allowed-hosts` holds every
/// name of that Service in the pod's namespace (`$(POD_NAMESPACE)`, from
/// the downward API), localhost for a port-forward, and the Ingress host,
/// whose Ingress sends `/mcp` to that Service port.
fn check_mcp_door(objects: &[Value], ingress_host: Option<&str>) {
    let dispatcher = toolmesh_workload(objects, "dispatcher");
    let container = &containers(dispatcher)[0];
    let args = strings(&container["args"]);
    let listen = flag(&args, "--mcp-listen").expect("the dispatchers serve MCP");
    assert_eq!(
        container_port(containers(dispatcher), &Value::from("mcp")),
        Some(port_of(listen)),
        "--mcp-listen is the container port `mcp`"
    );
    let service = kind(objects, "Service")
        .find(|s| {
            s["spec"]["clusterIP"] != "None"
                && selects(&s["spec"]["selector"], pod_labels(dispatcher))
        })
        .expect("a dispatcher Service");
    let service_name = name(service);
    assert!(
        service["spec"]["ports"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|p| p["name"] == "mcp" && p["targetPort"] == "mcp"),
        "{service_name} exposes the MCP door"
    );
    let hosts: Vec<&str> = flag(&args, "--mcp-allowed-hosts")
        .expect("--mcp-allowed-hosts")
        .split(',')
        .collect();
    let mut wanted = vec!["localhost".to_owned(), service_name.to_owned()];
    for suffix in ["", ".svc", ".svc.cluster.local"] {
        wanted.push(format!("{service_name}.$(POD_NAMESPACE){suffix}"));
    }
    wanted.extend(ingress_host.map(str::to_owned));
    for host in &wanted {
        assert!(hosts.contains(&host.as_str()), "{host} in {hosts:?}");
    }
    let namespace = container["env"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|e| e["name"] == "POD_NAMESPACE")
        .expect("POD_NAMESPACE for --mcp-allowed-hosts");
    assert_eq!(
        namespace["valueFrom"]["fieldRef"]["fieldPath"],
        "metadata.namespace"
    );
    let ingresses: Vec<&Value> = kind(objects, "Ingress").collect();
    assert_eq!(ingresses.len(), usize::from(ingress_host.is_some()));
    for ingress in ingresses {
        let rule = &ingress["spec"]["rules"][0];
        assert_eq!(rule["host"].as_str(), ingress_host);
        let mcp = rule["http"]["paths"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|p| p["path"] == "/mcp")
            .expect("the Ingress serves /mcp");
        assert_eq!(mcp["backend"]["service"]["name"], service_name);
        assert_eq!(mcp["backend"]["service"]["port"]["name"], "mcp");
    }
}

/// The workload of `component` (label app.kubernetes.io/component).
fn component<'a>(objects: &'a [Value], component: &str) -> Option<&'a Value> {
    workloads(objects).find(|w| pod_labels(w)["app.kubernetes.io/component"] == component)
}

/// The NetworkPolicies admit the connections the mesh makes and nothing
/// else: agents (from anywhere) reach the dispatchers' gRPC and MCP ports
/// but no registry, executor or etcd port; only dispatchers and registries
/// reach executors; only dispatchers and executors reach registries; only
/// registries (and its members) reach etcd; probes and metrics reach every
/// health, admin and etcd metrics port.
fn check_network_policies(objects: &[Value]) {
    let get = |c: &str| component(objects, c).unwrap_or_else(|| panic!("a {c} workload"));
    let (registry, dispatcher, executor) = (get("registry"), get("dispatcher"), get("executor"));
    let etcd = component(objects, "etcd");
    let port = |workload: &Value, port: &str| {
        container_port(containers(workload), &Value::from(port))
            .unwrap_or_else(|| panic!("{} declares no port {port}", name(workload)))
    };
    let admits = |from: Option<&Value>, to: &Value, to_port: &str| {
        network_policy::admits(objects, from.map(pod_labels), to, port(to, to_port))
    };
    assert!(
        kind(objects, "NetworkPolicy").count() >= 3,
        "NetworkPolicies are on by default"
    );
    let mut targets = vec![registry, dispatcher, executor];
    targets.extend(etcd);
    for workload in &targets {
        for open in ["health", "admin", "metrics"] {
            if container_port(containers(workload), &Value::from(open)).is_some() {
                assert!(
                    admits(None, workload, open),
                    "{}: {open} open",
                    name(workload)
                );
            }
        }
    }
    for door in ["grpc", "mcp"] {
        assert!(
            admits(None, dispatcher, door),
            "agents reach the dispatchers' {door}"
        );
    }
    let cases: Vec<(Option<&Value>, &Value, &str, bool)> = vec![
        (None, executor, "grpc", false),
        (None, registry, "grpc", false),
        (Some(dispatcher), executor, "grpc", true),
        (Some(registry), executor, "grpc", true),
        (Some(executor), executor, "grpc", false),
        (Some(dispatcher), registry, "grpc", true),
        (Some(executor), registry, "grpc", true),
    ];
    let etcd_cases: Vec<(Option<&Value>, &Value, &str, bool)> = etcd
        .map(|etcd| {
            vec![
                (Some(registry), etcd, "client", true),
                (Some(etcd), etcd, "peer", true),
                (Some(dispatcher), etcd, "client", false),
                (Some(executor), etcd, "client", false),
                (None, etcd, "client", false),
                (None, etcd, "peer", false),
            ]
        })
        .unwrap_or_default();
    for (from, to, to_port, expected) in cases.into_iter().chain(etcd_cases) {
        let source = from.map_or("outside", name);
        assert_eq!(
            admits(from, to, to_port),
            expected,
            "{source} -> {} {to_port}",
            name(to)
        );
    }
}

/// An MCP Ingress routes to the dispatchers and its host is one the door accepts.
#[test]
fn helm_mcp_ingress_host_is_accepted() {
    let objects = helm(&[
        "mcp.ingress.enabled=true",
        "mcp.ingress.host=mcp.example.test",
    ]);
    check_mcp_door(&objects, Some("mcp.example.test"));
    let refusal = helm_refusal(&["mcp.ingress.enabled=true"]);
    assert!(
        refusal.contains("mcp.ingress.host is required"),
        "{refusal}"
    );
}

/// Registry replicas need etcd, and the chart says how to give it; the HA
/// values run three registries on a bundled three-member etcd that starts
/// its members together, publishes them before they are ready, keeps a
/// quorum through disruptions and spreads them; your own etcd is reached
/// with TLS and a user whose password comes from a Secret.
#[test]
fn helm_registry_replicas_run_on_etcd() {
    let mut help = Help::default();
    let stderr = helm_refusal(&["registry.replicas=3"]);
    for needle in [
        "registry.replicas is 3",
        "etcd.bundled.enabled=true",
        "etcd.endpoints",
    ] {
        assert!(stderr.contains(needle), "{needle:?} in {stderr}");
    }

    let ha = helm_ha(&[]);
    check_containers(&ha, &mut help);
    check_wiring(&ha);
    check_api_tokens(&ha);
    check_network_policies(&ha);
    let registry = toolmesh_workload(&ha, "registry");
    assert_eq!(registry["spec"]["replicas"], 3);
    let etcd = component(&ha, "etcd").expect("the bundled etcd");
    assert_eq!(etcd["kind"], "StatefulSet");
    assert_eq!(etcd["spec"]["podManagementPolicy"], "Parallel");
    let members = etcd["spec"]["replicas"].as_u64().expect("replicas");
    assert_eq!(members, 3);
    let headless = kind(&ha, "Service")
        .find(|s| name(s) == etcd["spec"]["serviceName"])
        .expect("the etcd StatefulSet's Service");
    assert_eq!(headless["spec"]["clusterIP"], "None");
    assert_eq!(headless["spec"]["publishNotReadyAddresses"], true);
    let store = flag(&strings(&containers(registry)[0]["args"]), "--store")
        .expect("registries on etcd")
        .to_owned();
    let client = container_port(containers(etcd), &Value::from("client")).expect("client port");
    let expected: Vec<String> = (0..members)
        .map(|i| format!("{}-{i}.{}:{client}", name(etcd), name(headless)))
        .collect();
    assert_eq!(store, format!("etcd://{}", expected.join(",")));
    let image = containers(etcd)[0]["image"].as_str().expect("image");
    let pinned = image.contains("@sha256:")
        || image
            .rsplit_once(':')
            .is_some_and(|(_, tag)| tag.trim_start_matches('v').split('.').count() == 3);
    assert!(pinned, "the etcd image is pinned: {image}");
    for (workload, budget) in [(etcd, "minAvailable"), (registry, "maxUnavailable")] {
        let labels = pod_labels(workload);
        let pdb = kind(&ha, "PodDisruptionBudget")
            .find(|p| selects(&p["spec"]["selector"]["matchLabels"], labels))
            .unwrap_or_else(|| panic!("a PodDisruptionBudget covers {}", name(workload)));
        if workload == etcd {
            assert_eq!(pdb["spec"][budget], members / 2 + 1, "a quorum stays up");
        } else {
            assert!(pdb["spec"][budget].is_u64(), "{pdb}");
        }
        let anti = &workload["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"];
        let term = &anti["preferredDuringSchedulingIgnoredDuringExecution"][0]["podAffinityTerm"];
        assert!(
            selects(&term["labelSelector"]["matchLabels"], labels),
            "{}: anti-affinity to its own pods",
            name(workload)
        );
    }
    assert!(toolmesh_workload(&ha, "dispatcher")["spec"]["replicas"].as_u64() >= Some(2));
    let lint = Command::new(prepared_tool("TOOLMESH_TEST_HELM"))
        .arg("lint")
        .arg(chart_dir())
        .arg("--values")
        .arg(chart_dir().join("values-ha.yaml"))
        .arg("--set")
        .arg(format!(
            "auth.tokenSha256.dispatcher={}",
            sha256_hex(DISPATCHER_TOKEN)
        ))
        .arg("--set")
        .arg(format!(
            "auth.tokenSha256.executor={}",
            sha256_hex(EXECUTOR_TOKEN)
        ))
        .output()
        .expect("run helm lint");
    assert!(
        lint.status.success(),
        "{}",
        String::from_utf8_lossy(&lint.stdout)
    );

    let external = helm(&[
        "registry.replicas=2",
        "etcd.endpoints={etcd-a:2379,etcd-b:2379}",
        "etcd.tls.secretName=etcd-client",
        "etcd.auth.user=toolmesh",
        "etcd.auth.passwordSecret=etcd-password",
    ]);
    check_containers(&external, &mut help);
    assert!(component(&external, "etcd").is_none());
    let registry = &containers(toolmesh_workload(&external, "registry"))[0];
    assert_eq!(
        flag(&strings(&registry["args"]), "--store"),
        Some("etcd://etcd-a:2379,etcd-b:2379")
    );
    let volumes = &toolmesh_workload(&external, "registry")["spec"]["template"]["spec"]["volumes"];
    let password = volumes
        .as_array()
        .into_iter()
        .flatten()
        .find(|v| v["secret"]["secretName"] == "etcd-password")
        .expect("the etcd password comes from its Secret, as a file");
    let mount = registry["volumeMounts"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|m| m["name"] == password["name"])
        .expect("the password volume is mounted");
    let file = format!(
        "{}/{}",
        mount["mountPath"].as_str().unwrap(),
        password["secret"]["items"][0]["path"].as_str().unwrap()
    );
    let env = registry["env"].as_array().into_iter().flatten();
    assert!(
        env.into_iter()
            .any(|e| e["name"] == "TOOLMESH_ETCD_PASSWORD_FILE" && e["value"] == file.as_str()),
        "--etcd-password-file names {file}"
    );

    for (sets, wrong) in [
        (
            &["etcd.bundled.enabled=true", "etcd.bundled.replicas=2"][..],
            "odd number of members",
        ),
        (
            &["etcd.bundled.enabled=true", "etcd.tls.secretName=x"][..],
            "for your own etcd",
        ),
    ] {
        let refusal = helm_refusal(sets);
        assert!(refusal.contains(wrong), "{sets:?}: {refusal}");
    }
}

/// The `[workspace.package]` key `key` of Cargo.toml.
fn workspace_package(key: &str) -> String {
    let manifest: toml::Value =
        toml::from_str(&std::fs::read_to_string(repo_root().join("Cargo.toml")).unwrap()).unwrap();
    manifest["workspace"]["package"][key]
        .as_str()
        .unwrap_or_else(|| panic!("workspace.package.{key}"))
        .to_owned()
}

/// The image: every base pinned by digest, a distroless final stage that
/// runs `toolmesh` as uid 65532 without a HEALTHCHECK (probes are the
/// orchestrator's), OCI labels that agree with Cargo.toml and the chart,
/// and every port the chart's containers declare exposed.
#[test]
fn dockerfile_is_pinned_labelled_and_distroless() {
    let text = std::fs::read_to_string(repo_root().join("deploy/Dockerfile")).unwrap();
    // Instructions with their continuation lines joined.
    let instructions: Vec<String> = text
        .replace("\\\n", " ")
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(str::to_owned)
        .collect();
    let of = |keyword: &str| -> Vec<&str> {
        instructions
            .iter()
            .filter_map(|i| i.strip_prefix(keyword).map(str::trim))
            .collect()
    };
    let froms = of("FROM ");
    assert!(froms.len() >= 2, "a build stage and a final one");
    for from in &froms {
        let image = from.split_whitespace().next().unwrap_or_default();
        let digest = image.split_once("@sha256:").map(|(_, d)| d);
        assert!(
            digest.is_some_and(|d| d.len() == 64 && d.chars().all(|c| c.is_ascii_hexdigit())),
            "{image} is pinned by digest"
        );
    }
    let last = froms.last().unwrap();
    assert!(last.starts_with("gcr.io/distroless/"), "distroless: {last}");
    assert!(of("HEALTHCHECK").is_empty(), "no HEALTHCHECK");
    assert_eq!(of("USER "), ["65532:65532"]);
    let entrypoint: Vec<String> = serde_json::from_str(of("ENTRYPOINT ")[0]).expect("exec form");
    assert!(entrypoint[0].ends_with("/toolmesh"), "{entrypoint:?}");

    let labels: String = of("LABEL ").join(" ");
    let label = |key: &str| -> String {
        let start = labels
            .find(&format!("org.opencontainers.image.{key}=\""))
            .unwrap_or_else(|| panic!("LABEL org.opencontainers.image.{key}"));
        let value = &labels[start..];
        let value = &value[value.find('"').unwrap() + 1..];
        value[..value.find('"').unwrap()].to_owned()
    };
    let chart: Value =
        serde_yaml::from_str(&std::fs::read_to_string(chart_dir().join("Chart.yaml")).unwrap())
            .unwrap();
    assert_eq!(label("version"), workspace_package("version"));
    assert_eq!(chart["appVersion"], workspace_package("version"));
    assert_eq!(label("licenses"), workspace_package("license"));
    // No `source` label: the project names no repository address it
    // cannot stand behind (it named example.invalid).
    assert!(of("LABEL ").iter().all(|l| !l.contains("image.source")));
    for key in ["title", "description", "revision"] {
        label(key);
    }

    let exposed: Vec<u64> = of("EXPOSE ")
        .iter()
        .flat_map(|e| e.split_whitespace())
        .map(|p| p.parse().expect("a port"))
        .collect();
    let rendered = helm(&["metrics.enabled=true"]);
    for workload in workloads(&rendered) {
        for container in containers(workload).iter().filter(|c| runs_toolmesh(c)) {
            for port in container["ports"].as_array().into_iter().flatten() {
                let number = port["containerPort"].as_u64().unwrap();
                assert!(
                    exposed.contains(&number),
                    "EXPOSE {number} ({})",
                    name(workload)
                );
            }
        }
    }
}

/// The NOTES print a call of search_kb only when an executor runs the
/// knowledge example; otherwise a listing, over gRPC and MCP alike.
#[test]
fn helm_notes_call_a_tool_the_release_runs() {
    let dir = temp_dir("notes-values");
    let values = dir.join("accounts-only.yaml");
    std::fs::write(
        &values,
        "executors:\n  - {name: accounts, example: accounts, replicas: 1, port: 9001, healthPort: 9002, resources: {requests: {cpu: 50m, memory: 64Mi}}}\n",
    )
    .unwrap();
    let hashes: Vec<String> = [
        ("dispatcher", DISPATCHER_TOKEN),
        ("executor", EXECUTOR_TOKEN),
    ]
    .iter()
    .map(|(key, token)| format!("auth.tokenSha256.{key}={}", sha256_hex(token)))
    .collect();
    let default = helm_install("toolmesh", "default", &[], &hashes).notes;
    let accounts = helm_install("toolmesh", "default", &[values], &hashes).notes;
    for (notes, shown, hidden) in [
        (&default, "toolmesh call search_kb", "toolmesh tools"),
        (&accounts, "toolmesh tools", "search_kb"),
    ] {
        assert!(notes.contains(shown) && !notes.contains(hidden), "{notes}");
    }
    assert!(default.contains(r#""method":"tools/call""#), "{default}");
    assert!(accounts.contains(r#""method":"tools/list""#), "{accounts}");
}
