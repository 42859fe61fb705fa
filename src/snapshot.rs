//! Immutable, versioned snapshots of every known tool and the instances that
//! serve it. Snapshot N+1 shares every unchanged entry with snapshot N
//! (persistent map of `Arc`s), so a change costs O(what changed).

use crate::pb;
use crate::reference::ToolRef;
use crate::rollout::Rollout;
use crate::spec::{SpecError, ToolDef};
use imbl::OrdMap;
use std::sync::Arc;

mod definitions;
pub use definitions::Definitions;

/// One executor process serving a tool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Instance {
    /// Unique per executor process.
    pub executor_id: Arc<str>,
    /// host:port of its Executor service.
    pub endpoint: Arc<str>,
    /// The team or service that registered it.
    pub service: Arc<str>,
    /// Whether the registry currently considers it able to serve.
    pub healthy: bool,
    /// The token it accepts Execute calls with (empty: none asked for).
    pub execute_token: Arc<str>,
}

/// One tool at one version, with its instances.
#[derive(Debug, Clone)]
pub struct ToolEntry {
    /// The validated definition, shared by every snapshot that holds it.
    pub def: Arc<ToolDef>,
    /// Instances in registration order.
    pub instances: Arc<[Instance]>,
    /// Set (with the operator's reason) while the tool is switched off.
    pub disabled: Option<Arc<str>>,
}

impl ToolEntry {
    /// Listed and invocable: enabled with at least one healthy instance.
    pub fn exposed(&self) -> bool {
        self.disabled.is_none() && self.instances.iter().any(|i| i.healthy)
    }

    /// Whether some executor still holds a registration for this version,
    /// healthy or not. An executor's instance lasts as long as its lease:
    /// one that deregistered, or went away and let its lease run out, has
    /// none. An entry no one serves stays in the snapshot (a call is
    /// answered UNAVAILABLE, or by its fallback, rather than NOT_FOUND), but
    /// it is no row of the mesh's health: `toolmesh health` and the admin
    /// page show only the versions this holds for.
    pub fn is_served(&self) -> bool {
        !self.instances.is_empty()
    }

    /// The instances that may take calls.
    pub fn healthy_instances(&self) -> impl Iterator<Item = &Instance> {
        self.instances.iter().filter(|i| i.healthy)
    }

    /// This entry as `current` has it now: the same definition (a pin fixes
    /// the spec a run sees) with the instances and the operator's switch of
    /// the current snapshot (a pin never brings back a disabled tool or a
    /// departed instance). A definition that is gone, or was replaced by a
    /// different spec under the same name@version, has no instances.
    pub fn as_of(self: &Arc<Self>, current: &Snapshot) -> Arc<ToolEntry> {
        match current.get(self.def.name(), self.def.version()) {
            Some(live) if Arc::ptr_eq(live, self) => live.clone(),
            Some(live) if live.def.fingerprint() == self.def.fingerprint() => Arc::new(ToolEntry {
                def: self.def.clone(),
                instances: live.instances.clone(),
                disabled: live.disabled.clone(),
            }),
            _ => Arc::new(ToolEntry {
                def: self.def.clone(),
                instances: Arc::from([]),
                disabled: None,
            }),
        }
    }

    fn to_pb(&self) -> pb::ToolEntry {
        pb::ToolEntry {
            spec: Some(self.def.spec().clone()),
            instances: self
                .instances
                .iter()
                .map(|i| pb::Instance {
                    executor_id: i.executor_id.to_string(),
                    endpoint: i.endpoint.to_string(),
                    healthy: i.healthy,
                    service: i.service.to_string(),
                    execute_token: i.execute_token.to_string(),
                })
                .collect(),
            exposed: self.exposed(),
            disabled: self.disabled.is_some(),
            disabled_reason: self.disabled.as_deref().unwrap_or_default().to_owned(),
        }
    }
}

/// Every version of one tool name, oldest first. Equal only when it is
/// the same allocation, so diffing two snapshots skips shared entries
/// without comparing their contents.
#[derive(Debug, Clone)]
struct Family(Arc<[Arc<ToolEntry>]>);

