//! The checks before anything is sent, in the order a model can act on —
//! exists, may be used, enabled, arguments, preconditions, approval, rate —
//! each stage turning the previous one's output into its own.

use super::admit::{self, Admitted};
use super::authorize::{self, Authorized};
use super::reached::{Reached, Refused};
use super::resolve::{self, Resolved};
use super::service::Call;
use super::validate::{self, Validated};
use crate::error::CallError;
use crate::metrics::Metrics;
use toolmesh::SnapshotHistory;
use toolmesh_governance::Governance;
use toolmesh_policy::Policy;

/// What the checks read, shared across calls.
pub(crate) struct Checks<'p> {
    /// The newest snapshot, whose instances and switches a pinned call sees.
    pub(crate) snapshots: &'p SnapshotHistory,
    pub(crate) governance: &'p Governance,
    pub(crate) metrics: &'p Metrics,
    /// Largest `arguments` accepted, in bytes.
    pub(crate) max_argument_bytes: usize,
}

impl Checks<'_> {
    /// Runs every stage before anything is sent: the call admitted, or
    /// refused by the first stage that refuses it.
    pub(crate) async fn run(&self, call: &Call<'_>) -> Result<Admitted, Refused> {
        let refused = |error, reached| Refused { error, reached };
        let request = call.request;
        let policy = self.governance.policy();
        let resolved = self
            .resolve(call, &policy)
            .map_err(|e| refused(e, Reached::Nothing))?;
        let grant = match authorize::grant(call.snapshot, &policy, call.who, &resolved.entry) {
            Ok(grant) => grant,
            Err(e) => return Err(refused(e, Reached::Resolved(resolved))),
        };
        let def = resolved.entry.def.clone();
        let authorized = Authorized {
            resolved,
            policy,
            grant,
        };
        let narrowing = authorized.grant.narrowing.as_deref();
        let arguments =
            match validate::arguments(&def, &request.arguments, self.max_argument_bytes, narrowing)
            {
                Ok(arguments) => arguments,
                Err(e) => return Err(refused(e, Reached::Authorized(authorized))),
            };
        let validated = Validated {
            authorized,
            arguments,
        };
        let authorized = &validated.authorized;
        let admitted = admit::admit(
            self.governance,
            &authorized.policy,
            call.who,
            &def,
            request,
            &validated.arguments,
            authorized.grant.approval,
        )
        .await;
        match admitted {
            Ok(permit) => Ok(Admitted {
                validated,
                _permit: permit,
            }),
            Err(e) => Err(refused(e, Reached::Validated(validated))),
        }
    }

    /// Resolve: the tool the call names (in its snapshot, as the newest one
    /// routes it), how a rollout routed it, and its metric handles.
    fn resolve(&self, call: &Call<'_>, policy: &Policy) -> Result<Resolved, CallError> {
        let current = self.snapshots.current();
        let request = call.request;
        let session = super::session(&request.context);
        let (entry, routed) = resolve::tool(
            call.snapshot,
            &current,
            policy,
            call.who,
            session,
            &request.tool,
        )?;
        let handles = self.metrics.tool(&entry.def);
        Ok(Resolved {
            entry,
            routed,
            handles,
        })
    }
}
