//! The operator's switch over the key-value seam: a tool name disabled (with
//! the reason) or enabled again, for every version at once.

use crate::error::RegistryError;
use crate::keys::Slot;
use crate::kv::{Kv, Op, Txn};
use toolmesh::Snapshot;

/// A switch as written.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Switched {
    /// The revision after the write.
    pub(crate) revision: i64,
    /// Whether the stored switch changed (enabling an enabled tool changes
    /// nothing).
    pub(crate) changed: bool,
}

/// The reason `tool` is disabled for, if it is.
#[cfg(test)]
pub(crate) async fn reason(kv: &dyn Kv, tool: &str) -> Result<Option<String>, RegistryError> {
    let entry = kv.get(&Slot::Disabled(tool).key()).await?;
    Ok(entry.map(|e| String::from_utf8_lossy(&e.value).into_owned()))
}

/// Disables (`Some(reason)`) or enables every version of `tool`: refused
/// for a name neither `snapshot` nor the store knows.
pub(crate) async fn write(
    kv: &dyn Kv,
    snapshot: &Snapshot,
    tool: &str,
    reason: Option<&str>,
) -> Result<Switched, RegistryError> {
    let entry = kv.get(&Slot::Disabled(tool).key()).await?;
    let was_disabled = entry.is_some();
    if snapshot.versions(tool).is_empty() && !was_disabled {
        return Err(RegistryError::UnknownTool(tool.to_owned()));
    }
    if entry.map(|e| e.value).as_deref() == reason.map(str::as_bytes) {
        // Already so: nothing is written, and no version is spent.
        return Ok(Switched {
            revision: kv.revision().await?,
            changed: false,
        });
    }
    let revision = kv.txn(Txn::write(switch(tool, reason))).await?.revision;
    Ok(Switched {
        revision,
        changed: true,
    })
}

/// The write that disables `tool` (`Some(reason)`) or enables it.
pub(crate) fn switch(tool: &str, reason: Option<&str>) -> Op {
    let key = Slot::Disabled(tool).key();
    match reason {
        Some(reason) => Op::Put {
            key,
            value: reason.as_bytes().to_vec(),
            lease: 0,
        },
        None => Op::Delete { key },
    }
}