impl PartialEq for Family {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

/// Why a reference resolved to nothing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ResolveError {
    /// No tool has that name.
    #[error("no tool named {name:?}")]
    UnknownTool {
        /// The name asked for.
        name: String,
    },
    /// The name exists but no version matches.
    #[error("tool {name:?} has no version matching {wanted}; served versions: {served}")]
    NoMatchingVersion {
        /// The name asked for.
        name: String,
        /// The version pattern asked for.
        wanted: String,
        /// The versions that exist, comma-separated.
        served: String,
    },
}

/// An immutable view of every known tool.
#[derive(Debug, Clone)]
pub struct Snapshot {
    version: u64,
    epoch: Arc<str>,
    tools: OrdMap<Arc<str>, Family>,
    /// The rollouts (canaries), by tool name.
    rollouts: OrdMap<Arc<str>, Arc<Rollout>>,
}

impl Snapshot {
    /// The empty snapshot (version 0) of a registry lifetime.
    pub fn empty(epoch: impl Into<Arc<str>>) -> Self {
        Snapshot {
            version: 0,
            epoch: epoch.into(),
            tools: OrdMap::new(),
            rollouts: OrdMap::new(),
        }
    }

    /// The rollout of tool `name`, in whatever state.
    pub fn rollout(&self, name: &str) -> Option<&Arc<Rollout>> {
        self.rollouts.get(name)
    }

    /// Every rollout, sorted by tool name.
    pub fn rollouts(&self) -> impl Iterator<Item = &Arc<Rollout>> {
        self.rollouts.values()
    }

    /// Strictly increasing within one epoch.
    pub fn version(&self) -> u64 {
        self.version
    }

    /// Changes every time a registry starts.
    pub fn epoch(&self) -> &str {
        &self.epoch
    }

    /// Number of distinct tool names.
    pub fn name_count(&self) -> usize {
        self.tools.len()
    }

    /// Every entry, sorted by name, then version.
    pub fn entries(&self) -> impl Iterator<Item = &Arc<ToolEntry>> {
        self.tools.values().flat_map(|family| family.0.iter())
    }

