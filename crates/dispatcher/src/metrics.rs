//! The dispatcher's metrics — Prometheus families registered once, and each
//! tool version's last minute for the admin page — updated on the call path
//! through handles resolved once per tool version.

use crate::endpoints::Endpoints;
use crate::recent::{Held, Recent, RecentCalls};
use crate::window::Window;
use dashmap::DashMap;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::metrics::histogram::Histogram;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use tokio::time::Instant;
use toolmesh::ErrorCodeExt;
use toolmesh::pb::ErrorCode;
use toolmesh::{Snapshot, ToolDef};
use toolmesh_telemetry::metrics::duration_histogram;
use toolmesh_telemetry::{MetricsRegistry, ToolLabels};

/// Per-tool handles kept at most for this many tool versions; past it the
/// cache starts over (handles are only a shortcut to the families).
const MAX_CACHED_TOOLS: usize = 4096;
/// Outcome codes a call can end with (index = `ErrorCode` value; 0 = OK).
const CODES: usize = 13;

/// Labels of a call counter: the tool version and how the call ended.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CallLabels {
    tool: String,
    version: String,
    code: &'static str,
}

/// Labels of the retry counter: why the attempt failed.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct RetryLabels {
    pub(crate) reason: &'static str,
}

/// Labels of the result-cache counter: how a cached tool's call used it.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CacheLabels {
    result: &'static str,
}

/// Labels of the fallback counter: the tool a stand-in answered for.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct FallbackLabels {
    tool: String,
}

/// Labels of the approvals-decided counter.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DecisionLabels {
    decision: &'static str,
}

/// Why a search ranked lexically only although embeddings are configured.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub(crate) enum EmbeddingsFallback {
    /// The query's embedding did not come within the search's wait.
    Timeout,
    /// The endpoint failed the query's embedding.
    Error,
    /// No definition is embedded yet.
    NotReady,
}

/// Labels of the embeddings-fallback counter.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct EmbeddingsFallbackLabels {
    reason: &'static str,
}

/// Every dispatcher metric.
pub(crate) struct Metrics {
    calls: Family<CallLabels, Counter>,
    durations: Family<ToolLabels, Histogram>,
    attempts: Family<ToolLabels, Counter>,
    pub(crate) retries: Family<RetryLabels, Counter>,
    pub(crate) budget_exhausted: Counter,
    pub(crate) ejections: Counter,
    pub(crate) shed: Counter,
    pub(crate) in_flight: Gauge,
    pub(crate) approvals_requested: Counter,
    approvals_decided: Family<DecisionLabels, Counter>,
    pub(crate) rate_limited: Counter,
    cache: Family<CacheLabels, Counter>,
    fallbacks: Family<FallbackLabels, Counter>,
    embeddings_fallbacks: Family<EmbeddingsFallbackLabels, Counter>,
    pub(crate) snapshot_version: Gauge,
    installed: Arc<Installed>,
    tools: DashMap<usize, (Arc<ToolDef>, Arc<ToolHandles>)>,
    /// Each tool version's last minute, for the admin page.
    recent: Recent,
}

/// A tool version's handles: no label lookup per call once resolved.
pub(crate) struct ToolHandles {
    labels: ToolLabels,
    duration: Histogram,
    attempts: Counter,
    calls: [OnceLock<Counter>; CODES],
    /// Its last minute.
    recent: Arc<Window>,
}

/// When the snapshot followed was installed (for its age).
#[derive(Debug)]
struct Installed {
    origin: Instant,
    at_ms: AtomicU64,
}

/// Scrape-time values: instances ejected now, age of the snapshot.
#[derive(Debug)]
struct Live {
    pool: Arc<Endpoints>,
    installed: Arc<Installed>,
}

