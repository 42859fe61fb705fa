//! The result cache's store: answers keyed by the contract that made them (name@version and the definition's fingerprint) and the call, bounded in bytes with the least recently used evicted first, a contract's answers dropped once a snapshot replaces it, and identical calls in flight coalesced with every caller keeping its own deadline and cancellation (`flight`).

mod flight;
mod key;

pub(crate) use flight::{Deadline, Flown};
pub(crate) use key::Key;

use flight::Flights;
use key::Contract;
use prost::Message;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::time::Instant;
use toolmesh::Snapshot;
use toolmesh::pb::ToolResult;
use tracing::debug;

/// One cached answer.
#[derive(Debug)]
struct Stored {
    result: ToolResult,
    at: Instant,
    bytes: u64,
    /// Its place in the use order.
    tick: u64,
}

/// The answers, their order of last use, and which contract each is under.
#[derive(Debug, Default)]
struct Lru {
    entries: HashMap<Arc<Key>, Stored>,
    /// Last-use tick → key, oldest first.
    order: BTreeMap<u64, Arc<Key>>,
    /// The keys of each contract's answers, so a replaced contract's
    /// answers go together without a walk over the whole cache.
    by_contract: HashMap<Contract, HashSet<Arc<Key>>>,
    tick: u64,
    bytes: u64,
}

/// Cached answers and calls in flight, shared by every call of a dispatcher.
#[derive(Debug, Default)]
pub(crate) struct ResultCache {
    lru: Mutex<Lru>,
    flights: Flights,
}

