//! Embeddings for semantic tool search: each definition embedded once per
//! content digest by an OpenAI-compatible endpoint, in batches, in the
//! background as snapshots arrive; queries embedded within a bounded wait.

use crate::metrics::{EmbeddingsFallback, Metrics};
use serde_json::{Value, json};
use std::collections::{HashMap, VecDeque};
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use toolmesh::{Snapshot, ToolDef};

/// Longest a search waits for its query's embedding: past it (or half the
/// call's remaining deadline, if less) the search answers lexically.
pub const EMBEDDINGS_WAIT: Duration = Duration::from_millis(300);
/// Definitions sent in one embeddings request.
pub const EMBEDDINGS_BATCH: usize = 64;
/// Query embeddings kept (the most recent queries).
const QUERY_CACHE: usize = 256;
/// Query embeddings asked of the endpoint at once; past it a search does
/// not wait for a slow endpoint at all (counted as a timeout).
const QUERIES_IN_FLIGHT: usize = 64;
/// Longest one embeddings request may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// First and longest pause after the endpoint failed a batch.
const RETRY_AFTER: (Duration, Duration) = (Duration::from_millis(500), Duration::from_secs(30));

/// Where and how definitions and queries are embedded.
#[derive(Debug, Clone)]
pub struct EmbeddingsConfig {
    /// The endpoint's base URL: requests go to `{url}/v1/embeddings`.
    pub url: String,
    /// The `model` every request names.
    pub model: String,
    /// Sent as `Authorization: Bearer …` when set.
    pub api_key: Option<String>,
    /// Definitions per request.
    pub batch: usize,
    /// Longest a search waits for its query's embedding.
    pub wait: Duration,
}

impl EmbeddingsConfig {
    /// `model` at `url`, without a key, with the default batch and wait.
    pub fn new(url: impl Into<String>, model: impl Into<String>) -> Self {
        EmbeddingsConfig {
            url: url.into(),
            model: model.into(),
            api_key: None,
            batch: EMBEDDINGS_BATCH,
            wait: EMBEDDINGS_WAIT,
        }
    }
}

/// Why an embeddings request gave no vectors.
#[derive(Debug, thiserror::Error)]
pub(crate) enum EmbeddingsError {
    #[error("cannot reach the embeddings endpoint: {0}")]
    Unreachable(#[from] reqwest::Error),
    #[error("the embeddings endpoint answered HTTP {status}: {body}")]
    Status { status: u16, body: String },
    #[error("the embeddings endpoint answered something else than embeddings: {0}")]
    Malformed(String),
}

/// A definition's content digest: its name, tags and spec fingerprint
/// (the fields the embedded text is made of), hashed.
type Digest = u64;

fn digest(def: &ToolDef) -> Digest {
    let mut hasher = DefaultHasher::new();
    (def.name(), &def.spec().tags, def.fingerprint()).hash(&mut hasher);
    hasher.finish()
}

/// The text a definition is embedded as: the fields the lexical index
/// reads, in words (the name split at its separators).
fn text_of(def: &ToolDef) -> String {
    let [
        name,
        title,
        description,
        tags,
        parameter_names,
        parameter_descriptions,
        ..,
    ] = toolmesh_search::field_texts(def);
    let name = name.replace(['_', '.', '-', '/'], " ");
    let mut text = format!("{name}: {title}. {description}");
    for (label, field) in [
        ("Tags", tags),
        ("Parameters", parameter_names),
        ("", parameter_descriptions),
    ] {
        if !field.trim().is_empty() {
            text.push_str(&format!(
                " {label}{}{field}",
                if label.is_empty() { "" } else { ": " }
            ));
        }
    }
    text
}

/// The most recent queries' embeddings.
#[derive(Default)]
struct QueryCache {
    vectors: HashMap<String, Arc<[f32]>>,
    order: VecDeque<String>,
}

impl QueryCache {
    fn insert(&mut self, query: String, vector: Arc<[f32]>) {
        if self.vectors.insert(query.clone(), vector).is_none() {
            self.order.push_back(query);
        }
        while self.order.len() > QUERY_CACHE {
            if let Some(oldest) = self.order.pop_front() {
                self.vectors.remove(&oldest);
            }
        }
    }
}

/// The embeddings of the definitions the newest snapshot holds, and the
/// client that makes them.
pub(crate) struct Embeddings {
    config: EmbeddingsConfig,
    endpoint: String,
    client: reqwest::Client,
    /// Each definition's unit vector by content digest: only those of the
    /// newest snapshot (an older one's definitions rank lexically).
    vectors: RwLock<HashMap<Digest, Arc<[f32]>>>,
    queries: Mutex<QueryCache>,
    /// Bounds the query embeddings pending on a slow endpoint.
    queries_in_flight: Arc<tokio::sync::Semaphore>,
    metrics: Arc<Metrics>,
}

impl std::fmt::Debug for Embeddings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Embeddings")
            .field("endpoint", &self.endpoint)
            .field("model", &self.config.model)
            .finish_non_exhaustive()
    }
}

