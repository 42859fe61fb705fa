//! The canary accounting layer: every call that ran a tool under an active
//! rollout counts for that version in the canary watch, which aborts a
//! failing canary.

use super::admit::Admitted;
use super::checks::Refused;
use super::service::{Answer, Answered, Call, Service};
use crate::canary::CanaryWatch;
use toolmesh::SnapshotHistory;

/// Counts what each call that ran became, against the version that ran
/// (the stand-in's, when one answered).
pub(crate) struct Canary<'p, S> {
    pub(crate) watch: &'p CanaryWatch,
    /// Rollouts are read from the newest snapshot.
    pub(crate) snapshots: &'p SnapshotHistory,
    pub(crate) inner: S,
}

impl<S: Service> Service for Canary<'_, S> {
    async fn check(&self, call: &Call<'_>) -> Result<Admitted, Refused> {
        self.inner.check(call).await
    }

    async fn send(&self, call: &Call<'_>, admitted: &Admitted) -> Answered {
        self.inner.send(call, admitted).await
    }

    async fn call(&self, call: &Call<'_>) -> Answer {
        let answer = self.inner.call(call).await;
        if let Some(def) = answer.reached.ran() {
            let code = answer.answered.outcome.code();
            let current = self.snapshots.current();
            self.watch.record(&current, def.name(), def.version(), code);
        }
        answer
    }
}
