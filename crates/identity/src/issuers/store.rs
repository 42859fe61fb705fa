//! The cached keys of each issuer: fetched at start and on a schedule, refreshed on an unknown `kid` at a bounded rate, kept while the source fails for a bounded time.

use super::verified::{KeysInForce, VerifiedTokens};
use super::{FetchAuth, Issuer, KeySet, KeySource, fetch};
use crate::IssuerError;
use arc_swap::{ArcSwap, ArcSwapOption};
use std::{
    collections::HashMap,
    sync::{
        Arc, Mutex, Weak,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};
use tokio::sync::Notify;

/// Keys as last fetched.
pub(crate) struct Loaded {
    pub(crate) set: KeySet,
    fetched: Instant,
}

/// When to fetch, from the issuer's entry (a reload may change them).
#[derive(Debug, Clone, Copy)]
struct Timing {
    refresh: Duration,
    min_refresh: Duration,
    max_stale: Duration,
}

impl From<&Issuer> for Timing {
    fn from(issuer: &Issuer) -> Self {
        Timing {
            refresh: issuer.refresh,
            min_refresh: issuer.min_refresh,
            max_stale: issuer.max_stale,
        }
    }
}

/// What went on with fetches.
#[derive(Debug, Default)]
struct Fetching {
    /// When a fetch last started (or was asked for by an unknown `kid`).
    last_attempt: Option<Instant>,
    /// The last failure since the last success.
    last_error: Option<IssuerError>,
}

/// The keys of one issuer from one source.
pub(crate) struct KeyStore {
    issuer: String,
    source: KeySource,
    fetch: FetchAuth,
    timing: Mutex<Timing>,
    current: ArcSwapOption<Loaded>,
    fetching: Mutex<Fetching>,
    fetches: AtomicU64,
    failures: AtomicU64,
    wake: Arc<Notify>,
    task: AtomicBool,
}

/// How one issuer's keys stand, for health and metrics.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyStatus {
    /// The issuer.
    pub issuer: String,
    /// Keys held (0 before the first good fetch, or once they expired).
    pub keys: usize,
    /// Since when the keys held were fetched.
    pub age: Option<Duration>,
    /// Whether the last fetch failed and older keys still serve.
    pub stale: bool,
    /// Fetches tried, and how many failed.
    pub fetches: u64,
    /// Fetches that failed.
    pub failures: u64,
    /// Why the last fetch failed, when it did.
    pub last_error: Option<String>,
}

impl KeyStore {
    fn new(issuer: &Issuer) -> Arc<KeyStore> {
        let store = Arc::new(KeyStore {
            issuer: issuer.issuer.clone(),
            source: issuer.keys.clone(),
            fetch: issuer.fetch.clone(),
            timing: Mutex::new(Timing::from(issuer)),
            current: ArcSwapOption::empty(),
            fetching: Mutex::new(Fetching::default()),
            fetches: AtomicU64::new(0),
            failures: AtomicU64::new(0),
            wake: Arc::new(Notify::new()),
            task: AtomicBool::new(false),
        });
        if let KeySource::File(path) = &store.source {
            // A local file is read at once, so its keys serve from the first call.
            store.settle(fetch::read_key_file(path).and_then(|doc| KeySet::parse(&doc)));
        }
        store.start();
        store
    }

    fn timing(&self) -> Timing {
        *self.timing.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The keys that may verify a token now: the last good ones unless
    /// they outlived the refresh interval plus `max_stale_secs`.
    pub(crate) fn keys(&self) -> Option<Arc<Loaded>> {
        let loaded = self.current.load_full()?;
        let timing = self.timing();
        (loaded.fetched.elapsed() <= timing.refresh + timing.max_stale).then_some(loaded)
    }

    /// Asks for a fetch because a token named a key not held: at most one
    /// per `min_refresh_secs`, so random `kid`s cannot hammer the issuer.
    pub(crate) fn request_refresh(self: &Arc<Self>) {
        let min = self.timing().min_refresh;
        {
            let mut fetching = self.fetching.lock().unwrap_or_else(|e| e.into_inner());
            if fetching.last_attempt.is_some_and(|at| at.elapsed() < min) {
                return;
            }
            fetching.last_attempt = Some(Instant::now());
        }
        self.start();
        self.wake.notify_one();
    }

    /// Starts the refresh task, once, when a runtime is at hand.
    fn start(self: &Arc<Self>) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        if self.task.swap(true, Ordering::AcqRel) {
            return;
        }
        let weak = Arc::downgrade(self);
        let wake = self.wake.clone();
        runtime.spawn(refresh_loop(weak, wake));
    }

    /// Fetches the keys once and keeps them if they are good.
    async fn refresh(&self) {
        self.fetching
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .last_attempt = Some(Instant::now());
        let fetched = fetch::jwks(&self.issuer, &self.source, &self.fetch).await;
        self.settle(fetched.and_then(|doc| KeySet::parse(&doc)));
    }

