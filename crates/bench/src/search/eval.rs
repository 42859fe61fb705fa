//! Retrieval quality on the Berkeley Function Calling Leaderboard: every
//! category's functions pooled into one catalog served by a dispatcher,
//! each question asked of SearchTools, and recall@1/5/10 and MRR scored
//! against the functions its answer calls, beside a plain BM25
//! (`rank_bm25`'s BM25Okapi over the same fields' text, lowercased and
//! split at non-alphanumerics, no stemming, no stop words, no field
//! weights) asked once over all questions in the same run.
//!
//! The development categories are the non-live ones; the `live_*`
//! categories are held out and read only when asked (`--held-out`).

use super::Served;
use super::bfcl::{Catalog, Question, questions};
use crate::error::BenchError;
use serde::Serialize;
use std::path::PathBuf;
use std::sync::Arc;
use toolmesh::pb::SearchToolsRequest;
use toolmesh::{Instance, Snapshot, ToolDef, ToolEntry};
use toolmesh_search::{FIELDS, MAX_QUERY_BYTES, Query, Ranking, SearchIndex, View, field_texts};

/// Categories the ranking is developed and tuned on.
pub const DEVELOPMENT: &[&str] = &[
    "simple_python",
    "simple_java",
    "simple_javascript",
    "multiple",
    "parallel",
    "parallel_multiple",
];

/// Categories held out: read only with `held_out`, never tuned on.
pub const HELD_OUT: &[&str] = &[
    "live_simple",
    "live_multiple",
    "live_parallel",
    "live_parallel_multiple",
];

/// Where the data and the baseline are.
#[derive(Debug, Clone)]
pub struct EvalOptions {
    /// The package's `bfcl_eval/data` (scripts/bench/bfcl.sh unpacks it).
    pub data: PathBuf,
    /// A python with `rank_bm25` (the same script's venv).
    pub python: PathBuf,
    /// Also score the held-out `live_*` categories.
    pub held_out: bool,
    /// Search the ranking's parameters for the best on the development
    /// categories (never the held-out ones) and report them.
    pub tune: bool,
}

/// Recall and MRR over some questions (means per question; recall counts
/// the share of the answer's functions found).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Scores {
    /// Questions scored.
    pub questions: usize,
    /// In the first result.
    pub recall_at_1: f64,
    /// In the first five.
    pub recall_at_5: f64,
    /// In the first ten.
    pub recall_at_10: f64,
    /// Mean reciprocal rank of the first right function (0 past ten).
    pub mrr: f64,
}

/// One set of questions, toolmesh beside the baseline.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SetScores {
    /// A category, or `all` for the whole set.
    pub name: String,
    /// SearchTools.
    pub toolmesh: Scores,
    /// Plain BM25.
    pub baseline: Scores,
}

/// What the evaluation measured.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Quality {
    /// Tools in the pooled catalog.
    pub tools: usize,
    /// Questions cut to the query limit (1024 bytes).
    pub truncated_questions: usize,
    /// Each development category, then all of them.
    pub development: Vec<SetScores>,
    /// Each held-out category, then all of them (when asked).
    pub held_out: Option<Vec<SetScores>>,
    /// The best ranking found on the development categories (when asked).
    pub tuned: Option<Tuned>,
}

/// A ranking tuned on the development categories, with its scores there.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Tuned {
    /// Field weights, in `Field::ALL` order.
    pub weights: [f64; FIELDS],
    /// Length normalizations, in the same order.
    pub length_normalization: [f64; FIELDS],
    /// Term-frequency saturation.
    pub k1: f64,
    /// Its scores on all development questions.
    pub development: Scores,
    /// The default ranking's scores on them.
    pub default: Scores,
}

/// The baseline: BM25Okapi over each document's text, top ten per query
/// (score above zero), JSON in and out.
const BASELINE: &str = r#"
import json, re, sys
import numpy as np
from rank_bm25 import BM25Okapi
job = json.load(sys.stdin)
tokens = lambda text: re.findall(r"[a-z0-9]+", text.lower())
bm25 = BM25Okapi([tokens(d) for d in job["documents"]])
out = []
for query in job["queries"]:
    scores = bm25.get_scores(tokens(query))
    order = np.argsort(-scores, kind="stable")[: job["k"]]
    out.append([int(i) for i in order if scores[i] > 0])
json.dump(out, sys.stdout)
"#;

/// Results scored per question.
const K: usize = 10;

