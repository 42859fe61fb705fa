//! A container's command carried over to loopback: its variables as the
//! kubelet makes them (Service links, `valueFrom`, `$(VAR)` expansion), its
//! volumes as files, and each argument and variable through the rewrite
//! table, which fails on one it does not know.

use super::{Cluster, Endpoint, POD_IP, host_port};
use crate::render::{kind, name};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::PathBuf;

/// What the distroless image sets, the one variable a container gets
/// besides its own and the Service links.
const IMAGE_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// How a value of a container (an argument or a variable) is carried over
/// to loopback.
#[derive(Debug, Clone, Copy)]
enum Rewrite {
    /// As it is.
    Keep,
    /// `HOST:PORT` to listen on: the pod's loopback port for PORT.
    Listen,
    /// `POD_IP:PORT`, the pod's own address: its loopback port for PORT.
    Own,
    /// `HOST:PORT[,HOST:PORT…]` to connect to: each resolved.
    Dial,
    /// `etcd://HOST:PORT[,…]`: each resolved.
    EtcdStore,
    /// A path inside one of the container's volumes.
    File,
    /// `http://HOST:PORT[,…]` URLs to listen on.
    ListenUrls,
    /// `http://NAME:PORT[,…]` URLs naming the pod itself.
    OwnUrls,
    /// etcd's `NAME=http://HOST:PORT,…`: each member's URL resolved.
    Members,
}

/// The flags of `toolmesh` the manifests may pass, and how each is moved.
const TOOLMESH_FLAGS: [(&str, Rewrite); 17] = [
    ("--listen", Rewrite::Listen),
    ("--health-listen", Rewrite::Listen),
    ("--admin-listen", Rewrite::Listen),
    ("--mcp-listen", Rewrite::Listen),
    ("--advertise", Rewrite::Own),
    ("--registry", Rewrite::Dial),
    ("--store", Rewrite::EtcdStore),
    ("--policy", Rewrite::File),
    ("--data-dir", Rewrite::File),
    ("--grace-ms", Rewrite::Keep),
    ("--log-format", Rewrite::Keep),
    ("--default-ttl-ms", Rewrite::Keep),
    ("--max-in-flight", Rewrite::Keep),
    ("--public-metrics", Rewrite::Keep),
    ("--admin-allowed-hosts", Rewrite::Keep),
    ("--mcp-allowed-hosts", Rewrite::Keep),
    ("--mcp-allowed-origins", Rewrite::Keep),
];

/// The flags of etcd the manifests may pass.
const ETCD_FLAGS: [(&str, Rewrite); 12] = [
    ("--name", Rewrite::Keep),
    ("--data-dir", Rewrite::File),
    ("--listen-client-urls", Rewrite::ListenUrls),
    ("--listen-peer-urls", Rewrite::ListenUrls),
    ("--listen-metrics-urls", Rewrite::ListenUrls),
    ("--advertise-client-urls", Rewrite::OwnUrls),
    ("--initial-advertise-peer-urls", Rewrite::OwnUrls),
    ("--initial-cluster", Rewrite::Members),
    ("--initial-cluster-state", Rewrite::Keep),
    ("--initial-cluster-token", Rewrite::Keep),
    ("--auto-compaction-mode", Rewrite::Keep),
    ("--auto-compaction-retention", Rewrite::Keep),
];

/// The variables the manifests may set, and how each is moved.
const ENV: [(&str, Rewrite); 16] = [
    ("POD_IP", Rewrite::Keep),
    ("POD_NAME", Rewrite::Keep),
    ("POD_NAMESPACE", Rewrite::Keep),
    ("TOOLMESH_TOKEN", Rewrite::Keep),
    ("TOOLMESH_REGISTRY_TOKEN", Rewrite::Keep),
    ("TOOLMESH_TOKEN_FILE", Rewrite::File),
    ("TOOLMESH_REGISTRY_TOKEN_FILE", Rewrite::File),
    ("TOOLMESH_TLS_CA", Rewrite::File),
    ("TOOLMESH_TLS_CERT", Rewrite::File),
    ("TOOLMESH_TLS_KEY", Rewrite::File),
    ("TOOLMESH_TLS_CLIENT_CA", Rewrite::File),
    ("TOOLMESH_ETCD_CA", Rewrite::File),
    ("TOOLMESH_ETCD_CERT", Rewrite::File),
    ("TOOLMESH_ETCD_KEY", Rewrite::File),
    ("TOOLMESH_ETCD_USER", Rewrite::Keep),
    ("TOOLMESH_ETCD_PASSWORD_FILE", Rewrite::File),
];

