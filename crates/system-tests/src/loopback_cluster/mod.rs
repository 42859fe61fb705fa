//! Rendered manifests run on loopback as real processes, doing what a
//! kubelet, kube-proxy and cluster DNS would: every replica of every
//! Deployment and StatefulSet runs its containers' exact command, args and
//! env (`valueFrom` resolved, `$(VAR)` expanded as the kubelet does), with
//! ConfigMaps and Secrets written as files at their mount paths (moved into
//! a temporary directory), Service names (short, namespaced, FQDN, and a
//! StatefulSet pod's name under its headless Service) resolved to loopback
//! ports, each ClusterIP Service port fronted by a proxy that spreads
//! connections over the pods it selects, and each declared container port
//! moved to a free loopback port. Every argument and variable passes an
//! explicit rewrite table: one the table does not know fails the run, so a
//! chart change cannot slip past. Every connection the wiring makes must be
//! one the rendered NetworkPolicies admit. Probes are checked as the
//! kubelet checks them. The `toolmesh` image runs the `toolmesh` binary of
//! this build (its entrypoint; tests/deploy.rs checks the Dockerfile), the
//! etcd image the etcd that scripts/prepare/etcd.sh provides.

mod container;
mod control_plane;
mod outside;
mod probes;
mod proxy;

use crate::network_policy;
use crate::render::{container_port, containers, kind, name, selects};
use crate::{Proc, TempDir, TestProc};
use container::{Program, program};
use proxy::Proxy;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

pub use control_plane::ControlPlane;
pub use probes::http;

/// The IP every pod has.
pub(crate) const POD_IP: &str = "127.0.0.1";

/// One replica of a workload.
pub struct Pod {
    /// Its name: `WORKLOAD-N`, N its replica index.
    pub name: String,
    /// The index of its Deployment or StatefulSet among the objects.
    workload: usize,
    /// Its DNS subdomain: the headless Service of its StatefulSet.
    subdomain: Option<String>,
    /// Declared container port → loopback port.
    ports: BTreeMap<u64, u16>,
}

/// A Service port and the proxy in front of its pods (ClusterIP only).
struct ServicePort {
    name: String,
    port: u64,
    proxy: Option<Proxy>,
}

struct Service {
    object: usize,
    headless: bool,
    ports: Vec<ServicePort>,
}

/// Where a name points.
enum Endpoint {
    Service(usize),
    Pod(usize),
}

/// The rendered objects, running.
pub struct Cluster {
    /// The namespace the objects were rendered for.
    pub namespace: String,
    /// The rendered objects.
    pub objects: Vec<Value>,
    /// Every replica of every workload.
    pub pods: Vec<Pod>,
    services: Vec<Service>,
    secrets: BTreeMap<String, BTreeMap<String, Vec<u8>>>,
    running: BTreeMap<usize, Vec<Proc>>,
    dir: TempDir,
    /// The service-account issuer, when the manifests use workload identity.
    pub control_plane: Option<ControlPlane>,
}

/// A free loopback port for a pod to listen on: below the kernel's
/// ephemeral range (whose ports outgoing connections and port-0 listeners
/// take at any moment, so one released there may be gone when the pod
/// binds it), and never handed out twice by this process.
pub fn free_port() -> u16 {
    static NEXT: Mutex<Option<u16>> = Mutex::new(None);
    let ephemeral = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|r| r.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32768);
    let first = 10_000u16.min(ephemeral / 2);
    let span = ephemeral - first;
    let mut next = NEXT.lock().unwrap_or_else(|e| e.into_inner());
    // Processes running this at once start far apart.
    let mut port = next.unwrap_or(first + (std::process::id() % u32::from(span)) as u16);
    for _ in 0..span {
        port = if port + 1 >= ephemeral {
            first
        } else {
            port + 1
        };
        if std::net::TcpListener::bind((POD_IP, port)).is_ok() {
            *next = Some(port);
            return port;
        }
    }
    panic!("no free loopback port below {ephemeral}")
}

