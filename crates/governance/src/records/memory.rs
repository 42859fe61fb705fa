//! The shared records in this process' memory: a [`RecordStore`] with the registry's revisions and expiry, for a dispatcher that shares its records with nobody (tests, a node without a registry).

use super::{RecordStore, RecordsError};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;
use tokio::time::Instant;
use toolmesh::pb::{self, shared_record::Value};

/// Longest lifetime kept when a TTL is more than the clock can represent.
const MAX_TTL: Duration = Duration::from_secs(365 * 24 * 60 * 60);

#[derive(Debug)]
struct Kept {
    value: Option<Value>,
    revision: i64,
    expires_at: Instant,
}

#[derive(Debug, Default)]
struct Records {
    /// The last revision given out; every write takes the next one.
    revision: i64,
    kept: BTreeMap<String, Kept>,
    /// Every record by when it expires, to drop the due ones first.
    deadlines: BTreeSet<(Instant, String)>,
}

impl Records {
    /// Drops the records whose time ran out (on the tokio clock, so a
    /// test with a paused clock sees them expire when it advances).
    fn expire(&mut self, now: Instant) {
        while let Some((due, key)) = self.deadlines.first().cloned() {
            if due > now {
                break;
            }
            self.deadlines.remove(&(due, key.clone()));
            self.kept.remove(&key);
        }
    }

    fn remove(&mut self, key: &str) {
        if let Some(old) = self.kept.remove(key) {
            self.deadlines.remove(&(old.expires_at, key.to_owned()));
        }
    }
}

/// Shared records held in this process: what the registry keeps for a
/// mesh, kept for one dispatcher. Revisions grow with every write and a
/// record lives for its TTL, as in the registry, so the rules above run
/// alike on both.
#[derive(Debug, Default)]
pub struct MemoryRecords {
    records: Mutex<Records>,
}

impl MemoryRecords {
    /// An empty book.
    pub fn new() -> Self {
        MemoryRecords::default()
    }

    fn lock(&self) -> MutexGuard<'_, Records> {
        // Every update is complete between statements that can panic only
        // on allocation failure, so a poisoned lock is still usable.
        let mut records = self.records.lock().unwrap_or_else(|e| e.into_inner());
        records.expire(Instant::now());
        records
    }
}

#[tonic::async_trait]
impl RecordStore for MemoryRecords {
    async fn list(
        &self,
        prefix: &str,
        keys_only: bool,
    ) -> Result<Vec<pb::SharedRecord>, RecordsError> {
        let records = self.lock();
        Ok(records
            .kept
            .range(prefix.to_owned()..)
            .take_while(|(key, _)| key.starts_with(prefix))
            .map(|(key, kept)| pb::SharedRecord {
                key: key.clone(),
                revision: kept.revision,
                value: if keys_only { None } else { kept.value.clone() },
            })
            .collect())
    }

    async fn compare_and_put(
        &self,
        record: pb::SharedRecord,
        ttl: Duration,
    ) -> Result<bool, RecordsError> {
        let mut records = self.lock();
        let current = records.kept.get(&record.key).map_or(0, |k| k.revision);
        if current != record.revision {
            return Ok(false);
        }
        let now = Instant::now();
        let expires_at = now
            .checked_add(ttl)
            .or_else(|| now.checked_add(MAX_TTL))
            .unwrap_or(now);
        records.remove(&record.key);
        records.revision += 1;
        let revision = records.revision;
        records.deadlines.insert((expires_at, record.key.clone()));
        records.kept.insert(
            record.key,
            Kept {
                value: record.value,
                revision,
                expires_at,
            },
        );
        Ok(true)
    }

    async fn delete(&self, key: &str) -> Result<(), RecordsError> {
        self.lock().remove(key);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(key: &str, revision: i64, written_ms: u64) -> pb::SharedRecord {
        pb::SharedRecord {
            key: key.into(),
            revision,
            value: Some(Value::Session(pb::SessionRecord {
                facts: vec![],
                written_ms,
            })),
        }
    }

    /// A write compares revisions (0: absent), the second writer from the
    /// same read loses, and a listing holds only its prefix.
    #[tokio::test]
    async fn compare_and_put_and_list() {
        let book = MemoryRecords::new();
        let ttl = Duration::from_secs(60);
        assert!(
            book.compare_and_put(record("a/1", 0, 1), ttl)
                .await
                .unwrap()
        );
        assert!(
            !book
                .compare_and_put(record("a/1", 0, 2), ttl)
                .await
                .unwrap()
        );
        book.compare_and_put(record("b/1", 0, 3), ttl)
            .await
            .unwrap();
        let read = book.list("a/", false).await.unwrap();
        assert_eq!(read.len(), 1);
        let revision = read[0].revision;
        assert!(revision > 0);
        assert!(
            book.compare_and_put(record("a/1", revision, 4), ttl)
                .await
                .unwrap()
        );
        assert!(
            !book
                .compare_and_put(record("a/1", revision, 5), ttl)
                .await
                .unwrap(),
            "a write against the old revision loses"
        );
        let keys = book.list("a/", true).await.unwrap();
        assert_eq!((keys.len(), keys[0].value.clone()), (1, None));
        assert!(keys[0].revision > revision);
        book.delete("a/1").await.unwrap();
        assert!(book.list("a/", false).await.unwrap().is_empty());
        assert_eq!(book.list("", true).await.unwrap().len(), 1);
    }

    /// A record lives for its TTL, then is gone and may be written anew
    /// from revision 0.
    #[tokio::test(start_paused = true)]
    async fn records_expire() {
        let book = MemoryRecords::new();
        book.compare_and_put(record("a/1", 0, 1), Duration::from_secs(10))
            .await
            .unwrap();
        tokio::time::advance(Duration::from_secs(9)).await;
        assert_eq!(book.list("a/", true).await.unwrap().len(), 1);
        tokio::time::advance(Duration::from_secs(1)).await;
        assert!(book.list("a/", true).await.unwrap().is_empty());
        assert!(
            book.compare_and_put(record("a/1", 0, 2), Duration::from_secs(10))
                .await
                .unwrap()
        );
    }
}
