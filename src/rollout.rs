//! Gradual releases (canary) of one tool version: the rollout as snapshots
//! carry it, and the sticky bucket that decides which callers get the canary.

mod assign;
mod share;

pub use assign::{Assignment, Audience, Caller, Sticky, bucket};
pub use share::{BadShare, Share};

use crate::pb;
use std::sync::Arc;
use std::time::Duration;

/// Callers are spread over this many buckets: a share counts in hundredths
/// of a percent (basis points).
pub const BUCKETS: u32 = 10_000;

/// Where a rollout stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RolloutState {
    /// The canary goes to the callers its share and filters pick.
    Active,
    /// Done: the bare name resolves as if there were no rollout.
    Promoted,
    /// Stopped: every caller of the bare name gets the stable version.
    Aborted,
}

impl RolloutState {
    /// `active`, `promoted`, `aborted`.
    pub fn name(self) -> &'static str {
        match self {
            RolloutState::Active => "active",
            RolloutState::Promoted => "promoted",
            RolloutState::Aborted => "aborted",
        }
    }

    fn to_pb(self) -> pb::RolloutState {
        match self {
            RolloutState::Active => pb::RolloutState::Active,
            RolloutState::Promoted => pb::RolloutState::Promoted,
            RolloutState::Aborted => pb::RolloutState::Aborted,
        }
    }

    fn from_pb(state: i32) -> Option<RolloutState> {
        match pb::RolloutState::try_from(state).ok()? {
            pb::RolloutState::Active => Some(RolloutState::Active),
            pb::RolloutState::Promoted => Some(RolloutState::Promoted),
            pb::RolloutState::Aborted => Some(RolloutState::Aborted),
            pb::RolloutState::Unspecified => None,
        }
    }
}

/// When dispatchers abort a rollout by themselves: the canary's error rate
/// over `window` exceeds the stable version's by more than
/// `max_error_margin`, once the canary had `min_calls` calls in the window.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Guard {
    /// Error-rate points the canary may exceed the stable version by (0.05 = 5 points).
    pub max_error_margin: f64,
    /// Canary calls in the window before its rate is judged.
    pub min_calls: u32,
    /// The sliding window outcomes are counted over.
    pub window: Duration,
}

impl Default for Guard {
    fn default() -> Self {
        Guard {
            max_error_margin: 0.05,
            min_calls: 20,
            window: Duration::from_secs(60),
        }
    }
}

impl Guard {
    /// The wire form (every value filled in).
    pub fn to_pb(self) -> pb::RolloutGuard {
        pb::RolloutGuard {
            max_error_margin: self.max_error_margin,
            min_calls: self.min_calls,
            window_ms: u32::try_from(self.window.as_millis()).unwrap_or(u32::MAX),
        }
    }

    /// The guard `wire` asks for, defaults where it says 0 (or nothing).
    pub fn from_pb(wire: Option<&pb::RolloutGuard>) -> Guard {
        let default = Guard::default();
        let Some(wire) = wire else {
            return default;
        };
        Guard {
            max_error_margin: if wire.max_error_margin > 0.0 {
                wire.max_error_margin
            } else {
                default.max_error_margin
            },
            min_calls: if wire.min_calls > 0 {
                wire.min_calls
            } else {
                default.min_calls
            },
            window: if wire.window_ms > 0 {
                Duration::from_millis(u64::from(wire.window_ms))
            } else {
                default.window
            },
        }
    }
}

/// The gradual release of one tool version, as snapshots carry it.
#[derive(Debug, Clone, PartialEq)]
pub struct Rollout {
    /// The tool name.
    pub tool: String,
    /// The version released gradually.
    pub canary: semver::Version,
    /// The share of callers that gets it.
    pub share: Share,
    /// Only callers of these tenants (empty: any).
    pub tenants: Vec<String>,
    /// Only these principals (empty: any).
    pub principals: Vec<String>,
    /// Where it stands.
    pub state: RolloutState,
    /// Why it was aborted ("" otherwise).
    pub reason: String,
    /// Who made the last change.
    pub changed_by: String,
    /// Aborted by a dispatcher's error check.
    pub automatic: bool,
    /// When dispatchers abort it by themselves.
    pub guard: Guard,
    /// Unix time in milliseconds.
    pub started_at_ms: u64,
    /// Unix time in milliseconds.
    pub changed_at_ms: u64,
}

