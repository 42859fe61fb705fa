//! The index: every definition of a snapshot analyzed once, with postings
//! per term, in persistent maps so that the index of snapshot N+1 shares
//! everything unchanged with that of N and costs only what changed.

use crate::document::{Doc, DocId};
use crate::postings::{Posting, Postings};
use std::sync::Arc;
use toolmesh::{Snapshot, ToolDef};

/// The search index of one snapshot. Cloning is cheap (shared structure),
/// and [`advance`](Self::advance) costs what the snapshot change touched.
#[derive(Debug, Clone, Default)]
pub struct SearchIndex {
    /// Every version of each name, as the snapshot holds them.
    pub(crate) docs: imbl::HashMap<Arc<str>, Arc<[Arc<Doc>]>>,
    pub(crate) postings: imbl::HashMap<Box<str>, Postings>,
    next_id: DocId,
    documents: usize,
}

/// What one [`SearchIndex::advance`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Update {
    /// Definitions analyzed and added (new, or a new definition under an
    /// existing name@version).
    pub indexed: usize,
    /// Definitions whose postings were removed.
    pub removed: usize,
    /// Definitions of a changed name that kept their entry as it was
    /// (only instances or a switch changed): visited, not analyzed.
    pub kept: usize,
}

impl SearchIndex {
    /// The index of every definition in `snapshot`.
    pub fn of(snapshot: &Snapshot) -> Self {
        let mut index = SearchIndex::default();
        index.advance(&Snapshot::empty(snapshot.epoch()), snapshot);
        index
    }

    /// Number of definitions indexed (every version of every name).
    pub fn len(&self) -> usize {
        self.documents
    }

    /// Whether nothing is indexed.
    pub fn is_empty(&self) -> bool {
        self.documents == 0
    }

    /// Moves this index, which is `older`'s, to `newer`, visiting only
    /// the names whose entries differ ([`Snapshot::changed_names`]) and
    /// analyzing only definitions that are new (the same `Arc`, or the
    /// same fingerprint, is kept as indexed).
    pub fn advance(&mut self, older: &Snapshot, newer: &Snapshot) -> Update {
        let mut update = Update::default();
        for name in newer.changed_names(older) {
            let before = self
                .docs
                .get(&name)
                .cloned()
                .unwrap_or_else(|| Arc::from([]));
            let mut family = Vec::new();
            for entry in newer.versions(&name) {
                match before
                    .iter()
                    .find(|doc| same_definition(&doc.def, &entry.def))
                {
                    Some(doc) => {
                        update.kept += 1;
                        family.push(doc.clone());
                    }
                    None => {
                        update.indexed += 1;
                        family.push(self.insert(entry.def.clone()));
                    }
                }
            }
            for doc in before.iter() {
                if !family.iter().any(|kept| Arc::ptr_eq(kept, doc)) {
                    update.removed += 1;
                    self.remove(doc);
                }
            }
            if family.is_empty() {
                self.docs.remove(&name);
            } else {
                self.docs.insert(name, family.into());
            }
        }
        update
    }

    /// The indexed definition `name@version` (the version as its spec
    /// spells it).
    pub(crate) fn doc(&self, name: &str, version: &str) -> Option<&Arc<Doc>> {
        self.docs
            .get(name)?
            .iter()
            .find(|doc| doc.def.spec().version == version)
    }

    /// Analyzes `def` and adds its postings.
    fn insert(&mut self, def: Arc<ToolDef>) -> Arc<Doc> {
        let id = self.next_id;
        self.next_id += 1;
        self.documents += 1;
        let (doc, frequencies) = Doc::analyzed(id, def);
        for (term, frequencies) in frequencies {
            let posting = Posting {
                id,
                doc: doc.clone(),
                frequencies,
            };
            self.postings
                .entry(term.into_boxed_str())
                .or_default()
                .insert(posting);
        }
        doc
    }

    /// Removes `doc`'s postings.
    fn remove(&mut self, doc: &Doc) {
        self.documents -= 1;
        for term in &doc.terms {
            let now_empty = self.postings.get_mut(term).is_some_and(|postings| {
                postings.remove(doc.id);
                postings.is_empty()
            });
            if now_empty {
                self.postings.remove(term);
            }
        }
    }
}