impl Embeddings {
    /// Embeddings made by the endpoint of `config`, for `snapshots`
    /// (the newest first, then each installed), in a background task
    /// that ends at `stop`. Must be called inside a tokio runtime.
    pub(crate) fn start(
        config: EmbeddingsConfig,
        snapshots: watch::Receiver<Arc<Snapshot>>,
        metrics: Arc<Metrics>,
        stop: CancellationToken,
    ) -> Arc<Self> {
        let _ = tokio_rustls::rustls::crypto::ring::default_provider().install_default();
        // Building fails only without a TLS provider, installed just above.
        let client = reqwest::Client::builder()
            .timeout(REQUEST_TIMEOUT)
            .build()
            .unwrap_or_default();
        let endpoint = format!("{}/v1/embeddings", config.url.trim_end_matches('/'));
        let embeddings = Arc::new(Embeddings {
            config,
            endpoint,
            client,
            vectors: RwLock::default(),
            queries: Mutex::default(),
            queries_in_flight: Arc::new(tokio::sync::Semaphore::new(QUERIES_IN_FLIGHT)),
            metrics,
        });
        tokio::spawn(embeddings.clone().follow(snapshots, stop));
        embeddings
    }

    /// Embeds `inputs`, one unit vector each, in order.
    async fn embed(&self, inputs: &[String]) -> Result<Vec<Box<[f32]>>, EmbeddingsError> {
        let body = json!({"model": self.config.model, "input": inputs});
        let mut request = self
            .client
            .post(&self.endpoint)
            .header("content-type", "application/json")
            .body(body.to_string());
        if let Some(key) = &self.config.api_key {
            request = request.bearer_auth(key);
        }
        let response = request.send().await?;
        let status = response.status();
        let bytes = response.bytes().await?;
        if !status.is_success() {
            let body = String::from_utf8_lossy(&bytes).chars().take(200).collect();
            return Err(EmbeddingsError::Status {
                status: status.as_u16(),
                body,
            });
        }
        vectors_of(&bytes, inputs.len())
    }