/// The `host:port` parts of `address`.
fn host_port(address: &str) -> (&str, u64) {
    let (host, port) = address
        .rsplit_once(':')
        .unwrap_or_else(|| panic!("{address:?} is not host:port"));
    let port = port
        .parse()
        .unwrap_or_else(|_| panic!("{address:?} has no numeric port"));
    (host.trim_start_matches('[').trim_end_matches(']'), port)
}

impl Cluster {
    /// Plans every replica of `objects` in `namespace` (nothing runs yet);
    /// `secrets` are the Secrets the user created beside the render
    /// (name → key → value).
    pub async fn new(
        namespace: &str,
        objects: Vec<Value>,
        secrets: BTreeMap<String, BTreeMap<String, String>>,
    ) -> Cluster {
        let shm = Path::new("/dev/shm");
        let dir = if shm.is_dir() {
            TempDir::new_in(shm, "cluster")
        } else {
            TempDir::new("cluster")
        }
        .expect("a directory for the pods' volumes");
        let mut all_secrets: BTreeMap<String, BTreeMap<String, Vec<u8>>> = secrets
            .into_iter()
            .map(|(name, data)| {
                let data = data.into_iter().map(|(k, v)| (k, v.into_bytes())).collect();
                (name, data)
            })
            .collect();
        for secret in kind(&objects, "Secret") {
            let mut data = BTreeMap::new();
            for (key, value) in secret["stringData"].as_object().into_iter().flatten() {
                data.insert(
                    key.clone(),
                    value.as_str().unwrap_or_default().as_bytes().to_vec(),
                );
            }
            assert!(
                secret["data"].is_null(),
                "Secret {}: base64 `data` is not read by the runner; use stringData",
                name(secret)
            );
            all_secrets.insert(name(secret).to_owned(), data);
        }
        let mut pods = Vec::new();
        for (index, workload) in objects.iter().enumerate() {
            let stateful = workload["kind"] == "StatefulSet";
            if !stateful && workload["kind"] != "Deployment" {
                continue;
            }
            let replicas = workload["spec"]["replicas"].as_u64().unwrap_or(1);
            for i in 0..replicas {
                let ports = containers(workload)
                    .iter()
                    .flat_map(|c| c["ports"].as_array().into_iter().flatten())
                    .map(|p| {
                        (
                            p["containerPort"].as_u64().expect("containerPort"),
                            free_port(),
                        )
                    })
                    .collect();
                pods.push(Pod {
                    name: format!("{}-{i}", name(workload)),
                    workload: index,
                    subdomain: stateful
                        .then(|| workload["spec"]["serviceName"].as_str().map(str::to_owned))
                        .flatten(),
                    ports,
                });
            }
        }
        let mut cluster = Cluster {
            namespace: namespace.to_owned(),
            objects,
            pods,
            services: Vec::new(),
            secrets: all_secrets,
            running: BTreeMap::new(),
            dir,
            control_plane: None,
        };
        cluster.services = cluster.plan_services().await;
        cluster
    }

    /// The Services, each ClusterIP port with its proxy listening.
    async fn plan_services(&self) -> Vec<Service> {
        let mut services = Vec::new();
        for (object, service) in self.objects.iter().enumerate() {
            if service["kind"] != "Service" {
                continue;
            }
            let headless = service["spec"]["clusterIP"] == "None";
            let selected: Vec<usize> = (0..self.pods.len())
                .filter(|&p| selects(&service["spec"]["selector"], self.labels(p)))
                .collect();
            let mut ports = Vec::new();
            for port in service["spec"]["ports"].as_array().expect("Service ports") {
                let backends: Vec<(usize, u16, AtomicUsize)> = selected
                    .iter()
                    .filter_map(|&p| {
                        let target = container_port(self.containers(p), &port["targetPort"])?;
                        Some((p, self.pods[p].ports[&target], AtomicUsize::new(0)))
                    })
                    .collect();
                let proxy = if headless {
                    None
                } else {
                    Some(Proxy::start(backends).await)
                };
                ports.push(ServicePort {
                    name: port["name"].as_str().unwrap_or_default().to_owned(),
                    port: port["port"].as_u64().expect("Service port"),
                    proxy,
                });
            }
            services.push(Service {
                object,
                headless,
                ports,
            });
        }
        services
    }

