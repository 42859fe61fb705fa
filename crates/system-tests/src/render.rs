//! The deployment files rendered with the real `helm` and `kubectl`
//! (scripts/prepare/kube-tools.sh installs both), small readers of the
//! objects they describe, and what the chart and the kustomize base must
//! render alike; shared by tests/deploy.rs and tests/deploy_run.rs.

use serde::Deserialize;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The chart.
pub fn chart_dir() -> PathBuf {
    crate::repo_root().join("deploy/helm/toolmesh")
}

/// The kustomize base.
pub fn base_dir() -> PathBuf {
    crate::repo_root().join("deploy/kubernetes")
}

/// The tool named by `var`, which scripts/prepare/kube-tools.sh exports.
pub fn prepared_tool(var: &str) -> PathBuf {
    crate::prepared(var, "kube-tools.sh")
}

/// The hex SHA-256 of `token`, as `auth.tokenSha256.*` and the policy's
/// `token_sha256` take it.
pub fn sha256_hex(token: &str) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(token.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Runs `command`; its standard output, or a panic with its standard error.
fn output(mut command: Command) -> String {
    let out = command.output().expect("run the renderer");
    assert!(
        out.status.success(),
        "{command:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("UTF-8 output")
}

/// The YAML documents of `text`, empty ones left out.
pub fn documents(text: &str) -> Vec<Value> {
    serde_yaml::Deserializer::from_str(text)
        .map(|document| Value::deserialize(document).expect("valid YAML"))
        .filter(|document| !document.is_null())
        .collect()
}

/// Runs `command` and parses its standard output as YAML documents.
pub fn render(command: Command) -> Vec<Value> {
    documents(&output(command))
}

/// `kubectl kustomize DIR`.
pub fn kustomize(dir: &Path) -> Vec<Value> {
    let mut command = Command::new(prepared_tool("TOOLMESH_TEST_KUBECTL"));
    command.arg("kustomize").arg(dir);
    render(command)
}

/// `helm template toolmesh deploy/helm/toolmesh` with `sets` and nothing else.
pub fn helm_template_command(sets: &[&str]) -> Command {
    let mut command = Command::new(prepared_tool("TOOLMESH_TEST_HELM"));
    command.args(["template", "toolmesh"]).arg(chart_dir());
    for set in sets {
        command.args(["--set", set]);
    }
    command
}

/// What `helm install` shows: the objects it would create and its notes.
pub struct Install {
    /// The manifests it would apply.
    pub objects: Vec<Value>,
    /// The chart's NOTES.txt, rendered.
    pub notes: String,
}

/// `helm install RELEASE deploy/helm/toolmesh --dry-run=client` in
/// `namespace` with the `values` files and `sets`, as `helm install` would
/// create it (no cluster is asked).
pub fn helm_install(
    release: &str,
    namespace: &str,
    values: &[PathBuf],
    sets: &[String],
) -> Install {
    let mut command = Command::new(prepared_tool("TOOLMESH_TEST_HELM"));
    command.args(["install", release]).arg(chart_dir()).args([
        "--dry-run=client",
        "--namespace",
        namespace,
        "--output",
        "json",
    ]);
    for file in values {
        command.arg("--values").arg(file);
    }
    for set in sets {
        command.args(["--set", set]);
    }
    let release: Value = serde_json::from_str(&output(command)).expect("helm's JSON");
    Install {
        objects: documents(release["manifest"].as_str().expect("a manifest")),
        notes: release["info"]["notes"].as_str().expect("notes").to_owned(),
    }
}

/// The objects of `kind`.
pub fn kind<'a>(objects: &'a [Value], kind: &str) -> impl Iterator<Item = &'a Value> {
    objects.iter().filter(move |o| o["kind"] == kind)
}

/// The workloads (Deployments and StatefulSets).
pub fn workloads(objects: &[Value]) -> impl Iterator<Item = &Value> {
    objects
        .iter()
        .filter(|o| o["kind"] == "Deployment" || o["kind"] == "StatefulSet")
}

/// An object's `metadata.name` (empty when it has none).
pub fn name(object: &Value) -> &str {
    object["metadata"]["name"].as_str().unwrap_or_default()
}

/// Whether every label of `selector` (matchLabels) is on `labels`.
pub fn selects(selector: &Value, labels: &Value) -> bool {
    selector
        .as_object()
        .is_some_and(|s| !s.is_empty() && s.iter().all(|(k, v)| labels.get(k) == Some(v)))
}

/// Whether a LabelSelector (matchLabels and matchExpressions) selects
/// `labels`; an empty selector selects everything.
pub fn label_selector_matches(selector: &Value, labels: &Value) -> bool {
    let exact = selector["matchLabels"]
        .as_object()
        .is_none_or(|m| m.iter().all(|(k, v)| labels.get(k) == Some(v)));
    let expressions = selector["matchExpressions"]
        .as_array()
        .into_iter()
        .flatten()
        .all(|e| {
            let key = e["key"].as_str().expect("matchExpressions key");
            let value = labels.get(key).and_then(Value::as_str);
            let values = strings(&e["values"]);
            match e["operator"].as_str() {
                Some("In") => value.is_some_and(|v| values.contains(&v)),
                Some("NotIn") => value.is_none_or(|v| !values.contains(&v)),
                Some("Exists") => value.is_some(),
                Some("DoesNotExist") => value.is_none(),
                other => panic!("a label selector operator no check knows: {other:?}"),
            }
        });
    exact && expressions
}