impl Metrics {
    /// Registers every dispatcher metric in `registry`.
    pub(crate) fn new(registry: &MetricsRegistry, pool: Arc<Endpoints>) -> Metrics {
        let installed = Arc::new(Installed {
            origin: Instant::now(),
            at_ms: AtomicU64::new(0),
        });
        let metrics = Metrics {
            calls: Family::default(),
            durations: Family::new_with_constructor(duration_histogram),
            attempts: Family::default(),
            retries: Family::default(),
            budget_exhausted: Counter::default(),
            ejections: Counter::default(),
            shed: Counter::default(),
            in_flight: Gauge::default(),
            approvals_requested: Counter::default(),
            approvals_decided: Family::default(),
            rate_limited: Counter::default(),
            cache: Family::default(),
            fallbacks: Family::default(),
            embeddings_fallbacks: Family::default(),
            snapshot_version: Gauge::default(),
            installed: installed.clone(),
            tools: DashMap::new(),
            recent: Recent::default(),
        };
        let r = registry;
        r.register(
            "dispatcher_calls",
            "Calls by tool, version and outcome code.",
            metrics.calls.clone(),
        );
        r.register(
            "dispatcher_call_duration_seconds",
            "Call duration, from arrival to answer.",
            metrics.durations.clone(),
        );
        r.register(
            "dispatcher_attempts",
            "Attempts sent to executors.",
            metrics.attempts.clone(),
        );
        r.register(
            "dispatcher_retries",
            "Retries by the failure that caused them.",
            metrics.retries.clone(),
        );
        r.register(
            "dispatcher_retry_budget_exhausted",
            "Retries refused by the retry budget.",
            metrics.budget_exhausted.clone(),
        );
        r.register(
            "dispatcher_ejections",
            "Instances (or a tool on one) ejected by outlier detection.",
            metrics.ejections.clone(),
        );
        r.register(
            "dispatcher_shed",
            "Calls refused with RESOURCE_EXHAUSTED (over max in flight).",
            metrics.shed.clone(),
        );
        r.register(
            "dispatcher_in_flight",
            "Calls in flight.",
            metrics.in_flight.clone(),
        );
        r.register(
            "dispatcher_approvals_requested",
            "Calls answered APPROVAL_REQUIRED.",
            metrics.approvals_requested.clone(),
        );
        r.register(
            "dispatcher_approvals_decided",
            "Approvals decided, by decision.",
            metrics.approvals_decided.clone(),
        );
        r.register(
            "dispatcher_cache",
            "Calls of cached tools by how they used the result cache: hit, miss, stale or coalesced.",
            metrics.cache.clone(),
        );
        r.register(
            "dispatcher_fallbacks",
            "Calls a stand-in answered ([[fallbacks]] in the policy), by the tool called.",
            metrics.fallbacks.clone(),
        );
        r.register(
            "search_embeddings_fallbacks",
            "Searches ranked lexically only although embeddings are configured, by reason: timeout, error or not_ready.",
            metrics.embeddings_fallbacks.clone(),
        );
        r.register(
            "dispatcher_rate_limited",
            "Calls answered RATE_LIMITED.",
            metrics.rate_limited.clone(),
        );
        r.register(
            "dispatcher_snapshot_version",
            "Version of the snapshot followed.",
            metrics.snapshot_version.clone(),
        );
        r.register_collector(Live { pool, installed });
        metrics
    }

    /// Counts a search that ranked lexically only, and why.
    pub(crate) fn embeddings_fallback(&self, reason: EmbeddingsFallback) {
        let reason = match reason {
            EmbeddingsFallback::Timeout => "timeout",
            EmbeddingsFallback::Error => "error",
            EmbeddingsFallback::NotReady => "not_ready",
        };
        self.embeddings_fallbacks
            .get_or_create(&EmbeddingsFallbackLabels { reason })
            .inc();
    }

    /// The handles of `def`'s tool version.
    pub(crate) fn tool(&self, def: &Arc<ToolDef>) -> Arc<ToolHandles> {
        let key = Arc::as_ptr(def) as usize;
        if let Some(found) = self.tools.get(&key) {
            return found.1.clone();
        }
        if self.tools.len() >= MAX_CACHED_TOOLS {
            self.tools.clear();
        }
        let labels = ToolLabels {
            tool: def.name().to_owned(),
            version: def.spec().version.clone(),
        };
        let handles = Arc::new(ToolHandles {
            duration: self.durations.get_or_create_owned(&labels),
            attempts: self.attempts.get_or_create_owned(&labels),
            calls: Default::default(),
            recent: self.recent.window(&labels),
            labels,
        });
        // The def is kept alive with its handles, so its address is not reused.
        self.tools.insert(key, (def.clone(), handles.clone()));
        handles
    }

