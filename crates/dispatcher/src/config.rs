//! Dispatcher settings and their defaults (gRFC A6, Envoy and Linkerd).

use std::time::Duration;

/// Everything a dispatcher can be told.
#[derive(Debug, Clone)]
pub struct DispatcherConfig {
    /// Largest `arguments` accepted, in bytes.
    pub max_argument_bytes: usize,
    /// Calls in flight at once; the excess is shed with RESOURCE_EXHAUSTED.
    pub max_in_flight: usize,
    /// Calls in flight to one executor instance; a full instance is skipped.
    pub max_in_flight_per_instance: u32,
    /// No attempt starts with less than this left.
    pub min_attempt_budget: Duration,
    /// Retry budget: the window over which calls and retries are counted.
    pub retry_budget_window: Duration,
    /// Retry budget: retries allowed per second whatever the call volume.
    pub retry_budget_min_per_sec: u32,
    /// Retry budget: retries allowed as a fraction of calls.
    pub retry_budget_ratio: f32,
    /// Outlier ejection: consecutive failures that eject an instance.
    pub eject_after_failures: u32,
    /// Outlier ejection: first ejection time (multiplied by times ejected).
    pub base_ejection: Duration,
    /// Outlier ejection: longest ejection.
    pub max_ejection: Duration,
    /// Recent snapshots kept so callers can pin a version.
    pub snapshot_history: usize,
    /// TLS of the connections to executors (each serve thread of the node
    /// keeps its own, plaintext or TLS alike).
    pub tls: toolmesh_transport::Tls,
    /// Where the dispatcher's metrics are registered (the process' registry).
    pub metrics: toolmesh_telemetry::MetricsRegistry,
    /// Who aborts a rollout whose canary fails (the registry); without it
    /// a failing canary is only logged.
    pub rollout_control: Option<std::sync::Arc<dyn crate::RolloutControl>>,
    /// Semantic ranking of SearchTools: the embeddings endpoint, model and
    /// key; without it, search ranks lexically only.
    pub search_embeddings: Option<crate::EmbeddingsConfig>,
}

impl Default for DispatcherConfig {
    fn default() -> Self {
        DispatcherConfig {
            max_argument_bytes: 1024 * 1024,
            max_in_flight: 4096,
            max_in_flight_per_instance: 256,
            min_attempt_budget: Duration::from_millis(5),
            retry_budget_window: Duration::from_secs(10),
            retry_budget_min_per_sec: 10,
            retry_budget_ratio: 0.2,
            eject_after_failures: 5,
            base_ejection: Duration::from_secs(30),
            max_ejection: Duration::from_secs(300),
            snapshot_history: 64,
            tls: toolmesh_transport::Tls::none(),
            metrics: toolmesh_telemetry::MetricsRegistry::default(),
            rollout_control: None,
            search_embeddings: None,
        }
    }
}