    /// The definitions' vectors by digest, held for reading (a search's
    /// scan of its caller's view).
    pub(crate) fn read(&self) -> impl std::ops::Deref<Target = HashMap<u64, Arc<[f32]>>> + '_ {
        self.vectors.read().unwrap_or_else(|e| e.into_inner())
    }

    /// The vector of `def` in `vectors` (what [`read`](Self::read) holds).
    pub(crate) fn vector_of<'v>(
        vectors: &'v HashMap<u64, Arc<[f32]>>,
        def: &ToolDef,
    ) -> Option<&'v [f32]> {
        vectors.get(&digest(def)).map(|v| &**v)
    }

    /// The unit vector of `query`: from the recent queries, else from the
    /// endpoint if it answers within `wait`, else why not (counted). An
    /// answer that comes later still fills the cache for the next search.
    pub(crate) async fn query(self: &Arc<Self>, query: &str, wait: Duration) -> Option<Arc<[f32]>> {
        let fallback = |reason| {
            self.metrics.embeddings_fallback(reason);
            None
        };
        if self.read().is_empty() {
            return fallback(EmbeddingsFallback::NotReady);
        }
        let cached = self.lock_queries().vectors.get(query).cloned();
        if cached.is_some() {
            return cached;
        }
        let Ok(slot) = self.queries_in_flight.clone().try_acquire_owned() else {
            return fallback(EmbeddingsFallback::Timeout);
        };
        let embeddings = self.clone();
        let text = query.to_owned();
        let asked = tokio::spawn(async move {
            let _slot = slot;
            let mut vectors = embeddings.embed(std::slice::from_ref(&text)).await?;
            let vector: Arc<[f32]> = vectors
                .pop()
                .map(Arc::from)
                .ok_or_else(|| EmbeddingsError::Malformed("no embedding for the query".into()))?;
            embeddings.lock_queries().insert(text, vector.clone());
            Ok::<_, EmbeddingsError>(vector)
        });
        match tokio::time::timeout(wait, asked).await {
            Ok(Ok(Ok(vector))) => Some(vector),
            Ok(Ok(Err(error))) => {
                tracing::debug!(%error, "query not embedded: ranked lexically");
                fallback(EmbeddingsFallback::Error)
            }
            Ok(Err(_)) => fallback(EmbeddingsFallback::Error),
            Err(_) => fallback(EmbeddingsFallback::Timeout),
        }
    }

    /// The wait a search may spend on its query's embedding, when the
    /// caller gave it `deadline`: half of that, at most the configured wait.
    pub(crate) fn wait_within(&self, deadline: Option<Duration>) -> Duration {
        deadline.map_or(self.config.wait, |left| (left / 2).min(self.config.wait))
    }

    fn lock_queries(&self) -> std::sync::MutexGuard<'_, QueryCache> {
        self.queries.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Follows `snapshots` until `stop`: each change forgets the vectors of
    /// definitions that left and queues those that came (work in
    /// proportion to the change), and the queue is embedded in batches,
    /// retried with a growing pause while the endpoint fails.
    async fn follow(
        self: Arc<Self>,
        mut snapshots: watch::Receiver<Arc<Snapshot>>,
        stop: CancellationToken,
    ) {
        let mut held = Arc::new(Snapshot::empty(""));
        let mut queued: HashMap<Digest, Arc<ToolDef>> = HashMap::new();
        let mut pause = RETRY_AFTER.0;
        loop {
            let newer = snapshots.borrow_and_update().clone();
            self.advance(&held, &newer, &mut queued);
            held = newer;
            // Embeds the queue until it is empty or a newer snapshot came.
            let newer_came = loop {
                if snapshots.has_changed().unwrap_or(false) {
                    break true;
                }
                if queued.is_empty() {
                    break false;
                }
                let batch: Vec<(Digest, Arc<ToolDef>)> = queued
                    .iter()
                    .take(self.config.batch.max(1))
                    .map(|(digest, def)| (*digest, def.clone()))
                    .collect();
                let texts: Vec<String> = batch.iter().map(|(_, def)| text_of(def)).collect();
                match stop.run_until_cancelled(self.embed(&texts)).await {
                    None => return,
                    Some(Ok(vectors)) => {
                        pause = RETRY_AFTER.0;
                        let mut held = self.vectors.write().unwrap_or_else(|e| e.into_inner());
                        for ((digest, _), vector) in batch.into_iter().zip(vectors) {
                            queued.remove(&digest);
                            held.insert(digest, Arc::from(vector));
                        }
                    }
                    Some(Err(error)) => {
                        tracing::warn!(
                            %error,
                            queued = queued.len(),
                            "definitions not embedded yet: they rank lexically until the endpoint answers"
                        );
                        let slept = tokio::time::sleep(pause);
                        pause = (pause * 2).min(RETRY_AFTER.1);
                        tokio::select! {
                            () = slept => {}
                            () = stop.cancelled() => return,
                            changed = snapshots.changed() => match changed {
                                Ok(()) => break true,
                                Err(_) => return,
                            },
                        }
                    }
                }
            };
            if !newer_came {
                match stop.run_until_cancelled(snapshots.changed()).await {
                    Some(Ok(())) => {}
                    _ => return,
                }
            }
        }
    }

    /// Moves from `older` to `newer`: the names that changed only. A
    /// definition that left is forgotten (vector or queue); one that came
    /// is queued unless its digest is embedded already.
    fn advance(
        &self,
        older: &Snapshot,
        newer: &Snapshot,
        queued: &mut HashMap<Digest, Arc<ToolDef>>,
    ) {
        let mut vectors = self.vectors.write().unwrap_or_else(|e| e.into_inner());
        for name in newer.changed_names(older) {
            let now: Vec<(Digest, &Arc<ToolDef>)> = newer
                .versions(&name)
                .iter()
                .map(|entry| (digest(&entry.def), &entry.def))
                .collect();
            for entry in older.versions(&name).iter() {
                let gone = digest(&entry.def);
                if !now.iter().any(|(d, _)| *d == gone) {
                    vectors.remove(&gone);
                    queued.remove(&gone);
                }
            }
            for (digest, def) in now {
                if !vectors.contains_key(&digest) {
                    queued.entry(digest).or_insert_with(|| def.clone());
                }
            }
        }
    }
}