/// Which program an image runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Program {
    Toolmesh,
    Etcd,
}

/// `$(VAR)` references in `text` expanded as the kubelet does: `$$` is `$`,
/// a reference to a variable not defined is left as it is.
pub(crate) fn expand(text: &str, vars: &[(String, String)]) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        if let Some(tail) = after.strip_prefix('$') {
            out.push('$');
            rest = tail;
        } else if let Some((var, tail)) = after
            .strip_prefix('(')
            .and_then(|inner| inner.split_once(')'))
        {
            match vars.iter().rev().find(|(name, _)| name == var) {
                Some((_, value)) => out.push_str(value),
                None => out.push_str(&format!("$({var})")),
            }
            rest = tail;
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

/// The program an image runs.
pub(super) fn program(image: &str) -> Program {
    let without_digest = image.split('@').next().unwrap_or_default();
    let last = without_digest.rsplit('/').next().unwrap_or_default();
    match last.split(':').next() {
        Some("toolmesh") => Program::Toolmesh,
        Some("etcd") => Program::Etcd,
        _ => panic!("image {image}: the runner knows the toolmesh and etcd images only"),
    }
}

/// Splits `--flag=value` (or a bare `--flag`).
fn split_flag(arg: &str) -> (&str, Option<&str>) {
    match arg.split_once('=') {
        Some((flag, value)) => (flag, Some(value)),
        None => (arg, None),
    }
}

impl Cluster {
    /// The directory of volume `volume` of `pod`.
    fn volume_dir(&self, pod: usize, volume: &str) -> PathBuf {
        self.dir.join(&self.pods[pod].name).join(volume)
    }

    /// Makes the volumes of `pod` (files of ConfigMaps and Secrets, empty
    /// directories for the rest), keeping what a directory already holds.
    pub(super) fn make_volumes(&self, pod: usize) {
        let workload = self.workload(pod);
        let spec = &workload["spec"]["template"]["spec"];
        for volume in spec["volumes"].as_array().into_iter().flatten() {
            let volume_name = volume["name"].as_str().expect("volume name");
            let dir = self.volume_dir(pod, volume_name);
            std::fs::create_dir_all(&dir).unwrap();
            let files: BTreeMap<String, Vec<u8>> = if let Some(config) = volume.get("configMap") {
                self.config_map_files(pod, config)
            } else if let Some(secret) = volume.get("secret") {
                self.secret_files(secret, volume_name)
            } else if let Some(projected) = volume.get("projected") {
                self.projected_files(pod, projected)
            } else if volume.get("emptyDir").is_some()
                || volume.get("persistentVolumeClaim").is_some()
            {
                BTreeMap::new()
            } else {
                panic!(
                    "volume {volume}: the runner knows configMap, secret, projected, emptyDir and persistentVolumeClaim volumes"
                )
            };
            for (file, content) in files {
                std::fs::write(dir.join(file), content).unwrap();
            }
        }
        for template in workload["spec"]["volumeClaimTemplates"]
            .as_array()
            .into_iter()
            .flatten()
        {
            let claim = template["metadata"]["name"].as_str().expect("claim name");
            std::fs::create_dir_all(self.volume_dir(pod, claim)).unwrap();
        }
    }

    /// The files of a ConfigMap volume (or projected source). ConfigMaps
    /// the cluster makes itself (`kube-root-ca.crt`) come from the control
    /// plane. Paths inside the pod's volumes and the API server's name in
    /// the files' text are carried over as in arguments: a policy naming a
    /// mounted file, or `https://kubernetes.default.svc`, works here.
    fn config_map_files(&self, pod: usize, config: &Value) -> BTreeMap<String, Vec<u8>> {
        let map_name = config["name"].as_str().expect("configMap name");
        if map_name == "kube-root-ca.crt" {
            let plane = self
                .control_plane
                .as_ref()
                .expect("kube-root-ca.crt is mounted: run the cluster with a control plane");
            let data = BTreeMap::from([("ca.crt".to_owned(), plane.ca_pem.clone().into_bytes())]);
            return Self::projected(&config["items"], data, map_name);
        }
        let map = kind(&self.objects, "ConfigMap")
            .find(|c| name(c) == map_name)
            .unwrap_or_else(|| panic!("no ConfigMap {map_name}"));
        let mounts = self.pod_mounts(pod);
        let data = map["data"].as_object().into_iter().flatten();
        let data = data
            .map(|(k, v)| {
                let mut text = v.as_str().unwrap_or_default().to_owned();
                for (mount, dir) in &mounts {
                    text = text.replace(&format!("{mount}/"), &format!("{}/", dir.display()));
                }
                if let Some(plane) = &self.control_plane {
                    text = text.replace(
                        "https://kubernetes.default.svc/",
                        &format!("{}/", plane.issuer),
                    );
                }
                (k.clone(), text.into_bytes())
            })
            .collect();
        Self::projected(&config["items"], data, map_name)
    }

    /// The files of a Secret volume (or projected source).
    fn secret_files(&self, secret: &Value, volume_name: &str) -> BTreeMap<String, Vec<u8>> {
        let secret_name = secret["secretName"]
            .as_str()
            .or(secret["name"].as_str())
            .expect("secretName");
        let data = self
            .secrets
            .get(secret_name)
            .unwrap_or_else(|| panic!("no Secret {secret_name} for {volume_name}"))
            .clone();
        Self::projected(&secret["items"], data, secret_name)
    }

    /// The files of a projected volume: its ConfigMaps and Secrets, and the
    /// service-account tokens the kubelet mints for the pod's account.
    fn projected_files(&self, pod: usize, projected: &Value) -> BTreeMap<String, Vec<u8>> {
        let mut files = BTreeMap::new();
        for source in projected["sources"].as_array().into_iter().flatten() {
            if let Some(config) = source.get("configMap") {
                files.extend(self.config_map_files(pod, config));
            } else if let Some(secret) = source.get("secret") {
                files.extend(self.secret_files(secret, "a projected volume"));
            } else if let Some(token) = source.get("serviceAccountToken") {
                let plane = self.control_plane.as_ref().expect(
                    "a serviceAccountToken is projected: run the cluster with a control plane",
                );
                let spec = &self.workload(pod)["spec"]["template"]["spec"];
                let account = spec["serviceAccountName"].as_str().unwrap_or("default");
                let ttl = token["expirationSeconds"].as_u64().unwrap_or(3600);
                let minted = plane.projected_token(
                    &self.namespace,
                    account,
                    token["audience"].as_str(),
                    std::time::Duration::from_secs(ttl),
                );
                let path = token["path"].as_str().expect("serviceAccountToken path");
                files.insert(path.to_owned(), minted.into_bytes());
            } else {
                panic!(
                    "projected source {source}: the runner knows configMap, secret and serviceAccountToken"
                );
            }
        }
        files
    }

    /// The mounts of every container of `pod`.
    fn pod_mounts(&self, pod: usize) -> Vec<(String, PathBuf)> {
        self.containers(pod)
            .iter()
            .flat_map(|c| self.mounts(pod, c))
            .collect()
    }

    /// The files of a ConfigMap or Secret volume: every key, or `items`.
    fn projected(
        items: &Value,
        data: BTreeMap<String, Vec<u8>>,
        what: &str,
    ) -> BTreeMap<String, Vec<u8>> {
        match items.as_array() {
            None => data,
            Some(items) => items
                .iter()
                .map(|item| {
                    let key = item["key"].as_str().expect("item key");
                    let content = data
                        .get(key)
                        .unwrap_or_else(|| panic!("{what} has no key {key}"))
                        .clone();
                    (
                        item["path"].as_str().expect("item path").to_owned(),
                        content,
                    )
                })
                .collect(),
        }
    }

    /// The container's mounts: (mount path, directory here).
    fn mounts(&self, pod: usize, container: &Value) -> Vec<(String, PathBuf)> {
        container["volumeMounts"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|m| {
                assert!(m["subPath"].is_null(), "subPath mounts are not run: {m}");
                (
                    m["mountPath"].as_str().expect("mountPath").to_owned(),
                    self.volume_dir(pod, m["name"].as_str().expect("mount name")),
                )
            })
            .collect()
    }

    /// The Service link variables the kubelet gives every container whose
    /// pod does not turn them off (`enableServiceLinks`).
    fn service_links(&self, pod: usize) -> Vec<(String, String)> {
        if self.workload(pod)["spec"]["template"]["spec"]["enableServiceLinks"] == false {
            return Vec::new();
        }
        let mut vars = Vec::new();
        for service in self.services.iter().filter(|s| !s.headless) {
            let prefix = name(&self.objects[service.object])
                .to_uppercase()
                .replace('-', "_");
            for (i, port) in service.ports.iter().enumerate() {
                let proxy = port.proxy.as_ref().expect("a ClusterIP proxy").port;
                let url = format!("tcp://{POD_IP}:{proxy}");
                if i == 0 {
                    vars.push((format!("{prefix}_SERVICE_HOST"), POD_IP.to_owned()));
                    vars.push((format!("{prefix}_SERVICE_PORT"), proxy.to_string()));
                    vars.push((format!("{prefix}_PORT"), url.clone()));
                }
                if !port.name.is_empty() {
                    let named = port.name.to_uppercase().replace('-', "_");
                    vars.push((format!("{prefix}_SERVICE_PORT_{named}"), proxy.to_string()));
                }
                let base = format!("{prefix}_PORT_{proxy}_TCP");
                vars.push((format!("{base}_PROTO"), "tcp".to_owned()));
                vars.push((format!("{base}_PORT"), proxy.to_string()));
                vars.push((format!("{base}_ADDR"), POD_IP.to_owned()));
                vars.push((base, url));
            }
        }
        vars
    }

    /// A container's variables as the container sees them (the links first,
    /// then its own `env` in order, each expanded against those before it).
    fn container_env(&self, pod: usize, container: &Value) -> Vec<(String, String)> {
        assert!(
            container["envFrom"].is_null(),
            "envFrom is not run: {}",
            container["name"]
        );
        let mut vars = self.service_links(pod);
        for env in container["env"].as_array().into_iter().flatten() {
            let var = env["name"].as_str().expect("env name").to_owned();
            let value = if let Some(value) = env["value"].as_str() {
                expand(value, &vars)
            } else if let Some(secret) = env["valueFrom"].get("secretKeyRef") {
                let (secret_name, key) = (
                    secret["name"].as_str().expect("secret name"),
                    secret["key"].as_str().expect("secret key"),
                );
                let bytes = self
                    .secrets
                    .get(secret_name)
                    .and_then(|s| s.get(key))
                    .unwrap_or_else(|| {
                        panic!(
                            "{var}: Secret {secret_name} has no key {key} (the pod would not start)"
                        )
                    });
                String::from_utf8(bytes.clone()).expect("a UTF-8 secret")
            } else if let Some(field) = env["valueFrom"].get("fieldRef") {
                match field["fieldPath"].as_str() {
                    Some("status.podIP") => POD_IP.to_owned(),
                    Some("metadata.name") => self.pods[pod].name.clone(),
                    Some("metadata.namespace") => self.namespace.clone(),
                    other => panic!("{var}: fieldRef {other:?} is not run"),
                }
            } else if env["valueFrom"].is_null() {
                String::new()
            } else {
                panic!("{var}: valueFrom {} is not run", env["valueFrom"])
            };
            vars.push((var, value));
        }
        vars
    }

    /// `value` of `pod` carried over to loopback as `rewrite` says; `mounts`
    /// give the paths of its volumes.
    fn rewrite(
        &self,
        pod: usize,
        mounts: &[(String, PathBuf)],
        rewrite: Rewrite,
        value: &str,
    ) -> String {
        let own = |address: &str| -> String {
            let (host, port) = host_port(address);
            let ours =
                host == POD_IP || matches!(self.lookup(host), Some(Endpoint::Pod(p)) if p == pod);
            assert!(
                ours,
                "{address} is not an address of {}",
                self.pods[pod].name
            );
            format!("{POD_IP}:{}", self.loopback(pod, port))
        };
        let listen = |address: &str| -> String {
            let (host, port) = host_port(address);
            assert!(
                matches!(host, "0.0.0.0" | "::" | POD_IP),
                "{address}: a pod listens on a wildcard or its own IP"
            );
            format!("{POD_IP}:{}", self.loopback(pod, port))
        };
        let url = |text: &str, f: &dyn Fn(&str) -> String| -> String {
            let address = text
                .strip_prefix("http://")
                .unwrap_or_else(|| panic!("{text}: the runner knows plaintext http:// URLs"));
            format!("http://{}", f(address))
        };
        let list = |text: &str, f: &dyn Fn(&str) -> String| -> String {
            text.split(',').map(f).collect::<Vec<_>>().join(",")
        };
        let dial = |address: &str| self.dial(Some(pod), address);
        match rewrite {
            Rewrite::Keep => value.to_owned(),
            Rewrite::Listen => listen(value),
            Rewrite::Own => own(value),
            Rewrite::Dial => list(value, &dial),
            Rewrite::EtcdStore => {
                let members = value
                    .strip_prefix("etcd://")
                    .unwrap_or_else(|| panic!("--store={value}: etcd://… expected"));
                format!("etcd://{}", list(members, &dial))
            }
            Rewrite::File => {
                let (mount, dir) = mounts
                    .iter()
                    .filter(|(mount, _)| value.starts_with(mount.as_str()))
                    .max_by_key(|(mount, _)| mount.len())
                    .unwrap_or_else(|| {
                        panic!("{value}: not in a volume of {}", self.pods[pod].name)
                    });
                let inner = value[mount.len()..].trim_start_matches('/');
                dir.join(inner).to_str().expect("a UTF-8 path").to_owned()
            }
            Rewrite::ListenUrls => list(value, &|u| url(u, &listen)),
            Rewrite::OwnUrls => list(value, &|u| url(u, &own)),
            Rewrite::Members => list(value, &|member| {
                let (member_name, member_url) = member
                    .split_once('=')
                    .unwrap_or_else(|| panic!("{member}: NAME=URL expected"));
                format!("{member_name}={}", url(member_url, &dial))
            }),
        }
    }

    /// The command of `container` of `pod`, carried over to loopback.
    pub(super) fn command(&self, pod: usize, container: &Value) -> std::process::Command {
        let image = container["image"].as_str().expect("image");
        let program = program(image);
        let vars = self.container_env(pod, container);
        let mounts = self.mounts(pod, container);
        let expand_all = |v: &Value| -> Vec<String> {
            v.as_array()
                .into_iter()
                .flatten()
                .map(|a| expand(a.as_str().expect("a string"), &vars))
                .collect()
        };
        let command = expand_all(&container["command"]);
        let (binary, flags): (PathBuf, &[(&str, Rewrite)]) = match program {
            Program::Toolmesh => {
                assert!(
                    command.is_empty(),
                    "{}: the toolmesh image's entrypoint is `toolmesh`; give args, not command",
                    self.pods[pod].name
                );
                (toolmesh_testkit::toolmesh_bin(), &TOOLMESH_FLAGS)
            }
            Program::Etcd => {
                assert!(
                    command.len() == 1 && command[0].rsplit('/').next() == Some("etcd"),
                    "{}: the etcd image runs etcd: {command:?}",
                    self.pods[pod].name
                );
                let etcd = toolmesh_procs::etcd_binary()
                    .unwrap_or_else(|e| panic!("{e} (scripts/prepare/etcd.sh installs it)"));
                (etcd, &ETCD_FLAGS)
            }
        };
        let mut args = Vec::new();
        for arg in expand_all(&container["args"]) {
            if !arg.starts_with('-') {
                args.push(arg);
                continue;
            }
            let (flag, value) = split_flag(&arg);
            let rewrite = flags
                .iter()
                .find(|(known, _)| *known == flag)
                .map(|(_, r)| *r)
                .unwrap_or_else(|| {
                    panic!(
                        "{}: the runner does not know how to run {flag}; add it to its rewrite table",
                        self.pods[pod].name
                    )
                });
            args.push(match value {
                Some(value) => format!("{flag}={}", self.rewrite(pod, &mounts, rewrite, value)),
                None => flag.to_owned(),
            });
        }
        let links = self.service_links(pod);
        let mut process = std::process::Command::new(binary);
        process.args(args).env_clear().env("PATH", IMAGE_PATH);
        for (var, value) in &vars {
            let rewrite = if links.iter().any(|(l, _)| l == var) {
                Rewrite::Keep
            } else {
                ENV.iter()
                    .find(|(known, _)| known == var)
                    .map(|(_, r)| *r)
                    .unwrap_or_else(|| {
                        panic!(
                            "{}: the runner does not know how to carry {var} over; add it to its rewrite table",
                            self.pods[pod].name
                        )
                    })
            };
            process.env(var, self.rewrite(pod, &mounts, rewrite, value));
        }
        process
    }
}
