//! BM25F ranking within one caller's view: the document count, average
//! field lengths and document frequencies are those of the tools the
//! caller sees (document frequencies counted at query time), so a tool
//! outside the view takes no result slot and moves no score.

use crate::document::Doc;
use crate::document::{FIELDS, Field};
use crate::index::SearchIndex;
use crate::postings::Posting;
use crate::query::Query;
use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::sync::Arc;
use toolmesh::ToolDef;

/// The tools one caller sees (what its ListTools shows), by name and
/// version as their specs spell them.
pub trait View {
    /// Every `(name, version)` the caller sees.
    fn members(&self) -> impl Iterator<Item = (&str, &str)>;
}

/// A view resolved against one index: which of its definitions the caller
/// sees (a bit per definition number) and the view's collection
/// statistics. Made once per view ([`SearchIndex::prepare`]) and reused by
/// every query of that view on that index: the per-query cost is then the
/// postings of the query's terms, not the size of the view.
#[derive(Debug, Clone)]
pub struct PreparedView {
    visible: Vec<u64>,
    documents: f64,
    average_lengths: [f64; FIELDS],
}

impl PreparedView {
    fn contains(&self, id: u64) -> bool {
        let word = usize::try_from(id / 64).unwrap_or(usize::MAX);
        self.visible
            .get(word)
            .is_some_and(|bits| bits & (1 << (id % 64)) != 0)
    }

    /// Number of tools in the view.
    pub fn len(&self) -> usize {
        self.documents as usize
    }

    /// Whether the view holds no tool.
    pub fn is_empty(&self) -> bool {
        self.documents == 0.0
    }
}

/// BM25F's parameters: a weight and a length normalization per field, and
/// the term-frequency saturation.
#[derive(Debug, Clone, PartialEq)]
pub struct Ranking {
    /// How much a term in each field counts, by [`Field::ALL`] order.
    pub weights: [f64; FIELDS],
    /// How much each field's length normalizes (0: not at all, 1: fully).
    pub length_normalization: [f64; FIELDS],
    /// Saturation of the combined term frequency.
    pub k1: f64,
}

impl Default for Ranking {
    /// Tuned on the development categories of the Berkeley Function
    /// Calling Leaderboard (`toolmesh bench search --eval --tune`; never on
    /// its held-out live categories): a title or tag word counts most
    /// beside the description; a name word less, since the name's pairs
    /// of words count too; parameter names, descriptions and values little
    /// (they name the inputs, not what the tool does), and the name and
    /// description are normalized fully by their length.
    fn default() -> Self {
        Ranking {
            weights: [0.625, 2.0, 1.35, 1.5, 0.17, 0.625, 0.375],
            length_normalization: [1.0, 0.5, 1.0, 0.3, 0.8, 0.9, 0.05],
            k1: 1.2,
        }
    }
}

impl Ranking {
    fn weight(&self, field: Field) -> f64 {
        self.weights[field.index()]
    }

    fn b(&self, field: Field) -> f64 {
        self.length_normalization[field.index()]
    }

    /// BM25F's combined term frequency of `posting` in `view`: each
    /// field's frequency weighted and normalized by the field's length
    /// against the view's average.
    fn term_frequency(&self, posting: &Posting, view: &PreparedView) -> f64 {
        Field::ALL
            .iter()
            .map(|&field| {
                let i = field.index();
                let frequency = f64::from(posting.frequencies[i]);
                if frequency == 0.0 {
                    return 0.0;
                }
                let relative = match view.average_lengths[i] {
                    average if average > 0.0 => f64::from(posting.doc.lengths[i]) / average,
                    _ => 1.0,
                };
                let norm = 1.0 - self.b(field) + self.b(field) * relative;
                self.weight(field) * frequency / norm
            })
            .sum()
    }
}

/// The best matches offered so far, at most `limit`: a heap whose top is
/// the worst kept, so a definition that cannot enter costs one comparison
/// and the filter runs only on those that would.
struct Best<'a> {
    limit: usize,
    heap: BinaryHeap<Candidate<'a>>,
}

