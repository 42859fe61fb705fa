//! The result cache's store: answers by key, bounded in bytes with the least recently used evicted first, and identical calls in flight coalesced into one.

use prost::Message;
use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::sync::OnceCell;
use tokio::time::Instant;
use toolmesh::pb::ToolResult;

/// One cached answer.
#[derive(Debug)]
struct Stored {
    result: ToolResult,
    at: Instant,
    bytes: u64,
    /// Its place in the use order.
    tick: u64,
}

/// The answers, and their order of last use.
#[derive(Debug, Default)]
struct Lru {
    entries: HashMap<Arc<str>, Stored>,
    /// Last-use tick → key, oldest first.
    order: BTreeMap<u64, Arc<str>>,
    tick: u64,
    bytes: u64,
}

/// A call's answer being computed, which identical calls wait for.
type InFlight = Arc<OnceCell<ToolResult>>;

/// Cached answers and calls in flight, shared by every call of a dispatcher.
#[derive(Debug, Default)]
pub(crate) struct ResultCache {
    lru: Mutex<Lru>,
    in_flight: Mutex<HashMap<Arc<str>, InFlight>>,
}

impl ResultCache {
    /// The answer stored under `key` and its age, if it is younger than
    /// `max_age` (an older one is dropped); marks it used.
    pub(crate) fn get(&self, key: &str, max_age: Duration) -> Option<(ToolResult, Duration)> {
        let mut lru = lock(&self.lru);
        let age = lru.entries.get(key)?.at.elapsed();
        if age >= max_age {
            lru.remove(key);
            return None;
        }
        lru.tick += 1;
        let tick = lru.tick;
        let stored = lru.entries.get_mut(key)?;
        let old = std::mem::replace(&mut stored.tick, tick);
        let result = stored.result.clone();
        if let Some(k) = lru.order.remove(&old) {
            lru.order.insert(tick, k);
        }
        Some((result, age))
    }

    /// Stores `result` under `key`, evicting the least recently used
    /// answers past `max_bytes`; an answer larger than that is not kept.
    pub(crate) fn put(&self, key: Arc<str>, result: ToolResult, max_bytes: u64) {
        let bytes = (result.encoded_len() + key.len()) as u64;
        let mut lru = lock(&self.lru);
        lru.remove(&key);
        if bytes > max_bytes {
            return;
        }
        while lru.bytes + bytes > max_bytes {
            let Some((_, oldest)) = lru.order.pop_first() else {
                break;
            };
            lru.remove(&oldest);
        }
        lru.tick += 1;
        let tick = lru.tick;
        lru.bytes += bytes;
        lru.order.insert(tick, key.clone());
        let at = Instant::now();
        lru.entries.insert(
            key,
            Stored {
                result,
                at,
                bytes,
                tick,
            },
        );
    }

    /// Runs `call` unless an identical call (same `key`) is in flight, in
    /// which case its answer is shared; says whether this call ran it.
    pub(crate) async fn coalesce<F>(&self, key: &Arc<str>, call: F) -> (ToolResult, bool)
    where
        F: Future<Output = ToolResult>,
    {
        let cell = lock(&self.in_flight)
            .entry(key.clone())
            .or_default()
            .clone();
        let leave = Leave {
            in_flight: &self.in_flight,
            key,
            cell,
        };
        let mut ran = false;
        let result = leave
            .cell
            .get_or_init(|| {
                ran = true;
                call
            })
            .await
            .clone();
        (result, ran)
    }

    /// Bytes held now.
    #[cfg(test)]
    fn bytes(&self) -> u64 {
        lock(&self.lru).bytes
    }
}

/// Takes a call's entry out of the in-flight map when the call ends: once
/// its answer is there, or when the call is dropped (its caller went away)
/// with nobody else waiting, so no entry outlives its calls.
struct Leave<'a> {
    in_flight: &'a Mutex<HashMap<Arc<str>, InFlight>>,
    key: &'a Arc<str>,
    cell: InFlight,
}

