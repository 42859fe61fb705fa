//! Semantic ranking beside the lexical one: unit-length embeddings, the
//! nearest of a caller's candidates to a query by cosine, and reciprocal
//! rank fusion of rankings.

use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap};
use std::hash::Hash;

/// The `k` of reciprocal rank fusion (Cormack, Clarke and Büttcher, 2009):
/// an item at rank `r` (from 1) of a ranking adds `1 / (k + r)`, so the
/// first places of either ranking count, and no ranking's scores need
/// calibrating against the other's.
pub const RRF_K: f64 = 60.0;

/// An embedding scaled to unit length, so that cosine is a dot product;
/// `None` for an empty vector, a zero one, or one with a NaN or infinity.
pub fn unit_vector(mut vector: Vec<f32>) -> Option<Box<[f32]>> {
    let norm = vector.iter().map(|x| x * x).sum::<f32>().sqrt();
    if vector.is_empty() || !norm.is_normal() {
        return None;
    }
    for x in &mut vector {
        *x /= norm;
    }
    Some(vector.into_boxed_slice())
}

/// Cosine of two unit vectors (0 when their dimensions differ: another
/// model's vector is not comparable).
pub fn cosine(a: &[f32], b: &[f32]) -> f32 {
    if a.len() != b.len() {
        return 0.0;
    }
    // Eight running sums rather than one: independent additions the
    // compiler turns into vector instructions (a single float sum is a
    // chain it may not reorder).
    let mut lanes = [0.0_f32; 8];
    let (a_chunks, b_chunks) = (a.as_chunks::<8>(), b.as_chunks::<8>());
    let tail: f32 = a_chunks.1.iter().zip(b_chunks.1).map(|(x, y)| x * y).sum();
    for (x, y) in a_chunks.0.iter().zip(b_chunks.0) {
        for ((sum, x), y) in lanes.iter_mut().zip(x).zip(y) {
            *sum += x * y;
        }
    }
    lanes.iter().sum::<f32>() + tail
}

/// One candidate held while the nearest are picked: ordered worst first,
/// so the heap's top is the one to drop.
struct Near<T> {
    similarity: f32,
    /// The candidate's place in the input (earlier wins a tie).
    at: usize,
    item: T,
}

