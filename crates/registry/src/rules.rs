//! The registration rules every store applies the same way: who may take an
//! executor id or a lease, when a definition conflicts with the one other
//! executors serve, and how a tool owned elsewhere is refused.

use crate::error::RegistryError;
use crate::keys::{Key, label};
use std::sync::Arc;
use toolmesh::pb::RejectedTool;
use toolmesh::{Instance, ToolDef};

/// How many executors a conflict message names before "and N more".
const NAMED_EXECUTORS: usize = 5;

/// An executor's instance in a snapshot entry, carrying the token its
/// Execute service accepts (handed to dispatcher readers only). Both
/// stores build instances with this, so none leaves the token out.
pub(crate) fn instance(
    executor_id: Arc<str>,
    endpoint: Arc<str>,
    service: Arc<str>,
    execute_token: Arc<str>,
    healthy: bool,
) -> Instance {
    Instance {
        executor_id,
        endpoint,
        service,
        healthy,
        execute_token,
    }
}

/// Whether `owner` may register as `executor_id`: an id registered by
/// another owner is taken, and a new executor must stay within the owner's
/// cap (`live_for_owner` executors it holds now; replacing one of them does
/// not count, and anonymous registrations are not capped). Both stores ask
/// this before writing.
pub(crate) fn check_executor_slot(
    executor_id: &str,
    held_owner: Option<&str>,
    live_for_owner: usize,
    owner: &str,
    max: usize,
) -> Result<(), RegistryError> {
    match held_owner {
        Some(holder) if holder != owner => Err(RegistryError::ExecutorIdTaken {
            id: executor_id.to_owned(),
        }),
        Some(_) => Ok(()),
        None if !owner.is_empty() && live_for_owner >= max => {
            Err(RegistryError::TooManyExecutors {
                owner: owner.to_owned(),
                limit: max,
            })
        }
        None => Ok(()),
    }
}

/// Whether `owner` may renew or end the lease `lease_id`, whose
/// registration was made by `holder` (`None`: no live registration holds
/// it). Both stores ask this.
pub(crate) fn check_lease_holder(
    lease_id: &str,
    holder: Option<&str>,
    owner: &str,
) -> Result<(), RegistryError> {
    match holder {
        Some(holder) if holder == owner => Ok(()),
        Some(_) => Err(RegistryError::NotYourLease(lease_id.to_owned())),
        None => Err(RegistryError::UnknownLease(lease_id.to_owned())),
    }
}

/// Whether `executor_id` may serve `def` in the entry `key`, whose
/// definition is `current` and whose instances are `instances`: refused
/// when other executors serve it and the two definitions differ in a field
/// that matters. `Ok(true)` when others serve it (their definition stays),
/// `Ok(false)` when nobody else does. Both stores decide with this.
pub(crate) fn check_conflict(
    key: &Key,
    current: &ToolDef,
    instances: &[Instance],
    executor_id: &str,
    def: &ToolDef,
) -> Result<bool, RejectedTool> {
    let others: Vec<&str> = instances
        .iter()
        .filter(|i| &*i.executor_id != executor_id)
        .map(|i| &*i.executor_id)
        .collect();
    if others.is_empty() {
        return Ok(false);
    }
    let fields = current.conflicts_with(def);
    if fields.is_empty() {
        Ok(true)
    } else {
        Err(RejectedTool {
            name: def.name().to_owned(),
            reason: conflict_reason(key, &others, &fields),
        })
    }
}

/// The refusal of a tool name another owner holds.
pub(crate) fn owned_elsewhere(name: &str, holder: &str, owner: &str) -> RejectedTool {
    RejectedTool {
        name: name.to_owned(),
        reason: format!(
            "tool {name} belongs to owner {holder:?}; an executor registering as {owner:?} cannot register, replace or shadow it: choose a name in your own namespace"
        ),
    }
}

