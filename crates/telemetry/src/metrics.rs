//! One Prometheus registry per process, shared by the servers in it.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Metric, Registry};
use std::sync::{Arc, Mutex, PoisonError};

/// Duration buckets in seconds, from 100 µs to 5 min (tool calls range
/// from a cache lookup to a long report).
pub const DURATION_BUCKETS: [f64; 20] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    5.0, 10.0, 30.0, 60.0, 120.0, 300.0,
];

/// A histogram of durations in seconds with [`DURATION_BUCKETS`].
pub fn duration_histogram() -> Histogram {
    Histogram::new(DURATION_BUCKETS)
}

/// The only labels a per-tool metric carries: cardinality stays bounded by
/// the tools registered, never by calls or callers.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ToolLabels {
    /// Tool name.
    pub tool: String,
    /// Tool version.
    pub version: String,
}

/// The process' metrics: cheap to clone; every clone registers into and
/// encodes the same registry. Metrics are registered once at start, never
/// on the call path.
#[derive(Clone, Default)]
pub struct MetricsRegistry {
    inner: Arc<Mutex<Registry>>,
}

impl std::fmt::Debug for MetricsRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MetricsRegistry")
    }
}

/// Two handles are equal when they share one registry.
impl PartialEq for MetricsRegistry {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }
}

impl Eq for MetricsRegistry {}

impl MetricsRegistry {
    /// Registers `metric` under `toolmesh_<name>` (a counter gets `_total`
    /// appended by the encoder: never end `name` with it).
    pub fn register(&self, name: &str, help: &str, metric: impl Metric) {
        self.with(|r| r.register(format!("toolmesh_{name}"), help, metric));
    }

    /// Registers a collector whose values are computed at scrape time.
    pub fn register_collector(&self, collector: impl Collector) {
        self.with(|r| r.register_collector(Box::new(collector)));
    }

    /// The OpenMetrics text exposition of every registered metric.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = self.with(|r| prometheus_client::encoding::text::encode(&mut out, r));
        out
    }

    fn with<T>(&self, f: impl FnOnce(&mut Registry) -> T) -> T {
        f(&mut self.inner.lock().unwrap_or_else(PoisonError::into_inner))
    }
}
