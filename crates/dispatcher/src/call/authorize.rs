//! Authorize: whether the caller may use the tool under the policy in force
//! now, and whether an operator has switched it off.

use super::resolve::{self, Resolved};
use crate::error::CallError;
use std::sync::Arc;
use toolmesh::Principal;
use toolmesh::{Snapshot, ToolEntry};
use toolmesh_policy::{ApprovalNeed, Decision, Narrowing, Policy};

/// A resolved call the policy lets through: the policy in force for the
/// rest of the call, and the grant.
pub(crate) struct Authorized {
    pub(crate) resolved: Resolved,
    pub(crate) policy: Arc<Policy>,
    pub(crate) grant: Grant,
}

/// The grant that lets a call through.
#[derive(Debug)]
pub(crate) struct Grant {
    /// The policy rule that allowed it (for the audit trail).
    pub(crate) rule: String,
    /// Whether the call needs an approval before it runs.
    pub(crate) approval: ApprovalNeed,
    /// How the grant narrows the tool's arguments for this caller, if it does.
    pub(crate) narrowing: Option<Arc<Narrowing>>,
}

/// Decides `who`'s access to `entry` of `snapshot`: denied (answered to
/// the caller as an unknown name), disabled, or granted.
pub(crate) fn grant(
    snapshot: &Snapshot,
    policy: &Policy,
    who: &Principal,
    entry: &ToolEntry,
) -> Result<Grant, CallError> {
    if let Some(scope) = who.missing_call_scope() {
        return Err(CallError::MissingCallScope(scope.to_owned()));
    }
    let def = &entry.def;
    let (rule, approval) = match policy.decide(who, def.spec()) {
        Decision::Deny { reason } => {
            return Err(CallError::PermissionDenied {
                tool: def.label(),
                reason,
                seen_as: Box::new(resolve::unknown(snapshot, policy, who, def.name())),
            });
        }
        Decision::Allow { rule, approval } => (rule, approval),
    };
    if let Some(reason) = &entry.disabled {
        return Err(CallError::Disabled {
            tool: def.label(),
            reason: reason.to_string(),
        });
    }
    let narrowing = policy.narrowing(&rule, def.name()).cloned();
    Ok(Grant {
        rule,
        approval,
        narrowing,
    })
}
