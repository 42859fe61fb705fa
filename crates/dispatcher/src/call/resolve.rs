//! Resolve: the tool a call names (`name`, `name@1`, `name@1.2.3`) in the
//! pinned or newest snapshot, with close names offered when it is unknown.
//! A bare name under a rollout (canary) resolves to the version the
//! caller's sticky assignment picks: [`version`] decides it for ListTools,
//! Invoke and explain alike.

use crate::error::CallError;
use crate::metrics::ToolHandles;
use std::sync::Arc;
use toolmesh::Principal;
use toolmesh::reference::VersionPattern;
use toolmesh::rollout::{Assignment, Audience, Caller, RolloutState, Sticky};
use toolmesh::snapshot::ResolveError;
use toolmesh::{Rollout, Snapshot, ToolEntry, ToolRef, suggest};
use toolmesh_policy::Policy;

/// What resolving a call gives: the entry to send it to, how a rollout
/// routed the caller (when one did) and the entry's metric handles.
pub(crate) struct Resolved {
    pub(crate) entry: Arc<ToolEntry>,
    pub(crate) routed: Option<Routed>,
    pub(crate) handles: Arc<ToolHandles>,
}

/// How a rollout routed a caller.
#[derive(Debug, Clone)]
pub(crate) struct Routed {
    /// The tool's rollout.
    pub(crate) rollout: Arc<Rollout>,
    /// Whether its share and filters give the caller the canary, and why.
    pub(crate) assignment: Assignment,
    /// Whether the caller gets the canary (assigned, and the canary is
    /// callable).
    pub(crate) canary: bool,
}

impl Routed {
    /// `canary` or `stable`, as result metadata and the audit log say it.
    pub(crate) fn side(&self) -> &'static str {
        if self.canary { "canary" } else { "stable" }
    }

    /// Which version `caller` gets (`entry`) and why, in one sentence, as
    /// much as `audience` may read.
    pub(crate) fn explain(
        &self,
        entry: &ToolEntry,
        caller: &Caller<'_>,
        audience: Audience,
    ) -> String {
        let rollout = &*self.rollout;
        let why = self.assignment.describe(rollout, caller, audience);
        let label = rollout.canary_label();
        let gets = format!("{} {}", self.side(), entry.def.label());
        match (self.assignment.is_canary(), self.canary) {
            (true, false) => format!(
                "{why}, but {label} is not callable now (not registered, disabled or without a healthy executor): it gets {gets}"
            ),
            _ if rollout.state == RolloutState::Active => format!(
                "{label} is rolled out to {} of callers; {why}: it gets {gets}",
                rollout.share
            ),
            _ => format!("{why}: it gets {gets}"),
        }
    }
}

/// The version a bare name gives a caller.
#[derive(Debug, Clone)]
pub(crate) struct Choice<'s> {
    pub(crate) entry: &'s Arc<ToolEntry>,
    /// How its rollout routed the caller, when one applies.
    pub(crate) routed: Option<Routed>,
}

/// The caller as rollouts see it: an authenticated caller by tenant and
/// principal, an anonymous one by its session (none: never a canary).
pub(crate) fn caller<'a>(who: &'a Principal, session: &'a str) -> Caller<'a> {
    let sticky = match (who.anonymous, session) {
        (false, _) => Sticky::Principal,
        (true, "") => Sticky::None,
        (true, session) => Sticky::Session(session),
    };
    Caller {
        tenant: &who.tenant,
        principal: &who.name,
        sticky,
    }
}

/// Whether an entry of `snapshot` is exposed as `current` has it (a pin
/// fixes specs, never the switch or the instances).
pub(crate) fn exposed_in<'c>(
    snapshot: &Snapshot,
    current: &'c Snapshot,
) -> impl Fn(&Arc<ToolEntry>) -> bool + 'c {
    let pinned = snapshot.version() != current.version() || snapshot.epoch() != current.epoch();
    move |entry| {
        if pinned {
            entry.as_of(current).exposed()
        } else {
            entry.exposed()
        }
    }
}

/// The version the bare `name` gives `caller` in `snapshot` among those
/// `usable` accepts: under an active rollout the canary when the caller is
/// assigned to it (and it is usable), else the stable version (the newest
/// other one); under an aborted rollout the stable version; otherwise the
/// newest stable version. ListTools, Invoke and explain all ask this.
pub(crate) fn version<'s>(
    snapshot: &'s Snapshot,
    name: &str,
    caller: &Caller<'_>,
    usable: impl Fn(&Arc<ToolEntry>) -> bool,
) -> Option<Choice<'s>> {
    let rollout = snapshot
        .rollout(name)
        .filter(|r| r.state != RolloutState::Promoted);
    let Some(rollout) = rollout else {
        let entry = snapshot.newest_stable(name, usable)?;
        return Some(Choice {
            entry,
            routed: None,
        });
    };
    let assignment = rollout.assign(caller);
    let canary = snapshot
        .get(name, &rollout.canary)
        .filter(|e| assignment.is_canary() && usable(e));
    let entry = match canary {
        Some(entry) => entry,
        None => rollout.stable(snapshot, &usable)?,
    };
    Some(Choice {
        entry,
        routed: Some(Routed {
            rollout: rollout.clone(),
            assignment,
            canary: canary.is_some(),
        }),
    })
}

