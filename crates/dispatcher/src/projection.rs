//! A caller's projection of one snapshot: the tools it may list, sorted by
//! name, found through the names its grants reach and kept per caller
//! view, so a ListTools page costs the page, not the catalog.

use crate::call::resolve;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use toolmesh::rollout::Caller;
use toolmesh::{Principal, Snapshot, ToolEntry};
use toolmesh_policy::Candidates;

/// How long a projection is reused. Snapshots and policies are keyed
/// exactly; this bounds only how long an expired ejection stays hidden.
const CACHE_TTL: Duration = Duration::from_secs(1);
/// Projections kept at most (distinct caller views).
const CACHE_VIEWS: usize = 256;
/// Tools held by the kept projections together at most: they are pointers,
/// so 2 million are 16 MiB (20 views of 100,000 tools).
const CACHE_TOOLS: usize = 2_000_000;

/// Which projection: the snapshot listed, the current one (whose switches
/// and instances apply to a pinned listing too), policy generation, and the
/// caller's identity and roles with the side of each rollout it is on.
pub(crate) type ViewKey = (u64, u64, u64, String);

/// The tools one caller may list in one snapshot, sorted by name, one
/// version each (the one a bare name resolves to for it).
#[derive(Debug)]
pub(crate) struct Projection {
    /// The snapshot listed.
    pub(crate) snapshot_version: u64,
    /// The registry lifetime of that snapshot.
    pub(crate) epoch: String,
    pub(crate) entries: Vec<Arc<ToolEntry>>,
}

impl Projection {
    /// Where the tools sorted after `name` start ("" for the first).
    pub(crate) fn start_after(&self, name: &str) -> usize {
        self.entries.partition_point(|e| e.def.name() <= name)
    }

    /// Where `name` at `version` is, when it is listed.
    pub(crate) fn position(&self, name: &str, version: &str) -> Option<usize> {
        let at = self
            .entries
            .binary_search_by(|e| e.def.name().cmp(name))
            .ok()?;
        (self.entries[at].def.spec().version == version).then_some(at)
    }

    /// The same snapshot and the very same entries.
    fn same_as(&self, other: &Projection) -> bool {
        self.snapshot_version == other.snapshot_version
            && self.epoch == other.epoch
            && self.entries.len() == other.entries.len()
            && self
                .entries
                .iter()
                .zip(&other.entries)
                .all(|(a, b)| Arc::ptr_eq(a, b))
    }
}

/// Projections built already: a snapshot never changes, so a caller view
/// is worked out once, not on every page, and a hit is a pointer copy.
#[derive(Debug, Default)]
pub(crate) struct ProjectionCache {
    kept: Mutex<Kept>,
}

#[derive(Debug, Default)]
struct Kept {
    by_view: HashMap<ViewKey, (Instant, Arc<Projection>)>,
    /// Tools held by `by_view` together.
    tools: usize,
}