/// Whether two definitions under one name index the same: the same
/// allocation, or the same version and spec fingerprint.
fn same_definition(a: &Arc<ToolDef>, b: &Arc<ToolDef>) -> bool {
    Arc::ptr_eq(a, b) || (a.version() == b.version() && a.fingerprint() == b.fingerprint())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use toolmesh::pb::ToolSpec;
    use toolmesh::{Instance, ToolEntry};

    /// A served entry `name@version` described by `description`.
    pub(crate) fn entry(name: &str, version: &str, description: &str) -> ToolEntry {
        ToolEntry {
            def: Arc::new(
                ToolDef::new(ToolSpec {
                    name: name.into(),
                    version: version.into(),
                    description: description.into(),
                    input_schema: r#"{"type":"object"}"#.into(),
                    ..ToolSpec::default()
                })
                .unwrap(),
            ),
            instances: vec![Instance {
                executor_id: "x".into(),
                endpoint: "127.0.0.1:1".into(),
                service: "s".into(),
                healthy: true,
                execute_token: "".into(),
            }]
            .into(),
            disabled: None,
        }
    }

    /// One change to a catalog of 1,000 tools analyzes one definition and
    /// visits nothing else; an instance-only change analyzes none.
    #[test]
    fn advance_costs_the_change() {
        let mut builder = Snapshot::empty("e").next();
        for i in 0..1000 {
            builder.put(entry(&format!("tool_{i}"), "1.0.0", "Does things."));
        }
        let first = builder.finish();
        let mut index = SearchIndex::of(&first);
        assert_eq!(index.len(), 1000);

        let mut builder = first.next();
        builder.put(entry("tool_7", "1.0.0", "Does other things."));
        let second = builder.finish();
        let update = index.advance(&first, &second);
        assert_eq!(
            update,
            Update {
                indexed: 1,
                removed: 1,
                kept: 0
            }
        );

        let mut builder = second.next();
        let mut unhealthy = (**second.versions("tool_8").first().unwrap()).clone();
        unhealthy.instances = Arc::from([]);
        builder
            .put(unhealthy)
            .put(entry("tool_new", "1.0.0", "New."));
        let third = builder.finish();
        let update = index.advance(&second, &third);
        assert_eq!(
            update,
            Update {
                indexed: 1,
                removed: 0,
                kept: 1
            }
        );
        assert_eq!(index.len(), 1001);

        let mut builder = third.next();
        builder.remove("tool_new", &"1.0.0".parse().unwrap());
        let fourth = builder.finish();
        let update = index.advance(&third, &fourth);
        assert_eq!(update.removed, 1);
        assert_eq!(index.len(), 1000);
        assert!(index.doc("tool_new", "1.0.0").is_none());
    }

    /// An index moved change by change equals one built from scratch:
    /// the same definitions and the same postings.
    #[test]
    fn advanced_equals_rebuilt() {
        let mut builder = Snapshot::empty("e").next();
        builder
            .put(entry("alpha", "1.0.0", "Reads alpha records."))
            .put(entry("beta", "1.0.0", "Writes beta records."));
        let first = builder.finish();
        let mut index = SearchIndex::of(&first);
        let mut builder = first.next();
        builder
            .put(entry("alpha", "1.1.0", "Reads alpha rows."))
            .remove("beta", &"1.0.0".parse().unwrap())
            .put(entry("gamma", "1.0.0", "Deletes gamma."));
        let second = builder.finish();
        index.advance(&first, &second);
        let rebuilt = SearchIndex::of(&second);
        let shape = |index: &SearchIndex| {
            let mut terms: Vec<(String, Vec<String>)> = index
                .postings
                .iter()
                .map(|(term, postings)| {
                    let mut labels: Vec<String> =
                        postings.values().map(|p| p.doc.def.label()).collect();
                    labels.sort();
                    (term.to_string(), labels)
                })
                .collect();
            terms.sort();
            terms
        };
        assert_eq!(shape(&index), shape(&rebuilt));
        assert_eq!(index.len(), rebuilt.len());
        assert!(!shape(&index).iter().any(|(term, _)| term == "beta"));
    }
}