/// The entry `reference` names for `caller` in `snapshot`, and how a
/// rollout routed it: an exposed version when there is one, else the one
/// that reports why it is not callable. Only a bare name routes by rollout.
pub(crate) fn pick(
    snapshot: &Snapshot,
    current: &Snapshot,
    reference: &ToolRef<'_>,
    caller: &Caller<'_>,
) -> Result<(Arc<ToolEntry>, Option<Routed>), CallError> {
    if reference.version == VersionPattern::Newest {
        let name = reference.name;
        let chosen = version(snapshot, name, caller, exposed_in(snapshot, current))
            .or_else(|| version(snapshot, name, caller, |_| true));
        if let Some(choice) = chosen {
            return Ok((choice.entry.clone(), choice.routed));
        }
        if let Some(rollout) = snapshot
            .rollout(name)
            .filter(|r| r.state != RolloutState::Promoted)
        {
            return Err(CallError::NoStableVersion {
                tool: name.to_owned(),
                why: format!(
                    "{}, and no other stable version is registered",
                    rollout
                        .assign(caller)
                        .describe(rollout, caller, Audience::Caller)
                ),
            });
        }
    }
    match snapshot.resolve(reference) {
        Ok(entry) => Ok((entry.clone(), None)),
        Err(ResolveError::UnknownTool { name }) => Err(CallError::UnknownTool {
            name,
            suggestions: Vec::new(),
        }),
        Err(other) => Err(CallError::BadReference(other.to_string())),
    }
}

/// The entry `tool` names for `who` (in session `session`) in `snapshot`
/// (pinned or newest), with the instances and operator switch of
/// `current`: a pin fixes the spec a run sees, never the kill switch. A
/// name `who` may not use anywhere is answered as a name that does not
/// exist ([`unknown`]), whatever went wrong with it, so a refusal never
/// reveals a hidden tool.
pub(crate) fn tool(
    snapshot: &Snapshot,
    current: &Snapshot,
    policy: &Policy,
    who: &Principal,
    session: &str,
    tool: &str,
) -> Result<(Arc<ToolEntry>, Option<Routed>), CallError> {
    let reference = ToolRef::parse(tool).map_err(|e| CallError::BadReference(e.to_string()))?;
    match pick(snapshot, current, &reference, &caller(who, session)) {
        Ok((entry, routed)) if std::ptr::eq(snapshot, current) => Ok((entry, routed)),
        Ok((entry, routed)) => Ok((entry.as_of(current), routed)),
        Err(_) if !may_see(snapshot, policy, who, reference.name) => {
            Err(unknown(snapshot, policy, who, reference.name))
        }
        Err(error) => Err(error),
    }
}

/// Whether the policy gives `who` some version of `name` in `snapshot`.
pub(crate) fn may_see(snapshot: &Snapshot, policy: &Policy, who: &Principal, name: &str) -> bool {
    snapshot
        .versions(name)
        .iter()
        .any(|e| policy.decide(who, e.def.spec()).is_allowed())
}

/// The answer to `who` for `name`, which it cannot use: the same whether
/// no tool has that name or the policy hides it, with close names only
/// among the tools `who` may use.
pub(crate) fn unknown(
    snapshot: &Snapshot,
    policy: &Policy,
    who: &Principal,
    name: &str,
) -> CallError {
    let visible = snapshot
        .names()
        .filter(|n| may_see(snapshot, policy, who, n));
    CallError::UnknownTool {
        suggestions: suggest::close_names(name, visible, 3)
            .into_iter()
            .map(str::to_owned)
            .collect(),
        name: name.to_owned(),
    }
}

/// Which side of each routing rollout `caller` is on in `snapshot` (one
/// character per rollout, in tool order): part of a listing's cache key,
/// empty when no rollout routes.
pub(crate) fn rollout_view(snapshot: &Snapshot, caller: &Caller<'_>) -> String {
    snapshot
        .rollouts()
        .filter(|r| r.state == RolloutState::Active)
        .map(|r| {
            if r.assign(caller).is_canary() {
                'c'
            } else {
                's'
            }
        })
        .collect()
}

#[cfg(test)]
mod tests;