impl ResultCache {
    /// The answer stored under `key` and its age, if it is younger than
    /// `max_age` (an older one is dropped); marks it used.
    pub(crate) fn get(&self, key: &Key, max_age: Duration) -> Option<(ToolResult, Duration)> {
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
    pub(crate) fn put(&self, key: Arc<Key>, result: ToolResult, max_bytes: u64) {
        let bytes = result.encoded_len() as u64 + key.bytes();
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
        lru.by_contract
            .entry(key.contract().clone())
            .or_default()
            .insert(key.clone());
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

    /// Drops the answers of every contract `snapshot` replaced (its
    /// name@version there has another definition); says how many went.
    /// Walks the contracts with answers, not the answers, and is free
    /// while nothing is cached. Answers of a contract that merely left the
    /// snapshot stay: it may come back unchanged, and if it comes back
    /// changed this drops them then.
    pub(crate) fn forget_replaced(&self, snapshot: &Snapshot) -> usize {
        let mut lru = lock(&self.lru);
        let replaced: Vec<Contract> = lru
            .by_contract
            .keys()
            .filter(|c| c.superseded_in(snapshot))
            .cloned()
            .collect();
        let mut forgotten = 0;
        for contract in replaced {
            let mut answers = 0;
            for key in lru.by_contract.remove(&contract).unwrap_or_default() {
                lru.remove(&key);
                answers += 1;
            }
            debug!(
                tool = %contract.def().label(),
                answers,
                "a new definition replaced this one: its cached answers are dropped"
            );
            forgotten += answers;
        }
        forgotten
    }

    /// Runs `call` unless an identical call (same `key`) is in flight, in
    /// which case its answer is shared — unless it came too late for this
    /// caller's `deadline`, or was cut short by an earlier deadline of the
    /// caller that ran it (see `flight`).
    pub(crate) async fn coalesce<F>(&self, key: &Arc<Key>, deadline: Deadline, call: F) -> Flown
    where
        F: Future<Output = ToolResult>,
    {
        self.flights.coalesce(key, deadline, call).await
    }

    /// Bytes held now.
    #[cfg(test)]
    fn bytes(&self) -> u64 {
        lock(&self.lru).bytes
    }
}

impl Lru {
    fn remove(&mut self, key: &Key) {
        let Some(stored) = self.entries.remove(key) else {
            return;
        };
        self.order.remove(&stored.tick);
        self.bytes -= stored.bytes;
        if let Some(keys) = self.by_contract.get_mut(key.contract()) {
            keys.remove(key);
            if keys.is_empty() {
                self.by_contract.remove(key.contract());
            }
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;
    use key::tests::{def, snapshot};
    use toolmesh::ToolDef;

    fn answer(text: &str) -> ToolResult {
        ToolResult {
            output: text.into(),
            ..ToolResult::default()
        }
    }

    /// The key of call `call` to lookup@1.0.0 without an output schema.
    fn key(call: &str) -> Arc<Key> {
        Arc::new(Key::new(def(""), call.into()))
    }

    /// An answer is served until it is `max_age` old, then dropped.
    #[tokio::test(start_paused = true)]
    async fn answers_age_out() {
        let cache = ResultCache::default();
        cache.put(key("k"), answer("a"), 1 << 20);
        tokio::time::advance(Duration::from_millis(40)).await;
        let (hit, age) = cache.get(&key("k"), Duration::from_millis(50)).unwrap();
        assert_eq!((hit.output.as_str(), age), ("a", Duration::from_millis(40)));
        tokio::time::advance(Duration::from_millis(10)).await;
        assert!(cache.get(&key("k"), Duration::from_millis(50)).is_none());
        assert_eq!(cache.bytes(), 0, "an aged-out answer frees its bytes");
    }

    /// Past the byte bound the least recently used answer goes first; an
    /// answer larger than the bound is never kept.
    #[test]
    fn least_recently_used_is_evicted() {
        let cache = ResultCache::default();
        let size = answer("aaaa").encoded_len() as u64 + key("a").bytes();
        let hour = Duration::from_secs(3600);
        cache.put(key("a"), answer("aaaa"), size * 2);
        cache.put(key("b"), answer("bbbb"), size * 2);
        assert!(
            cache.get(&key("a"), hour).is_some(),
            "a is now the most recent"
        );
        cache.put(key("c"), answer("cccc"), size * 2);
        assert!(
            cache.get(&key("b"), hour).is_none(),
            "b was least recently used"
        );
        assert!(cache.get(&key("a"), hour).is_some() && cache.get(&key("c"), hour).is_some());
        assert_eq!(cache.bytes(), size * 2);
        cache.put(key("big"), answer(&"x".repeat(100)), size * 2);
        assert!(cache.get(&key("big"), hour).is_none());
    }

    /// Once a snapshot holds name@version under another definition, the
    /// answers made under the old one are gone, bytes and all; a snapshot
    /// without the tool, or with the same definition, keeps them.
    #[test]
    fn a_replaced_contract_loses_its_answers() {
        let cache = ResultCache::default();
        let hour = Duration::from_secs(3600);
        let (old, new) = (def(""), def(r#"{"type":"object"}"#));
        let under = |def: &Arc<ToolDef>, call: &str| Arc::new(Key::new(def.clone(), call.into()));
        cache.put(under(&old, "a"), answer("a"), 1 << 20);
        cache.put(under(&old, "b"), answer("b"), 1 << 20);
        assert!(
            cache.get(&under(&new, "a"), hour).is_none(),
            "another contract's key never meets the old answer"
        );
        assert_eq!(
            cache.forget_replaced(&snapshot(&[])),
            0,
            "gone, not replaced"
        );
        assert_eq!(
            cache.forget_replaced(&snapshot(&[def("")])),
            0,
            "the same contract"
        );
        cache.put(under(&new, "a"), answer("new a"), 1 << 20);
        let kept =
            cache.bytes() - (answer("new a").encoded_len() as u64 + under(&new, "a").bytes());
        assert!(kept > 0);
        assert_eq!(
            cache.forget_replaced(&snapshot(std::slice::from_ref(&new))),
            2
        );
        assert!(cache.get(&under(&old, "a"), hour).is_none());
        assert_eq!(
            cache.get(&under(&new, "a"), hour).unwrap().0.output,
            "new a"
        );
        assert_eq!(
            cache.bytes(),
            answer("new a").encoded_len() as u64 + under(&new, "a").bytes()
        );
        assert_eq!(lock(&cache.lru).by_contract.len(), 1);
    }
}