    /// Every tool name, sorted.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.tools.keys().map(|k| &**k)
    }

    /// The tool names starting with `prefix`, sorted: one range of the
    /// ordered map, so O(log n + matches), not a walk over every name.
    pub fn names_with_prefix<'a>(&'a self, prefix: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        self.tools
            .range::<_, str>((
                std::ops::Bound::Included(prefix),
                std::ops::Bound::Unbounded,
            ))
            .map(|(name, _)| &**name)
            .take_while(move |name| name.starts_with(prefix))
    }

    /// Every version of `name`, oldest first.
    pub fn versions(&self, name: &str) -> &[Arc<ToolEntry>] {
        self.tools.get(name).map(|f| &f.0[..]).unwrap_or(&[])
    }

    /// One exact name@version.
    pub fn get(&self, name: &str, version: &semver::Version) -> Option<&Arc<ToolEntry>> {
        self.versions(name)
            .iter()
            .find(|e| e.def.version() == version)
    }

    /// The newest stable (not pre-release) version of `name` that `usable`
    /// accepts: what the bare name resolves to when no rollout applies.
    pub fn newest_stable(
        &self,
        name: &str,
        usable: impl Fn(&Arc<ToolEntry>) -> bool,
    ) -> Option<&Arc<ToolEntry>> {
        self.versions(name).iter().rev().find(|e| {
            crate::reference::VersionPattern::Newest.matches(e.def.version()) && usable(e)
        })
    }

    /// Resolves a reference: among the versions it accepts, the newest
    /// exposed one, or else the newest one (which then reports why it is not
    /// callable).
    pub fn resolve(&self, reference: &ToolRef<'_>) -> Result<&Arc<ToolEntry>, ResolveError> {
        let family = self.versions(reference.name);
        if family.is_empty() {
            return Err(ResolveError::UnknownTool {
                name: reference.name.to_owned(),
            });
        }
        let newest_where = |want_exposed: bool| {
            family
                .iter()
                .rev()
                .filter(|e| !want_exposed || e.exposed())
                .find(|e| reference.version.matches(e.def.version()))
        };
        newest_where(true)
            .or_else(|| newest_where(false))
            .ok_or_else(|| ResolveError::NoMatchingVersion {
                name: reference.name.to_owned(),
                wanted: reference.version.to_string(),
                served: family
                    .iter()
                    .map(|e| e.def.version().to_string())
                    .collect::<Vec<_>>()
                    .join(", "),
            })
    }

    /// The tool names whose entries differ between `older` and this
    /// snapshot (added, changed or removed), visiting only what is not
    /// shared: O(changes), not O(tools), for snapshots built one from the other.
    pub fn changed_names(&self, older: &Snapshot) -> Vec<Arc<str>> {
        older
            .tools
            .diff(&self.tools)
            .map(|item| match item {
                imbl::ordmap::DiffItem::Add(name, _)
                | imbl::ordmap::DiffItem::Remove(name, _)
                | imbl::ordmap::DiffItem::Update { new: (name, _), .. } => name.clone(),
            })
            .collect()
    }

    /// Starts snapshot `version + 1` from this one; nothing is copied.
    pub fn next(&self) -> SnapshotBuilder {
        SnapshotBuilder {
            snapshot: Snapshot {
                version: self.version + 1,
                epoch: self.epoch.clone(),
                tools: self.tools.clone(),
                rollouts: self.rollouts.clone(),
            },
        }
    }

    /// The wire form.
    pub fn to_pb(&self) -> pb::Snapshot {
        pb::Snapshot {
            version: self.version,
            epoch: self.epoch.to_string(),
            tools: self.entries().map(|e| e.to_pb()).collect(),
            rollouts: self.rollouts_pb(),
            ..pb::Snapshot::default()
        }
    }

    fn rollouts_pb(&self) -> Vec<pb::Rollout> {
        self.rollouts.values().map(|r| r.to_pb()).collect()
    }

    /// The wire form of what changed from `older` to this snapshot: every
    /// version of each changed name, and the entries that are gone.
    /// O(changes) for snapshots built one from the other.
    pub fn delta_pb(&self, older: &Snapshot) -> pb::Snapshot {
        let mut tools = Vec::new();
        let mut removed = Vec::new();
        for name in self.changed_names(older) {
            tools.extend(self.versions(&name).iter().map(|e| e.to_pb()));
            for gone in older
                .versions(&name)
                .iter()
                .filter(|e| self.get(&name, e.def.version()).is_none())
            {
                removed.push(pb::ToolKey {
                    name: name.to_string(),
                    version: gone.def.version().to_string(),
                });
            }
        }
        pb::Snapshot {
            version: self.version,
            epoch: self.epoch.to_string(),
            tools,
            delta: true,
            base_version: older.version,
            removed,
            rollouts: self.rollouts_pb(),
        }
    }

    /// Rebuilds a snapshot received over the wire. Definitions whose
    /// fingerprint matches one in `previous` are reused (no recompilation).
    /// Entries that fail validation are left out and reported. A delta
    /// (`wire.delta`) is applied on top of `previous`, which must be its
    /// base; otherwise the answer is `None`.
    pub fn from_pb(
        wire: &pb::Snapshot,
        previous: Option<&Snapshot>,
    ) -> Option<(Snapshot, Vec<(String, SpecError)>)> {
        Snapshot::from_pb_sharing(wire, previous, None)
    }

    /// [`Snapshot::from_pb`], taking each new definition from
    /// `definitions` (when given): specs decoded before in this process are
    /// not compiled or held again.
    pub fn from_pb_sharing(
        wire: &pb::Snapshot,
        previous: Option<&Snapshot>,
        definitions: Option<&Definitions>,
    ) -> Option<(Snapshot, Vec<(String, SpecError)>)> {
        let mut skipped = Vec::new();
        let mut builder = match (wire.delta, previous) {
            (false, _) => SnapshotBuilder {
                snapshot: Snapshot::empty(wire.epoch.as_str()),
            },
            (true, Some(base))
                if base.epoch() == wire.epoch && base.version() == wire.base_version =>
            {
                let mut builder = base.next();
                for key in &wire.removed {
                    if let Ok(version) = semver::Version::parse(&key.version) {
                        builder.remove(&key.name, &version);
                    }
                }
                builder
            }
            (true, _) => return None,
        };
        builder.snapshot.version = wire.version;
        // Every message carries every rollout: its list replaces the base's.
        builder.snapshot.rollouts = OrdMap::new();
        for rollout in &wire.rollouts {
            match Rollout::from_pb(rollout) {
                Ok(rollout) => {
                    builder.put_rollout(rollout);
                }
                Err(bad) => skipped.push((rollout.tool.clone(), SpecError::Rollout(bad))),
            }
        }
        for entry in &wire.tools {
            match entry_from_pb(entry, previous, definitions) {
                Ok(entry) => {
                    builder.put(entry);
                }
                Err(reject) => skipped.push(reject),
            }
        }
        Some((builder.snapshot, skipped))
    }
}

