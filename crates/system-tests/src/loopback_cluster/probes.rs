//! Probes as the kubelet runs them (gRPC health, HTTP GET, TCP), and
//! waiting for a pod to turn ready.

use super::{Cluster, POD_IP};
use crate::render::container_port;
use serde_json::Value;
use std::time::{Duration, Instant};
use tokio::net::TcpStream;

/// Log lines after which waiting for readiness cannot help.
const HOPELESS: [&str; 1] = ["registry refused"];

impl Cluster {
    /// The result of one probe of `container` of `pod`, as the kubelet
    /// would read it: Ok, or why not.
    async fn probe(&self, pod: usize, probe: &Value) -> Result<(), String> {
        let timeout = toolmesh_testkit::patient(Duration::from_secs(
            probe["timeoutSeconds"].as_u64().unwrap_or(1),
        ));
        let containers = self.containers(pod);
        if let Some(grpc) = probe.get("grpc") {
            let port = grpc["port"]
                .as_u64()
                .expect("a gRPC probe's port is a number");
            let addr = format!("{POD_IP}:{}", self.loopback(pod, port));
            let service = grpc["service"].as_str().unwrap_or_default().to_owned();
            let status = tokio::time::timeout(timeout, health_check(&addr, &service))
                .await
                .map_err(|_| {
                    format!("gRPC health {service:?} on {addr}: no answer in {timeout:?}")
                })??;
            let serving = tonic_health::pb::health_check_response::ServingStatus::Serving as i32;
            return (status == serving)
                .then_some(())
                .ok_or_else(|| format!("gRPC health {service:?} on {addr}: status {status}"));
        }
        if let Some(get) = probe.get("httpGet") {
            assert!(
                get["scheme"].is_null() || get["scheme"] == "HTTP",
                "an httpGet probe over {}",
                get["scheme"]
            );
            let port = container_port(containers, &get["port"]).expect("the probe's port");
            let addr = format!("{POD_IP}:{}", self.loopback(pod, port));
            let path = get["path"].as_str().unwrap_or("/").to_owned();
            let (status, body) = http(&addr, "GET", &path, &[], "").await?;
            return (200..400)
                .contains(&status)
                .then_some(())
                .ok_or_else(|| format!("GET {path} on {addr}: {status} {body}"));
        }
        if let Some(tcp) = probe.get("tcpSocket") {
            let port = container_port(containers, &tcp["port"]).expect("the probe's port");
            let addr = format!("{POD_IP}:{}", self.loopback(pod, port));
            return TcpStream::connect(&addr)
                .await
                .map(drop)
                .map_err(|e| format!("connect {addr}: {e}"));
        }
        panic!("probe {probe}: the runner knows grpc, httpGet and tcpSocket probes")
    }

    /// Panics if a container of `pod` exited or logged a line after which
    /// waiting cannot help.
    fn check_alive(&mut self, pod: usize) {
        let name = self.pods[pod].name.clone();
        for proc in self.running.get_mut(&pod).into_iter().flatten() {
            for needle in HOPELESS {
                if let Ok(line) = proc.wait_line(needle, Duration::ZERO) {
                    panic!("{name} will not turn ready: {line}");
                }
            }
            if let Some(status) = proc.try_exit() {
                let lines = proc.lines_read().join("\n");
                panic!("{name} exited ({status}):\n{lines}");
            }
        }
    }

    /// Waits until every container of `pod` passes its startup and
    /// readiness probes, then checks its liveness probe once.
    pub async fn wait_ready(&mut self, pod: usize) {
        let limit = toolmesh_testkit::patient(Duration::from_secs(30));
        let deadline = Instant::now() + limit;
        for c in 0..self.containers(pod).len() {
            for kind_ in ["startupProbe", "readinessProbe"] {
                let probe = self.containers(pod)[c][kind_].clone();
                if probe.is_null() {
                    continue;
                }
                loop {
                    self.check_alive(pod);
                    let result = self.probe(pod, &probe).await;
                    match result {
                        Ok(()) => break,
                        Err(why) if Instant::now() > deadline => {
                            let lines = self
                                .running
                                .get(&pod)
                                .into_iter()
                                .flatten()
                                .flat_map(|p| p.lines_read())
                                .collect::<Vec<_>>()
                                .join("\n");
                            panic!(
                                "{} not past its {kind_} after {limit:?}: {why}\n{lines}",
                                self.pods[pod].name
                            );
                        }
                        Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
                    }
                }
            }
            let liveness = self.containers(pod)[c]["livenessProbe"].clone();
            if !liveness.is_null() {
                self.probe(pod, &liveness)
                    .await
                    .unwrap_or_else(|why| panic!("{} is not live: {why}", self.pods[pod].name));
            }
        }
    }

    /// Every probe of every running pod passes now.
    pub async fn check_probes(&self) {
        for &pod in self.running.keys() {
            for container in self.containers(pod) {
                for kind_ in ["startupProbe", "readinessProbe", "livenessProbe"] {
                    if container[kind_].is_null() {
                        continue;
                    }
                    self.probe(pod, &container[kind_])
                        .await
                        .unwrap_or_else(|why| panic!("{} {kind_}: {why}", self.pods[pod].name));
                }
            }
        }
    }
}

/// The `grpc.health.v1` status of `service` at `addr`, or why there is none.
async fn health_check(addr: &str, service: &str) -> Result<i32, String> {
    let channel = toolmesh_transport::channel(addr, &toolmesh_transport::Tls::none())
        .map_err(|e| e.to_string())?;
    let request = tonic_health::pb::HealthCheckRequest {
        service: service.to_owned(),
    };
    tonic_health::pb::health_client::HealthClient::new(channel)
        .check(request)
        .await
        .map(|r| r.into_inner().status)
        .map_err(|status| format!("gRPC health {service:?} on {addr}: {status}"))
}

/// One HTTP/1.1 exchange (see [`toolmesh_testkit::try_http`]) off the
/// async runtime's threads.
pub async fn http(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> Result<(u16, String), String> {
    let (addr, method, path, body) = (
        addr.to_owned(),
        method.to_owned(),
        path.to_owned(),
        body.to_owned(),
    );
    let headers: Vec<(String, String)> = headers
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    tokio::task::spawn_blocking(move || {
        let headers: Vec<(&str, &str)> = headers
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        toolmesh_testkit::try_http(&addr, &method, &path, &headers, &body)
            .map_err(|e| e.to_string())
    })
    .await
    .expect("the HTTP exchange ran")
}
