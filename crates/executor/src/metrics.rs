//! The executor SDK's Prometheus metrics: executions, durations, calls in
//! flight, cancellations and panics, with each tool's handles resolved
//! once, when the tool is added (at start, or when the set is replaced).

use arc_swap::ArcSwap;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use std::collections::BTreeMap;
use std::sync::Arc;
use toolmesh::ErrorCodeExt;
use toolmesh::pb::ErrorCode;
use toolmesh_telemetry::metrics::duration_histogram;
use toolmesh_telemetry::{MetricsRegistry, ToolLabels};

/// Labels of the executions counter.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ExecutionLabels {
    tool: String,
    version: String,
    code: &'static str,
}

/// One tool's handles, resolved at start: its duration histogram and its
/// `OK` counter (the common outcome costs no label lookup per execution).
struct ToolHandles {
    labels: ToolLabels,
    duration: Histogram,
    ok: Counter,
}

/// Every executor metric.
pub(crate) struct Metrics {
    executions: Family<ExecutionLabels, Counter>,
    durations: Family<ToolLabels, Histogram>,
    /// Handles by tool name; replaced whole when tools are added.
    tools: ArcSwap<BTreeMap<String, Arc<ToolHandles>>>,
    pub(crate) in_flight: Gauge,
    pub(crate) cancellations: Counter,
    pub(crate) panics: Counter,
}

impl Metrics {
    /// Registers the metrics of an executor serving `tools` (name, version).
    pub(crate) fn new<'a>(
        registry: &MetricsRegistry,
        tools: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> Metrics {
        let metrics = Metrics {
            executions: Family::default(),
            durations: Family::new_with_constructor(duration_histogram),
            tools: ArcSwap::default(),
            in_flight: Gauge::default(),
            cancellations: Counter::default(),
            panics: Counter::default(),
        };
        metrics.track(tools);
        let r = registry;
        r.register(
            "executor_executions",
            "Executions by tool, version and outcome code.",
            metrics.executions.clone(),
        );
        r.register(
            "executor_execution_duration_seconds",
            "Execution duration.",
            metrics.durations.clone(),
        );
        r.register(
            "executor_in_flight",
            "Executions in flight.",
            metrics.in_flight.clone(),
        );
        r.register(
            "executor_cancellations",
            "Executions cancelled (deadline passed or caller gone).",
            metrics.cancellations.clone(),
        );
        r.register(
            "executor_panics",
            "Executions whose tool panicked.",
            metrics.panics.clone(),
        );
        metrics
    }

    /// Resolves the handles of `tools` (name, version) not tracked yet, so
    /// their executions are counted from the first. Names and versions
    /// already tracked keep their handles.
    pub(crate) fn track<'a>(&self, tools: impl IntoIterator<Item = (&'a str, &'a str)>) {
        let tools: Vec<(&str, &str)> = tools.into_iter().collect();
        self.tools.rcu(|current| {
            let mut next = (**current).clone();
            for &(tool, version) in &tools {
                if next
                    .get(tool)
                    .is_some_and(|handles| handles.labels.version == version)
                {
                    continue;
                }
                let labels = ToolLabels {
                    tool: tool.to_owned(),
                    version: version.to_owned(),
                };
                let handles = ToolHandles {
                    duration: self.durations.get_or_create_owned(&labels),
                    ok: self
                        .executions
                        .get_or_create_owned(&execution_labels(&labels, "OK")),
                    labels,
                };
                next.insert(tool.to_owned(), Arc::new(handles));
            }
            next
        });
    }

    /// Counts a finished execution of `tool` (unknown names are not labels).
    pub(crate) fn executed(&self, tool: &str, code: ErrorCode, seconds: f64) {
        let tools = self.tools.load();
        let Some(handles) = tools.get(tool) else {
            return;
        };
        handles.duration.observe(seconds);
        match code {
            ErrorCode::Unspecified => {
                handles.ok.inc();
            }
            other => {
                let labels = execution_labels(&handles.labels, other.short_name());
                self.executions.get_or_create(&labels).inc();
            }
        }
    }
}

/// The executions counter's labels for `tool` and outcome `code`.
fn execution_labels(tool: &ToolLabels, code: &'static str) -> ExecutionLabels {
    ExecutionLabels {
        tool: tool.tool.clone(),
        version: tool.version.clone(),
        code,
    }
}