/// Runs the evaluation; see the module docs.
pub(crate) async fn run(options: &EvalOptions) -> Result<Quality, BenchError> {
    let catalog = Catalog::pooled(&options.data)?;
    let mut snapshot = Snapshot::empty("bfcl").next();
    let mut documents = Vec::new();
    for tool in &catalog.tools {
        let def = ToolDef::new(tool.spec.clone()).map_err(|e| {
            BenchError::failed(format!("register {}", tool.spec.name), e.to_string())
        })?;
        documents.push(field_texts(&def).join(" "));
        snapshot.put(entry(def));
    }
    let snapshot = snapshot.finish();
    let tuned = if options.tune {
        let mut development = Vec::new();
        for category in DEVELOPMENT {
            development.extend(questions(&options.data, category)?);
        }
        Some(tune(&snapshot, &catalog, &development)?)
    } else {
        None
    };
    let served = Served::new(snapshot)?;

    let mut sets: Vec<(&str, Vec<Question>)> = Vec::new();
    let categories = if options.held_out {
        [DEVELOPMENT, HELD_OUT].concat()
    } else {
        DEVELOPMENT.to_vec()
    };
    for category in categories {
        sets.push((category, questions(&options.data, category)?));
    }
    let mut truncated = 0;
    let asked: Vec<String> = sets
        .iter()
        .flat_map(|(_, questions)| questions)
        .map(|q| {
            let query = within_limit(&q.text);
            truncated += usize::from(query.len() < q.text.len());
            query.to_owned()
        })
        .collect();

    let names: Vec<&str> = catalog.tools.iter().map(|t| t.spec.name.as_str()).collect();
    let baseline: Vec<Vec<String>> = baseline(options, &documents, &asked)?
        .into_iter()
        .map(|found| found.into_iter().map(|i| names[i].to_owned()).collect())
        .collect();
    let mut toolmesh = Vec::with_capacity(asked.len());
    for query in &asked {
        let request = SearchToolsRequest {
            query: query.clone(),
            limit: K as u32,
            ..SearchToolsRequest::default()
        };
        let found = served
            .dispatcher
            .search_tools_in(&served.caller, "", &request)
            .map_err(|r| BenchError::rpc("SearchTools", r.into()))?;
        toolmesh.push(
            found
                .matches
                .into_iter()
                .filter_map(|m| m.tool.map(|t| t.name))
                .collect::<Vec<_>>(),
        );
    }

    let mut development = Vec::new();
    let mut held_out = Vec::new();
    let mut at = 0;
    for (category, questions) in &sets {
        let range = at..at + questions.len();
        at = range.end;
        let truths: Vec<Vec<&str>> = questions
            .iter()
            .map(|q| {
                q.truth
                    .iter()
                    .map(|name| {
                        catalog
                            .names
                            .get(name)
                            .map_or(name.as_str(), String::as_str)
                    })
                    .collect()
            })
            .collect();
        let set = SetScores {
            name: (*category).to_owned(),
            toolmesh: Scores::of(&toolmesh[range.clone()], &truths),
            baseline: Scores::of(&baseline[range], &truths),
        };
        if HELD_OUT.contains(category) {
            held_out.push(set);
        } else {
            development.push(set);
        }
    }
    let total = |sets: &mut Vec<SetScores>| {
        if !sets.is_empty() {
            let all = SetScores {
                name: "all".into(),
                toolmesh: Scores::pooled(sets.iter().map(|s| s.toolmesh)),
                baseline: Scores::pooled(sets.iter().map(|s| s.baseline)),
            };
            sets.push(all);
        }
    };
    total(&mut development);
    total(&mut held_out);
    Ok(Quality {
        tools: catalog.tools.len(),
        truncated_questions: truncated,
        development,
        held_out: options.held_out.then_some(held_out),
        tuned,
    })
}

/// Every tool of the catalog, as one caller's view.
struct Everything<'a>(&'a Snapshot);

impl View for Everything<'_> {
    fn members(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0
            .entries()
            .map(|e| (e.def.name(), e.def.spec().version.as_str()))
    }
}

/// Coordinate ascent over every parameter of the ranking, on `questions`
/// (the development ones), maximizing recall@5 plus MRR.
fn tune(
    snapshot: &Snapshot,
    catalog: &Catalog,
    questions: &[Question],
) -> Result<Tuned, BenchError> {
    let index = SearchIndex::of(snapshot);
    let view = index.prepare(&Everything(snapshot));
    let mut queries = Vec::new();
    for question in questions {
        let query = Query::parse(within_limit(&question.text))
            .map_err(|e| BenchError::failed("parse a question", e.to_string()))?;
        queries.push(query);
    }
    let truths: Vec<Vec<&str>> = questions
        .iter()
        .map(|q| {
            q.truth
                .iter()
                .map(|name| {
                    catalog
                        .names
                        .get(name)
                        .map_or(name.as_str(), String::as_str)
                })
                .collect()
        })
        .collect();
    let score = |ranking: &Ranking| {
        let found: Vec<Vec<String>> = queries
            .iter()
            .map(|query| {
                index
                    .search(query, &view, ranking, K, |_| true)
                    .into_iter()
                    .map(|m| m.def.name().to_owned())
                    .collect()
            })
            .collect();
        Scores::of(&found, &truths)
    };
    let objective = |s: &Scores| s.recall_at_5 + s.mrr;
    let default = score(&Ranking::default());
    let (mut best, mut best_scores) = (Ranking::default(), default);
    for _round in 0..3 {
        for parameter in 0..2 * FIELDS + 1 {
            for factor in [0.0, 0.25, 0.5, 0.75, 0.9, 1.1, 1.5, 2.0, 3.0] {
                let mut trial = best.clone();
                // Each parameter with its ceiling (a length normalization
                // is at most 1); scaled, a value stays above zero unless
                // switched off.
                let (value, ceiling) = match parameter {
                    p if p < FIELDS => (&mut trial.weights[p], f64::MAX),
                    p if p < 2 * FIELDS => (&mut trial.length_normalization[p - FIELDS], 1.0),
                    _ => (&mut trial.k1, f64::MAX),
                };
                let floor = if factor == 0.0 { 0.0 } else { 0.05 };
                *value = (*value * factor).clamp(floor, ceiling);
                let scores = score(&trial);
                if objective(&scores) > objective(&best_scores) + 1e-9 {
                    (best, best_scores) = (trial, scores);
                }
            }
        }
    }
    Ok(Tuned {
        weights: best.weights,
        length_normalization: best.length_normalization,
        k1: best.k1,
        development: best_scores,
        default,
    })
}

