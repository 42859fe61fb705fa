//! Definitions shared by every snapshot decoded in one process: a tool
//! definition that arrives twice (after a reconnect, or at several
//! followers in one process) is decoded once and held once.

use crate::pb;
use crate::spec::{SpecError, ToolDef};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError, Weak};

/// Entries looked at for dead definitions once the table has grown by
/// this many since the last sweep.
const SWEEP_EVERY: usize = 4_096;

/// The definitions alive in this process, by name@version. Holds them
/// weakly: a definition no snapshot holds any more is dropped, and its
/// slot goes at the next sweep.
#[derive(Debug, Default)]
pub struct Definitions {
    table: Mutex<Table>,
}

#[derive(Debug, Default)]
struct Table {
    by_key: HashMap<(String, String), Weak<ToolDef>>,
    /// Table size right after the last sweep.
    swept_at: usize,
}

impl Definitions {
    /// A new, empty table.
    pub fn new() -> Self {
        Definitions::default()
    }

    /// The definition of `spec`: the one already held when an identical
    /// spec was decoded before, else a new one (checked here, outside the
    /// table's lock, as a definition the registry validated: see
    /// [`ToolDef::stored`]).
    pub fn intern(&self, spec: pb::ToolSpec) -> Result<Arc<ToolDef>, SpecError> {
        let key = (spec.name.clone(), spec.version.clone());
        if let Some(def) = self.held(&key, &spec) {
            return Ok(def);
        }
        let def = Arc::new(ToolDef::stored(spec)?);
        let mut table = self.lock();
        // Another decoder may have made it meanwhile: keep the first.
        if let Some(held) = table.by_key.get(&key).and_then(Weak::upgrade)
            && held.spec() == def.spec()
        {
            return Ok(held);
        }
        table.by_key.insert(key, Arc::downgrade(&def));
        table.sweep();
        Ok(def)
    }

    /// Definitions held now (dead slots not yet swept are not counted).
    pub fn len(&self) -> usize {
        self.lock()
            .by_key
            .values()
            .filter(|d| d.strong_count() > 0)
            .count()
    }

    /// Whether none is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn held(&self, key: &(String, String), spec: &pb::ToolSpec) -> Option<Arc<ToolDef>> {
        let def = self.lock().by_key.get(key)?.upgrade()?;
        // The registry sends normalised specs: an identical one is the same
        // definition. A spec that only shares the name@version is not.
        (def.spec() == spec).then_some(def)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Table {
    /// Drops the slots of dead definitions once the table has grown enough
    /// since the last sweep (amortised O(1) per insert).
    fn sweep(&mut self) {
        if self.by_key.len() < self.swept_at + SWEEP_EVERY {
            return;
        }
        self.by_key.retain(|_, def| def.strong_count() > 0);
        self.swept_at = self.by_key.len();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A spec as the registry sends it (its defaults filled in).
    fn spec(name: &str, description: &str) -> pb::ToolSpec {
        let raw = pb::ToolSpec {
            name: name.into(),
            version: "1.0.0".into(),
            description: description.into(),
            input_schema: r#"{"type":"object"}"#.into(),
            ..Default::default()
        };
        ToolDef::new(raw).unwrap().spec().clone()
    }

    #[test]
    fn an_identical_spec_is_one_definition() {
        let definitions = Definitions::new();
        let a = definitions.intern(spec("search", "Searches.")).unwrap();
        let b = definitions.intern(spec("search", "Searches.")).unwrap();
        assert!(Arc::ptr_eq(&a, &b));
        assert_eq!(definitions.len(), 1);
    }

    #[test]
    fn another_spec_under_the_same_name_is_another_definition() {
        let definitions = Definitions::new();
        let a = definitions.intern(spec("search", "Searches.")).unwrap();
        let b = definitions.intern(spec("search", "Finds.")).unwrap();
        assert!(!Arc::ptr_eq(&a, &b));
        assert_eq!(b.spec().description, "Finds.");
    }

    #[test]
    fn a_definition_nobody_holds_is_dropped() {
        let definitions = Definitions::new();
        drop(definitions.intern(spec("search", "Searches.")).unwrap());
        assert!(definitions.is_empty());
        let again = definitions.intern(spec("search", "Searches.")).unwrap();
        assert_eq!(Arc::strong_count(&again), 1);
    }

    #[test]
    fn a_bad_spec_is_refused_and_not_held() {
        let definitions = Definitions::new();
        let bad = pb::ToolSpec {
            version: "one".into(),
            ..spec("search", "Searches.")
        };
        assert!(definitions.intern(bad).is_err());
        assert!(definitions.is_empty());
    }
}