    fn workload(&self, pod: usize) -> &Value {
        &self.objects[self.pods[pod].workload]
    }

    fn labels(&self, pod: usize) -> &Value {
        &self.workload(pod)["spec"]["template"]["metadata"]["labels"]
    }

    fn containers(&self, pod: usize) -> &[Value] {
        containers(self.workload(pod))
    }

    /// The pods of the workload called `workload`.
    pub fn pods_of(&self, workload: &str) -> Vec<usize> {
        (0..self.pods.len())
            .filter(|&p| name(self.workload(p)) == workload)
            .collect()
    }

    /// The pods whose first container runs `toolmesh SUBCOMMAND`.
    pub fn pods_running(&self, subcommand: &str) -> Vec<usize> {
        (0..self.pods.len())
            .filter(|&p| {
                let c = &self.containers(p)[0];
                program(c["image"].as_str().unwrap_or_default()) == Program::Toolmesh
                    && c["args"][0] == subcommand
            })
            .collect()
    }

    /// Where container port `port` of `pod` listens on loopback.
    pub fn pod_addr(&self, pod: usize, port: &Value) -> String {
        let number = container_port(self.containers(pod), port)
            .unwrap_or_else(|| panic!("{} declares no port {port}", self.pods[pod].name));
        format!("{POD_IP}:{}", self.loopback(pod, number))
    }

    fn loopback(&self, pod: usize, port: u64) -> u16 {
        *self.pods[pod].ports.get(&port).unwrap_or_else(|| {
            panic!(
                "{} uses port {port}, which none of its containers declares",
                self.pods[pod].name
            )
        })
    }

    fn service(&self, name_: &str) -> Option<usize> {
        self.services
            .iter()
            .position(|s| name(&self.objects[s.object]) == name_)
    }

    /// What `host` names in this namespace: a Service (by its short,
    /// namespaced or full name) or a StatefulSet pod under its headless
    /// Service.
    fn lookup(&self, host: &str) -> Option<Endpoint> {
        let labels: Vec<&str> = host.split('.').collect();
        let ns = self.namespace.as_str();
        let suffixes: [&[&str]; 4] = [&[], &[ns], &[ns, "svc"], &[ns, "svc", "cluster", "local"]];
        for suffix in suffixes {
            let Some(rest) = labels
                .len()
                .checked_sub(suffix.len())
                .filter(|&n| labels[n..] == *suffix)
                .map(|n| &labels[..n])
            else {
                continue;
            };
            match rest {
                [service] => {
                    if let Some(s) = self.service(service) {
                        return Some(Endpoint::Service(s));
                    }
                }
                [pod, service] => {
                    let found = self
                        .pods
                        .iter()
                        .position(|p| p.name == *pod && p.subdomain.as_deref() == Some(*service));
                    if let (Some(p), Some(s)) = (found, self.service(service))
                        && self.services[s].headless
                    {
                        return Some(Endpoint::Pod(p));
                    }
                }
                _ => {}
            }
        }
        None
    }

