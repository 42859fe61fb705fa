//! What a cached answer is filed under: the contract that produced it (name@version and the definition's fingerprint) and the call (who shares it, the arguments' digest).

use std::hash::{Hash, Hasher};
use std::sync::Arc;
use toolmesh::{Snapshot, ToolDef};

/// The definition whose answers these are. Two are equal when name,
/// version and fingerprint are: a spec re-registered under the same
/// name@version with another schema, description, risk, timeout or hint
/// is another contract, and its calls never meet the old one's answers.
#[derive(Debug, Clone)]
pub(crate) struct Contract(Arc<ToolDef>);

impl Contract {
    /// The definition itself.
    pub(crate) fn def(&self) -> &ToolDef {
        &self.0
    }

    /// Whether `snapshot` holds this name@version under another
    /// definition (a name@version that is gone is not superseded: it may
    /// come back as it was).
    pub(crate) fn superseded_in(&self, snapshot: &Snapshot) -> bool {
        snapshot
            .get(self.0.name(), self.0.version())
            .is_some_and(|live| live.def.fingerprint() != self.0.fingerprint())
    }
}

impl PartialEq for Contract {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
            || (self.0.fingerprint() == other.0.fingerprint()
                && self.0.name() == other.0.name()
                && self.0.version() == other.0.version())
    }
}

impl Eq for Contract {}

impl Hash for Contract {
    fn hash<H: Hasher>(&self, state: &mut H) {
        // The fingerprint alone: equal contracts have equal fingerprints.
        self.0.fingerprint().hash(state);
    }
}

/// The key of one cached answer.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct Key {
    contract: Contract,
    /// Who shares the answer and the digest of the canonical arguments.
    call: Box<str>,
}

impl Key {
    /// The key of `call` (scope and arguments' digest) to the tool `def`.
    pub(crate) fn new(def: Arc<ToolDef>, call: String) -> Key {
        Key {
            contract: Contract(def),
            call: call.into(),
        }
    }

    /// The contract the answer was made under.
    pub(crate) fn contract(&self) -> &Contract {
        &self.contract
    }

    /// Bytes the key costs a cache entry (its text; the definition is shared).
    pub(crate) fn bytes(&self) -> u64 {
        let def = self.contract.def();
        (def.name().len() + def.fingerprint().len() + self.call.len()) as u64
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use toolmesh::ToolEntry;
    use toolmesh::pb::ToolSpec;

    /// `lookup@1.0.0` with this output schema ("" for none).
    pub(crate) fn def(output_schema: &str) -> Arc<ToolDef> {
        Arc::new(
            ToolDef::new(ToolSpec {
                name: "lookup".into(),
                version: "1.0.0".into(),
                description: "Looks a key up.".into(),
                input_schema: r#"{"type":"object"}"#.into(),
                output_schema: output_schema.into(),
                read_only: true,
                idempotent: true,
                ..ToolSpec::default()
            })
            .unwrap(),
        )
    }

    /// A snapshot holding `defs`.
    pub(crate) fn snapshot(defs: &[Arc<ToolDef>]) -> Snapshot {
        let mut next = Snapshot::empty("e").next();
        for def in defs {
            next.put(ToolEntry {
                def: def.clone(),
                instances: Vec::new().into(),
                disabled: None,
            });
        }
        next.finish()
    }

    /// Keys of one name@version differ when its definition does, and not
    /// when an equal definition was merely built again.
    #[test]
    fn keys_follow_the_definition() {
        let (a, again, b) = (def(""), def(""), def(r#"{"type":"object"}"#));
        assert_eq!(Key::new(a.clone(), "k".into()), Key::new(again, "k".into()));
        assert_ne!(
            Key::new(a.clone(), "k".into()),
            Key::new(b.clone(), "k".into())
        );
        assert_ne!(
            Key::new(a.clone(), "k".into()),
            Key::new(a.clone(), "j".into())
        );
        let contract = Key::new(a.clone(), "k".into()).contract().clone();
        assert!(contract.superseded_in(&snapshot(&[b])));
        assert!(!contract.superseded_in(&snapshot(&[a])));
        assert!(
            !contract.superseded_in(&snapshot(&[])),
            "gone is not superseded"
        );
    }
}
