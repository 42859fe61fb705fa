//! Tokens verified lately, by the SHA-256 of their bytes: served again without a signature check until their `exp` or until their issuer's keys are fetched again, at most [`MAX_VERIFIED_TOKENS`] of them.

use crate::Principal;
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, RwLock, Weak};

/// The most verified tokens remembered; past it the oldest remembered is
/// forgotten first (one entry is a few hundred bytes: about 1 MiB in all).
pub const MAX_VERIFIED_TOKENS: usize = 4096;

/// Where an issuer's keys are kept: the set in force now, replaced whole
/// by each fetch (so a set's address names that fetch).
pub(crate) trait KeysInForce {
    /// One fetch's keys.
    type Keys;
    /// The keys in force, if any are.
    fn keys_in_force(&self) -> Option<Arc<Self::Keys>>;
}

/// One token's verification: who it named, until when, under which keys.
struct Verified<S: KeysInForce> {
    principal: Principal,
    /// Its `exp`, in seconds since the epoch.
    expires_at: u64,
    /// The store whose keys verified it.
    store: Weak<S>,
    /// The keys that verified it: any fetch since replaces them.
    keys: Weak<S::Keys>,
}

impl<S: KeysInForce> Verified<S> {
    /// Whether it still stands at `now`: before its `exp` and while the
    /// keys that verified it are the ones in force (a fetch of the JWKS,
    /// a key rotation or keys outliving `max_stale_secs` end it).
    fn stands(&self, now: u64) -> bool {
        now < self.expires_at
            && self
                .store
                .upgrade()
                .and_then(|store| store.keys_in_force())
                .is_some_and(|current| std::ptr::eq(Arc::as_ptr(&current), self.keys.as_ptr()))
    }
}

/// A map holding at most `capacity` entries, forgetting the oldest
/// inserted first.
struct Bounded<V> {
    capacity: usize,
    /// Each entry with the number of its insertion.
    entries: HashMap<[u8; 32], (u64, V)>,
    /// Keys in insertion order, with the number of that insertion (a key
    /// inserted again leaves its older number behind, skipped on eviction).
    order: VecDeque<([u8; 32], u64)>,
    inserted: u64,
}

impl<V> Bounded<V> {
    fn new(capacity: usize) -> Bounded<V> {
        Bounded {
            capacity,
            entries: HashMap::new(),
            order: VecDeque::new(),
            inserted: 0,
        }
    }

    fn get(&self, key: &[u8; 32]) -> Option<&V> {
        self.entries.get(key).map(|(_, value)| value)
    }

    fn insert(&mut self, key: [u8; 32], value: V) {
        self.inserted += 1;
        self.entries.insert(key, (self.inserted, value));
        self.order.push_back((key, self.inserted));
        while self.entries.len() > self.capacity {
            let Some((oldest, number)) = self.order.pop_front() else {
                break;
            };
            if self.entries.get(&oldest).is_some_and(|(n, _)| *n == number) {
                self.entries.remove(&oldest);
            }
        }
        if self.order.len() > 2 * self.capacity.max(1) {
            // Keys inserted again many times: drop their stale numbers.
            let entries = &self.entries;
            self.order
                .retain(|(key, number)| entries.get(key).is_some_and(|(n, _)| n == number));
        }
    }

    fn clear(&mut self) {
        self.entries.clear();
        self.order.clear();
    }

    fn len(&self) -> usize {
        self.entries.len()
    }
}

/// The tokens verified lately; never a token that failed.
pub(crate) struct VerifiedTokens<S: KeysInForce> {
    tokens: RwLock<Bounded<Verified<S>>>,
}

impl<S: KeysInForce> Default for VerifiedTokens<S> {
    fn default() -> Self {
        VerifiedTokens {
            tokens: RwLock::new(Bounded::new(MAX_VERIFIED_TOKENS)),
        }
    }
}

impl<S: KeysInForce> VerifiedTokens<S> {
    /// The caller the token whose SHA-256 is `digest` named when it was
    /// verified, if that still stands.
    pub(crate) fn lookup(&self, digest: &[u8; 32]) -> Option<Principal> {
        let now = jsonwebtoken::get_current_timestamp();
        let tokens = self.tokens.read().unwrap_or_else(|e| e.into_inner());
        tokens
            .get(digest)
            .filter(|verified| verified.stands(now))
            .map(|verified| verified.principal.clone())
    }

    /// Remembers that `keys` of `store` verified the token whose SHA-256
    /// is `digest`, naming `principal` until `expires_at`.
    pub(crate) fn remember(
        &self,
        digest: &[u8; 32],
        principal: &Principal,
        expires_at: u64,
        store: &Arc<S>,
        keys: &Arc<S::Keys>,
    ) {
        let verified = Verified {
            principal: principal.clone(),
            expires_at,
            store: Arc::downgrade(store),
            keys: Arc::downgrade(keys),
        };
        self.tokens
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(*digest, verified);
    }

    /// Forgets every token (the policy changed: issuers, their claim
    /// mapping or the callers pinned to subjects may have).
    pub(crate) fn forget_all(&self) {
        self.tokens
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
    }

    /// How many tokens it remembers.
    pub(crate) fn len(&self) -> usize {
        self.tokens.read().unwrap_or_else(|e| e.into_inner()).len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use toolmesh::digest::sha256;

    fn key(n: u32) -> [u8; 32] {
        sha256(&n.to_be_bytes())
    }

    /// Past its capacity the map forgets the oldest inserted first, and
    /// never holds more than its capacity.
    #[test]
    fn forgets_the_oldest_past_its_bound() {
        let mut map = Bounded::new(3);
        for n in 0..5 {
            map.insert(key(n), n);
        }
        assert_eq!(map.len(), 3);
        assert_eq!(map.get(&key(0)), None);
        assert_eq!(map.get(&key(1)), None);
        assert_eq!(map.get(&key(4)), Some(&4));
    }

    /// A key inserted again counts from its latest insertion, and the
    /// insertion order stays bounded however often one key comes back.
    #[test]
    fn a_key_inserted_again_is_young_again() {
        let mut map = Bounded::new(2);
        map.insert(key(0), 0);
        map.insert(key(1), 1);
        map.insert(key(0), 10);
        map.insert(key(2), 2);
        assert_eq!(map.get(&key(0)), Some(&10));
        assert_eq!(map.get(&key(1)), None);
        for n in 0..100 {
            map.insert(key(0), n);
        }
        assert!(map.order.len() <= 4, "{}", map.order.len());
        assert_eq!(map.len(), 2);
    }
}