/// A scored definition; greater is worse (lower score, then later name,
/// then later number), so the heap's top is the first to leave.
struct Candidate<'a> {
    doc: &'a Arc<Doc>,
    score: f64,
}

impl Ord for Candidate<'_> {
    fn cmp(&self, other: &Self) -> Ordering {
        other
            .score
            .total_cmp(&self.score)
            .then_with(|| self.doc.def.name().cmp(other.doc.def.name()))
            .then_with(|| self.doc.id.cmp(&other.doc.id))
    }
}

impl PartialOrd for Candidate<'_> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for Candidate<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Candidate<'_> {}

impl<'a> Best<'a> {
    fn new(limit: usize) -> Self {
        Best {
            limit,
            heap: BinaryHeap::with_capacity(limit.min(MAX_KEPT) + 1),
        }
    }

    /// Keeps `doc` if it is among the best so far and `keep` accepts it.
    fn offer(&mut self, doc: &'a Arc<Doc>, score: f64, keep: impl Fn(&ToolDef) -> bool) {
        let candidate = Candidate { doc, score };
        let enters = self.heap.len() < self.limit
            || self.heap.peek().is_some_and(|worst| candidate < *worst);
        if enters && keep(&doc.def) {
            self.heap.push(candidate);
            if self.heap.len() > self.limit {
                self.heap.pop();
            }
        }
    }

    /// The matches kept, best first.
    fn into_matches(self) -> Vec<Match> {
        self.heap
            .into_sorted_vec()
            .into_iter()
            .map(|c| Match {
                def: c.doc.def.clone(),
                score: c.score,
            })
            .collect()
    }
}

/// The heap's capacity reserved up front at most (a limit is clamped by
/// callers; this only bounds the allocation of an unclamped one).
const MAX_KEPT: usize = 1024;

/// One tool found, with its score (higher is better).
#[derive(Debug, Clone)]
pub struct Match {
    /// The definition found.
    pub def: Arc<ToolDef>,
    /// Its BM25F score within the caller's view.
    pub score: f64,
}

impl SearchIndex {
    /// The tools of `view` that best match `query`, best first (ties by
    /// name), at most `limit`, those `keep` refuses left out (a filter:
    /// it changes which tools are answered, not their scores).
    /// `view` must be [prepared](Self::prepare) on this index.
    pub fn search(
        &self,
        query: &Query,
        view: &PreparedView,
        ranking: &Ranking,
        limit: usize,
        keep: impl Fn(&ToolDef) -> bool,
    ) -> Vec<Match> {
        if query.terms.is_empty() || limit == 0 {
            return Vec::new();
        }
        // One cursor per query term over the postings the view holds, each
        // with the term's weight in this view; the cursors advance together
        // in definition order, so each definition is scored once, from
        // postings alone, and only the best `limit` are kept.
        let mut cursors = Vec::new();
        for term in query.terms.iter().chain(&query.pairs) {
            let Some(postings) = self.postings.get(term.as_str()) else {
                continue;
            };
            let visible = || postings.values().filter(|p| view.contains(p.id));
            let df = visible().count();
            if df == 0 {
                continue;
            }
            let df = df as f64;
            let idf = (1.0 + (view.documents - df + 0.5) / (df + 0.5)).ln();
            cursors.push((idf, visible().peekable()));
        }
        let mut best = Best::new(limit);
        while let Some(id) = cursors
            .iter_mut()
            .filter_map(|(_, cursor)| cursor.peek().map(|p| p.id))
            .min()
        {
            let mut score = 0.0;
            let mut doc = None;
            for (idf, cursor) in &mut cursors {
                if let Some(posting) = cursor.next_if(|p| p.id == id) {
                    let tf = ranking.term_frequency(posting, view);
                    score += *idf * tf / (ranking.k1 + tf);
                    doc = Some(&posting.doc);
                }
            }
            if let Some(doc) = doc {
                best.offer(doc, score, &keep);
            }
        }
        best.into_matches()
    }

