//! Keys an embedded registry keeps across restarts: the keys under the
//! prefixes the registry hands the memory backend, opaque here, kept as
//! one small JSON file in the data directory and replaced atomically on
//! every change to them.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

/// The file's name inside the data directory.
pub const STATE_FILE: &str = "registry-state.json";

/// The section of the file that holds the keys, by key.
const KEYS: &str = "keys";

/// Keys under `prefix` are kept. `legacy` names the section that held
/// them, by the rest of the key, in the file's first layout (one section
/// per kind of record), which is still read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Kept {
    /// The keys kept start with it.
    pub(crate) prefix: Vec<u8>,
    /// Their section in the first layout.
    pub(crate) legacy: &'static str,
}

/// A value as the file holds it: text when it is UTF-8 (so that an
/// operator can read the file), else its bytes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
enum Value {
    Text(String),
    Bytes(Vec<u8>),
}

impl Value {
    fn of(bytes: &[u8]) -> Value {
        match std::str::from_utf8(bytes) {
            Ok(text) => Value::Text(text.to_owned()),
            Err(_) => Value::Bytes(bytes.to_vec()),
        }
    }

    fn into_bytes(self) -> Vec<u8> {
        match self {
            Value::Text(text) => text.into_bytes(),
            Value::Bytes(bytes) => bytes,
        }
    }
}

/// What the file holds: every kept key and its value.
#[derive(Debug, Default, Serialize)]
struct Contents<'a> {
    keys: BTreeMap<&'a str, Value>,
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
/// the keys under the prefixes it was handed.
#[derive(Debug)]
pub(crate) struct DurableFile {
    path: PathBuf,
    kept: Vec<Kept>,
}

impl DurableFile {
    /// The state file in `dir` (none yet is fine), keeping the keys under
    /// each of `kept`.
    pub(crate) fn in_dir(dir: &Path, kept: &[Kept]) -> DurableFile {
        DurableFile {
            path: dir.join(STATE_FILE),
            kept: kept.to_vec(),
        }
    }

    /// Whether the file keeps `key`.
    pub(crate) fn keeps(&self, key: &[u8]) -> bool {
        self.kept.iter().any(|k| key.starts_with(&k.prefix))
    }

    fn problem(&self, problem: String) -> StateFileError {
        StateFileError {
            path: self.path.clone(),
            problem,
        }
    }

    /// The keys and values the file holds (none when there is no file),
    /// in either layout.
    pub(crate) fn load(&self) -> Result<Vec<KeyValue>, StateFileError> {
        let text = match std::fs::read_to_string(&self.path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(self.problem(format!("cannot be read: {e}"))),
        };
        let invalid = |why: String| {
            self.problem(format!(
                "is not a valid state file ({why}); fix or move it away"
            ))
        };
        let sections: BTreeMap<String, BTreeMap<String, serde_json::Value>> =
            serde_json::from_str(&text).map_err(|e| invalid(e.to_string()))?;
        let mut loaded = Vec::new();
        for (section, entries) in sections {
            if section == KEYS {
                for (key, value) in entries {
                    let value: Value = serde_json::from_value(value)
                        .map_err(|e| invalid(format!("the value of {key}: {e}")))?;
                    if !self.keeps(key.as_bytes()) {
                        return Err(invalid(format!("{key} is not a key it keeps")));
                    }
                    loaded.push((key.into_bytes(), value.into_bytes()));
                }
                continue;
            }
            let Some(kept) = self.kept.iter().find(|k| k.legacy == section) else {
                return Err(invalid(format!("unknown section {section:?}")));
            };
            for (rest, value) in entries {
                // A record that was a JSON document is its text again.
                let value = match value {
                    serde_json::Value::String(text) => text.into_bytes(),
                    other => other.to_string().into_bytes(),
                };
                let key = [kept.prefix.as_slice(), rest.as_bytes()].concat();
                loaded.push((key, value));
            }
        }
        Ok(loaded)
    }

