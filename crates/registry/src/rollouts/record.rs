//! A rollout as both stores keep it: one JSON document, in the data dir's
//! state file or under `/toolmesh/rollout/<tool>` in etcd.

use serde::{Deserialize, Serialize};
use std::time::Duration;
use toolmesh::rollout::{Guard, Rollout, RolloutState, Share};

/// A rollout as both stores keep it (a JSON document).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RolloutRecord {
    tool: String,
    canary: String,
    basis_points: u32,
    #[serde(default)]
    tenants: Vec<String>,
    #[serde(default)]
    principals: Vec<String>,
    /// `active`, `promoted` or `aborted`.
    state: String,
    #[serde(default)]
    reason: String,
    #[serde(default)]
    changed_by: String,
    #[serde(default)]
    automatic: bool,
    max_error_margin: f64,
    min_calls: u32,
    window_ms: u64,
    started_at_ms: u64,
    changed_at_ms: u64,
}

impl From<&Rollout> for RolloutRecord {
    fn from(rollout: &Rollout) -> Self {
        RolloutRecord {
            tool: rollout.tool.clone(),
            canary: rollout.canary.to_string(),
            basis_points: rollout.share.basis_points(),
            tenants: rollout.tenants.clone(),
            principals: rollout.principals.clone(),
            state: rollout.state.name().to_owned(),
            reason: rollout.reason.clone(),
            changed_by: rollout.changed_by.clone(),
            automatic: rollout.automatic,
            max_error_margin: rollout.guard.max_error_margin,
            min_calls: rollout.guard.min_calls,
            window_ms: u64::try_from(rollout.guard.window.as_millis()).unwrap_or(u64::MAX),
            started_at_ms: rollout.started_at_ms,
            changed_at_ms: rollout.changed_at_ms,
        }
    }
}

impl TryFrom<RolloutRecord> for Rollout {
    type Error = String;

    fn try_from(record: RolloutRecord) -> Result<Self, String> {
        let state = match record.state.as_str() {
            "active" => RolloutState::Active,
            "promoted" => RolloutState::Promoted,
            "aborted" => RolloutState::Aborted,
            other => {
                return Err(format!(
                    "state {other:?} is not active, promoted or aborted"
                ));
            }
        };
        Ok(Rollout {
            canary: semver::Version::parse(&record.canary)
                .map_err(|e| format!("canary {:?}: {e}", record.canary))?,
            share: Share::from_basis_points(record.basis_points).map_err(|e| e.to_string())?,
            guard: Guard {
                max_error_margin: record.max_error_margin,
                min_calls: record.min_calls,
                window: Duration::from_millis(record.window_ms),
            },
            tool: record.tool,
            tenants: record.tenants,
            principals: record.principals,
            state,
            reason: record.reason,
            changed_by: record.changed_by,
            automatic: record.automatic,
            started_at_ms: record.started_at_ms,
            changed_at_ms: record.changed_at_ms,
        })
    }
}