    /// The loopback address for `host:port` dialled from `from` (None: from
    /// outside the namespace), which the NetworkPolicies must admit to
    /// every pod it may reach.
    pub fn dial(&self, from: Option<usize>, address: &str) -> String {
        let (host, port) = host_port(address);
        let source = from.map(|p| self.labels(p));
        match self.lookup(host) {
            Some(Endpoint::Service(s)) => {
                let service = &self.services[s];
                let what = name(&self.objects[service.object]);
                assert!(
                    !service.headless,
                    "{address}: headless Service {what} by name resolves to every pod; name one pod"
                );
                let service_port = service
                    .ports
                    .iter()
                    .find(|p| p.port == port)
                    .unwrap_or_else(|| panic!("{address}: Service {what} has no port {port}"));
                let proxy = service_port.proxy.as_ref().expect("a ClusterIP proxy");
                assert!(
                    !proxy.backends.is_empty(),
                    "{address}: Service {what} selects no pod"
                );
                for (pod, loopback, _) in proxy.backends.iter() {
                    let number = self.pods[*pod]
                        .ports
                        .iter()
                        .find(|(_, l)| *l == loopback)
                        .map(|(n, _)| *n)
                        .expect("a declared port");
                    self.check_admitted(from, source, *pod, number, address);
                }
                format!("{POD_IP}:{}", proxy.port)
            }
            Some(Endpoint::Pod(p)) => {
                if from != Some(p) {
                    self.check_admitted(from, source, p, port, address);
                }
                format!("{POD_IP}:{}", self.loopback(p, port))
            }
            None => panic!(
                "{address}: {host} is no Service or StatefulSet pod of namespace {}",
                self.namespace
            ),
        }
    }

    fn check_admitted(
        &self,
        from: Option<usize>,
        source: Option<&Value>,
        to: usize,
        port: u64,
        address: &str,
    ) {
        let who = from.map_or("outside".to_owned(), |p| self.pods[p].name.clone());
        assert!(
            network_policy::admits(&self.objects, source, self.workload(to), port),
            "{who} dials {address}, but the NetworkPolicies refuse it port {port} of {}",
            self.pods[to].name
        );
    }

    /// The address a Service port (by name) is reached on from outside.
    pub fn service_addr(&self, service: &str, port: &str) -> String {
        let s = self
            .service(service)
            .unwrap_or_else(|| panic!("no Service {service}"));
        let number = self.services[s]
            .ports
            .iter()
            .find(|p| p.name == port)
            .unwrap_or_else(|| panic!("Service {service} has no port {port}"))
            .port;
        self.dial(None, &format!("{service}:{number}"))
    }

    /// The connections open to `pod` through the Services' proxies.
    pub fn open_connections(&self, pod: usize) -> usize {
        self.services
            .iter()
            .flat_map(|s| s.ports.iter().filter_map(|p| p.proxy.as_ref()))
            .flat_map(|proxy| proxy.backends.iter())
            .filter(|(p, _, _)| *p == pod)
            .map(|(_, _, open)| open.load(Ordering::Relaxed))
            .sum()
    }

    /// The pod of `workload` with the most connections open through its
    /// Services (the one whose loss breaks the most).
    pub fn busiest(&self, workload: &str) -> usize {
        self.pods_of(workload)
            .into_iter()
            .max_by_key(|&p| self.open_connections(p))
            .unwrap_or_else(|| panic!("no pod of {workload}"))
    }

    /// Starts every container of the pods `which` selects that are not
    /// running yet.
    pub fn start(&mut self, which: impl Fn(&Pod) -> bool) {
        for pod in 0..self.pods.len() {
            if self.running.contains_key(&pod) || !which(&self.pods[pod]) {
                continue;
            }
            self.make_volumes(pod);
            let procs = self
                .containers(pod)
                .iter()
                .map(|container| {
                    let command = self.command(pod, container);
                    let label = format!("{}/{}", self.pods[pod].name, container["name"]);
                    Proc::spawn(&label, command)
                })
                .collect();
            self.running.insert(pod, procs);
        }
    }

    /// Whether `pod` runs.
    pub fn is_running(&self, pod: usize) -> bool {
        self.running.contains_key(&pod)
    }

    /// SIGKILLs the containers of `pod`.
    pub async fn kill9(&mut self, pod: usize) {
        for mut proc in self.running.remove(&pod).unwrap_or_default() {
            proc.kill_and_reap().await;
        }
    }
}
