//! Rollout requests: what an operator or a dispatcher asks for, read from
//! an `UpdateRollout` message with every value checked.

use super::RolloutError;
use std::time::Duration;
use toolmesh::pb;
use toolmesh::reference::{ToolRef, VersionPattern};
use toolmesh::rollout::{Guard, Share};

/// The longest window a guard may count over.
const MAX_WINDOW: Duration = Duration::from_secs(3600);
/// The shortest window a guard may count over.
const MIN_WINDOW: Duration = Duration::from_secs(1);

/// What a rollout request asks for.
#[derive(Debug, Clone, PartialEq)]
pub enum RolloutChange {
    /// Release `canary` to `share` of the callers the filters cover.
    Start {
        /// The version to release.
        canary: semver::Version,
        /// Its share of callers.
        share: Share,
        /// Only these tenants (empty: any).
        tenants: Vec<String>,
        /// Only these principals (empty: any).
        principals: Vec<String>,
        /// When dispatchers abort it by themselves.
        guard: Guard,
    },
    /// Change an active rollout's share.
    Set {
        /// The new share.
        share: Share,
    },
    /// Every caller gets the canary.
    Promote,
    /// Every caller gets the stable version.
    Abort {
        /// Why.
        reason: String,
        /// By a dispatcher's error check.
        automatic: bool,
    },
}

impl RolloutChange {
    /// What the audit log calls this change.
    pub fn verb(&self) -> &'static str {
        match self {
            RolloutChange::Start { .. } => "started",
            RolloutChange::Set { .. } => "changed",
            RolloutChange::Promote => "promoted",
            RolloutChange::Abort { .. } => "aborted",
        }
    }
}

/// One change to one tool's rollout, by `actor`.
#[derive(Debug, Clone, PartialEq)]
pub struct RolloutRequest {
    /// The tool name.
    pub tool: String,
    /// Act only when the rollout's canary is this version.
    pub expect: Option<semver::Version>,
    /// What to do.
    pub change: RolloutChange,
    /// Who asks (an admin's principal, or a dispatcher's).
    pub actor: String,
}

impl RolloutRequest {
    /// The request an `UpdateRollout` message makes, by `actor`.
    pub fn from_pb(wire: pb::UpdateRolloutRequest, actor: String) -> Result<Self, RolloutError> {
        let reference = ToolRef::parse(&wire.tool)
            .ok()
            .filter(|r| toolmesh::spec::validate_name(r.name).is_ok())
            .ok_or_else(|| RolloutError::BadTool(wire.tool.clone()))?;
        let exact = match &reference.version {
            VersionPattern::Exact(version) => Some(version.clone()),
            VersionPattern::Newest => None,
            _ => return Err(RolloutError::BadTool(wire.tool.clone())),
        };
        let share = || Share::from_basis_points(wire.basis_points);
        let action = pb::RolloutAction::try_from(wire.action).unwrap_or_default();
        let change = match action {
            pb::RolloutAction::Unspecified => return Err(RolloutError::NoAction),
            pb::RolloutAction::Start => RolloutChange::Start {
                canary: exact
                    .clone()
                    .ok_or_else(|| RolloutError::CanaryNeedsVersion(reference.name.into()))?,
                share: share()?,
                tenants: cleaned(wire.tenants),
                principals: cleaned(wire.principals),
                guard: guard(wire.guard.as_ref())?,
            },
            pb::RolloutAction::Set => RolloutChange::Set { share: share()? },
            pb::RolloutAction::Promote => RolloutChange::Promote,
            pb::RolloutAction::Abort => RolloutChange::Abort {
                reason: match wire.reason.trim() {
                    "" => "aborted by an operator".to_owned(),
                    reason => reason.to_owned(),
                },
                automatic: wire.automatic,
            },
        };
        let expect = (action != pb::RolloutAction::Start)
            .then_some(exact)
            .flatten();
        Ok(RolloutRequest {
            tool: reference.name.to_owned(),
            expect,
            change,
            actor,
        })
    }
}

/// Trimmed, non-empty, sorted, each once.
fn cleaned(list: Vec<String>) -> Vec<String> {
    let mut list: Vec<String> = list
        .into_iter()
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
        .collect();
    list.sort();
    list.dedup();
    list
}

/// The guard a START asks for, checked.
fn guard(wire: Option<&pb::RolloutGuard>) -> Result<Guard, RolloutError> {
    let guard = Guard::from_pb(wire);
    if !(guard.max_error_margin > 0.0 && guard.max_error_margin <= 1.0) {
        return Err(RolloutError::BadGuard(format!(
            "max error margin {} is not a rate difference: give a number above 0 and at most 1 (0.05 is five points)",
            guard.max_error_margin
        )));
    }
    if !(MIN_WINDOW..=MAX_WINDOW).contains(&guard.window) {
        return Err(RolloutError::BadGuard(format!(
            "window of {} ms is out of range: give 1 to 3600 seconds",
            guard.window.as_millis()
        )));
    }
    Ok(guard)
}
