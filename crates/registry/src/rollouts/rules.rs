//! The rules both stores apply to a rollout request: what each action
//! makes of a tool's rollout in each state, against the newest snapshot.

use super::{RolloutChange, RolloutError, RolloutRequest};
use std::time::{SystemTime, UNIX_EPOCH};
use toolmesh::Snapshot;
use toolmesh::pb;
use toolmesh::rollout::{Rollout, RolloutState};

/// Unix time now, in milliseconds.
pub(crate) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// The rollout `request` makes of `current` (the tool's rollout, if any)
/// against `snapshot`: one rule for both stores.
pub(crate) fn apply(
    current: Option<&Rollout>,
    request: &RolloutRequest,
    snapshot: &Snapshot,
    now_ms: u64,
) -> Result<Rollout, RolloutError> {
    let tool = &request.tool;
    if let RolloutChange::Start {
        canary,
        share,
        tenants,
        principals,
        guard,
    } = &request.change
    {
        if snapshot.versions(tool).is_empty() {
            return Err(RolloutError::UnknownTool(tool.clone()));
        }
        if let Some(active) = current.filter(|r| r.state == RolloutState::Active) {
            return Err(RolloutError::AlreadyActive {
                tool: tool.clone(),
                canary: active.canary.to_string(),
                share: active.share,
            });
        }
        return Ok(Rollout {
            tool: tool.clone(),
            canary: canary.clone(),
            share: *share,
            tenants: tenants.clone(),
            principals: principals.clone(),
            state: RolloutState::Active,
            reason: String::new(),
            changed_by: request.actor.clone(),
            automatic: false,
            guard: *guard,
            started_at_ms: now_ms,
            changed_at_ms: now_ms,
        });
    }
    let current = active(current, request)?;
    let mut next = Rollout {
        changed_by: request.actor.clone(),
        changed_at_ms: now_ms,
        ..current.clone()
    };
    match &request.change {
        RolloutChange::Set { share } => next.share = *share,
        RolloutChange::Promote => {
            check_newest(snapshot, current)?;
            next.state = RolloutState::Promoted;
        }
        RolloutChange::Abort { reason, automatic } => {
            next.state = RolloutState::Aborted;
            next.reason = reason.clone();
            next.automatic = *automatic;
        }
        RolloutChange::Start { .. } => unreachable!("handled above"),
    }
    Ok(next)
}

/// The tool's rollout, when it is active and of the canary asked for.
fn active<'r>(
    current: Option<&'r Rollout>,
    request: &RolloutRequest,
) -> Result<&'r Rollout, RolloutError> {
    let current = current.ok_or_else(|| RolloutError::NoRollout(request.tool.clone()))?;
    if let Some(asked) = request.expect.as_ref().filter(|v| **v != current.canary) {
        return Err(RolloutError::OtherCanary {
            tool: request.tool.clone(),
            asked: asked.to_string(),
            canary: current.canary.to_string(),
        });
    }
    if current.state != RolloutState::Active {
        let how = if current.reason.is_empty() {
            String::new()
        } else {
            format!(": {}", current.reason)
        };
        return Err(RolloutError::NotActive {
            label: current.canary_label(),
            state: current.state.name(),
            by: format!("by {}{how}", current.changed_by),
        });
    }
    Ok(current)
}

/// Promotion ends the rollout, after which the bare name resolves to the
/// newest exposed stable version: that must be the canary.
fn check_newest(snapshot: &Snapshot, rollout: &Rollout) -> Result<(), RolloutError> {
    match snapshot.newest_stable(&rollout.tool, |e| e.exposed()) {
        Some(entry) if *entry.def.version() == rollout.canary => Ok(()),
        other => Err(RolloutError::NotNewest {
            label: rollout.canary_label(),
            newest: other.map_or_else(
                || "none (no version is exposed)".to_owned(),
                |e| e.def.version().to_string(),
            ),
        }),
    }
}

/// What `ListRollouts` answers for `rollout` in `snapshot`.
pub(crate) fn status(snapshot: &Snapshot, rollout: &Rollout) -> pb::RolloutStatus {
    let stable = rollout.stable(snapshot, |e| e.exposed());
    pb::RolloutStatus {
        rollout: Some(rollout.to_pb()),
        stable_version: stable
            .map(|e| e.def.version().to_string())
            .unwrap_or_default(),
        canary_exposed: snapshot
            .get(&rollout.tool, &rollout.canary)
            .is_some_and(|e| e.exposed()),
    }
}
