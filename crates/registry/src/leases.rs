//! Leases: who holds which lease, when each expires, and the earliest deadline
//! the reaper sleeps until.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// One granted lease.
#[derive(Debug, Clone)]
pub(crate) struct Lease {
    /// The executor holding it.
    pub(crate) executor_id: Arc<str>,
    /// How long each renewal extends it.
    pub(crate) ttl: Duration,
    /// When it expires unless renewed.
    pub(crate) deadline: Instant,
}

/// Every live lease, indexed by id and by deadline.
#[derive(Debug, Default)]
pub(crate) struct LeaseTable {
    by_id: HashMap<Arc<str>, Lease>,
    by_deadline: BTreeSet<(Instant, Arc<str>)>,
}

impl LeaseTable {
    /// Grants `lease_id` to `executor_id` until `now + ttl`.
    pub(crate) fn grant(
        &mut self,
        lease_id: Arc<str>,
        executor_id: Arc<str>,
        ttl: Duration,
        now: Instant,
    ) {
        let deadline = now + ttl;
        self.revoke(&lease_id);
        self.by_deadline.insert((deadline, lease_id.clone()));
        self.by_id.insert(
            lease_id,
            Lease {
                executor_id,
                ttl,
                deadline,
            },
        );
    }

    /// Extends `lease_id` to `now + ttl`; `None` when it is unknown.
    pub(crate) fn renew(&mut self, lease_id: &str, now: Instant) -> Option<&Lease> {
        let (key, lease) = self.by_id.get_key_value(lease_id)?;
        let key = key.clone();
        let old = lease.deadline;
        let deadline = now + lease.ttl;
        self.by_deadline.remove(&(old, key.clone()));
        self.by_deadline.insert((deadline, key.clone()));
        let lease = self.by_id.get_mut(&key)?;
        lease.deadline = deadline;
        Some(lease)
    }

    /// The executor holding `lease_id`, when it is live.
    pub(crate) fn executor_of(&self, lease_id: &str) -> Option<&Arc<str>> {
        self.by_id.get(lease_id).map(|lease| &lease.executor_id)
    }

    /// Removes `lease_id`, returning it when it was live.
    pub(crate) fn revoke(&mut self, lease_id: &str) -> Option<Lease> {
        let (key, lease) = self.by_id.remove_entry(lease_id)?;
        self.by_deadline.remove(&(lease.deadline, key));
        Some(lease)
    }

    /// The earliest deadline of any live lease.
    pub(crate) fn earliest(&self) -> Option<Instant> {
        self.by_deadline.first().map(|(deadline, _)| *deadline)
    }

    /// Removes and returns every lease whose deadline is at or before `now`.
    pub(crate) fn take_expired(&mut self, now: Instant) -> Vec<(Arc<str>, Lease)> {
        let mut expired = Vec::new();
        while let Some((deadline, _)) = self.by_deadline.first() {
            if *deadline > now {
                break;
            }
            let Some((_, lease_id)) = self.by_deadline.pop_first() else {
                break;
            };
            if let Some(lease) = self.by_id.remove(&lease_id) {
                expired.push((lease_id, lease));
            }
        }
        expired
    }

    /// Number of live leases.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.by_id.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Deadlines order expiry; renewal moves a deadline; revocation forgets it.
    #[test]
    fn grant_renew_revoke_expire() {
        let t0 = Instant::now();
        let mut table = LeaseTable::default();
        let s = Duration::from_secs(1);
        table.grant("a".into(), "ex-a".into(), s, t0);
        table.grant("b".into(), "ex-b".into(), 2 * s, t0);
        table.grant("c".into(), "ex-c".into(), 3 * s, t0);
        assert_eq!(table.earliest(), Some(t0 + s));
        assert!(table.renew("a", t0 + s / 2).is_some());
        assert_eq!(table.earliest(), Some(t0 + s + s / 2));
        assert!(table.renew("zz", t0).is_none());
        assert!(table.revoke("c").is_some());
        assert!(table.revoke("c").is_none());
        assert!(table.take_expired(t0 + s).is_empty());
        let expired = table.take_expired(t0 + 2 * s);
        let ids: Vec<&str> = expired.iter().map(|(id, _)| &**id).collect();
        assert_eq!(ids, ["a", "b"]);
        assert_eq!(table.len(), 0);
        assert_eq!(table.earliest(), None);
    }
}