fn conflict_reason(key: &Key, executors: &[&str], fields: &[&str]) -> String {
    let noun = if executors.len() == 1 {
        "executor"
    } else {
        "executors"
    };
    let mut named = executors
        .iter()
        .take(NAMED_EXECUTORS)
        .copied()
        .collect::<Vec<_>>()
        .join(", ");
    if executors.len() > NAMED_EXECUTORS {
        named.push_str(&format!(" and {} more", executors.len() - NAMED_EXECUTORS));
    }
    format!(
        "conflicts with {} as served by {noun} {named}: fields differ: {}; register it under a new version",
        label(key),
        fields.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::{check_conflict, check_executor_slot, check_lease_holder};
    use crate::error::RegistryError;
    use crate::keys::key_of;
    use toolmesh::pb::ToolSpec;
    use toolmesh::{Instance, ToolDef};

    fn def(description: &str) -> ToolDef {
        ToolDef::new(ToolSpec {
            name: "search_kb".into(),
            version: "1.0.0".into(),
            description: description.into(),
            input_schema: r#"{"type":"object"}"#.into(),
            ..ToolSpec::default()
        })
        .unwrap()
    }

    fn served_by(id: &str) -> Instance {
        Instance {
            executor_id: id.into(),
            endpoint: "127.0.0.1:1".into(),
            service: "kb".into(),
            healthy: true,
            execute_token: "".into(),
        }
    }

    /// Only the owner that registered may use a lease; an unknown lease is
    /// unknown to everyone.
    #[test]
    fn lease_holders() {
        assert!(check_lease_holder("l1", Some("bob"), "bob").is_ok());
        assert!(check_lease_holder("l1", Some(""), "").is_ok());
        assert!(matches!(
            check_lease_holder("l1", Some("alice"), "bob"),
            Err(RegistryError::NotYourLease(l)) if l == "l1"
        ));
        assert!(matches!(
            check_lease_holder("l1", None, "bob"),
            Err(RegistryError::UnknownLease(l)) if l == "l1"
        ));
    }

    /// A differing definition is refused only while other executors serve
    /// the entry; the same one joins them; alone, an executor may change it.
    #[test]
    fn conflicts() {
        let current = def("Searches.");
        let key = key_of(&current);
        let others = [served_by("kb-1"), served_by("kb-2")];
        let reject = check_conflict(&key, &current, &others, "kb-3", &def("Other.")).unwrap_err();
        assert_eq!(reject.name, "search_kb");
        assert!(
            reject.reason.contains("executors kb-1, kb-2") && reject.reason.contains("description"),
            "{}",
            reject.reason
        );
        assert_eq!(
            check_conflict(&key, &current, &others, "kb-3", &def("Searches.")),
            Ok(true)
        );
        let alone = [served_by("kb-3")];
        assert_eq!(
            check_conflict(&key, &current, &alone, "kb-3", &def("Other.")),
            Ok(false)
        );
        assert_eq!(
            check_conflict(&key, &current, &[], "kb-3", &def("Other.")),
            Ok(false)
        );
    }

    /// Another owner's id is taken; a new executor past the owner's cap is
    /// refused; replacing one's own executor and anonymous registrations are
    /// not capped.
    #[test]
    fn executor_slots() {
        assert!(matches!(
            check_executor_slot("ex", Some("alice"), 0, "bob", 10),
            Err(RegistryError::ExecutorIdTaken { id }) if id == "ex"
        ));
        assert!(matches!(
            check_executor_slot("ex", Some(""), 0, "bob", 10),
            Err(RegistryError::ExecutorIdTaken { .. })
        ));
        assert!(matches!(
            check_executor_slot("ex", None, 2, "bob", 2),
            Err(RegistryError::TooManyExecutors { owner, limit: 2 }) if owner == "bob"
        ));
        assert!(check_executor_slot("ex", None, 1, "bob", 2).is_ok());
        assert!(check_executor_slot("ex", Some("bob"), 2, "bob", 2).is_ok());
        assert!(check_executor_slot("ex", None, 5, "", 2).is_ok());
    }
}
