//! What a layer says of the answer it handled, for `observe` to put in the
//! result's metadata and the audit record: a layer that marks answers adds
//! its mark here (the cache's use, the stand-in that answered), and nothing
//! else learns of it.

use std::time::Duration;
use toolmesh::pb::ToolResult;
use toolmesh_audit::AuditRecord;

/// One layer's word on an answer.
#[derive(Debug, Clone)]
pub(crate) enum Mark {
    /// How the call used the result cache.
    Cache(CacheUse),
    /// A stand-in answered instead of the tool called.
    FellBack(FellBack),
}

impl Mark {
    /// Says so in the result the caller reads.
    pub(crate) fn on_result(&self, result: &mut ToolResult) {
        match self {
            Mark::Cache(used) => used.mark(result),
            Mark::FellBack(fell_back) => fell_back.mark(result),
        }
    }

    /// Says so in the call's audit record.
    pub(crate) fn on_audit(&self, record: &mut AuditRecord) {
        match self {
            Mark::Cache(used) => record.cache = Some(used.name().to_owned()),
            Mark::FellBack(fell_back) => record.fallback_for = Some(fell_back.from.clone()),
        }
    }
}

/// How a call used the cache (metadata `toolmesh.cache`, the audit log, metrics).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CacheUse {
    /// No fresh answer: this call ran the tool (and stored its answer).
    Miss,
    /// A fresh answer this old was served; the tool did not run.
    Hit(Duration),
    /// The tool failed; an answer this old was served instead, marked stale.
    Stale(Duration),
    /// An identical call in flight ran the tool; its answer was shared.
    Coalesced,
}

impl CacheUse {
    /// The value of `toolmesh.cache`.
    pub(crate) fn name(self) -> &'static str {
        match self {
            CacheUse::Miss => "miss",
            CacheUse::Hit(_) => "hit",
            CacheUse::Stale(_) => "stale",
            CacheUse::Coalesced => "coalesced",
        }
    }

    /// How old the answer served was, when it came from the cache.
    pub(crate) fn age(self) -> Option<Duration> {
        match self {
            CacheUse::Hit(age) | CacheUse::Stale(age) => Some(age),
            CacheUse::Miss | CacheUse::Coalesced => None,
        }
    }

    /// Metadata `toolmesh.cache` (and `toolmesh.cache_age_ms` for an
    /// answer from the cache) on a cached tool's result.
    pub(crate) fn mark(self, result: &mut ToolResult) {
        let metadata = &mut result.metadata;
        metadata.insert("toolmesh.cache".into(), self.name().into());
        if let Some(age) = self.age() {
            metadata.insert("toolmesh.cache_age_ms".into(), age.as_millis().to_string());
        }
    }
}

/// Which stand-in answered, and why the tool itself did not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FellBack {
    /// The tool called, `name@version`.
    pub(crate) from: String,
    /// The stand-in that answered, `name@version`.
    pub(crate) to: String,
    /// Why the tool did not answer, e.g. `has no healthy executor`.
    pub(crate) why: String,
}

impl FellBack {
    /// Says so where the model reads and in the result's metadata.
    pub(crate) fn mark(&self, result: &mut ToolResult) {
        result
            .metadata
            .insert("toolmesh.fallback".into(), self.to.clone());
        result
            .metadata
            .insert("toolmesh.fallback_for".into(), self.from.clone());
        let note = format!(
            "[answered by {} standing in for {}, which {}]",
            self.to, self.from, self.why
        );
        toolmesh::content::prepend_note(result, &note);
    }
}
