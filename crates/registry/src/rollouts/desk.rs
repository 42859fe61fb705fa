//! Where rollout changes are made — the registry, then the journal (the audit
//! log) — by the gRPC edge and by an in-process dispatcher alike.

use super::{RolloutChange, RolloutRequest};
use crate::error::RegistryError;
use crate::registry::Registry;
use std::sync::Arc;
use toolmesh::Rollout;

/// Hears of every decision operators make through the registry (the audit
/// log): rollout changes and tools disabled or enabled. Each returns once
/// the record is kept, so a decision is never answered before it is
/// journaled (a crash right after would otherwise lose its record).
#[tonic::async_trait]
pub trait DecisionJournal: Send + Sync + 'static {
    /// `rollout` is what `change` made of the tool's rollout.
    async fn rollout(&self, change: &RolloutChange, rollout: &Rollout);

    /// `admin` disabled `tool` (for `reason`) or, with no reason, enabled
    /// it, in snapshot `version`.
    async fn switched(&self, tool: &str, reason: Option<&str>, admin: &str, version: u64);

    /// Returns once the decision that made snapshot `version` is in force
    /// wherever this registry's answer must already hold (a `serve` node:
    /// its own dispatcher's calls and listings); at once by default.
    async fn in_force(&self, _version: u64) {}
}

/// Where rollout changes are made: the registry, then the journal. The gRPC
/// edge and an in-process dispatcher (its automatic aborts) both go
/// through one.
#[derive(Clone)]
pub struct RolloutDesk {
    registry: Registry,
    journal: Option<Arc<dyn DecisionJournal>>,
}

impl std::fmt::Debug for RolloutDesk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RolloutDesk").finish_non_exhaustive()
    }
}

impl RolloutDesk {
    /// A desk over `registry`, telling `journal` (if any) of each change.
    pub fn new(registry: Registry, journal: Option<Arc<dyn DecisionJournal>>) -> Self {
        RolloutDesk { registry, journal }
    }

    /// Applies `request`; the rollout it made and the snapshot version
    /// that holds it.
    pub async fn update(&self, request: RolloutRequest) -> Result<(u64, Rollout), RegistryError> {
        let (version, rollout) = self.registry.update_rollout(&request).await?;
        if let Some(journal) = &self.journal {
            journal.rollout(&request.change, &rollout).await;
        }
        log(&request, &rollout, version);
        Ok((version, rollout))
    }

    /// The registry this desk writes to.
    pub fn registry(&self) -> &Registry {
        &self.registry
    }
}

fn log(request: &RolloutRequest, rollout: &Rollout, version: u64) {
    let (label, share) = (rollout.canary_label(), rollout.share.to_string());
    let by = request.actor.as_str();
    if matches!(request.change, RolloutChange::Abort { .. }) {
        tracing::warn!(rollout = %label, by, automatic = rollout.automatic, reason = %rollout.reason, version, "rollout aborted");
    } else {
        tracing::info!(rollout = %label, %share, by, state = rollout.state.name(), version, "rollout {}", request.change.verb());
    }
}
