//! The canary watch: for each tool under an active rollout, every version's
//! call outcomes over the rollout's sliding window; when the canary's error
//! rate exceeds the stable versions' by more than the rollout's margin, the
//! registry is asked to abort the rollout (automatically, saying why).

use crate::error::AbortError;
use crate::window::{Counts, Window};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};
use toolmesh::Snapshot;
use toolmesh::pb::ErrorCode;
use toolmesh::rollout::{Guard, Rollout, RolloutState};

/// How long after asking for an abort the watch waits before asking again
/// (the registry's answer, or the snapshot that shows the abort, comes first).
const ASK_AGAIN_AFTER: Duration = Duration::from_secs(10);
/// Slots a rollout's window is cut into.
const WINDOW_SLOTS: u32 = 30;

/// Asks the registry to abort a rollout whose canary fails (the registry
/// in this process, or one reached by gRPC with the dispatcher's token).
#[tonic::async_trait]
pub trait RolloutControl: Send + Sync + std::fmt::Debug + 'static {
    /// Aborts the rollout of `tool` whose canary is `canary`, automatically,
    /// for `reason`; `Err` says why it could not.
    async fn abort(
        &self,
        tool: &str,
        canary: &semver::Version,
        reason: String,
    ) -> Result<(), AbortError>;
}

/// Whether an outcome counts against the version that produced it: the
/// failures of the version itself, not of the caller or the policy.
pub(crate) fn counts_as_error(code: ErrorCode) -> bool {
    matches!(
        code,
        ErrorCode::ExecutorFailed | ErrorCode::Unavailable | ErrorCode::DeadlineExceeded
    )
}

/// One tool's outcomes under one rollout.
#[derive(Debug)]
struct ToolWatch {
    /// The rollout counted for: canary and start time.
    rollout: (semver::Version, u64),
    guard: Guard,
    versions: HashMap<semver::Version, Window>,
    /// When this dispatcher last asked for an abort.
    asked: Option<Instant>,
}

impl ToolWatch {
    fn new(rollout: &Rollout) -> Self {
        ToolWatch {
            rollout: (rollout.canary.clone(), rollout.started_at_ms),
            guard: rollout.guard,
            versions: HashMap::new(),
            asked: None,
        }
    }

    /// The canary's counts and those of every other version.
    fn split(&self, now_ms: u64) -> (Counts, Counts) {
        let mut canary = Counts::default();
        let mut stable = Counts::default();
        for (version, window) in &self.versions {
            let counts = window.counts(now_ms);
            let side = if *version == self.rollout.0 {
                &mut canary
            } else {
                &mut stable
            };
            side.calls += counts.calls;
            side.errors += counts.errors;
        }
        (canary, stable)
    }
}

/// Why the canary should be aborted, when it should: its error rate
/// exceeds the stable side's by more than the margin, over at least
/// `min_calls` canary calls (the stable side's rate is 0 without calls).
pub(crate) fn verdict(canary: Counts, stable: Counts, guard: &Guard) -> Option<String> {
    if canary.calls < u64::from(guard.min_calls) {
        return None;
    }
    let excess = canary.rate() - stable.rate();
    (excess > guard.max_error_margin).then(|| {
        format!(
            "its error rate was {:.1}% ({} of {} calls failed) against {:.1}% for the stable version ({} of {}) over the last {} s: more than the {:.1}-point margin",
            canary.rate() * 100.0,
            canary.errors,
            canary.calls,
            stable.rate() * 100.0,
            stable.errors,
            stable.calls,
            guard.window.as_secs_f64(),
            guard.max_error_margin * 100.0
        )
    })
}

/// Outcomes per tool under an active rollout, and who to ask for an abort.
#[derive(Debug)]
pub(crate) struct CanaryWatch {
    tools: Mutex<HashMap<String, ToolWatch>>,
    control: Option<Arc<dyn RolloutControl>>,
    /// The clock the windows count on.
    epoch: Instant,
}

impl CanaryWatch {
    /// A watch that asks `control` (if any) to abort failing canaries.
    pub(crate) fn new(control: Option<Arc<dyn RolloutControl>>) -> Self {
        CanaryWatch {
            tools: Mutex::default(),
            control,
            epoch: Instant::now(),
        }
    }

    /// Counts a call of `tool@version` that ended with `code`, when `tool`
    /// is under an active rollout in `current`; asks for an abort when the
    /// canary has failed enough. Costs nothing for tools without one.
    pub(crate) fn record(
        &self,
        current: &Snapshot,
        tool: &str,
        version: &semver::Version,
        code: ErrorCode,
    ) {
        let Some(rollout) = current
            .rollout(tool)
            .filter(|r| r.state == RolloutState::Active)
        else {
            return;
        };
        let now_ms = u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX);
        let reason = {
            let mut tools = self.tools.lock().unwrap_or_else(PoisonError::into_inner);
            if !tools.contains_key(tool) {
                // A tool's first call under this rollout: forget the tools
                // whose rollouts are gone (not on every call), then watch it.
                tools.retain(|name, _| current.rollout(name).is_some());
                tools.insert(tool.to_owned(), ToolWatch::new(rollout));
            }
            let Some(watch) = tools.get_mut(tool) else {
                return;
            };
            if watch.rollout != (rollout.canary.clone(), rollout.started_at_ms) {
                *watch = ToolWatch::new(rollout);
            }
            let window = watch.guard.window;
            watch
                .versions
                .entry(version.clone())
                .or_insert_with(|| Window::new(window, WINDOW_SLOTS))
                .record(now_ms, counts_as_error(code));
            self.judge(watch, version, now_ms)
        };
        if let Some(reason) = reason {
            self.ask_abort(rollout, reason);
        }
    }

    /// The abort reason, when a canary outcome tips the verdict and this
    /// dispatcher has not asked recently (it then counts as asked).
    fn judge(
        &self,
        watch: &mut ToolWatch,
        version: &semver::Version,
        now_ms: u64,
    ) -> Option<String> {
        if *version != watch.rollout.0
            || watch.asked.is_some_and(|at| at.elapsed() < ASK_AGAIN_AFTER)
        {
            return None;
        }
        let (canary, stable) = watch.split(now_ms);
        let reason = verdict(canary, stable, &watch.guard)?;
        watch.asked = Some(Instant::now());
        Some(reason)
    }

    /// Asks the registry, in the background, to abort `rollout`.
    fn ask_abort(&self, rollout: &Rollout, reason: String) {
        let label = rollout.canary_label();
        let reason = format!("canary {label} failed: {reason}");
        let Some(control) = self.control.clone() else {
            tracing::error!(rollout = %label, %reason, "the canary is failing, but this dispatcher has no registry to ask for an abort: abort it with `toolmesh rollout abort`");
            return;
        };
        tracing::warn!(rollout = %label, %reason, "asking the registry to abort the rollout");
        let (tool, canary) = (rollout.tool.clone(), rollout.canary.clone());
        tokio::spawn(async move {
            if let Err(error) = control.abort(&tool, &canary, reason).await {
                tracing::error!(rollout = %label, %error, "the registry did not abort the failing canary; abort it with `toolmesh rollout abort`");
            }
        });
    }
}

#[cfg(test)]
mod tests;
