//! What rendered NetworkPolicies let through: whether a connection from a
//! pod (or from outside the release: agents, kubelet probes, Prometheus) to
//! a port of another pod is admitted, by the Kubernetes rules for ingress.

use crate::render::{container_port, containers, kind, label_selector_matches, pod_labels};
use serde_json::Value;

/// Whether a connection from `source` (the labels of a pod in the same
/// namespace; None for anything else) to the port numbered `port` of a pod
/// of `target` (a workload) is admitted by `objects`' NetworkPolicies: a
/// pod no Ingress policy selects admits everything; otherwise some rule of
/// a policy selecting it must admit the source and the port.
pub fn admits(objects: &[Value], source: Option<&Value>, target: &Value, port: u64) -> bool {
    let labels = pod_labels(target);
    let policies: Vec<&Value> = kind(objects, "NetworkPolicy")
        .filter(|p| label_selector_matches(&p["spec"]["podSelector"], labels))
        .filter(|p| {
            let types = p["spec"]["policyTypes"].as_array();
            types.is_none_or(|t| t.iter().any(|t| t == "Ingress"))
        })
        .collect();
    if policies.is_empty() {
        return true;
    }
    policies.iter().any(|policy| {
        policy["spec"]["ingress"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|rule| rule_admits(rule, source, containers(target), port))
    })
}

/// Whether one ingress rule admits `source` on `port` of a pod with `containers`.
fn rule_admits(rule: &Value, source: Option<&Value>, containers: &[Value], port: u64) -> bool {
    let port_ok = match rule["ports"].as_array() {
        None => true,
        Some(ports) if ports.is_empty() => true,
        Some(ports) => ports.iter().any(|p| {
            assert!(
                p["protocol"].is_null() || p["protocol"] == "TCP",
                "a NetworkPolicy port of a protocol no check knows: {p}"
            );
            assert!(p["endPort"].is_null(), "port ranges are not checked: {p}");
            container_port(containers, &p["port"]) == Some(port)
        }),
    };
    let from_ok = match rule["from"].as_array() {
        None => true,
        Some(peers) if peers.is_empty() => true,
        Some(peers) => peers.iter().any(|peer| {
            assert!(
                peer["namespaceSelector"].is_null() && peer["ipBlock"].is_null(),
                "a NetworkPolicy peer other than a pod of this namespace: {peer} (the checks know podSelector only)"
            );
            source.is_some_and(|labels| label_selector_matches(&peer["podSelector"], labels))
        }),
    };
    port_ok && from_ok
}
