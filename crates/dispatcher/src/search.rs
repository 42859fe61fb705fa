//! SearchTools: the caller's own listing ranked against a query, over a
//! search index that follows the snapshots the dispatcher installs, fused
//! with a semantic ranking where embeddings are configured.

use crate::embeddings::Embeddings;
use crate::projection::Projection;
use crate::{Dispatcher, Principal, Refusal};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;
use toolmesh::pb::{RiskLevel, SearchToolsRequest, SearchToolsResponse, ToolFormat, ToolMatch};
use toolmesh::{Snapshot, ToolDef};
use toolmesh_search::{
    PreparedView, Query, Ranking, SearchIndex, View, clamp_limit, nearest, reciprocal_rank_fusion,
};

/// The search index of one snapshot.
#[derive(Debug)]
pub(crate) struct Indexed {
    snapshot: Arc<Snapshot>,
    index: SearchIndex,
}

/// Prepared views kept at most (distinct caller projections).
const PREPARED_VIEWS: usize = 256;

/// How deep each ranking goes into a caller's view before the two are
/// fused: the lexical and the semantic top 100.
const FUSION_DEPTH: usize = 100;

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
    /// The definitions' embeddings, where semantic ranking is configured.
    embeddings: Option<Arc<Embeddings>>,
}

impl SearchIndexes {
    /// The index of `snapshot`, every definition analyzed; ranked with
    /// `embeddings` too, when given.
    pub(crate) fn new(snapshot: Arc<Snapshot>, embeddings: Option<Arc<Embeddings>>) -> Self {
        let index = SearchIndex::of(&snapshot);
        SearchIndexes {
            current: RwLock::new(Arc::new(Indexed { snapshot, index })),
            prepared: Mutex::default(),
            embeddings,
        }
    }

    /// Moves the index to `newer`, analyzing only what changed since the
    /// snapshot it holds. One writer (the follower) calls this.
    pub(crate) fn follow(&self, newer: Arc<Snapshot>) {
        let indexed = self.at(&newer);
        *self.current.write().unwrap_or_else(|e| e.into_inner()) = indexed;
    }

    /// The index of `snapshot`: the one held, or a copy of it moved to
    /// `snapshot` (a pinned, older one), analyzing only the definitions
    /// the two snapshots do not share.
    fn at(&self, snapshot: &Arc<Snapshot>) -> Arc<Indexed> {
        let held = self.current();
        if Arc::ptr_eq(&held.snapshot, snapshot) {
            return held;
        }
        let mut index = held.index.clone();
        index.advance(&held.snapshot, snapshot);
        Arc::new(Indexed {
            snapshot: snapshot.clone(),
            index,
        })
    }

    /// `projection` resolved against `indexed`: prepared once and reused
    /// for the index held, prepared for this search alone for another.
    fn prepared(&self, projection: &Arc<Projection>, indexed: &Arc<Indexed>) -> Arc<PreparedView> {
        if !Arc::ptr_eq(indexed, &self.current()) {
            return Arc::new(indexed.index.prepare(&Listed(projection)));
        }
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

/// A search resolved and ranked lexically: the caller's projection, the
/// matches by position in it (best first, with their BM25F scores), and
/// what the answer keeps of the request.
struct Ranked<'r> {
    projection: Arc<Projection>,
    lexical: Vec<(usize, f64)>,
    filter: Filter<'r>,
    limit: usize,
    format: ToolFormat,
}

impl Dispatcher {
    /// The tools `who` may list that best match `request.query`, best
    /// first, each as its ListTools shows it (one projection decides what
    /// a caller sees, the one ListTools pages), ranked lexically within
    /// that projection; in `request.format` too, rendered as ListTools
    /// renders it.
    pub fn search_tools_in(
        &self,
        who: &Principal,
        session: &str,
        request: &SearchToolsRequest,
    ) -> Result<SearchToolsResponse, Refusal> {
        let ranked =
            self.rank_lexically(who, session, request, None, clamp_limit(request.limit))?;
        let found = ranked.lexical.iter().copied().take(ranked.limit).collect();
        Ok(self.answer(who, &ranked, found))
    }

    /// Like [`search_tools_in`](Self::search_tools_in), fused with the
    /// semantic ranking where embeddings are configured: the query's
    /// embedding is awaited at most half of `deadline` (what the caller
    /// has left) and at most the configured wait; without it in time, or
    /// with the endpoint down, the search answers lexically (counted in
    /// `toolmesh_search_embeddings_fallbacks_total`).
    pub async fn search_tools(
        &self,
        who: &Principal,
        session: &str,
        request: &SearchToolsRequest,
        deadline: Option<Duration>,
    ) -> Result<SearchToolsResponse, Refusal> {
        self.search_tools_at(who, session, request, deadline, None)
            .await
    }