/// One entry from the wire, reusing `previous`'s definition (or the
/// process's, from `definitions`) when its spec is the same.
fn entry_from_pb(
    entry: &pb::ToolEntry,
    previous: Option<&Snapshot>,
    definitions: Option<&Definitions>,
) -> Result<ToolEntry, (String, SpecError)> {
    let spec = entry.spec.clone().unwrap_or_default();
    // The registry sends normalised specs it validated: an identical one is
    // the same definition, reused as it is; a new one is not compiled here
    // (its schemas compile on the first call that needs them).
    let reused = semver::Version::parse(&spec.version)
        .ok()
        .and_then(|version| previous?.get(&spec.name, &version))
        .filter(|old| old.def.spec() == &spec)
        .map(|old| old.def.clone());
    let def = match reused {
        Some(def) => def,
        None => {
            let label = crate::spec::label(&spec.name, &spec.version);
            match definitions {
                Some(definitions) => definitions.intern(spec),
                None => ToolDef::stored(spec).map(Arc::new),
            }
            .map_err(|e| (label, e))?
        }
    };
    let instances = entry
        .instances
        .iter()
        .map(|i| Instance {
            executor_id: i.executor_id.as_str().into(),
            endpoint: i.endpoint.as_str().into(),
            service: i.service.as_str().into(),
            healthy: i.healthy,
            execute_token: i.execute_token.as_str().into(),
        })
        .collect();
    Ok(ToolEntry {
        def,
        instances,
        disabled: entry
            .disabled
            .then(|| entry.disabled_reason.as_str().into()),
    })
}

/// Collects the changes that make the next snapshot.
#[derive(Debug)]
pub struct SnapshotBuilder {
    snapshot: Snapshot,
}

impl SnapshotBuilder {
    /// Inserts or replaces the entry for its name@version.
    pub fn put(&mut self, entry: ToolEntry) -> &mut Self {
        let name: Arc<str> = entry.def.name().into();
        let mut family: Vec<Arc<ToolEntry>> = self
            .snapshot
            .tools
            .get(&name)
            .map(|f| f.0.to_vec())
            .unwrap_or_default();
        let version = entry.def.version().clone();
        match family.binary_search_by(|e| e.def.version().cmp(&version)) {
            Ok(i) => family[i] = Arc::new(entry),
            Err(i) => family.insert(i, Arc::new(entry)),
        }
        self.snapshot.tools.insert(name, Family(family.into()));
        self
    }

    /// Removes name@version; a no-op when it is absent.
    pub fn remove(&mut self, name: &str, version: &semver::Version) -> &mut Self {
        if let Some(family) = self.snapshot.tools.get(name) {
            let rest: Vec<Arc<ToolEntry>> = family
                .0
                .iter()
                .filter(|e| e.def.version() != version)
                .cloned()
                .collect();
            if rest.is_empty() {
                self.snapshot.tools.remove(name);
            } else {
                self.snapshot.tools.insert(name.into(), Family(rest.into()));
            }
        }
        self
    }

