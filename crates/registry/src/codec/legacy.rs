//! A rollout as registries before the protobuf layout stored it: one JSON
//! document, in the data dir's state file or under `/toolmesh/rollout/<tool>`
//! in etcd. Read only: nothing is written in it any more.

use serde::Deserialize;
use std::time::Duration;
use toolmesh::rollout::{Guard, Rollout, RolloutState, Share};

/// A rollout as the previous layout stored it (a JSON document).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct LegacyRollout {
    tool: String,
    canary: String,
    basis_points: u32,
    #[serde(default)]
    tenants: Vec<String>,
    #[serde(default)]
    principals: Vec<String>,
    state: LegacyState,
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

/// Where a rollout stood, as the previous layout named it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
enum LegacyState {
    Active,
    Promoted,
    Aborted,
}

impl From<LegacyState> for RolloutState {
    fn from(state: LegacyState) -> RolloutState {
        match state {
            LegacyState::Active => RolloutState::Active,
            LegacyState::Promoted => RolloutState::Promoted,
            LegacyState::Aborted => RolloutState::Aborted,
        }
    }
}

impl TryFrom<LegacyRollout> for Rollout {
    type Error = String;

    fn try_from(record: LegacyRollout) -> Result<Self, String> {
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
            state: record.state.into(),
            reason: record.reason,
            changed_by: record.changed_by,
            automatic: record.automatic,
            started_at_ms: record.started_at_ms,
            changed_at_ms: record.changed_at_ms,
        })
    }
}