/// The strings of a JSON array (none when it is not one).
pub fn strings(value: &Value) -> Vec<&str> {
    value
        .as_array()
        .map(|items| items.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

/// The value of `--flag=VALUE` in `args`.
pub fn flag<'a>(args: &[&'a str], flag: &str) -> Option<&'a str> {
    let prefix = format!("{flag}=");
    args.iter().find_map(|a| a.strip_prefix(prefix.as_str()))
}

/// The port of a `host:port` value.
pub fn port_of(address: &str) -> u64 {
    address
        .rsplit_once(':')
        .and_then(|(_, p)| p.parse().ok())
        .unwrap_or_else(|| panic!("{address:?} has no port"))
}

/// The pod template's labels of a workload.
pub fn pod_labels(workload: &Value) -> &Value {
    &workload["spec"]["template"]["metadata"]["labels"]
}

/// The containers of a workload's pod template.
pub fn containers(workload: &Value) -> &[Value] {
    workload["spec"]["template"]["spec"]["containers"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
}

/// The number a container port named or numbered `port` stands for among
/// `containers`' ports, if any declares it.
pub fn container_port(containers: &[Value], port: &Value) -> Option<u64> {
    if let Some(number) = port.as_u64() {
        return Some(number);
    }
    let wanted = port.as_str()?;
    containers
        .iter()
        .flat_map(|c| c["ports"].as_array().into_iter().flatten())
        .find(|p| p["name"] == wanted)
        .and_then(|p| p["containerPort"].as_u64())
}

/// The workload whose first container runs `toolmesh SUBCOMMAND`.
pub fn toolmesh_workload<'a>(objects: &'a [Value], subcommand: &str) -> &'a Value {
    workloads(objects)
        .find(|w| {
            containers(w)
                .first()
                .is_some_and(|c| strings(&c["args"]).first() == Some(&subcommand))
        })
        .unwrap_or_else(|| panic!("no workload runs `toolmesh {subcommand}`"))
}

/// Labels only one renderer sets: Helm's release and chart labels, and
/// the base's `part-of` (kustomize `labels`). Selectors agree on the rest.
pub const RENDERER_LABELS: [&str; 4] = [
    "app.kubernetes.io/instance",
    "app.kubernetes.io/part-of",
    "app.kubernetes.io/managed-by",
    "helm.sh/chart",
];

/// `value` with the renderers' own labels removed wherever they appear
/// (selectors included), names renamed by `renames`, and no
/// `imagePullPolicy` (the chart's value; the base leaves the default).
pub fn normalized(value: &Value, renames: &BTreeMap<String, String>) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter(|(k, _)| {
                    !RENDERER_LABELS.contains(&k.as_str()) && k.as_str() != "imagePullPolicy"
                })
                .map(|(k, v)| {
                    let mut v = normalized(v, renames);
                    // Labels and annotations of any object (pod and claim
                    // templates too): selectors say what selects what.
                    if let (Value::Object(metadata), "metadata") = (&mut v, k.as_str()) {
                        metadata.remove("labels");
                        metadata.remove("annotations");
                    }
                    (k.clone(), v)
                })
                .collect(),
        ),
        Value::Array(items) => items.iter().map(|v| normalized(v, renames)).collect(),
        Value::String(text) => Value::from(renames.get(text).unwrap_or(text).as_str()),
        other => other.clone(),
    }
}

/// What the chart and the kustomize base (or an overlay of it) must render
/// alike, by `Kind/name`: every object but its labels and annotations
/// (workloads, pods and containers whole: replicas, strategy, service
/// account, automount, spread, affinity, volumes, args, env, mounts,
/// ports, probes, resources, security; PodDisruptionBudgets, Services,
/// NetworkPolicies, ServiceAccounts, bindings), ConfigMaps under the name
/// they are generated with (kustomize's hash suffix off) and the policy
/// as the TOML it parses to.
pub fn essentials(objects: &[Value]) -> BTreeMap<String, Value> {
    let renames: BTreeMap<String, String> = kind(objects, "ConfigMap")
        .filter_map(|c| {
            let generated = name(c);
            let (base, hash) = generated.rsplit_once('-')?;
            (hash.len() == 10 && hash.chars().all(|c| c.is_ascii_alphanumeric()))
                .then(|| (generated.to_owned(), base.to_owned()))
        })
        .collect();
    objects
        .iter()
        .map(|object| {
            let mut object = normalized(object, &renames);
            let key = format!(
                "{}/{}",
                object["kind"].as_str().unwrap_or_default(),
                name(&object)
            );
            object["metadata"] = serde_json::json!({});
            if let Some(policy) = object["data"]["policy.toml"].as_str() {
                let parsed: Value = toml::from_str(policy).expect("the policy is TOML");
                object["data"]["policy.toml"] = parsed;
            }
            (key, object)
        })
        .collect()
}

/// The chart's render and the base's (or an overlay's) have the same
/// essentials; the differences are named.
pub fn assert_renders_alike(chart: &[Value], kustomized: &[Value]) {
    let (chart, kustomized) = (essentials(chart), essentials(kustomized));
    let keys: BTreeSet<&String> = chart.keys().chain(kustomized.keys()).collect();
    let differences: Vec<String> = keys
        .into_iter()
        .filter(|k| chart.get(*k) != kustomized.get(*k))
        .map(|k| {
            format!(
                "{k}:\n  chart: {}\n  kustomize: {}",
                chart.get(k).map_or("(none)".into(), Value::to_string),
                kustomized.get(k).map_or("(none)".into(), Value::to_string)
            )
        })
        .collect();
    assert!(
        differences.is_empty(),
        "the chart and the kustomize render differ:\n{}",
        differences.join("\n")
    );
}