impl Drop for Leave<'_> {
    fn drop(&mut self) {
        let mut in_flight = lock(self.in_flight);
        let ours = in_flight
            .get(self.key)
            .is_some_and(|c| Arc::ptr_eq(c, &self.cell));
        // Held by the map and by us only: nobody else is waiting.
        let alone = Arc::strong_count(&self.cell) <= 2;
        if ours && (self.cell.initialized() || alone) {
            in_flight.remove(self.key);
        }
    }
}

impl Lru {
    fn remove(&mut self, key: &str) {
        if let Some(stored) = self.entries.remove(key) {
            self.order.remove(&stored.tick);
            self.bytes -= stored.bytes;
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    fn answer(text: &str) -> ToolResult {
        ToolResult {
            output: text.into(),
            ..ToolResult::default()
        }
    }

    /// An answer is served until it is `max_age` old, then dropped.
    #[tokio::test(start_paused = true)]
    async fn answers_age_out() {
        let cache = ResultCache::default();
        cache.put("k".into(), answer("a"), 1 << 20);
        tokio::time::advance(Duration::from_millis(40)).await;
        let (hit, age) = cache.get("k", Duration::from_millis(50)).unwrap();
        assert_eq!((hit.output.as_str(), age), ("a", Duration::from_millis(40)));
        tokio::time::advance(Duration::from_millis(10)).await;
        assert!(cache.get("k", Duration::from_millis(50)).is_none());
        assert_eq!(cache.bytes(), 0, "an aged-out answer frees its bytes");
    }

    /// Past the byte bound the least recently used answer goes first; an
    /// answer larger than the bound is never kept.
    #[test]
    fn least_recently_used_is_evicted() {
        let cache = ResultCache::default();
        let size = (answer("aaaa").encoded_len() + 1) as u64;
        let hour = Duration::from_secs(3600);
        cache.put("a".into(), answer("aaaa"), size * 2);
        cache.put("b".into(), answer("bbbb"), size * 2);
        assert!(cache.get("a", hour).is_some(), "a is now the most recent");
        cache.put("c".into(), answer("cccc"), size * 2);
        assert!(cache.get("b", hour).is_none(), "b was least recently used");
        assert!(cache.get("a", hour).is_some() && cache.get("c", hour).is_some());
        assert_eq!(cache.bytes(), size * 2);
        cache.put("big".into(), answer(&"x".repeat(100)), size * 2);
        assert!(cache.get("big", hour).is_none());
    }

    /// Identical calls in flight run once and share the answer; a later
    /// call runs again.
    #[tokio::test(start_paused = true)]
    async fn identical_calls_coalesce() {
        let cache = Arc::new(ResultCache::default());
        let runs = Arc::new(AtomicU32::new(0));
        let key: Arc<str> = "k".into();
        let call = |cache: Arc<ResultCache>, runs: Arc<AtomicU32>, key: Arc<str>| async move {
            cache
                .coalesce(&key, async {
                    runs.fetch_add(1, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    answer("once")
                })
                .await
        };
        let calls: Vec<_> = (0..5)
            .map(|_| tokio::spawn(call(cache.clone(), runs.clone(), key.clone())))
            .collect();
        let mut leaders = 0;
        for c in calls {
            let (result, ran) = c.await.unwrap();
            assert_eq!(result.output, "once");
            leaders += u32::from(ran);
        }
        assert_eq!((runs.load(Ordering::SeqCst), leaders), (1, 1));
        call(cache.clone(), runs.clone(), key.clone()).await;
        assert_eq!(runs.load(Ordering::SeqCst), 2);
        assert!(
            lock(&cache.in_flight).is_empty(),
            "no entry outlives its calls"
        );
    }

    /// A call whose caller goes away leaves nothing behind, and the next
    /// identical call runs.
    #[tokio::test(start_paused = true)]
    async fn a_dropped_call_leaves_nothing() {
        let cache = ResultCache::default();
        let key: Arc<str> = "k".into();
        let slow = cache.coalesce(&key, async {
            tokio::time::sleep(Duration::from_secs(60)).await;
            answer("never")
        });
        let timed_out = tokio::time::timeout(Duration::from_millis(10), slow).await;
        assert!(timed_out.is_err());
        assert!(lock(&cache.in_flight).is_empty());
        let (result, ran) = cache.coalesce(&key, async { answer("now") }).await;
        assert_eq!((result.output.as_str(), ran), ("now", true));
    }
}