    /// Counts a finished call of `tool` (None: it never resolved to a tool).
    pub(crate) fn call(&self, tool: Option<&ToolHandles>, code: ErrorCode, seconds: f64) {
        match tool {
            Some(handles) => {
                let slot = (code as usize).min(CODES - 1);
                handles.calls[slot]
                    .get_or_init(|| {
                        self.calls.get_or_create_owned(&CallLabels {
                            tool: handles.labels.tool.clone(),
                            version: handles.labels.version.clone(),
                            code: code_label(code),
                        })
                    })
                    .inc();
                handles.duration.observe(seconds);
                self.recent.record(&handles.recent, code, seconds);
            }
            // A name no snapshot holds is not a label (unbounded).
            None => {
                self.calls
                    .get_or_create(&CallLabels {
                        tool: String::new(),
                        version: String::new(),
                        code: code_label(code),
                    })
                    .inc();
            }
        }
        match code {
            ErrorCode::ApprovalRequired => {
                self.approvals_requested.inc();
            }
            ErrorCode::RateLimited => {
                self.rate_limited.inc();
            }
            _ => {}
        }
    }

    /// Counts how a cached tool's call used the cache (`hit`, `stale`,
    /// `coalesced` or `miss`).
    pub(crate) fn cache(&self, result: &'static str) {
        self.cache.get_or_create(&CacheLabels { result }).inc();
    }

    /// Counts a call a stand-in answered for `tool`.
    pub(crate) fn fallback(&self, tool: &str) {
        self.fallbacks
            .get_or_create(&FallbackLabels {
                tool: tool.to_owned(),
            })
            .inc();
    }

    /// Counts one attempt sent.
    pub(crate) fn attempt(&self, tool: &ToolHandles) {
        tool.attempts.inc();
    }

    /// Counts an approval decided (`deny` or not).
    pub(crate) fn decided(&self, denied: bool) {
        let decision = if denied { "denied" } else { "approved" };
        self.approvals_decided
            .get_or_create(&DecisionLabels { decision })
            .inc();
    }

    /// `tool@version`'s calls over the last minute.
    pub(crate) fn recent(&self, tool: &str, version: &str) -> RecentCalls {
        self.recent.of(tool, version)
    }

    /// Forgets the figures and handles of tool versions `snapshot` no
    /// longer holds (so both stay bounded by the tools registered).
    pub(crate) fn forget_gone(&self, snapshot: &Snapshot) {
        let held = Held::of(snapshot);
        self.recent.retain(&held);
        self.tools
            .retain(|_, (_, handles)| held.holds(&handles.labels));
    }

    /// Notes that snapshot `version` is now followed.
    pub(crate) fn snapshot_installed(&self, version: u64) {
        self.snapshot_version
            .set(i64::try_from(version).unwrap_or(i64::MAX));
        let now = self.installed.origin.elapsed().as_millis() as u64;
        self.installed.at_ms.store(now, Ordering::Relaxed);
    }
}

/// The `code` label: `OK` or the short error code name.
fn code_label(code: ErrorCode) -> &'static str {
    match code {
        ErrorCode::Unspecified => "OK",
        other => other.short_name(),
    }
}

impl Collector for Live {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        let ejected = ConstGauge::new(self.pool.ejected_now() as i64);
        let metric = encoder.encode_descriptor(
            "toolmesh_dispatcher_instances_ejected",
            "Instances (or a tool on one) ejected now.",
            None,
            ejected.metric_type(),
        )?;
        ejected.encode(metric)?;
        let at = self.installed.at_ms.load(Ordering::Relaxed);
        let age_ms = (self.installed.origin.elapsed().as_millis() as u64).saturating_sub(at);
        let age = ConstGauge::new(age_ms as f64 / 1000.0);
        let metric = encoder.encode_descriptor(
            "toolmesh_dispatcher_snapshot_age_seconds",
            "Time since the snapshot followed was installed.",
            None,
            age.metric_type(),
        )?;
        age.encode(metric)
    }
}
