//! SearchTools: the caller's own listing ranked against a query, over a
//! search index that follows the snapshots the dispatcher installs.

use crate::projection::Projection;
use crate::{Dispatcher, Principal, Refusal};
use std::sync::{Arc, Mutex, RwLock};
use toolmesh::pb::{RiskLevel, SearchToolsRequest, SearchToolsResponse, ToolFormat, ToolMatch};
use toolmesh::{Snapshot, ToolDef};
use toolmesh_search::{PreparedView, Query, Ranking, SearchIndex, View, clamp_limit};

/// The search index of one installed snapshot.
#[derive(Debug)]
pub(crate) struct Indexed {
    snapshot: Arc<Snapshot>,
    index: SearchIndex,
}

/// Prepared views kept at most (distinct caller projections).
const PREPARED_VIEWS: usize = 256;

/// A caller's projection resolved against an index, with the two it was
/// made from: held, so their addresses identify them while the entry lives.
type Prepared = (Arc<Projection>, Arc<Indexed>, Arc<PreparedView>);

/// The index of the newest snapshot installed. The follower advances it
/// right after installing a snapshot, so the version it holds is always
/// one the dispatcher serves (current, or just before it).
#[derive(Debug)]
pub(crate) struct SearchIndexes {
    current: RwLock<Arc<Indexed>>,
    /// Views prepared for projections: a projection is cached and shared
    /// while it stays the same ([`crate::projection::ProjectionCache`]), so
    /// a caller's searches resolve its view once per projection and index,
    /// not once per query (that walk is as long as the projection).
    prepared: Mutex<Vec<Prepared>>,
}

impl SearchIndexes {
    /// The index of `snapshot`, every definition analyzed.
    pub(crate) fn new(snapshot: Arc<Snapshot>) -> Self {
        let index = SearchIndex::of(&snapshot);
        SearchIndexes {
            current: RwLock::new(Arc::new(Indexed { snapshot, index })),
            prepared: Mutex::default(),
        }
    }

    /// Moves the index to `newer`, analyzing only what changed since the
    /// snapshot it holds. One writer (the follower) calls this.
    pub(crate) fn follow(&self, newer: Arc<Snapshot>) {
        let held = self.current();
        let mut index = held.index.clone();
        index.advance(&held.snapshot, &newer);
        let indexed = Arc::new(Indexed {
            snapshot: newer,
            index,
        });
        *self.current.write().unwrap_or_else(|e| e.into_inner()) = indexed;
    }

    /// `projection` resolved against `indexed`, prepared once and reused.
    fn prepared(&self, projection: &Arc<Projection>, indexed: &Arc<Indexed>) -> Arc<PreparedView> {
        let lock = || self.prepared.lock().unwrap_or_else(|e| e.into_inner());
        let hit = lock()
            .iter()
            .find(|(p, i, _)| Arc::ptr_eq(p, projection) && Arc::ptr_eq(i, indexed))
            .map(|(_, _, view)| view.clone());
        if let Some(view) = hit {
            return view;
        }
        let view = Arc::new(indexed.index.prepare(&Listed(projection)));
        let mut prepared = lock();
        if prepared.len() >= PREPARED_VIEWS {
            prepared.clear();
        }
        prepared.push((projection.clone(), indexed.clone(), view.clone()));
        view
    }

    fn current(&self) -> Arc<Indexed> {
        self.current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

/// A caller's projection as the view a search ranks within: its tools,
/// sorted by name, one version each.
struct Listed<'a>(&'a Projection);

impl View for Listed<'_> {
    fn members(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0
            .entries
            .iter()
            .map(|e| (e.def.name(), e.def.spec().version.as_str()))
    }
}

/// What a request keeps besides the query: every tag it names, and risk
/// at most its `max_risk`.
struct Filter<'a> {
    tags: &'a [String],
    max_risk: Option<RiskLevel>,
}

impl<'a> Filter<'a> {
    fn of(request: &'a SearchToolsRequest) -> Result<Self, Refusal> {
        let max_risk = match RiskLevel::try_from(request.max_risk) {
            Ok(RiskLevel::Unspecified) => None,
            Ok(risk) => Some(risk),
            Err(_) => return Err(Refusal::UnknownRisk(request.max_risk)),
        };
        Ok(Filter {
            tags: &request.tags,
            max_risk,
        })
    }

    fn keeps(&self, def: &ToolDef) -> bool {
        let tagged = self.tags.iter().all(|tag| def.spec().tags.contains(tag));
        tagged && self.max_risk.is_none_or(|max| def.risk() <= max)
    }
}

impl Dispatcher {
    /// The tools `who` may list that best match `request.query`, best
    /// first, each as its ListTools shows it (one projection decides what
    /// a caller sees, the one ListTools pages), ranked within
    /// that projection; in `request.format` too, rendered as ListTools
    /// renders it.
    pub fn search_tools_in(
        &self,
        who: &Principal,
        session: &str,
        request: &SearchToolsRequest,
    ) -> Result<SearchToolsResponse, Refusal> {
        let query = Query::parse(&request.query)?;
        let filter = Filter::of(request)?;
        let format = ToolFormat::try_from(request.format)
            .map_err(|_| Refusal::UnknownFormat(request.format))?;
        let indexed = self.search.current();
        let snapshot = match self.pipeline.snapshots.get(indexed.snapshot.version()) {
            // The indexed snapshot left the history meanwhile (many
            // installs in a moment): search the index that replaced it.
            Err(_) => return self.search_tools_in(who, session, request),
            Ok(snapshot) => snapshot,
        };
        let projection = self.projection(who, session, &snapshot)?;
        let view = self.search.prepared(&projection, &indexed);
        let found = indexed.index.search(
            &query,
            &view,
            &Ranking::default(),
            clamp_limit(request.limit),
            |def| filter.keeps(def),
        );
        let (entries, scores): (Vec<_>, Vec<_>) = found
            .iter()
            .filter_map(|found| {
                let at = projection.position(found.def.name(), &found.def.spec().version)?;
                Some((projection.entries[at].clone(), found.score))
            })
            .unzip();
        // Rendered as the listing renders them, so a match shows exactly
        // as ListTools in that format shows the tool.
        let policy = self.governance().policy();
        let listed = crate::list::render(
            projection.snapshot_version,
            &entries,
            (format, false),
            |e| crate::list::narrowed(&policy, who, e),
        );
        let matches = listed
            .tools
            .into_iter()
            .zip(scores)
            .map(|(tool, score)| ToolMatch {
                tool: Some(tool),
                score,
            })
            .collect();
        Ok(SearchToolsResponse {
            snapshot_version: projection.snapshot_version,
            matches,
            formatted: listed.formatted,
        })
    }
}
