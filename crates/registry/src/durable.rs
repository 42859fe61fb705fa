//! Operator state that must survive an embedded registry's restart —
//! disabled tools, rollouts and which owner each tool name belongs to —
//! kept as one small JSON file in the data directory, replaced atomically
//! on every change to those keys of the memory backend.

use crate::keys::Slot;
use crate::rollouts::RolloutRecord;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

/// The file's name inside the data directory.
pub const STATE_FILE: &str = "registry-state.json";

#[derive(Debug, Default, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Contents {
    /// Tool name → the operator's reason.
    #[serde(default)]
    disabled: BTreeMap<String, String>,
    /// Tool name → the owner that first registered it.
    #[serde(default)]
    owners: BTreeMap<String, String>,
    /// Tool name → its rollout (canary), in whatever state.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    rollouts: BTreeMap<String, RolloutRecord>,
}

/// The state file could not be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("registry state file {path}: {problem}")]
pub(crate) struct StateFileError {
    /// The file.
    pub(crate) path: PathBuf,
    /// What is wrong and what to do.
    pub(crate) problem: String,
}

/// A key and its value.
pub(crate) type KeyValue = (Vec<u8>, Vec<u8>);

/// The state file of an embedded registry: where the memory backend keeps
/// the keys that must survive a restart (tool owners, disabled tools,
/// rollouts), in the file's own JSON layout.
#[derive(Debug)]
pub(crate) struct DurableFile {
    path: PathBuf,
}

impl DurableFile {
    /// The state file in `dir` (none yet is fine).
    pub(crate) fn in_dir(dir: &Path) -> DurableFile {
        DurableFile {
            path: dir.join(STATE_FILE),
        }
    }

    /// Whether the file keeps `key`.
    pub(crate) fn keeps(key: &[u8]) -> bool {
        matches!(
            Slot::parse(key),
            Some(Slot::Owner(_) | Slot::Disabled(_) | Slot::Rollout(_))
        )
    }

    /// The keys and values the file holds (none when there is no file).
    pub(crate) fn load(&self) -> Result<Vec<KeyValue>, StateFileError> {
        let path = &self.path;
        let contents: Contents = match std::fs::read_to_string(path) {
            Ok(text) => serde_json::from_str(&text).map_err(|e| StateFileError {
                path: path.clone(),
                problem: format!("is not a valid state file ({e}); fix or move it away"),
            })?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Contents::default(),
            Err(e) => {
                return Err(StateFileError {
                    path: path.clone(),
                    problem: format!("cannot be read: {e}"),
                });
            }
        };
        let mut kept = Vec::new();
        for (name, owner) in contents.owners {
            kept.push((Slot::Owner(&name).key(), owner.into_bytes()));
        }
        for (name, reason) in contents.disabled {
            kept.push((Slot::Disabled(&name).key(), reason.into_bytes()));
        }
        for (name, record) in contents.rollouts {
            let value = serde_json::to_vec(&record).unwrap_or_default();
            kept.push((Slot::Rollout(&name).key(), value));
        }
        Ok(kept)
    }

    /// Replaces the file with `kept` (temp file, fsync, rename).
    pub(crate) fn save<'a>(
        &self,
        kept: impl Iterator<Item = (&'a [u8], &'a [u8])>,
    ) -> Result<(), StateFileError> {
        let mut contents = Contents::default();
        let text = |value: &[u8]| String::from_utf8_lossy(value).into_owned();
        for (key, value) in kept {
            match Slot::parse(key) {
                Some(Slot::Owner(name)) => {
                    contents.owners.insert(name.to_owned(), text(value));
                }
                Some(Slot::Disabled(name)) => {
                    contents.disabled.insert(name.to_owned(), text(value));
                }
                Some(Slot::Rollout(name)) => match serde_json::from_slice(value) {
                    Ok(record) => {
                        contents.rollouts.insert(name.to_owned(), record);
                    }
                    Err(error) => tracing::error!(tool = name, %error, "rollout not saved"),
                },
                _ => {}
            }
        }
        write_atomically(&self.path, &contents)
    }
}

fn write_atomically(path: &Path, contents: &Contents) -> Result<(), StateFileError> {
    let fail = |e: std::io::Error| StateFileError {
        path: path.to_owned(),
        problem: format!("cannot be written: {e}"),
    };
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(fail)?;
    }
    let text = serde_json::to_string_pretty(contents).unwrap_or_default();
    let temp = path.with_extension("json.tmp");
    let mut file = std::fs::File::create(&temp).map_err(fail)?;
    file.write_all(text.as_bytes()).map_err(fail)?;
    file.sync_all().map_err(fail)?;
    std::fs::rename(&temp, path).map_err(fail)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kv::{Kv, MemoryKv, Txn, at_once};
    use crate::{owners, switches};
    use toolmesh_testkit::TempDir;

    fn open(dir: Option<&TempDir>) -> MemoryKv {
        MemoryKv::open(dir.map(|d| DurableFile::in_dir(d.path()))).unwrap()
    }

    /// Writes the switch of `tool` (the rule around it, which asks whether
    /// the tool is known, is tested with a registry in front).
    fn disable(kv: &MemoryKv, tool: &str, reason: Option<&str>) {
        at_once(kv.txn(Txn::write(switches::switch(tool, reason)))).unwrap();
    }

    /// Disabled tools and owners survive a reopen; enabling removes the entry.
    #[test]
    fn survives_a_reopen() {
        let dir = TempDir::new("reopen").unwrap();
        let state = open(Some(&dir));
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
        let again = open(Some(&dir));
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

    /// A corrupt file is refused with its path and what to do, not ignored.
    #[test]
    fn corrupt_file_is_refused() {
        let dir = TempDir::new("corrupt").unwrap();
        std::fs::write(dir.join(STATE_FILE), "{not json").unwrap();
        let err = MemoryKv::open(Some(DurableFile::in_dir(dir.path())))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains(STATE_FILE) && err.contains("fix or move it away"),
            "{err}"
        );
    }

    /// Without a data dir the state lives in memory.
    #[test]
    fn memory_only() {
        let state = open(None);
        disable(&state, "t", Some("r"));
        assert_eq!(
            at_once(switches::reason(&state, "t")).unwrap().as_deref(),
            Some("r")
        );
    }
}