/// A wire rollout that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("rollout of {tool:?} left out: {problem}")]
pub struct BadRollout {
    /// The tool it is about.
    pub tool: String,
    /// What is wrong.
    pub problem: String,
}

impl Rollout {
    /// `name@version` of the canary.
    pub fn canary_label(&self) -> String {
        crate::reference::label(&self.tool, &self.canary)
    }

    /// The wire form.
    pub fn to_pb(&self) -> pb::Rollout {
        pb::Rollout {
            tool: self.tool.clone(),
            canary_version: self.canary.to_string(),
            basis_points: self.share.basis_points(),
            tenants: self.tenants.clone(),
            principals: self.principals.clone(),
            state: self.state.to_pb() as i32,
            reason: self.reason.clone(),
            changed_by: self.changed_by.clone(),
            automatic: self.automatic,
            guard: Some(self.guard.to_pb()),
            started_at_ms: self.started_at_ms,
            changed_at_ms: self.changed_at_ms,
        }
    }

    /// A rollout from the wire.
    pub fn from_pb(wire: &pb::Rollout) -> Result<Rollout, BadRollout> {
        let bad = |problem: String| BadRollout {
            tool: wire.tool.clone(),
            problem,
        };
        let canary = semver::Version::parse(&wire.canary_version)
            .map_err(|e| bad(format!("canary version {:?}: {e}", wire.canary_version)))?;
        let share = Share::from_basis_points(wire.basis_points).map_err(|e| bad(e.to_string()))?;
        let state = RolloutState::from_pb(wire.state)
            .ok_or_else(|| bad(format!("state {} is not one this build knows", wire.state)))?;
        Ok(Rollout {
            tool: wire.tool.clone(),
            canary,
            share,
            tenants: wire.tenants.clone(),
            principals: wire.principals.clone(),
            state,
            reason: wire.reason.clone(),
            changed_by: wire.changed_by.clone(),
            automatic: wire.automatic,
            guard: Guard::from_pb(wire.guard.as_ref()),
            started_at_ms: wire.started_at_ms,
            changed_at_ms: wire.changed_at_ms,
        })
    }

    /// The stable version in `snapshot`: the newest stable version other
    /// than the canary that `usable` accepts.
    pub fn stable<'s>(
        &self,
        snapshot: &'s crate::Snapshot,
        usable: impl Fn(&Arc<crate::ToolEntry>) -> bool,
    ) -> Option<&'s Arc<crate::ToolEntry>> {
        snapshot.newest_stable(&self.tool, |e| *e.def.version() != self.canary && usable(e))
    }
}

/// A rollout of search_kb@2.0.0 to `basis_points` (for tests).
#[cfg(test)]
pub(crate) fn example(basis_points: u32) -> Rollout {
    Rollout {
        tool: "search_kb".into(),
        canary: semver::Version::new(2, 0, 0),
        share: Share::from_basis_points(basis_points).unwrap(),
        tenants: vec![],
        principals: vec![],
        state: RolloutState::Active,
        reason: String::new(),
        changed_by: "alice".into(),
        automatic: false,
        guard: Guard::default(),
        started_at_ms: 1,
        changed_at_ms: 2,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The wire form round-trips; a bad version is refused by name.
    #[test]
    fn wire_round_trip() {
        let mut r = example(750);
        r.tenants = vec!["acme".into()];
        r.guard.min_calls = 7;
        assert_eq!(Rollout::from_pb(&r.to_pb()).unwrap(), r);
        let mut wire = r.to_pb();
        wire.canary_version = "two".into();
        assert!(
            Rollout::from_pb(&wire)
                .unwrap_err()
                .to_string()
                .contains("two")
        );
        assert_eq!(Guard::from_pb(None), Guard::default());
    }
}
