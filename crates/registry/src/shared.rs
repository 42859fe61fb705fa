//! Records every replica of a registry shares besides the snapshot (shared
//! approval tickets): read all under a prefix, write one if nobody changed
//! it since it was read (compare on its revision), expire after a TTL. The
//! embedded store keeps them here, in this process.

use std::collections::BTreeMap;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;
use tokio::time::Instant;

/// One shared record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SharedRecord {
    /// Its key (for example `approval/a-7`).
    pub key: String,
    /// Its value.
    pub value: Vec<u8>,
    /// Its revision: what a write compares against (0: absent).
    pub revision: i64,
}

/// Shared records in this process.
#[derive(Debug, Default)]
pub(crate) struct LocalRecords {
    inner: Mutex<Records>,
}

#[derive(Debug, Default)]
struct Records {
    revision: i64,
    map: BTreeMap<String, (Vec<u8>, i64, Instant)>,
}

impl LocalRecords {
    /// Every live record under `prefix`, with its value when `values`.
    pub(crate) fn list(&self, prefix: &str, values: bool) -> Vec<SharedRecord> {
        let now = Instant::now();
        let mut records = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        records.map.retain(|_, (_, _, expires)| *expires > now);
        records
            .map
            .range(prefix.to_owned()..)
            .take_while(|(k, _)| k.starts_with(prefix))
            .map(|(key, (value, revision, _))| SharedRecord {
                key: key.clone(),
                value: if values { value.clone() } else { Vec::new() },
                revision: *revision,
            })
            .collect()
    }

    /// Writes `key` if its revision is still `revision`; false when not.
    pub(crate) fn put(&self, key: &str, value: Vec<u8>, revision: i64, ttl: Duration) -> bool {
        let now = Instant::now();
        let mut records = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        let current = records
            .map
            .get(key)
            .filter(|(_, _, expires)| *expires > now)
            .map_or(0, |(_, r, _)| *r);
        if current != revision {
            return false;
        }
        records.revision += 1;
        let next = records.revision;
        records.map.insert(key.to_owned(), (value, next, now + ttl));
        true
    }

    /// Removes `key`.
    pub(crate) fn delete(&self, key: &str) {
        self.inner
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .map
            .remove(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A write compares revisions: the second writer from the same read loses.
    #[tokio::test]
    async fn compare_and_put() {
        let records = LocalRecords::default();
        let ttl = Duration::from_secs(60);
        assert!(records.put("approval/a-1", b"x".to_vec(), 0, ttl));
        assert!(!records.put("approval/a-1", b"y".to_vec(), 0, ttl));
        let read = records.list("approval/", true);
        assert_eq!(read.len(), 1);
        assert!(records.put("approval/a-1", b"y".to_vec(), read[0].revision, ttl));
        assert!(!records.put("approval/a-1", b"z".to_vec(), read[0].revision, ttl));
        records.delete("approval/a-1");
        assert!(records.list("approval/", true).is_empty());
    }
}