    fn settle(&self, outcome: Result<KeySet, IssuerError>) {
        self.fetches.fetch_add(1, Ordering::Relaxed);
        let mut fetching = self.fetching.lock().unwrap_or_else(|e| e.into_inner());
        match outcome {
            Ok(set) => {
                if fetching.last_error.take().is_some() {
                    tracing::info!(issuer = %self.issuer, keys = set.len(), "issuer keys fetched again");
                }
                self.current.store(Some(Arc::new(Loaded {
                    set,
                    fetched: Instant::now(),
                })));
            }
            Err(error) => {
                self.failures.fetch_add(1, Ordering::Relaxed);
                let timing = self.timing();
                match self.current.load().as_ref() {
                    Some(loaded) => tracing::warn!(
                        issuer = %self.issuer,
                        %error,
                        kept_for_secs = (timing.refresh + timing.max_stale).saturating_sub(loaded.fetched.elapsed()).as_secs(),
                        "issuer keys not fetched; the last good keys still serve"
                    ),
                    None => tracing::warn!(
                        issuer = %self.issuer,
                        %error,
                        "issuer keys not fetched; its tokens are refused until they are"
                    ),
                }
                fetching.last_error = Some(error);
            }
        }
    }

    fn status(&self) -> KeyStatus {
        let held = self.keys();
        let fetching = self.fetching.lock().unwrap_or_else(|e| e.into_inner());
        KeyStatus {
            issuer: self.issuer.clone(),
            keys: held.as_ref().map_or(0, |l| l.set.len()),
            age: self.current.load().as_ref().map(|l| l.fetched.elapsed()),
            stale: fetching.last_error.is_some() && held.is_some(),
            fetches: self.fetches.load(Ordering::Relaxed),
            failures: self.failures.load(Ordering::Relaxed),
            last_error: fetching.last_error.as_ref().map(ToString::to_string),
        }
    }
}

impl KeysInForce for KeyStore {
    type Keys = Loaded;
    fn keys_in_force(&self) -> Option<Arc<Loaded>> {
        self.keys()
    }
}

impl Drop for KeyStore {
    fn drop(&mut self) {
        // The refresh task wakes, finds the store gone and ends.
        self.wake.notify_one();
    }
}

/// Fetches at start, then every `refresh_secs` or when an unknown `kid`
/// asks (no sooner than `min_refresh_secs` after the last fetch); ends
/// with the store.
async fn refresh_loop(store: Weak<KeyStore>, wake: Arc<Notify>) {
    loop {
        let Some(strong) = store.upgrade() else {
            return;
        };
        strong.refresh().await;
        let timing = strong.timing();
        drop(strong);
        tokio::select! {
            () = tokio::time::sleep(timing.refresh) => {}
            // Asked by an unknown `kid`, already spaced by min_refresh_secs.
            () = wake.notified() => {}
        }
    }
}

/// The key stores of the policy's issuers, kept across reloads for every
/// issuer whose `issuer` and key source did not change; and the tokens
/// they verified lately, forgotten at every reload.
pub struct IssuerKeys {
    generation: AtomicU64,
    stores: ArcSwap<HashMap<(String, KeySource, FetchAuth), Arc<KeyStore>>>,
    sync: Mutex<()>,
    verified: VerifiedTokens<KeyStore>,
}

impl Default for IssuerKeys {
    fn default() -> Self {
        IssuerKeys {
            generation: AtomicU64::new(0),
            stores: ArcSwap::from_pointee(HashMap::new()),
            sync: Mutex::new(()),
            verified: VerifiedTokens::default(),
        }
    }
}

impl std::fmt::Debug for IssuerKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IssuerKeys")
            .field("issuers", &self.stores.load().len())
            .finish()
    }
}

impl IssuerKeys {
    /// Follows policy generation `generation` with `issuers`: new issuers
    /// get a store (and a first fetch), unchanged ones keep theirs, gone
    /// ones are dropped. One atomic load when the generation is the same.
    pub fn follow(&self, generation: u64, issuers: &[Issuer]) {
        if self.generation.load(Ordering::Acquire) == generation {
            return;
        }
        let _one = self.sync.lock().unwrap_or_else(|e| e.into_inner());
        if self.generation.load(Ordering::Acquire) == generation {
            return;
        }
        let old = self.stores.load_full();
        let stores = issuers
            .iter()
            .map(|issuer| {
                let key = issuer.key_id();
                let store = match old.get(&key) {
                    Some(kept) => {
                        *kept.timing.lock().unwrap_or_else(|e| e.into_inner()) =
                            Timing::from(issuer);
                        kept.clone()
                    }
                    None => KeyStore::new(issuer),
                };
                (key, store)
            })
            .collect();
        self.stores.store(Arc::new(stores));
        // A token's caller may differ under the new policy.
        self.verified.forget_all();
        self.generation.store(generation, Ordering::Release);
    }

    /// The tokens verified lately.
    pub(crate) fn verified(&self) -> &VerifiedTokens<KeyStore> {
        &self.verified
    }

    /// How many verified tokens are remembered (at most
    /// [`MAX_VERIFIED_TOKENS`](super::MAX_VERIFIED_TOKENS)).
    pub fn verified_tokens(&self) -> usize {
        self.verified.len()
    }

    /// The store of `issuer`'s keys.
    pub(crate) fn store(&self, issuer: &Issuer) -> Option<Arc<KeyStore>> {
        self.stores.load().get(&issuer.key_id()).cloned()
    }

    /// How each issuer's keys stand (for health and metrics).
    pub fn status(&self) -> Vec<KeyStatus> {
        let mut all: Vec<KeyStatus> = self.stores.load().values().map(|s| s.status()).collect();
        all.sort_by(|a, b| a.issuer.cmp(&b.issuer));
        all
    }
}
