//! What controllers outside the release read from the manifests:
//! Prometheus' ServiceMonitors and PodMonitors, an Ingress controller's rules.

use super::Cluster;
use crate::render::{kind, label_selector_matches, name, selects};

impl Cluster {
    /// Where Prometheus would scrape, as the ServiceMonitors and PodMonitors
    /// say: (monitor, target, address, path) for each endpoint of each pod.
    pub fn scrape_targets(&self) -> Vec<(String, String, String, String)> {
        let mut targets = Vec::new();
        for monitor in kind(&self.objects, "ServiceMonitor") {
            for service in &self.services {
                let object = &self.objects[service.object];
                if !label_selector_matches(
                    &monitor["spec"]["selector"],
                    &object["metadata"]["labels"],
                ) {
                    continue;
                }
                for endpoint in monitor["spec"]["endpoints"]
                    .as_array()
                    .into_iter()
                    .flatten()
                {
                    let port = endpoint["port"].as_str().expect("a named endpoint port");
                    let Some(service_port) = object["spec"]["ports"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .find(|p| p["name"] == port)
                    else {
                        continue;
                    };
                    for pod in (0..self.pods.len()).filter(|&p| {
                        self.is_running(p) && selects(&object["spec"]["selector"], self.labels(p))
                    }) {
                        targets.push((
                            name(monitor).to_owned(),
                            format!("{} {}", name(object), self.pods[pod].name),
                            self.pod_addr(pod, &service_port["targetPort"]),
                            endpoint["path"].as_str().unwrap_or("/metrics").to_owned(),
                        ));
                    }
                }
            }
        }
        for monitor in kind(&self.objects, "PodMonitor") {
            for pod in (0..self.pods.len()).filter(|&p| {
                self.is_running(p)
                    && label_selector_matches(&monitor["spec"]["selector"], self.labels(p))
            }) {
                for endpoint in monitor["spec"]["podMetricsEndpoints"]
                    .as_array()
                    .into_iter()
                    .flatten()
                {
                    targets.push((
                        name(monitor).to_owned(),
                        self.pods[pod].name.clone(),
                        self.pod_addr(pod, &endpoint["port"]),
                        endpoint["path"].as_str().unwrap_or("/metrics").to_owned(),
                    ));
                }
            }
        }
        targets
    }

    /// The address an Ingress controller would send `host` `path` to: the
    /// Service port of the rule's backend.
    pub fn ingress_backend(&self, host: &str, path: &str) -> String {
        for ingress in kind(&self.objects, "Ingress") {
            for rule in ingress["spec"]["rules"].as_array().into_iter().flatten() {
                if rule["host"] != host {
                    continue;
                }
                for candidate in rule["http"]["paths"].as_array().into_iter().flatten() {
                    let prefix = candidate["path"].as_str().unwrap_or("/");
                    if !path.starts_with(prefix) {
                        continue;
                    }
                    let backend = &candidate["backend"]["service"];
                    let service = backend["name"].as_str().expect("backend Service");
                    let port = backend["port"]["name"]
                        .as_str()
                        .expect("a named backend port");
                    return self.service_addr(service, port);
                }
            }
        }
        panic!("no Ingress serves {host}{path}")
    }
}
