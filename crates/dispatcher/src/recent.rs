//! What each tool version's calls did over the last minute on this
//! dispatcher — calls per second, error rate, p95 latency — from its own
//! counters (a lock-free window per tool version, bounded by the tools the
//! snapshot holds), for the admin page.

use crate::canary::counts_as_error;
use crate::window::Window;
use dashmap::DashMap;
use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;
use toolmesh::Snapshot;
use toolmesh::pb::ErrorCode;
use toolmesh_telemetry::ToolLabels;

/// The window the figures cover.
pub const RECENT_WINDOW: Duration = Duration::from_secs(60);
/// One slot per second.
const SLOTS: u32 = 60;

/// One tool version's calls over the last [`RECENT_WINDOW`] on this
/// dispatcher.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct RecentCalls {
    /// Calls that ended (any outcome).
    pub calls: u64,
    /// Those that failed in the tool or its executors (`EXECUTOR_FAILED`,
    /// `UNAVAILABLE`, `DEADLINE_EXCEEDED`: what a rollout's guard counts),
    /// not refusals of the caller or the policy.
    pub errors: u64,
    /// The 95th percentile of their durations (arrival to answer), as
    /// Prometheus estimates it from the duration buckets; `None` without calls.
    pub p95: Option<Duration>,
}

impl RecentCalls {
    /// Calls per second over the window.
    pub fn per_second(&self) -> f64 {
        self.calls as f64 / RECENT_WINDOW.as_secs_f64()
    }

    /// Errors per call (0 without calls).
    pub fn error_rate(&self) -> f64 {
        crate::window::Counts {
            calls: self.calls,
            errors: self.errors,
        }
        .rate()
    }
}

/// The windows of every tool version called lately.
#[derive(Debug)]
pub(crate) struct Recent {
    /// The clock the windows count on.
    origin: Instant,
    windows: DashMap<ToolLabels, Arc<Window>>,
}

impl Default for Recent {
    fn default() -> Self {
        Recent {
            origin: Instant::now(),
            windows: DashMap::new(),
        }
    }
}

impl Recent {
    fn now_ms(&self) -> u64 {
        u64::try_from(self.origin.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// The window of the tool version `labels` names (resolved once per
    /// tool version by the call path's handles).
    pub(crate) fn window(&self, labels: &ToolLabels) -> Arc<Window> {
        if let Some(found) = self.windows.get(labels) {
            return found.clone();
        }
        self.windows
            .entry(labels.clone())
            .or_insert_with(|| Arc::new(Window::timed(RECENT_WINDOW, SLOTS)))
            .clone()
    }

    /// Counts a call that ended with `code` after `seconds` in `window`.
    pub(crate) fn record(&self, window: &Window, code: ErrorCode, seconds: f64) {
        window.record_timed(self.now_ms(), counts_as_error(code), seconds);
    }

    /// The figures of `tool@version` now (zero when it was not called).
    pub(crate) fn of(&self, tool: &str, version: &str) -> RecentCalls {
        let labels = ToolLabels {
            tool: tool.to_owned(),
            version: version.to_owned(),
        };
        let Some(window) = self.windows.get(&labels).map(|w| w.clone()) else {
            return RecentCalls::default();
        };
        let now = self.now_ms();
        let counts = window.counts(now);
        RecentCalls {
            calls: counts.calls,
            errors: counts.errors,
            p95: window
                .quantile(now, 0.95)
                .map(|seconds| Duration::from_secs_f64(seconds.max(0.0))),
        }
    }

    /// Forgets the tool versions not in `held`.
    pub(crate) fn retain(&self, held: &Held) {
        self.windows.retain(|labels, _| held.holds(labels));
    }
}

/// The tool versions a snapshot holds.
pub(crate) struct Held(HashSet<ToolLabels>);

impl Held {
    pub(crate) fn of(snapshot: &Snapshot) -> Held {
        Held(
            snapshot
                .entries()
                .map(|e| ToolLabels {
                    tool: e.def.name().to_owned(),
                    version: e.def.spec().version.clone(),
                })
                .collect(),
        )
    }

    pub(crate) fn holds(&self, labels: &ToolLabels) -> bool {
        self.0.contains(labels)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Calls, errors (as the rollout guard counts them) and the p95 of one
    /// tool version; per second over the minute.
    #[tokio::test(start_paused = true)]
    async fn figures_of_one_tool_version() {
        let recent = Recent::default();
        let labels = ToolLabels {
            tool: "t".into(),
            version: "1.0.0".into(),
        };
        assert_eq!(recent.of("t", "1.0.0"), RecentCalls::default());
        let window = recent.window(&labels);
        assert!(Arc::ptr_eq(&window, &recent.window(&labels)));
        for _ in 0..27 {
            recent.record(&window, ErrorCode::Unspecified, 0.002);
        }
        recent.record(&window, ErrorCode::ExecutorFailed, 0.2);
        recent.record(&window, ErrorCode::DeadlineExceeded, 0.2);
        recent.record(&window, ErrorCode::InvalidArguments, 0.0001);
        let now = recent.of("t", "1.0.0");
        assert_eq!((now.calls, now.errors), (30, 2));
        assert!((now.per_second() - 0.5).abs() < 1e-9);
        assert!((now.error_rate() - 2.0 / 30.0).abs() < 1e-9);
        let p95 = now.p95.unwrap().as_secs_f64();
        assert!(p95 > 0.1 && p95 <= 0.25, "{p95}");
        assert_eq!(recent.of("t", "2.0.0"), RecentCalls::default());
        tokio::time::advance(RECENT_WINDOW).await;
        assert_eq!(recent.of("t", "1.0.0").calls, 0, "a minute later");
    }
}