impl<T> PartialEq for Near<T> {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl<T> Eq for Near<T> {}

impl<T> PartialOrd for Near<T> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl<T> Ord for Near<T> {
    /// Better is smaller: higher similarity, then earlier.
    fn cmp(&self, other: &Self) -> Ordering {
        other
            .similarity
            .total_cmp(&self.similarity)
            .then(self.at.cmp(&other.at))
    }
}

/// The `depth` candidates nearest to `query` (a unit vector), nearest
/// first, by brute force over every candidate (each a unit vector).
pub fn nearest<'v, T>(
    query: &[f32],
    candidates: impl IntoIterator<Item = (T, &'v [f32])>,
    depth: usize,
) -> Vec<T> {
    if depth == 0 {
        return Vec::new();
    }
    let mut kept: BinaryHeap<Near<T>> = BinaryHeap::with_capacity(depth + 1);
    for (at, (item, vector)) in candidates.into_iter().enumerate() {
        let near = Near {
            similarity: cosine(query, vector),
            at,
            item,
        };
        if kept.len() < depth {
            kept.push(near);
        } else if kept.peek().is_some_and(|worst| near < *worst) {
            kept.pop();
            kept.push(near);
        }
    }
    kept.into_sorted_vec()
        .into_iter()
        .map(|near| near.item)
        .collect()
}

/// The items of `rankings` (each best first) by reciprocal rank fusion
/// ([`RRF_K`]), best first with their fused scores; equal scores keep the
/// order in which the rankings first name the items (the first ranking
/// wins a tie).
pub fn reciprocal_rank_fusion<T: Clone + Eq + Hash>(rankings: &[&[T]]) -> Vec<(T, f64)> {
    let mut fused: Vec<(T, f64)> = Vec::new();
    let mut at: HashMap<T, usize> = HashMap::new();
    for ranking in rankings {
        for (rank, item) in ranking.iter().enumerate() {
            let share = 1.0 / (RRF_K + rank as f64 + 1.0);
            match at.get(item) {
                Some(&i) => fused[i].1 += share,
                None => {
                    at.insert(item.clone(), fused.len());
                    fused.push((item.clone(), share));
                }
            }
        }
    }
    // Stable: ties keep first-named order.
    fused.sort_by(|a, b| b.1.total_cmp(&a.1));
    fused
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unit_vectors_and_cosine() {
        let a = unit_vector(vec![3.0, 4.0]).unwrap();
        assert!((a[0] - 0.6).abs() < 1e-6 && (a[1] - 0.8).abs() < 1e-6);
        assert!((cosine(&a, &a) - 1.0).abs() < 1e-6);
        assert!(unit_vector(vec![]).is_none());
        assert!(unit_vector(vec![0.0, 0.0]).is_none());
        assert!(unit_vector(vec![f32::NAN, 1.0]).is_none());
        assert_eq!(cosine(&a, &[1.0]), 0.0);
        let long: Vec<f32> = (0..19).map(|i| i as f32).collect();
        let expected: f32 = long.iter().map(|x| x * x).sum();
        assert_eq!(cosine(&long, &long), expected);
    }

    #[test]
    fn nearest_first_ties_by_order() {
        let x = unit_vector(vec![1.0, 0.0]).unwrap();
        let y = unit_vector(vec![0.0, 1.0]).unwrap();
        let xy = unit_vector(vec![1.0, 1.0]).unwrap();
        let candidates = [("y", &*y), ("x1", &*x), ("xy", &*xy), ("x2", &*x)];
        assert_eq!(nearest(&x, candidates, 3), ["x1", "x2", "xy"]);
        assert_eq!(nearest(&x, candidates, 10), ["x1", "x2", "xy", "y"]);
        assert!(nearest(&x, candidates, 0).is_empty());
    }

    /// An item both rankings hold beats one only the first holds at the
    /// top; the second ranking alone brings in what the first lacks.
    #[test]
    fn fusion_adds_reciprocal_ranks() {
        let lexical = ["a", "b", "c"];
        let semantic = ["d", "b"];
        let fused = reciprocal_rank_fusion(&[&lexical, &semantic]);
        let order: Vec<&str> = fused.iter().map(|(item, _)| *item).collect();
        assert_eq!(order, ["b", "a", "d", "c"]);
        let b = 1.0 / 62.0 + 1.0 / 62.0;
        assert!((fused[0].1 - b).abs() < 1e-12);
        assert!((fused[1].1 - 1.0 / 61.0).abs() < 1e-12);
        assert_eq!(
            fused[1].1, fused[2].1,
            "a and d tie; the first ranking's wins"
        );
    }

    /// Brute-force cosine over 10,000 candidates of dimension 384 (a
    /// caller's visible set with a small sentence model): its cost per
    /// query, printed (`cargo test --release -p toolmesh-search
    /// semantic_cost -- --nocapture`).
    #[test]
    fn semantic_cost_at_ten_thousand() {
        const DIMENSION: usize = 384;
        const CANDIDATES: usize = 10_000;
        let mut seed = 0x9E37_79B9_7F4A_7C15_u64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed >> 40) as f32 / (1u64 << 24) as f32 - 0.5
        };
        let vectors: Vec<Box<[f32]>> = (0..CANDIDATES)
            .map(|_| unit_vector((0..DIMENSION).map(|_| next()).collect()).unwrap())
            .collect();
        let query = unit_vector((0..DIMENSION).map(|_| next()).collect()).unwrap();
        let rounds = 20;
        let started = std::time::Instant::now();
        let mut found = Vec::new();
        for _ in 0..rounds {
            found = nearest(
                &query,
                vectors.iter().enumerate().map(|(i, v)| (i, &**v)),
                100,
            );
        }
        let each = started.elapsed() / rounds;
        assert_eq!(found.len(), 100);
        println!("nearest 100 of {CANDIDATES} x {DIMENSION}: {each:?} per query");
    }
}