    /// `view` resolved against this index: its definitions and its
    /// document count and average field lengths.
    pub fn prepare(&self, view: &impl View) -> PreparedView {
        let mut visible = Vec::new();
        let mut documents = 0usize;
        let mut totals = [0u64; FIELDS];
        for (name, version) in view.members() {
            let Some(doc) = self.doc(name, version) else {
                continue;
            };
            documents += 1;
            let word = usize::try_from(doc.id / 64).unwrap_or(usize::MAX);
            if visible.len() <= word {
                visible.resize(word + 1, 0u64);
            }
            visible[word] |= 1 << (doc.id % 64);
            for (total, length) in totals.iter_mut().zip(doc.lengths) {
                *total += u64::from(length);
            }
        }
        let count = documents.max(1) as f64;
        PreparedView {
            visible,
            documents: documents as f64,
            average_lengths: totals.map(|total| total as f64 / count),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index::tests::entry;
    use proptest::prelude::*;
    use std::collections::BTreeSet;
    use toolmesh::pb::ToolSpec;
    use toolmesh::{Snapshot, ToolEntry};

    /// A view of explicit `(name, version)` pairs.
    struct Set(BTreeSet<(String, String)>);

    impl View for Set {
        fn members(&self) -> impl Iterator<Item = (&str, &str)> {
            self.0.iter().map(|(n, v)| (n.as_str(), v.as_str()))
        }
    }

    /// Everything in `snapshot`.
    fn everything(snapshot: &Snapshot) -> Set {
        Set(snapshot
            .entries()
            .map(|e| (e.def.name().to_owned(), e.def.spec().version.clone()))
            .collect())
    }

    fn with_params(name: &str, description: &str, schema: &str, tags: &[&str]) -> ToolEntry {
        let mut e = entry(name, "1.0.0", description);
        e.def = Arc::new(
            ToolDef::new(ToolSpec {
                input_schema: schema.into(),
                tags: tags.iter().map(|t| (*t).into()).collect(),
                ..e.def.spec().clone()
            })
            .unwrap(),
        );
        e
    }

    fn catalog() -> Snapshot {
        let mut b = Snapshot::empty("e").next();
        b.put(with_params(
            "refund_order",
            "Refunds a customer's order in full or in part.",
            r#"{"type":"object","properties":{"order_id":{"type":"string","description":"The order to refund."},"amount":{"type":"number"}}}"#,
            &["billing"],
        ))
        .put(with_params(
            "getOrderStatus",
            "Where an order is: placed, shipped or delivered.",
            r#"{"type":"object","properties":{"order_id":{"type":"string"}}}"#,
            &["orders"],
        ))
        .put(with_params(
            "send_email",
            "Sends an email to a customer.",
            r#"{"type":"object","properties":{"to":{"type":"string"},"body":{"type":"string"}}}"#,
            &["messaging"],
        ))
        .put(with_params(
            "create_ticket",
            "Opens a support ticket.",
            r#"{"type":"object","properties":{"summary":{"type":"string","description":"What the customer asks about, for example a refund."}}}"#,
            &["support"],
        ))
        .put(entry("get_current_time", "1.0.0", "The current time in a time zone."));
        b.finish()
    }

    fn names(found: &[Match]) -> Vec<&str> {
        found.iter().map(|m| m.def.name()).collect()
    }

    fn search(snapshot: &Snapshot, text: &str) -> Vec<Match> {
        let index = SearchIndex::of(snapshot);
        let query = Query::parse(text).unwrap();
        index.search(
            &query,
            &index.prepare(&everything(snapshot)),
            &Ranking::default(),
            10,
            |_| true,
        )
    }

    /// The tool a plain request describes comes first; a tool that only
    /// mentions the word in a parameter's description ranks below one
    /// named for it; tools matching nothing are not answered.
    #[test]
    fn ranking_sanity() {
        let s = catalog();
        let found = search(&s, "refund a customer's order");
        assert_eq!(found[0].def.name(), "refund_order", "{:?}", names(&found));
        let ticket = found.iter().position(|m| m.def.name() == "create_ticket");
        assert!(ticket.is_some_and(|at| at > 0), "{:?}", names(&found));
        assert!(!names(&found).contains(&"get_current_time"));
        assert_eq!(names(&search(&s, "email the customer"))[0], "send_email");
        assert_eq!(names(&search(&s, "order status"))[0], "getOrderStatus");
        assert_eq!(names(&search(&s, "what time is it"))[0], "get_current_time");
        assert_eq!(names(&search(&s, "billing"))[0], "refund_order");
        assert!(search(&s, "kubernetes").is_empty());
        assert!(found.windows(2).all(|w| w[0].score >= w[1].score));
    }

    /// camelCase and underscores meet the same query words, and stems meet
    /// inflections ("statuses" finds `getOrderStatus`, "refunding" finds
    /// `refund_order`).
    #[test]
    fn splitting_and_stemming_find_tools() {
        let s = catalog();
        assert_eq!(
            names(&search(&s, "statuses of orders"))[0],
            "getOrderStatus"
        );
        assert_eq!(names(&search(&s, "refunding"))[0], "refund_order");
        assert_eq!(names(&search(&s, "tickets"))[0], "create_ticket");
    }

    /// Limit and the filter choose what is answered; scores do not change.
    #[test]
    fn limit_and_filter() {
        let s = catalog();
        let index = SearchIndex::of(&s);
        let query = Query::parse("order customer").unwrap();
        let view = index.prepare(&everything(&s));
        let all = index.search(&query, &view, &Ranking::default(), 10, |_| true);
        let one = index.search(&query, &view, &Ranking::default(), 1, |_| true);
        assert_eq!(names(&one), names(&all)[..1]);
        let no_refund = index.search(&query, &view, &Ranking::default(), 10, |d| {
            d.name() != "refund_order"
        });
        assert!(!names(&no_refund).contains(&"refund_order"));
        for m in &no_refund {
            let same = all.iter().find(|a| a.def.name() == m.def.name()).unwrap();
            assert_eq!(same.score, m.score);
        }
    }

    /// Words for the generated tools.
    const WORDS: &[&str] = &[
        "refund", "order", "customer", "email", "ticket", "invoice", "status", "search", "user",
        "delete", "report", "time",
    ];

    fn words(n: usize) -> impl Strategy<Value = String> {
        proptest::collection::vec(proptest::sample::select(WORDS), 1..n).prop_map(|w| w.join(" "))
    }

    proptest! {
        /// Tools outside a caller's view change nothing the caller gets:
        /// not which tools, not their order, not one bit of a score.
        #[test]
        fn hidden_tools_change_no_visible_score(
            visible in proptest::collection::vec((words(3), words(12)), 1..12),
            hidden in proptest::collection::vec((words(3), words(12)), 1..12),
            query in words(4),
        ) {
            let name_of = |prefix: &str, i: usize, words: &str| {
                format!("{prefix}{i}_{}", words.replace(' ', "_"))
            };
            let mut b = Snapshot::empty("e").next();
            for (i, (name, description)) in visible.iter().enumerate() {
                b.put(entry(&name_of("v", i, name), "1.0.0", description));
            }
            let seen = b.finish();
            let view = everything(&seen);
            let mut b = seen.next();
            for (i, (name, description)) in hidden.iter().enumerate() {
                b.put(entry(&name_of("h", i, name), "1.0.0", description));
            }
            let all = b.finish();
            let query = Query::parse(&query).unwrap();
            let ranking = Ranking::default();
            let alone_index = SearchIndex::of(&seen);
            let alone = alone_index.search(&query, &alone_index.prepare(&view), &ranking, 50, |_| true);
            let mut index = SearchIndex::of(&seen);
            index.advance(&seen, &all);
            let among = index.search(&query, &index.prepare(&view), &ranking, 50, |_| true);
            let scored = |found: &[Match]| -> Vec<(String, u64)> {
                found.iter().map(|m| (m.def.name().to_owned(), m.score.to_bits())).collect()
            };
            prop_assert_eq!(scored(&alone), scored(&among));
        }
    }
}
