//! Tool search: an index of tool definitions kept in step with snapshots
//! at the cost of what changed, ranked with BM25F over the caller's own
//! view (a tool outside it changes none of that caller's scores), and
//! fused with a semantic ranking where embeddings are at hand.
#![forbid(unsafe_code)]

mod analyze;
mod document;
mod index;
mod postings;
mod query;
mod rank;
mod semantic;

pub use document::{FIELDS, Field, field_texts};
pub use index::{SearchIndex, Update};
pub use query::{DEFAULT_LIMIT, MAX_LIMIT, MAX_QUERY_BYTES, Query, QueryError, clamp_limit};
pub use rank::{Match, PreparedView, Ranking, View};
pub use semantic::{RRF_K, cosine, nearest, reciprocal_rank_fusion, unit_vector};
