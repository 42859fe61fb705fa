//! The canary accounting layer: every call that ran a tool under an active
//! rollout counts for that version in the canary watch, which aborts a
//! failing canary.

use super::admit::Admitted;
use super::reached::Refused;
use super::service::{Answer, Answered, Call, Service};
use crate::canary::CanaryWatch;
use std::future::Future;
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
    fn check(&self, call: &Call<'_>) -> impl Future<Output = Result<Admitted, Refused>> + Send {
        self.inner.check(call)
    }

    fn send(&self, call: &Call<'_>, admitted: &Admitted) -> impl Future<Output = Answered> + Send {
        self.inner.send(call, admitted)
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
