//! The key layout both key-value backends share, and the records kept under it.

use crate::durable::Kept;
use serde::Deserialize;
use sha2::{Digest, Sha256};
use std::sync::Arc;
use toolmesh::ToolDef;

/// A tool name and version: the identity of one `ToolEntry`.
pub(crate) type Key = (Arc<str>, semver::Version);

/// `name@version` for messages.
pub(crate) fn label(key: &Key) -> String {
    toolmesh::spec::label(&key.0, &key.1)
}

/// The key of a definition.
pub(crate) fn key_of(def: &ToolDef) -> Key {
    (def.name().into(), def.version().clone())
}

/// Every key toolmesh keeps in etcd starts with this.
pub(crate) const PREFIX: &str = "/toolmesh/";

/// What one key under the prefix is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Slot<'a> {
    /// The cluster id, created once: every replica's snapshot epoch.
    Epoch,
    /// A registered executor ([`ExecRecord`]), attached to its lease.
    Exec(&'a str),
    /// A tool definition (an encoded `ToolSpec`), keyed by its content hash.
    Def(&'a str),
    /// The health verdict of an executor ([`HealthRecord`]), attached to its lease.
    Health(&'a str),
    /// Which replica watches an executor's health, attached to that
    /// replica's session lease.
    Watcher(&'a str),
    /// A replica that is up (empty value), attached to its session lease:
    /// the others count it among those sharing the health watches before
    /// it holds any.
    Replica(&'a str),
    /// The owner of a tool name (created once, never replaced).
    Owner(&'a str),
    /// The operator's reason for disabling a tool name.
    Disabled(&'a str),
    /// A tool's rollout (an encoded `toolmesh.v1.Rollout`).
    Rollout(&'a str),
    /// A record shared by the replicas (approval tickets), by its key.
    Shared(&'a str),
    /// Anything else under the prefix.
    Other,
}

impl<'a> Slot<'a> {
    /// Reads a raw etcd key.
    pub(crate) fn parse(key: &'a [u8]) -> Option<Slot<'a>> {
        let rest = std::str::from_utf8(key).ok()?.strip_prefix(PREFIX)?;
        if rest == "epoch" {
            return Some(Slot::Epoch);
        }
        let (kind, name) = rest.split_once('/')?;
        Some(match kind {
            "exec" => Slot::Exec(name),
            "def" => Slot::Def(name),
            "health" => Slot::Health(name),
            "watcher" => Slot::Watcher(name),
            "replica" => Slot::Replica(name),
            "owner" => Slot::Owner(name),
            "disabled" => Slot::Disabled(name),
            "rollout" => Slot::Rollout(name),
            "shared" => Slot::Shared(name),
            _ => Slot::Other,
        })
    }

    /// The raw etcd key.
    pub(crate) fn key(&self) -> Vec<u8> {
        let (kind, name) = match self {
            Slot::Epoch => return format!("{PREFIX}epoch").into_bytes(),
            Slot::Other => return PREFIX.as_bytes().to_vec(),
            Slot::Exec(n) => ("exec", n),
            Slot::Def(n) => ("def", n),
            Slot::Health(n) => ("health", n),
            Slot::Watcher(n) => ("watcher", n),
            Slot::Replica(n) => ("replica", n),
            Slot::Owner(n) => ("owner", n),
            Slot::Disabled(n) => ("disabled", n),
            Slot::Rollout(n) => ("rollout", n),
            Slot::Shared(n) => ("shared", n),
        };
        format!("{PREFIX}{kind}/{name}").into_bytes()
    }
}

/// The keys an embedded registry keeps across restarts (`--data-dir`):
/// the operator's state — tool owners, disabled tools, rollouts — each
/// with the section of the state file's first layout that held it.
pub(crate) fn durable() -> [Kept; 3] {
    [
        (Slot::Owner(""), "owners"),
        (Slot::Disabled(""), "disabled"),
        (Slot::Rollout(""), "rollouts"),
    ]
    .map(|(slot, legacy)| Kept {
        prefix: slot.key(),
        legacy,
    })
}

/// One registered executor, as every replica reads it (stored through
/// [`crate::codec`]; `Deserialize` reads the previous, JSON layout).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub(crate) struct ExecRecord {
    /// The identity that registered it ("" for anonymous registrations).
    pub(crate) owner: String,
    pub(crate) service: String,
    pub(crate) endpoint: String,
    /// The token its Execute service accepts, handed to dispatchers only
    /// ("" when it asked for none; absent in records written before).
    #[serde(default)]
    pub(crate) execute_token: String,
    /// The lease as granted, in milliseconds.
    pub(crate) ttl_ms: u64,
    /// Content hashes of the definitions it serves (`def/<hash>`).
    pub(crate) tools: Vec<String>,
}

/// A health verdict written by the replica that watches the executor
/// (stored through [`crate::codec`]; `Deserialize` reads the previous, JSON
/// layout).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub(crate) struct HealthRecord {
    /// The lease of the registration it is about (a newer registration
    /// starts healthy).
    pub(crate) lease: i64,
    pub(crate) healthy: bool,
    pub(crate) reason: String,
}

/// The content address of an encoded definition.
pub(crate) fn content_hash(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// A lease id as executors see it (hex), and back.
pub(crate) fn lease_label(lease: i64) -> String {
    format!("{lease:x}")
}

/// Reads a lease id an executor sent; `None` when it cannot be one of ours.
pub(crate) fn parse_lease(label: &str) -> Option<i64> {
    i64::from_str_radix(label, 16).ok().filter(|l| *l > 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Keys round-trip through their slots; foreign keys are not misread.
    #[test]
    fn slots_round_trip() {
        for slot in [
            Slot::Epoch,
            Slot::Exec("ex-1"),
            Slot::Def("ab12"),
            Slot::Health("ex-1"),
            Slot::Watcher("ex-1"),
            Slot::Replica("replica-1"),
            Slot::Owner("search_kb"),
            Slot::Disabled("send_email"),
            Slot::Rollout("search_kb"),
        ] {
            assert_eq!(Slot::parse(&slot.key()), Some(slot.clone()));
        }
        assert_eq!(
            Slot::parse(b"/toolmesh/shared/approval/a-1"),
            Some(Slot::Shared("approval/a-1"))
        );
        assert_eq!(Slot::parse(b"/toolmesh/later/x"), Some(Slot::Other));
        assert_eq!(Slot::parse(b"/other/exec/x"), None);
        assert_eq!(parse_lease(&lease_label(0x1234)), Some(0x1234));
        assert_eq!(parse_lease("zz"), None);
        assert_eq!(parse_lease("0"), None);
    }

    /// Disabled tools and owners survive a reopen of the memory backend
    /// over the state file; enabling removes the entry.
    #[test]
    fn operator_state_survives_a_reopen() {
        use crate::durable::DurableFile;
        use crate::kv::{Kv, MemoryKv, Txn, at_once};
        use crate::{owners, switches};
        let dir = toolmesh_testkit::TempDir::new("reopen").unwrap();
        let open = || MemoryKv::open(Some(DurableFile::in_dir(dir.path(), &durable()))).unwrap();
        // The switch of a tool alone (the rule around it, which asks whether
        // the tool is known, is tested with a registry in front).
        let disable = |kv: &MemoryKv, tool: &str, reason: Option<&str>| {
            at_once(kv.txn(Txn::write(switches::switch(tool, reason)))).unwrap();
        };
        let state = open();
        disable(&state, "send_email", Some("incident 7"));
        disable(&state, "search_kb", Some("x"));
        disable(&state, "search_kb", None);
        let names = ["search_kb".to_owned(), "get_user_info".to_owned()];
        assert!(
            at_once(owners::claim(&state, "team-a", &names))
                .unwrap()
                .is_empty()
        );
        let lost = at_once(owners::claim(&state, "team-b", &names[..1])).unwrap();
        assert_eq!(lost, ["search_kb"]);
        let again = open();
        assert_eq!(
            at_once(switches::reason(&again, "send_email"))
                .unwrap()
                .as_deref(),
            Some("incident 7")
        );
        assert_eq!(
            at_once(switches::reason(&again, "search_kb")).unwrap(),
            None
        );
        assert_eq!(
            at_once(owners::holder(&again, "search_kb"))
                .unwrap()
                .as_deref(),
            Some("team-a"),
            "first owner keeps it"
        );
    }
}
