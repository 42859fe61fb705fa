//! Operator state that must survive a registry restart — disabled tools,
//! rollouts and which owner each tool name belongs to — kept as one small
//! JSON file in the data directory, replaced atomically on every change.

use crate::error::RegistryError;
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

/// Disabled tools and tool owners, in memory and (with a data dir) on disk.
#[derive(Debug, Default)]
pub(crate) struct Durable {
    path: Option<PathBuf>,
    contents: Contents,
}

impl Durable {
    /// Loads the state file from `dir` (none yet is fine); without a
    /// directory the state lives in memory only.
    pub(crate) fn open(dir: Option<&Path>) -> Result<Self, RegistryError> {
        let Some(dir) = dir else {
            return Ok(Durable::default());
        };
        let path = dir.join(STATE_FILE);
        let contents = match std::fs::read_to_string(&path) {
            Ok(text) => serde_json::from_str(&text).map_err(|e| RegistryError::State {
                path: path.clone(),
                problem: format!("is not a valid state file ({e}); fix or move it away"),
            })?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Contents::default(),
            Err(e) => {
                return Err(RegistryError::State {
                    path,
                    problem: format!("cannot be read: {e}"),
                });
            }
        };
        Ok(Durable {
            path: Some(path),
            contents,
        })
    }

    /// The operator's reason, if `tool` is disabled.
    pub(crate) fn disabled(&self, tool: &str) -> Option<&str> {
        self.contents.disabled.get(tool).map(String::as_str)
    }

    /// Switches `tool` off (`Some`) or on (`None`) and saves.
    pub(crate) fn set_disabled(
        &mut self,
        tool: &str,
        reason: Option<&str>,
    ) -> Result<(), RegistryError> {
        let before = self.contents.clone();
        match reason {
            Some(reason) => self
                .contents
                .disabled
                .insert(tool.to_owned(), reason.to_owned()),
            None => self.contents.disabled.remove(tool),
        };
        self.save_or_restore(before)
    }

    /// Every kept rollout; one the file holds but this build cannot read
    /// is left out, saying so.
    pub(crate) fn rollouts(&self) -> Vec<toolmesh::Rollout> {
        self.contents
            .rollouts
            .iter()
            .filter_map(|(tool, record)| match record.clone().try_into() {
                Ok(rollout) => Some(rollout),
                Err(problem) => {
                    tracing::error!(tool, %problem, "stored rollout left out");
                    None
                }
            })
            .collect()
    }

    /// Keeps `rollout` (replacing the tool's earlier one) and saves.
    pub(crate) fn set_rollout(&mut self, rollout: &toolmesh::Rollout) -> Result<(), RegistryError> {
        let before = self.contents.clone();
        self.contents
            .rollouts
            .insert(rollout.tool.clone(), RolloutRecord::from(rollout));
        self.save_or_restore(before)
    }

    /// The owner of `tool`, if some owner has claimed it.
    pub(crate) fn owner(&self, tool: &str) -> Option<&str> {
        self.contents.owners.get(tool).map(String::as_str)
    }

    /// Claims unowned `tools` for `owner` and saves when anything changed.
    pub(crate) fn claim<'a>(
        &mut self,
        owner: &str,
        tools: impl IntoIterator<Item = &'a str>,
    ) -> Result<(), RegistryError> {
        let before = self.contents.clone();
        let mut changed = false;
        for tool in tools {
            if !self.contents.owners.contains_key(tool) {
                self.contents
                    .owners
                    .insert(tool.to_owned(), owner.to_owned());
                changed = true;
            }
        }
        if changed {
            self.save_or_restore(before)
        } else {
            Ok(())
        }
    }

    /// Writes the file (temp file, fsync, rename); on failure the memory
    /// state goes back to `before`, so memory never claims what disk lost.
    fn save_or_restore(&mut self, before: Contents) -> Result<(), RegistryError> {
        let Some(path) = &self.path else {
            return Ok(());
        };
        let result = write_atomically(path, &self.contents);
        if result.is_err() {
            self.contents = before;
        }
        result
    }
}

fn write_atomically(path: &Path, contents: &Contents) -> Result<(), RegistryError> {
    let fail = |e: std::io::Error| RegistryError::State {
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
    use toolmesh_testkit::TempDir;

    /// Disabled tools and owners survive a reopen; enabling removes the entry.
    #[test]
    fn survives_a_reopen() {
        let dir = TempDir::new("reopen").unwrap();
        let mut state = Durable::open(Some(dir.path())).unwrap();
        state
            .set_disabled("send_email", Some("incident 7"))
            .unwrap();
        state.set_disabled("search_kb", Some("x")).unwrap();
        state.set_disabled("search_kb", None).unwrap();
        state
            .claim("team-a", ["search_kb", "get_user_info"])
            .unwrap();
        state.claim("team-b", ["search_kb"]).unwrap();
        let again = Durable::open(Some(dir.path())).unwrap();
        assert_eq!(again.disabled("send_email"), Some("incident 7"));
        assert_eq!(again.disabled("search_kb"), None);
        assert_eq!(
            again.owner("search_kb"),
            Some("team-a"),
            "first owner keeps it"
        );
    }

    /// A corrupt file is refused with its path and what to do, not ignored.
    #[test]
    fn corrupt_file_is_refused() {
        let dir = TempDir::new("corrupt").unwrap();
        std::fs::write(dir.join(STATE_FILE), "{not json").unwrap();
        let err = Durable::open(Some(dir.path())).unwrap_err().to_string();
        assert!(
            err.contains(STATE_FILE) && err.contains("fix or move it away"),
            "{err}"
        );
    }

    /// Without a data dir the state lives in memory.
    #[test]
    fn memory_only() {
        let mut state = Durable::open(None).unwrap();
        state.set_disabled("t", Some("r")).unwrap();
        assert_eq!(state.disabled("t"), Some("r"));
    }
}
