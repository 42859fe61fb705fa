//! A search query as asked: its text checked and analyzed, and how many
//! matches to answer.

use crate::analyze;

/// The longest query accepted, in bytes.
pub const MAX_QUERY_BYTES: usize = 1024;
/// Matches answered when the request names no limit (0).
pub const DEFAULT_LIMIT: usize = 10;
/// The most matches one search answers; a larger limit is clamped to it.
pub const MAX_LIMIT: usize = 50;

/// Why a query cannot be searched.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QueryError {
    /// Nothing to search for.
    #[error("the query is empty; give 1 to {MAX_QUERY_BYTES} bytes of text")]
    Empty,
    /// Longer than [`MAX_QUERY_BYTES`].
    #[error("the query is {bytes} bytes; at most {MAX_QUERY_BYTES} bytes are accepted")]
    TooLong {
        /// Its length.
        bytes: usize,
    },
}

/// An analyzed query: its distinct terms, and its distinct pairs of
/// adjacent terms (which meet a name's pairs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Query {
    pub(crate) terms: Vec<String>,
    pub(crate) pairs: Vec<String>,
}

impl Query {
    /// Checks and analyzes `text` (1 to [`MAX_QUERY_BYTES`] bytes, not all
    /// whitespace). A query of stop words only is valid and matches nothing.
    pub fn parse(text: &str) -> Result<Self, QueryError> {
        if text.len() > MAX_QUERY_BYTES {
            return Err(QueryError::TooLong { bytes: text.len() });
        }
        if text.trim().is_empty() {
            return Err(QueryError::Empty);
        }
        let mut terms = analyze::terms(text);
        let mut pairs: Vec<String> = analyze::pairs(&terms).collect();
        for words in [&mut terms, &mut pairs] {
            words.sort();
            words.dedup();
        }
        Ok(Query { terms, pairs })
    }
}

/// The number of matches to answer for a requested `limit`: 0 (absent)
/// is [`DEFAULT_LIMIT`], more than [`MAX_LIMIT`] is [`MAX_LIMIT`].
pub fn clamp_limit(limit: u32) -> usize {
    match usize::try_from(limit) {
        Ok(0) => DEFAULT_LIMIT,
        Ok(limit) => limit.min(MAX_LIMIT),
        Err(_) => MAX_LIMIT,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Empty and over-long queries are refused with the limit in the
    /// message; the longest accepted one is searched.
    #[test]
    fn query_bounds() {
        assert_eq!(Query::parse(""), Err(QueryError::Empty));
        assert_eq!(Query::parse("  \n"), Err(QueryError::Empty));
        let long = "a".repeat(MAX_QUERY_BYTES + 1);
        let refused = Query::parse(&long).unwrap_err();
        assert!(refused.to_string().contains("1024 bytes"), "{refused}");
        assert!(Query::parse(&"a".repeat(MAX_QUERY_BYTES)).is_ok());
        assert!(QueryError::Empty.to_string().contains("1024"));
    }

    /// Terms are analyzed and deduplicated.
    #[test]
    fn query_terms() {
        let query = Query::parse("Refund refunds, the ORDER").unwrap();
        assert_eq!(query.terms, ["order", "refund"]);
    }

    /// Each pair of adjacent terms is searched too, deduplicated.
    #[test]
    fn query_pairs() {
        let query = Query::parse("Refund refunds, the ORDER; refund order").unwrap();
        assert_eq!(
            query.pairs,
            ["order refund", "refund order", "refund refund"]
        );
    }

    /// 0 means the default; more than the maximum is clamped.
    #[test]
    fn limits() {
        assert_eq!(clamp_limit(0), DEFAULT_LIMIT);
        assert_eq!(clamp_limit(3), 3);
        assert_eq!(clamp_limit(50), 50);
        assert_eq!(clamp_limit(51), MAX_LIMIT);
        assert_eq!(clamp_limit(u32::MAX), MAX_LIMIT);
    }
}