impl ProjectionCache {
    /// The cached projection for `key`, or `build`'s, remembered. One built
    /// again after the TTL that came out the same keeps the earlier `Arc`,
    /// so an unchanged projection keeps its address (and the pages and
    /// search views cached for it).
    pub(crate) fn get_or_build(
        &self,
        key: ViewKey,
        build: impl FnOnce() -> Projection,
    ) -> Arc<Projection> {
        let stale = match self.lock().by_view.get(&key) {
            Some((at, hit)) if at.elapsed() < CACHE_TTL => return hit.clone(),
            Some((_, hit)) => Some(hit.clone()),
            None => None,
        };
        let built = build();
        let projection = match stale {
            Some(stale) if stale.same_as(&built) => stale,
            _ => Arc::new(built),
        };
        let mut kept = self.lock();
        let held = projection.entries.len();
        if kept.by_view.len() >= CACHE_VIEWS || kept.tools + held > CACHE_TOOLS {
            kept.by_view.clear();
            kept.tools = 0;
        }
        let replaced = kept
            .by_view
            .insert(key, (Instant::now(), projection.clone()));
        kept.tools = kept.tools + held - replaced.map_or(0, |(_, old)| old.entries.len());
        projection
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Kept> {
        self.kept.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The key of `who`'s projection of `(snapshot listed, current snapshot)`,
/// with `rollouts` the sides of the rollouts `who` is on
/// ([`resolve::rollout_view`]).
pub(crate) fn view_key(
    (snapshot_version, current_version): (u64, u64),
    policy_generation: u64,
    who: &Principal,
    rollouts: &str,
) -> ViewKey {
    let view = format!(
        "{}/{}/{}/{rollouts}",
        who.tenant,
        who.name,
        who.roles.join(",")
    );
    (snapshot_version, current_version, policy_generation, view)
}

/// The names of `snapshot` that `candidates` reach, sorted, each once:
/// exact names by lookup and prefixes by range, or every name when the
/// caller's grants cannot be looked up by name.
pub(crate) fn reached<'a>(
    snapshot: &'a Snapshot,
    candidates: &'a Candidates,
) -> Box<dyn Iterator<Item = &'a str> + 'a> {
    let Candidates::Named { names, prefixes } = candidates else {
        return Box::new(snapshot.names());
    };
    let mut reached: Vec<&str> = prefixes
        .iter()
        .flat_map(|prefix| snapshot.names_with_prefix(prefix))
        .chain(
            names
                .iter()
                .map(String::as_str)
                .filter(|name| !snapshot.versions(name).is_empty()),
        )
        .collect();
    reached.sort_unstable();
    reached.dedup();
    Box::new(reached.into_iter())
}

/// Per name of `names` (sorted), the version a bare name resolves to for
/// `caller` ([`resolve::version`]: the one its calls go to, rollouts
/// included), when `keep` keeps it (in rotation here, granted).
pub(crate) fn callable<'n>(
    snapshot: &Snapshot,
    current: &Snapshot,
    caller: &Caller<'_>,
    names: impl Iterator<Item = &'n str>,
    keep: impl Fn(&Arc<ToolEntry>) -> bool,
) -> Vec<Arc<ToolEntry>> {
    let exposed = resolve::exposed_in(snapshot, current);
    names
        .filter_map(|name| crate::list::listed(snapshot, name, caller, &exposed, &keep))
        .cloned()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::list::tests::{ANYONE, entry};
    use std::collections::BTreeSet;

    /// Only callable tools are listed, one version per name (the one a bare
    /// name resolves to), sorted; pre-releases and unhealthy ones are left out.
    #[test]
    fn lists_callable_tools_sorted() {
        let mut b = Snapshot::empty("e").next();
        b.put(entry("zeta", "1.0.0", true))
            .put(entry("alpha", "1.0.0", true))
            .put(entry("alpha", "1.1.0", true))
            .put(entry("alpha", "2.0.0-rc.1", true))
            .put(entry("down", "1.0.0", false));
        let s = b.finish();
        let listed = callable(&s, &s, &ANYONE, s.names(), |_| true);
        let names: Vec<String> = listed.iter().map(|e| e.def.label()).collect();
        assert_eq!(names, ["alpha@1.1.0", "zeta@1.0.0"]);
    }

    /// Exact names and prefixes reach what they name and nothing else,
    /// sorted and each once (an exact name under a prefix too); names not
    /// held are not reached.
    #[test]
    fn reached_names_are_looked_up() {
        let mut b = Snapshot::empty("e").next();
        for name in ["alpha", "billing_a", "billing_b", "billing_c", "zeta"] {
            b.put(entry(name, "1.0.0", true));
        }
        let s = b.finish();
        let named = Candidates::Named {
            names: BTreeSet::from(["zeta".into(), "billing_b".into(), "gone".into()]),
            prefixes: vec!["billing_".into()],
        };
        let reached: Vec<&str> = reached(&s, &named).collect();
        assert_eq!(reached, ["billing_a", "billing_b", "billing_c", "zeta"]);
        assert_eq!(super::reached(&s, &Candidates::Every).count(), 5);
    }

    /// A projection is built once per snapshot, policy and caller view; a
    /// new snapshot version builds again; a hit is the same projection.
    #[test]
    fn projections_are_cached_per_view() {
        let cache = ProjectionCache::default();
        let who = toolmesh_testkit::principal("a", "t", &["agent"]);
        let builds = std::cell::Cell::new(0);
        let build = |version| {
            builds.set(builds.get() + 1);
            Projection {
                snapshot_version: version,
                epoch: "e".into(),
                entries: Vec::new(),
            }
        };
        for _ in 0..3 {
            cache.get_or_build(view_key((7, 7), 1, &who, ""), || build(7));
        }
        assert_eq!(builds.get(), 1);
        let other = Principal {
            roles: vec!["admin".into()],
            ..who.clone()
        };
        cache.get_or_build(view_key((7, 7), 1, &other, ""), || build(7));
        let fresh = cache.get_or_build(view_key((8, 8), 1, &who, ""), || build(8));
        assert_eq!(builds.get(), 3);
        assert_eq!(fresh.snapshot_version, 8);
        let again = cache.get_or_build(view_key((8, 8), 1, &who, ""), || build(8));
        assert!(Arc::ptr_eq(&fresh, &again), "a hit is the same projection");
    }
}
