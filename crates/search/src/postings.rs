//! The postings of one term: sorted by definition number in shared chunks,
//! so a query walks them in order over contiguous memory and one change
//! copies one chunk, not the list.

use crate::document::{Doc, DocId, FIELDS};
use std::sync::Arc;

/// Postings per chunk at most: a change copies one chunk (and a query
/// reads them in runs this long).
const CHUNK: usize = 128;

/// One definition holding one term: its number and the term's frequency
/// per field inline (what the walk compares and most postings need); the
/// field lengths are read from the definition, only for a field the term
/// is in (inline, they made every posting half as large again: 48 bytes
/// rather than 32, an index larger than the snapshot it indexes).
#[derive(Debug, Clone)]
pub(crate) struct Posting {
    pub(crate) id: DocId,
    pub(crate) doc: Arc<Doc>,
    pub(crate) frequencies: [u16; FIELDS],
}

/// The postings of one term in ascending definition number. Cloning is
/// cheap: chunks are shared until changed.
#[derive(Debug, Clone, Default)]
pub(crate) struct Postings {
    chunks: imbl::Vector<Arc<[Posting]>>,
}

impl Postings {
    /// Whether no definition holds the term (an emptied chunk is
    /// dropped, so no chunk means no posting).
    pub(crate) fn is_empty(&self) -> bool {
        self.chunks.is_empty()
    }

    /// Every posting, in ascending definition number.
    pub(crate) fn values(&self) -> impl Iterator<Item = &Posting> {
        self.chunks.iter().flat_map(|chunk| chunk.iter())
    }

    /// Adds `posting` in its place (numbers grow, so usually at the end),
    /// replacing one with the same number.
    pub(crate) fn insert(&mut self, posting: Posting) {
        let Some(at) = self.chunk_of(posting.id) else {
            self.chunks.push_front(Arc::from([posting]));
            return;
        };
        let mut chunk = self.chunks[at].to_vec();
        match chunk.binary_search_by_key(&posting.id, |p| p.id) {
            Ok(same) => chunk[same] = posting,
            Err(place) => chunk.insert(place, posting),
        }
        if chunk.len() > CHUNK {
            let upper = chunk.split_off(chunk.len() / 2);
            self.chunks.set(at, chunk.into());
            self.chunks.insert(at + 1, upper.into());
        } else {
            self.chunks.set(at, chunk.into());
        }
    }

    /// Removes the posting of definition `id`, if any.
    pub(crate) fn remove(&mut self, id: DocId) {
        let Some(at) = self.chunk_of(id) else {
            return;
        };
        let chunk = &self.chunks[at];
        let Ok(place) = chunk.binary_search_by_key(&id, |p| p.id) else {
            return;
        };
        if chunk.len() == 1 {
            self.chunks.remove(at);
        } else {
            let mut chunk = chunk.to_vec();
            chunk.remove(place);
            self.chunks.set(at, chunk.into());
        }
    }

    /// The chunk that holds, or would hold, `id`: the last whose first
    /// number is at most `id` (the first chunk when `id` precedes them
    /// all); None when there are no chunks.
    fn chunk_of(&self, id: DocId) -> Option<usize> {
        if self.chunks.is_empty() {
            return None;
        }
        let after = match self.chunks.binary_search_by(|chunk| chunk[0].id.cmp(&id)) {
            Ok(at) => return Some(at),
            Err(after) => after,
        };
        Some(after.saturating_sub(1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index::tests::entry;

    fn posting(id: DocId, doc: &Arc<Doc>) -> Posting {
        Posting {
            id,
            doc: doc.clone(),
            frequencies: [1; FIELDS],
        }
    }

    /// A posting stays small: an index holds one per term per definition
    /// (about 30 per tool), more than the definitions themselves.
    #[test]
    fn a_posting_is_small() {
        assert!(std::mem::size_of::<Posting>() <= 32);
    }

    /// Postings stay sorted and counted across chunk splits and removals,
    /// in any order of insertion.
    #[test]
    fn sorted_across_chunks() {
        let doc = Doc::analyzed(0, entry("t", "1.0.0", "T.").def).0;
        let mut postings = Postings::default();
        let ids: Vec<DocId> = (0..1000).map(|i| (i * 7919) % 1000).collect();
        for &id in &ids {
            postings.insert(posting(id, &doc));
        }
        postings.insert(posting(5, &doc));
        assert_eq!(postings.values().count(), 1000);
        let walked: Vec<DocId> = postings.values().map(|p| p.id).collect();
        assert_eq!(walked, (0..1000).collect::<Vec<_>>());
        let before = postings.clone();
        for id in (0..1000).step_by(3) {
            postings.remove(id);
        }
        postings.remove(5000);
        let walked: Vec<DocId> = postings.values().map(|p| p.id).collect();
        let kept: Vec<DocId> = (0..1000).filter(|id| id % 3 != 0).collect();
        assert_eq!(walked, kept);
        assert_eq!(postings.values().count(), kept.len());
        assert_eq!(before.values().count(), 1000, "a clone is unchanged");
        for id in kept {
            postings.remove(id);
        }
        assert!(postings.is_empty());
        assert_eq!(postings.values().count(), 0);
    }
}