    /// Replaces the file with `kept` (temp file, fsync, rename).
    pub(crate) fn save<'a>(
        &self,
        kept: impl Iterator<Item = (&'a [u8], &'a [u8])>,
    ) -> Result<(), StateFileError> {
        let mut contents = Contents::default();
        for (key, value) in kept {
            // Every key the registry writes is text.
            let Ok(key) = std::str::from_utf8(key) else {
                tracing::error!(key = %String::from_utf8_lossy(key), "key not saved: not UTF-8");
                continue;
            };
            contents.keys.insert(key, Value::of(value));
        }
        self.write_atomically(&contents)
    }

    fn write_atomically(&self, contents: &Contents<'_>) -> Result<(), StateFileError> {
        let fail = |e: std::io::Error| self.problem(format!("cannot be written: {e}"));
        if let Some(dir) = self.path.parent() {
            std::fs::create_dir_all(dir).map_err(fail)?;
        }
        let text = serde_json::to_string_pretty(contents).unwrap_or_default();
        let temp = self.path.with_extension("json.tmp");
        let mut file = std::fs::File::create(&temp).map_err(fail)?;
        file.write_all(text.as_bytes()).map_err(fail)?;
        file.sync_all().map_err(fail)?;
        std::fs::rename(&temp, &self.path).map_err(fail)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kv::{Kv, MemoryKv, Op, Txn, at_once};
    use toolmesh_testkit::TempDir;

    fn open(dir: &TempDir) -> Result<MemoryKv, StateFileError> {
        let kept = [("/p/a/", "as"), ("/p/b/", "bs")].map(|(prefix, legacy)| Kept {
            prefix: prefix.as_bytes().to_vec(),
            legacy,
        });
        MemoryKv::open(Some(DurableFile::in_dir(dir.path(), &kept)))
    }

    fn put(kv: &MemoryKv, key: &str, value: &[u8]) {
        let op = Op::Put {
            key: key.as_bytes().to_vec(),
            value: value.to_vec(),
            lease: 0,
        };
        at_once(kv.txn(Txn::write(op))).unwrap();
    }

    fn delete(kv: &MemoryKv, key: &str) {
        let op = Op::Delete {
            key: key.as_bytes().to_vec(),
        };
        at_once(kv.txn(Txn::write(op))).unwrap();
    }

    /// Every key and value the memory backend holds.
    fn held(kv: &MemoryKv) -> Vec<(String, Vec<u8>)> {
        let (entries, _) = at_once(kv.range(b"", false)).unwrap();
        entries
            .into_iter()
            .map(|e| (String::from_utf8(e.key).unwrap(), e.value))
            .collect()
    }

    /// The keys under the prefixes handed to it survive a reopen, whatever
    /// their values (text or not); a deleted key is gone; keys under other
    /// prefixes live in memory only.
    #[test]
    fn kept_keys_survive_a_reopen() {
        let dir = TempDir::new("reopen").unwrap();
        let kv = open(&dir).unwrap();
        put(&kv, "/p/a/x", b"text");
        put(&kv, "/p/b/y", &[0xff, 0, 1]);
        put(&kv, "/p/b/z", b"soon gone");
        put(&kv, "/p/c/w", b"memory only");
        delete(&kv, "/p/b/z");
        let again = open(&dir).unwrap();
        assert_eq!(
            held(&again),
            [
                ("/p/a/x".to_owned(), b"text".to_vec()),
                ("/p/b/y".to_owned(), vec![0xff, 0, 1]),
            ]
        );
    }

    /// A file in the first layout (a section per kind of record, named by
    /// the rest of the key) loads under the prefixes handed to it: text
    /// values as they were, JSON documents as their text; the next save
    /// writes the current layout, which loads to the same.
    #[test]
    fn first_layout_loads() {
        let dir = TempDir::new("first-layout").unwrap();
        let first = r#"{"as": {"x": "team-a"}, "bs": {"y": {"n": 1}}}"#;
        std::fs::write(dir.join(STATE_FILE), first).unwrap();
        let kv = open(&dir).unwrap();
        let loaded = [
            ("/p/a/x".to_owned(), b"team-a".to_vec()),
            ("/p/b/y".to_owned(), br#"{"n":1}"#.to_vec()),
        ];
        assert_eq!(held(&kv), loaded);
        put(&kv, "/p/c/w", b"memory only");
        put(&kv, "/p/a/v", b"new");
        let again = open(&dir).unwrap();
        let mut expected = loaded.to_vec();
        expected.insert(0, ("/p/a/v".to_owned(), b"new".to_vec()));
        assert_eq!(held(&again), expected);
        let text = std::fs::read_to_string(dir.join(STATE_FILE)).unwrap();
        assert!(text.contains(r#""/p/a/x": "team-a""#), "{text}");
    }

    /// A corrupt file, an unknown section and a key under no prefix handed
    /// to it are refused with the path and what to do, not ignored.
    #[test]
    fn unusable_files_are_refused() {
        let dir = TempDir::new("corrupt").unwrap();
        for text in [
            "{not json",
            r#"{"cs": {"x": "y"}}"#,
            r#"{"keys": {"/p/c/x": "y"}}"#,
        ] {
            std::fs::write(dir.join(STATE_FILE), text).unwrap();
            let err = open(&dir).unwrap_err().to_string();
            assert!(
                err.contains(STATE_FILE) && err.contains("fix or move it away"),
                "{text}: {err}"
            );
        }
    }

    /// Without a data dir the keys live in memory.
    #[test]
    fn memory_only() {
        let kv = MemoryKv::open(None).unwrap();
        put(&kv, "/p/a/x", b"r");
        assert_eq!(held(&kv), [("/p/a/x".to_owned(), b"r".to_vec())]);
    }
}
