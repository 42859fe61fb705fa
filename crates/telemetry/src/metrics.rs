//! One Prometheus registry per process, shared by the servers in it.

use crate::exposition::Exposition;
use crate::process::ProcessCollector;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::metrics::info::Info;
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

/// The labels of `toolmesh_build_info`: what runs, and as what.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BuildLabels {
    /// The toolmesh release.
    version: &'static str,
    /// What the process serves: `registry`, `dispatcher`,
    /// `registry+dispatcher` or `executor`.
    role: String,
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
    /// The registry of a process serving as `role`: with the `process_*`
    /// metrics (on Linux) and `toolmesh_build_info{version, role}`.
    pub fn for_process(role: &str) -> MetricsRegistry {
        let metrics = MetricsRegistry::default();
        metrics.register_collector(ProcessCollector);
        metrics.register(
            "build",
            "The toolmesh release this process runs and its role; always 1.",
            Info::new(BuildLabels {
                version: env!("CARGO_PKG_VERSION"),
                role: role.to_owned(),
            }),
        );
        metrics
    }

    /// Registers `metric` under `toolmesh_<name>` (a counter gets `_total`
    /// appended by the encoder, an info `_info`: never end `name` with
    /// them). `help` is one sentence; its final period is the encoder's.
    pub fn register(&self, name: &str, help: &str, metric: impl Metric) {
        let help = help.strip_suffix('.').unwrap_or(help);
        self.with(|r| r.register(format!("toolmesh_{name}"), help, metric));
    }

    /// Registers a collector whose values are computed at scrape time.
    pub fn register_collector(&self, collector: impl Collector) {
        self.with(|r| r.register_collector(Box::new(collector)));
    }

    /// The OpenMetrics text exposition of every registered metric.
    pub fn encode(&self) -> String {
        self.encode_as(Exposition::OpenMetrics)
    }

    /// Every registered metric in `format`.
    pub fn encode_as(&self, format: Exposition) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = self.with(|r| match format {
            Exposition::OpenMetrics => prometheus_client::encoding::text::encode(&mut out, r),
            Exposition::PrometheusText => {
                prometheus_client::encoding::prometheus_text::encode(&mut out, r)
            }
        });
        out
    }

    fn with<T>(&self, f: impl FnOnce(&mut Registry) -> T) -> T {
        f(&mut self.inner.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus_client::metrics::counter::Counter;

    /// A process' registry in both formats: one HELP per family, each
    /// ending in one period; `_total` samples; `# EOF` and `# UNIT`-free
    /// info only in OpenMetrics, a gauge `_info` in the text format.
    #[test]
    fn both_formats_carry_help_and_build_info() {
        let metrics = MetricsRegistry::for_process("dispatcher");
        let calls = Counter::<u64>::default();
        metrics.register("demo_calls", "Calls made.", calls.clone());
        calls.inc();
        let version = env!("CARGO_PKG_VERSION");
        let text = metrics.encode_as(Exposition::PrometheusText);
        assert!(
            text.contains("# HELP toolmesh_demo_calls_total Calls made.\n"),
            "{text}"
        );
        assert!(
            text.contains("# TYPE toolmesh_demo_calls_total counter\n"),
            "{text}"
        );
        assert!(text.contains("toolmesh_demo_calls_total 1\n"), "{text}");
        assert!(
            text.contains("# TYPE toolmesh_build_info gauge\n"),
            "{text}"
        );
        let build = format!("toolmesh_build_info{{version=\"{version}\",role=\"dispatcher\"}} 1\n");
        assert!(text.contains(&build), "{text}");
        assert!(!text.contains("# EOF"), "{text}");
        let open = metrics.encode();
        assert!(open.ends_with("# EOF\n"), "{open}");
        assert!(open.contains("# TYPE toolmesh_build info\n"), "{open}");
        assert!(open.contains(&build), "{open}");
        for exposition in [text, open] {
            let helps: Vec<&str> = exposition
                .lines()
                .filter(|l| l.starts_with("# HELP "))
                .collect();
            let types = exposition
                .lines()
                .filter(|l| l.starts_with("# TYPE "))
                .count();
            assert_eq!(helps.len(), types, "{exposition}");
            for help in helps {
                assert!(help.ends_with('.') && !help.ends_with(".."), "{help}");
            }
        }
    }

    /// On Linux the process' figures are there, in both formats.
    #[cfg(target_os = "linux")]
    #[test]
    fn process_metrics_are_exported() {
        let metrics = MetricsRegistry::for_process("executor");
        for format in [Exposition::PrometheusText, Exposition::OpenMetrics] {
            let text = metrics.encode_as(format);
            for name in [
                "process_cpu_seconds_total ",
                "process_resident_memory_bytes ",
                "process_virtual_memory_bytes ",
                "process_open_fds ",
                "process_max_fds ",
                "process_start_time_seconds ",
            ] {
                assert!(
                    text.lines().any(|l| l.starts_with(name)),
                    "{name} in {text}"
                );
            }
        }
    }
}