    /// [`search_tools`](Self::search_tools) in `pinned` (None: the newest
    /// snapshot indexed).
    pub(crate) async fn search_tools_at(
        &self,
        who: &Principal,
        session: &str,
        request: &SearchToolsRequest,
        deadline: Option<Duration>,
        pinned: Option<Arc<Snapshot>>,
    ) -> Result<SearchToolsResponse, Refusal> {
        let limit = clamp_limit(request.limit);
        let Some(embeddings) = self.search.embeddings.clone() else {
            let ranked = self.rank_lexically(who, session, request, pinned, limit)?;
            let found = ranked.lexical.clone();
            return Ok(self.answer(who, &ranked, found));
        };
        let ranked = self.rank_lexically(who, session, request, pinned, FUSION_DEPTH)?;
        let wait = embeddings.wait_within(deadline);
        let found = match embeddings.query(&request.query, wait).await {
            None => ranked.lexical.iter().copied().take(limit).collect(),
            Some(query) => {
                let semantic = rank_semantically(&embeddings, &query, &ranked);
                let lexical: Vec<usize> = ranked.lexical.iter().map(|(at, _)| *at).collect();
                let mut fused = reciprocal_rank_fusion(&[&lexical, &semantic]);
                fused.truncate(limit);
                fused
            }
        };
        Ok(self.answer(who, &ranked, found))
    }

    /// Resolves a search in `pinned` (or the newest snapshot indexed) and
    /// ranks the caller's view lexically, `depth` deep.
    fn rank_lexically<'r>(
        &self,
        who: &Principal,
        session: &str,
        request: &'r SearchToolsRequest,
        pinned: Option<Arc<Snapshot>>,
        depth: usize,
    ) -> Result<Ranked<'r>, Refusal> {
        let query = Query::parse(&request.query)?;
        let filter = Filter::of(request)?;
        let format = ToolFormat::try_from(request.format)
            .map_err(|_| Refusal::UnknownFormat(request.format))?;
        let (indexed, snapshot) = match pinned {
            Some(snapshot) => (self.search.at(&snapshot), snapshot),
            None => {
                let indexed = self.search.current();
                match self.pipeline.snapshots.get(indexed.snapshot.version()) {
                    // The indexed snapshot left the history meanwhile (many
                    // installs in a moment): search the index that
                    // replaced it.
                    Err(_) => return self.rank_lexically(who, session, request, None, depth),
                    Ok(snapshot) => (indexed, snapshot),
                }
            }
        };
        let projection = self.projection(who, session, &snapshot)?;
        let view = self.search.prepared(&projection, &indexed);
        let found = indexed
            .index
            .search(&query, &view, &Ranking::default(), depth, |def| {
                filter.keeps(def)
            });
        let lexical = found
            .iter()
            .filter_map(|found| {
                let at = projection.position(found.def.name(), &found.def.spec().version)?;
                Some((at, found.score))
            })
            .collect();
        Ok(Ranked {
            projection,
            lexical,
            filter,
            limit: clamp_limit(request.limit),
            format,
        })
    }

    /// The answer to a search that found `found` (positions in the
    /// caller's projection, best first, with their scores), rendered as
    /// the listing renders them, so a match shows exactly as ListTools in
    /// that format shows the tool.
    fn answer(
        &self,
        who: &Principal,
        ranked: &Ranked<'_>,
        found: Vec<(usize, f64)>,
    ) -> SearchToolsResponse {
        let projection = &ranked.projection;
        let (entries, scores): (Vec<_>, Vec<_>) = found
            .into_iter()
            .map(|(at, score)| (projection.entries[at].clone(), score))
            .unzip();
        let policy = self.governance().policy();
        let listed = crate::list::render(
            projection.snapshot_version,
            &entries,
            (ranked.format, false),
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
        SearchToolsResponse {
            snapshot_version: projection.snapshot_version,
            matches,
            formatted: listed.formatted,
        }
    }
}

/// The caller's tools the filter keeps nearest to `query` by their
/// embeddings, as positions in the projection, nearest first (brute force
/// over the view: only tools the caller may list are compared). Tools not
/// embedded yet are not in it: they rank lexically only.
fn rank_semantically(embeddings: &Embeddings, query: &[f32], ranked: &Ranked<'_>) -> Vec<usize> {
    let vectors = embeddings.read();
    let candidates = ranked
        .projection
        .entries
        .iter()
        .enumerate()
        .filter(|(_, entry)| ranked.filter.keeps(&entry.def))
        .filter_map(|(at, entry)| Some((at, Embeddings::vector_of(&vectors, &entry.def)?)));
    nearest(query, candidates, FUSION_DEPTH)
}
