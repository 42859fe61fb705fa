//! The checks before anything is sent, in the order a model can act on —
//! exists, may be used, enabled, arguments, preconditions, approval, rate —
//! each stage turning the previous one's output into its own, and how far a
//! call got when one refused it.

use super::admit::{self, Admitted};
use super::authorize::{self, Authorized};
use super::resolve::{self, Resolved, Routed};
use super::service::Call;
use super::validate::{self, Arguments, Validated};
use crate::error::CallError;
use crate::metrics::{Metrics, ToolHandles};
use std::sync::Arc;
use toolmesh::{SnapshotHistory, ToolDef};
use toolmesh_governance::Governance;

/// How far a call got through the stages: the output of the last one it
/// passed.
pub(crate) enum Reached {
    /// No tool: the name did not resolve.
    Nothing,
    Resolved(Resolved),
    Authorized(Authorized),
    Validated(Validated),
    /// Every check passed and the call was sent: the tool ran, or the
    /// cache answered for it.
    Sent(Validated),
}

impl Reached {
    /// The resolved tool, its routing and metric handles, once resolved.
    pub(crate) fn resolved(&self) -> Option<&Resolved> {
        match self {
            Reached::Nothing => None,
            Reached::Resolved(resolved) => Some(resolved),
            Reached::Authorized(authorized) => Some(&authorized.resolved),
            Reached::Validated(validated) | Reached::Sent(validated) => {
                Some(&validated.authorized.resolved)
            }
        }
    }

    /// The resolved definition, once resolved.
    pub(crate) fn def(&self) -> Option<&Arc<ToolDef>> {
        self.resolved().map(|r| &r.entry.def)
    }

    /// How a rollout routed the call, when one did.
    pub(crate) fn routed(&self) -> Option<&Routed> {
        self.resolved().and_then(|r| r.routed.as_ref())
    }

    /// The resolved version's metric handles, once resolved.
    pub(crate) fn handles(&self) -> Option<&ToolHandles> {
        self.resolved().map(|r| &*r.handles)
    }

    /// The policy rule that granted the call, once authorized.
    pub(crate) fn rule(&self) -> Option<&str> {
        match self {
            Reached::Nothing | Reached::Resolved(_) => None,
            Reached::Authorized(authorized) => Some(&authorized.grant.rule),
            Reached::Validated(validated) | Reached::Sent(validated) => {
                Some(&validated.authorized.grant.rule)
            }
        }
    }

    /// The checked arguments, once valid.
    pub(crate) fn arguments(&self) -> Option<&Arguments> {
        match self {
            Reached::Validated(validated) | Reached::Sent(validated) => Some(&validated.arguments),
            _ => None,
        }
    }

    /// The definition that ran (or whose cached answer was served).
    pub(crate) fn ran(&self) -> Option<&Arc<ToolDef>> {
        match self {
            Reached::Sent(validated) => Some(&validated.authorized.resolved.entry.def),
            _ => None,
        }
    }
}

/// A call a check refused, and how far it got.
pub(crate) struct Refused {
    pub(crate) error: CallError,
    pub(crate) reached: Reached,
}

impl Admitted {
    /// The resolved tool of an admitted call.
    pub(crate) fn resolved(&self) -> &Resolved {
        &self.validated.authorized.resolved
    }

    /// The policy that authorized the call.
    pub(crate) fn authorized(&self) -> &Authorized {
        &self.validated.authorized
    }

    /// How far the call got once sent (its rate-limit slot freed).
    pub(crate) fn sent(self) -> Reached {
        Reached::Sent(self.validated)
    }
}

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
        let policy = self.governance.policy();
        let current = self.snapshots.current();
        let request = call.request;
        let session = request
            .context
            .as_ref()
            .map_or("", |c| c.session_id.as_str());
        let found = resolve::tool(
            call.snapshot,
            &current,
            &policy,
            call.who,
            session,
            &request.tool,
        );
        let (entry, routed) = found.map_err(|e| refused(e, Reached::Nothing))?;
        let handles = self.metrics.tool(&entry.def);
        let resolved = Resolved {
            entry,
            routed,
            handles,
        };
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
}
