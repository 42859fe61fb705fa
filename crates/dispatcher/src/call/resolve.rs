//! Resolve: the tool a call names (`name`, `name@1`, `name@1.2.3`) in the
//! pinned or newest snapshot, with close names offered when it is unknown.

use crate::error::CallError;
use std::sync::Arc;
use toolmesh::snapshot::ResolveError;
use toolmesh::{Snapshot, ToolEntry, ToolRef, suggest};
use toolmesh_governance::{Policy, Principal};

/// The entry `tool` names in `snapshot` (pinned or newest), with the
/// instances and operator switch of `current`: a pin fixes the spec a run
/// sees, never the kill switch. Only names `who` may use are offered as
/// suggestions, so a refusal never reveals a hidden tool.
pub(crate) fn tool(
    snapshot: &Snapshot,
    current: &Snapshot,
    policy: &Policy,
    who: &Principal,
    tool: &str,
) -> Result<Arc<ToolEntry>, CallError> {
    let reference = ToolRef::parse(tool).map_err(|e| CallError::BadReference(e.to_string()))?;
    match snapshot.resolve(&reference) {
        Ok(entry) if std::ptr::eq(snapshot, current) => Ok(entry.clone()),
        Ok(entry) => Ok(entry.as_of(current)),
        Err(ResolveError::UnknownTool { name }) => {
            let visible = snapshot.names().filter(|n| {
                snapshot
                    .versions(n)
                    .last()
                    .is_some_and(|e| policy.decide(who, e.def.spec()).is_allowed())
            });
            Err(CallError::UnknownTool {
                suggestions: suggest::close_names(&name, visible, 3)
                    .into_iter()
                    .map(str::to_owned)
                    .collect(),
                name,
            })
        }
        Err(other) => Err(CallError::BadReference(other.to_string())),
    }
}