/// The `inputs` unit vectors of an embeddings response, in input order.
fn vectors_of(body: &[u8], inputs: usize) -> Result<Vec<Box<[f32]>>, EmbeddingsError> {
    let malformed = |why: &str| EmbeddingsError::Malformed(why.to_owned());
    let parsed: Value = serde_json::from_slice(body).map_err(|e| malformed(&e.to_string()))?;
    let data = parsed
        .get("data")
        .and_then(Value::as_array)
        .ok_or_else(|| malformed("no \"data\" array"))?;
    let mut vectors: Vec<Option<Box<[f32]>>> = vec![None; inputs];
    for (at, item) in data.iter().enumerate() {
        let index = item
            .get("index")
            .and_then(Value::as_u64)
            .map_or(at, |i| usize::try_from(i).unwrap_or(usize::MAX));
        let embedding = item
            .get("embedding")
            .and_then(Value::as_array)
            .ok_or_else(|| malformed("an item without an \"embedding\" array"))?
            .iter()
            .map(|x| x.as_f64().map(|x| x as f32))
            .collect::<Option<Vec<f32>>>()
            .ok_or_else(|| malformed("an embedding with something else than numbers"))?;
        let slot = vectors
            .get_mut(index)
            .ok_or_else(|| malformed("an \"index\" past the inputs"))?;
        *slot = Some(
            toolmesh_search::unit_vector(embedding)
                .ok_or_else(|| malformed("an empty or zero embedding"))?,
        );
    }
    vectors
        .into_iter()
        .collect::<Option<Vec<_>>>()
        .ok_or_else(|| malformed("fewer embeddings than inputs"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The response's items go back to their inputs by `index`; a short,
    /// empty or malformed answer is an error, never a wrong vector.
    #[test]
    fn responses_read_by_index() {
        let body = br#"{"data":[{"index":1,"embedding":[0,2]},{"index":0,"embedding":[3,4]}]}"#;
        let vectors = vectors_of(body, 2).unwrap();
        assert_eq!(&*vectors[0], &[0.6, 0.8]);
        assert_eq!(&*vectors[1], &[0.0, 1.0]);
        for (bad, inputs) in [
            (&br#"{"data":[{"index":0,"embedding":[1]}]}"#[..], 2),
            (br#"{"data":[{"index":0,"embedding":[0,0]}]}"#, 1),
            (br#"{"data":[{"index":3,"embedding":[1]}]}"#, 1),
            (br#"{"error":"x"}"#, 1),
            (b"not json", 1),
        ] {
            assert!(
                vectors_of(bad, inputs).is_err(),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
    }
}
