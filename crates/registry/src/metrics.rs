//! The registry's Prometheus metrics: events counted as they happen,
//! snapshot facts (and, on etcd, whether etcd has a leader) read from the
//! store at scrape time.

use crate::published::Published;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use std::sync::Weak;
use toolmesh_telemetry::MetricsRegistry;

/// Labels of the health transitions counter.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct TransitionLabels {
    /// `healthy` or `unhealthy`.
    pub(crate) to: &'static str,
}

/// Labels of the snapshot watches counter.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct WatchLabels {
    /// `delta` (the watcher held a snapshot of this epoch and continues
    /// from it) or `full`.
    pub(crate) start: &'static str,
}

/// Every registry event metric.
#[derive(Debug, Default)]
pub(crate) struct Metrics {
    pub(crate) registrations: Counter,
    pub(crate) lease_expiries: Counter,
    pub(crate) health_transitions: Family<TransitionLabels, Counter>,
    pub(crate) flap_holds: Counter,
    pub(crate) snapshot_watches: Family<WatchLabels, Counter>,
    /// Executors whose `grpc.health.v1` this replica watches now.
    pub(crate) health_watches: Gauge,
}

impl Metrics {
    /// Registers the event counters (the store registers its scrape-time
    /// facts with [`observe`] once it is built).
    pub(crate) fn events(registry: &MetricsRegistry) -> Metrics {
        let metrics = Metrics::default();
        let r = registry;
        r.register(
            "registry_registrations",
            "Executor registrations accepted.",
            metrics.registrations.clone(),
        );
        r.register(
            "registry_lease_expiries",
            "Executor leases that expired.",
            metrics.lease_expiries.clone(),
        );
        r.register(
            "registry_health_transitions",
            "Executor health changes, by new state.",
            metrics.health_transitions.clone(),
        );
        r.register(
            "registry_flap_holds",
            "Recoveries held out of rotation because the executor flaps.",
            metrics.flap_holds.clone(),
        );
        r.register(
            "registry_health_watches",
            "Executors whose grpc.health.v1 this replica watches (each executor is watched by one replica; together the replicas watch every registered executor that has a health service).",
            metrics.health_watches.clone(),
        );
        r.register(
            "registry_snapshot_watches",
            "Snapshot watches opened (dispatchers following this replica), by how each started: from a snapshot the watcher held (delta) or from nothing (full).",
            metrics.snapshot_watches.clone(),
        );
        metrics
    }

    /// Counts a snapshot watch opened, continuing from a held snapshot
    /// (`delta`) or not.
    pub(crate) fn watch_opened(&self, delta: bool) {
        let start = if delta { "delta" } else { "full" };
        self.snapshot_watches
            .get_or_create(&WatchLabels { start })
            .inc();
    }

    /// Counts a health change to `healthy` or not.
    pub(crate) fn transition(&self, healthy: bool) {
        let to = if healthy { "healthy" } else { "unhealthy" };
        self.health_transitions
            .get_or_create(&TransitionLabels { to })
            .inc();
    }
}

/// What the scrape-time collector reads from a store.
pub(crate) trait Observed: Send + Sync + 'static {
    /// The published snapshots.
    fn published(&self) -> &Published;
    /// Whether etcd answers with a leader, for a store on etcd; `None`
    /// for a store in this process.
    fn etcd_leader(&self) -> Option<bool> {
        None
    }
}

/// Registers the scrape-time facts of `store`.
pub(crate) fn observe(registry: &MetricsRegistry, store: Weak<dyn Observed>) {
    registry.register_collector(Snapshot { store });
}

/// Labels of the per-tool instance gauge.
#[derive(Clone, Debug, EncodeLabelSet)]
struct InstanceLabels {
    tool: String,
    version: String,
    /// `healthy` or `unhealthy`.
    health: &'static str,
}

/// Scrape-time facts of the newest snapshot.
struct Snapshot {
    store: Weak<dyn Observed>,
}

impl std::fmt::Debug for Snapshot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("registry snapshot collector")
    }
}

impl Collector for Snapshot {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        let Some(observed) = self.store.upgrade() else {
            return Ok(());
        };
        let store = observed.published();
        let snapshot = store.current();
        let exposed = snapshot.entries().filter(|e| e.exposed());
        let (tools, instances) = exposed.fold((0i64, 0i64), |(t, i), e| {
            (t + 1, i + e.healthy_instances().count() as i64)
        });
        let gauges = [
            (
                "toolmesh_registry_snapshot_version",
                "Version of the newest snapshot.",
                i64::try_from(snapshot.version()).unwrap_or(i64::MAX),
            ),
            (
                "toolmesh_registry_tools_exposed",
                "Tool versions exposed (enabled, some instance healthy).",
                tools,
            ),
            (
                "toolmesh_registry_instances_exposed",
                "Healthy instances of exposed tool versions.",
                instances,
            ),
            (
                "toolmesh_registry_watchers",
                "Snapshot subscribers (WatchSnapshots streams and in-process dispatchers).",
                store.watchers() as i64,
            ),
        ];
        for (name, help, value) in gauges {
            let gauge = ConstGauge::new(value);
            let metric = encoder.encode_descriptor(name, help, None, gauge.metric_type())?;
            gauge.encode(metric)?;
        }
        let mut family = encoder.encode_descriptor(
            "toolmesh_registry_tool_instances",
            "Instances registered for each tool version known, healthy or not (both always present, 0 when none).",
            None,
            prometheus_client::metrics::MetricType::Gauge,
        )?;
        for entry in snapshot.entries() {
            let healthy = entry.healthy_instances().count();
            let counts = [
                ("healthy", healthy),
                ("unhealthy", entry.instances.len() - healthy),
            ];
            for (health, count) in counts {
                let labels = InstanceLabels {
                    tool: entry.def.name().to_owned(),
                    version: entry.def.spec().version.clone(),
                    health,
                };
                ConstGauge::new(count as i64).encode(family.encode_family(&labels)?)?;
            }
        }
        if let Some(leader) = observed.etcd_leader() {
            let gauge = ConstGauge::new(i64::from(leader));
            let metric = encoder.encode_descriptor(
                "toolmesh_registry_etcd_leader",
                "1 while etcd answers this replica with a leader (writes possible), 0 once it has failed for a few seconds.",
                None,
                gauge.metric_type(),
            )?;
            gauge.encode(metric)?;
        }
        Ok(())
    }
}
