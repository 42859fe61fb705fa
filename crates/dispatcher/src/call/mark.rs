//! What a layer says of the answer it handled, for `observe` to put in the
//! result's metadata and the audit record: a layer that marks answers adds
//! its mark here, and nothing else learns of it.

use super::cached::CacheUse;
use super::fallback::FellBack;
use toolmesh::pb::ToolResult;
use toolmesh_governance::audit::AuditRecord;

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
