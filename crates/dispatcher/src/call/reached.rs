//! How far a call got through the checks (the output of the last stage it passed), and a call a check refused: what every layer and `observe` read of a call, whatever answered it.

use super::admit::Admitted;
use super::authorize::Authorized;
use super::resolve::{Resolved, Routed};
use super::validate::{Arguments, Validated};
use crate::error::CallError;
use crate::metrics::ToolHandles;
use std::sync::Arc;
use toolmesh::ToolDef;

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