impl Scores {
    /// Scores of `found` (names, best first) against `truths` (the names
    /// each answer calls), question by question.
    fn of(found: &[Vec<String>], truths: &[Vec<&str>]) -> Scores {
        let mut scores = Scores {
            questions: found.len(),
            ..Scores::default()
        };
        for (found, truth) in found.iter().zip(truths) {
            let within = |k: usize| {
                let hits = truth
                    .iter()
                    .filter(|t| found.iter().take(k).any(|f| f == *t))
                    .count();
                hits as f64 / truth.len().max(1) as f64
            };
            scores.recall_at_1 += within(1);
            scores.recall_at_5 += within(5);
            scores.recall_at_10 += within(K);
            if let Some(rank) = found
                .iter()
                .take(K)
                .position(|f| truth.contains(&f.as_str()))
            {
                scores.mrr += 1.0 / (rank + 1) as f64;
            }
        }
        let n = scores.questions.max(1) as f64;
        scores.recall_at_1 /= n;
        scores.recall_at_5 /= n;
        scores.recall_at_10 /= n;
        scores.mrr /= n;
        scores
    }

    /// Several sets' scores as one (weighted by their questions).
    fn pooled(sets: impl Iterator<Item = Scores>) -> Scores {
        let mut all = Scores::default();
        for s in sets {
            let n = s.questions as f64;
            all.questions += s.questions;
            all.recall_at_1 += s.recall_at_1 * n;
            all.recall_at_5 += s.recall_at_5 * n;
            all.recall_at_10 += s.recall_at_10 * n;
            all.mrr += s.mrr * n;
        }
        let n = all.questions.max(1) as f64;
        all.recall_at_1 /= n;
        all.recall_at_5 /= n;
        all.recall_at_10 /= n;
        all.mrr /= n;
        all
    }
}

/// `text` cut at a character boundary to fit the query limit.
fn within_limit(text: &str) -> &str {
    let mut end = text.len().min(MAX_QUERY_BYTES);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// The baseline's top ten (document positions) for each query, from one
/// run of the python.
fn baseline(
    options: &EvalOptions,
    documents: &[String],
    queries: &[String],
) -> Result<Vec<Vec<usize>>, BenchError> {
    use std::io::Write;
    let job = serde_json::json!({"documents": documents, "queries": queries, "k": K});
    let mut child = std::process::Command::new(&options.python)
        .args(["-c", BASELINE])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| BenchError::io(format!("start {}", options.python.display()), e))?;
    let mut stdin = child
        .stdin
        .take()
        .ok_or_else(|| BenchError::failed("run the baseline", "no stdin"))?;
    let text = job.to_string();
    let writer = std::thread::spawn(move || stdin.write_all(text.as_bytes()));
    let output = child
        .wait_with_output()
        .map_err(|e| BenchError::io("run the baseline", e))?;
    writer
        .join()
        .map_err(|_| BenchError::failed("run the baseline", "the writer panicked"))?
        .map_err(|e| BenchError::io("give the baseline its input", e))?;
    if !output.status.success() {
        return Err(BenchError::failed(
            "run the baseline (rank_bm25; source scripts/bench/bfcl.sh)",
            output.status.to_string(),
        ));
    }
    let rankings: Vec<Vec<usize>> = serde_json::from_slice(&output.stdout)?;
    if rankings.len() != queries.len() || rankings.iter().flatten().any(|&i| i >= documents.len()) {
        return Err(BenchError::failed(
            "read the baseline's rankings",
            "not one ranking of known documents per query",
        ));
    }
    Ok(rankings)
}

/// A served entry of `def`.
fn entry(def: ToolDef) -> ToolEntry {
    ToolEntry {
        def: Arc::new(def),
        instances: vec![Instance {
            executor_id: "bfcl".into(),
            endpoint: "127.0.0.1:1".into(),
            service: "s".into(),
            healthy: true,
            execute_token: "".into(),
        }]
        .into(),
        disabled: None,
    }
}