    /// Sets the rollout of its tool (replacing any before).
    pub fn put_rollout(&mut self, rollout: Rollout) -> &mut Self {
        self.snapshot
            .rollouts
            .insert(rollout.tool.as_str().into(), Arc::new(rollout));
        self
    }

    /// Removes the rollout of tool `name`; a no-op when there is none.
    pub fn remove_rollout(&mut self, name: &str) -> &mut Self {
        self.snapshot.rollouts.remove(name);
        self
    }

    /// Numbers the snapshot `version` instead of the base's + 1 (a store
    /// whose revisions number its changes, with gaps; never lower than the
    /// base's).
    pub fn at_version(&mut self, version: u64) -> &mut Self {
        self.snapshot.version = version;
        self
    }

    /// The entry as the builder currently has it.
    pub fn get(&self, name: &str, version: &semver::Version) -> Option<&Arc<ToolEntry>> {
        self.snapshot.get(name, version)
    }

    /// The finished snapshot.
    pub fn finish(self) -> Snapshot {
        self.snapshot
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pb::ToolSpec;

    fn def(name: &str, version: &str) -> Arc<ToolDef> {
        Arc::new(
            ToolDef::new(ToolSpec {
                name: name.into(),
                version: version.into(),
                description: format!("{name} tool"),
                input_schema: r#"{"type":"object"}"#.into(),
                ..ToolSpec::default()
            })
            .unwrap(),
        )
    }

    fn entry(name: &str, version: &str, healthy: bool) -> ToolEntry {
        ToolEntry {
            def: def(name, version),
            instances: vec![Instance {
                executor_id: format!("ex-{name}").into(),
                endpoint: "127.0.0.1:1".into(),
                service: "svc".into(),
                healthy,
                execute_token: "".into(),
            }]
            .into(),
            disabled: None,
        }
    }

    /// A prefix range lists exactly the names starting with it, sorted,
    /// across a catalog large enough to be a tree of many nodes.
    #[test]
    fn names_with_prefix_is_one_range() {
        let mut builder = Snapshot::empty("e1").next();
        for i in 0..1_000 {
            builder.put(entry(
                &format!("team{:03}_op{}", i / 10, i % 10),
                "1.0.0",
                true,
            ));
        }
        builder.put(entry("team", "1.0.0", true));
        let snapshot = builder.finish();
        for prefix in ["team042_", "team04", "team", "zzz", ""] {
            let ranged: Vec<&str> = snapshot.names_with_prefix(prefix).collect();
            let walked: Vec<&str> = snapshot.names().filter(|n| n.starts_with(prefix)).collect();
            assert_eq!(ranged, walked, "{prefix:?}");
        }
        assert_eq!(snapshot.names_with_prefix("team042_").count(), 10);
    }

    /// Every single change is in the delta to the next snapshot, whichever
    /// name it is, in a catalog large enough to be a tree of many nodes.
    /// (imbl 6's `OrdMap::diff` skipped the entry after a shared node:
    /// about one change in eight reached no follower.)
    #[test]
    fn every_change_is_in_the_delta() {
        let names: Vec<String> = (0..1_000)
            .map(|i| format!("team{:05}_op{}", i / 10, i % 10))
            .collect();
        let mut builder = Snapshot::empty("e1").next();
        for name in &names {
            builder.put(entry(name, "1.0.0", true));
        }
        let mut current = builder.finish();
        let mut missed = Vec::new();
        for name in &names {
            let mut next = current.next();
            next.put(entry(name, "1.0.0", false));
            let next = next.finish();
            let changed = next.changed_names(&current);
            if changed.iter().map(|n| &**n).ne([name.as_str()]) {
                missed.push(name.clone());
            }
            let delta = next.delta_pb(&current);
            let (applied, _) = Snapshot::from_pb(&delta, Some(&current)).unwrap();
            assert!(!applied.versions(name)[0].instances[0].healthy, "{name}");
            current = next;
        }
        assert!(missed.is_empty(), "changes left out: {missed:?}");
    }

    /// Each change makes a new version and leaves the old snapshot untouched;
    /// unchanged entries are the very same allocation (structural sharing).
    #[test]
    fn versions_and_structural_sharing() {
        let s0 = Snapshot::empty("e1");
        let mut b = s0.next();
        b.put(entry("a", "1.0.0", true))
            .put(entry("b", "1.0.0", true));
        let s1 = b.finish();
        let mut b = s1.next();
        b.put(entry("c", "1.0.0", true));
        let s2 = b.finish();
        assert_eq!((s0.version(), s1.version(), s2.version()), (0, 1, 2));
        assert_eq!(s1.entries().count(), 2);
        assert_eq!(s2.entries().count(), 3);
        let a1 = &s1.versions("a")[0];
        let a2 = &s2.versions("a")[0];
        assert!(Arc::ptr_eq(a1, a2), "unchanged entry must be shared");
        let changed: Vec<String> = s2
            .changed_names(&s1)
            .iter()
            .map(|n| n.to_string())
            .collect();
        assert_eq!(changed, ["c"], "only the added name differs");
        let mut b = s2.next();
        b.remove("a", &semver::Version::new(1, 0, 0));
        let s3 = b.finish();
        let changed: Vec<String> = s3
            .changed_names(&s2)
            .iter()
            .map(|n| n.to_string())
            .collect();
        assert_eq!(changed, ["a"]);
        assert!(s3.versions("a").is_empty());
        assert_eq!(s2.versions("a").len(), 1, "old snapshot unchanged");
    }

    /// A pinned entry takes the current snapshot's instances and switch:
    /// a later disable or departure applies to it; its spec stays.
    #[test]
    fn pinned_entries_follow_the_current_switch_and_instances() {
        let mut b = Snapshot::empty("e").next();
        b.put(entry("a", "1.0.0", true));
        let pinned = b.finish();
        let old = pinned.versions("a")[0].clone();
        assert!(
            Arc::ptr_eq(&old.as_of(&pinned), &old),
            "same snapshot: shared"
        );
        let mut b = pinned.next();
        let mut off = (*old).clone();
        off.disabled = Some("incident".into());
        b.put(off);
        let disabled = b.finish();
        let seen = old.as_of(&disabled);
        assert!(Arc::ptr_eq(&seen.def, &old.def));
        assert_eq!(seen.disabled.as_deref(), Some("incident"));
        assert!(!seen.exposed());
        let mut b = disabled.next();
        b.remove("a", &semver::Version::new(1, 0, 0));
        let gone = b.finish();
        assert!(old.as_of(&gone).instances.is_empty());
        let mut b = gone.next();
        let mut other = entry("a", "1.0.0", true);
        other.def = Arc::new(
            ToolDef::new(ToolSpec {
                description: "another spec under the same version".into(),
                ..other.def.spec().clone()
            })
            .unwrap(),
        );
        b.put(other);
        let replaced = b.finish();
        assert!(
            old.as_of(&replaced).instances.is_empty(),
            "never routed to a different spec"
        );
    }

    /// Resolution prefers the newest exposed version and explains misses.
    #[test]
    fn resolution() {
        let mut b = Snapshot::empty("e").next();
        b.put(entry("t", "1.0.0", true))
            .put(entry("t", "1.1.0", false))
            .put(entry("t", "2.0.0-rc.1", true));
        let s = b.finish();
        let pick = |text: &str| {
            s.resolve(&ToolRef::parse(text).unwrap())
                .map(|e| e.def.version().to_string())
        };
        assert_eq!(pick("t").unwrap(), "1.0.0", "newest exposed stable");
        assert_eq!(pick("t@1.1").unwrap(), "1.1.0", "unhealthy but only match");
        assert_eq!(pick("t@2.0.0-rc.1").unwrap(), "2.0.0-rc.1");
        assert!(matches!(pick("x"), Err(ResolveError::UnknownTool { .. })));
        let err = pick("t@3").unwrap_err().to_string();
        assert!(err.contains("1.0.0, 1.1.0, 2.0.0-rc.1"), "{err}");
    }

    /// The wire form round-trips, and definitions are reused by fingerprint.
    #[test]
    fn wire_round_trip_reuses_definitions() {
        let mut b = Snapshot::empty("e").next();
        b.put(entry("a", "1.0.0", true))
            .put(entry("b", "1.0.0", false));
        let s = b.finish();
        let wire = s.to_pb();
        assert_eq!(wire.tools.len(), 2);
        assert!(wire.tools[0].exposed && !wire.tools[1].exposed);
        let (back, skipped) = Snapshot::from_pb(&wire, Some(&s)).unwrap();
        assert!(skipped.is_empty());
        assert_eq!(back.version(), s.version());
        assert!(Arc::ptr_eq(
            &back.versions("a")[0].def,
            &s.versions("a")[0].def
        ));
        assert_eq!(back.to_pb(), wire);
    }

    /// A delta carries only what changed and, applied to its base, gives
    /// the same snapshot; applied to another base it is refused.
    #[test]
    fn deltas_round_trip() {
        let mut b = Snapshot::empty("e").next();
        b.put(entry("a", "1.0.0", true))
            .put(entry("b", "1.0.0", true))
            .put(entry("c", "1.0.0", true));
        let s1 = b.finish();
        let mut b = s1.next();
        b.put(entry("b", "1.0.0", false))
            .remove("c", &semver::Version::new(1, 0, 0));
        let s2 = b.finish();
        let delta = s2.delta_pb(&s1);
        assert!(delta.delta);
        assert_eq!(delta.base_version, 1);
        let names: Vec<&str> = delta
            .tools
            .iter()
            .map(|t| t.spec.as_ref().unwrap().name.as_str())
            .collect();
        assert_eq!(names, ["b"], "only the changed entry travels");
        assert_eq!(delta.removed.len(), 1);
        let (follower, _) = Snapshot::from_pb(&s1.to_pb(), None).unwrap();
        let (applied, skipped) = Snapshot::from_pb(&delta, Some(&follower)).unwrap();
        assert!(skipped.is_empty());
        assert_eq!(applied.to_pb(), s2.to_pb());
        assert!(Snapshot::from_pb(&delta, Some(&s2)).is_none(), "wrong base");
        assert!(Snapshot::from_pb(&delta, None).is_none(), "no base");
    }

    /// Rollouts travel whole in full snapshots and deltas alike: a delta's
    /// list replaces its base's, so a removed or changed rollout is seen.
    #[test]
    fn rollouts_travel_in_every_message() {
        let mut b = Snapshot::empty("e").next();
        b.put(entry("search_kb", "1.0.0", true))
            .put_rollout(crate::rollout::example(500));
        let s1 = b.finish();
        let (follower, _) = Snapshot::from_pb(&s1.to_pb(), None).unwrap();
        assert_eq!(
            follower.rollout("search_kb").unwrap().share.basis_points(),
            500
        );
        let mut b = s1.next();
        b.put_rollout(crate::rollout::example(5000));
        let s2 = b.finish();
        let delta = s2.delta_pb(&s1);
        assert!(delta.tools.is_empty(), "no tool changed");
        let (applied, _) = Snapshot::from_pb(&delta, Some(&follower)).unwrap();
        assert_eq!(
            applied.rollout("search_kb").unwrap().share.basis_points(),
            5000
        );
        let mut b = s2.next();
        b.remove_rollout("search_kb");
        let s3 = b.finish();
        let (gone, _) = Snapshot::from_pb(&s3.delta_pb(&s2), Some(&applied)).unwrap();
        assert!(gone.rollouts().next().is_none());
        let mut wire = s2.to_pb();
        wire.rollouts[0].canary_version = "two".into();
        let (skipped_one, skipped) = Snapshot::from_pb(&wire, None).unwrap();
        assert!(skipped_one.rollout("search_kb").is_none());
        assert!(skipped[0].1.to_string().contains("\"two\""), "{skipped:?}");
    }
}
