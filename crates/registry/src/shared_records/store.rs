//! Shared records over the key-value seam: read all under a prefix, write
//! one if nobody changed it since it was read (compare on its revision),
//! expire after a TTL (the record goes with its lease).

use crate::error::RegistryError;
use crate::keys::Slot;
use crate::kv::{Kv, Op, Txn};
use std::time::Duration;

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

/// Every live record under `prefix`, their values left empty when `keys_only`.
pub(crate) async fn list(
    kv: &dyn Kv,
    prefix: &str,
    keys_only: bool,
) -> Result<Vec<SharedRecord>, RegistryError> {
    let base = Slot::Shared("").key().len();
    let (entries, _) = kv.range(&Slot::Shared(prefix).key(), keys_only).await?;
    Ok(entries
        .into_iter()
        .map(|entry| SharedRecord {
            key: String::from_utf8_lossy(&entry.key[base..]).into_owned(),
            value: entry.value,
            revision: entry.mod_revision,
        })
        .collect())
}

/// Writes `key` if its revision is still `revision` (0: it must not
/// exist), expiring after `ttl`; false when another writer came first.
pub(crate) async fn put(
    kv: &dyn Kv,
    key: &str,
    value: Vec<u8>,
    revision: i64,
    ttl: Duration,
) -> Result<bool, RegistryError> {
    let key = Slot::Shared(key).key();
    let (lease, _) = kv.grant(ttl).await?;
    let put = Op::Put {
        key: key.clone(),
        value,
        lease,
    };
    let outcome = kv.txn(Txn::if_unchanged(&key, revision, put)).await?;
    if !outcome.succeeded {
        // Nothing went with it.
        let _ = kv.revoke(lease).await;
    }
    Ok(outcome.succeeded)
}

/// Removes `key`.
pub(crate) async fn delete(kv: &dyn Kv, key: &str) -> Result<(), RegistryError> {
    let key = Slot::Shared(key).key();
    kv.txn(Txn::write(Op::Delete { key })).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kv::MemoryKv;

    /// A write compares revisions: the second writer from the same read loses.
    #[tokio::test]
    async fn compare_and_put() {
        let records = MemoryKv::open(None).unwrap();
        let ttl = Duration::from_secs(60);
        assert!(
            put(&records, "approval/a-1", b"x".to_vec(), 0, ttl)
                .await
                .unwrap()
        );
        assert!(
            !put(&records, "approval/a-1", b"y".to_vec(), 0, ttl)
                .await
                .unwrap()
        );
        let read = list(&records, "approval/", false).await.unwrap();
        assert_eq!(read.len(), 1);
        assert!(
            put(
                &records,
                "approval/a-1",
                b"y".to_vec(),
                read[0].revision,
                ttl
            )
            .await
            .unwrap()
        );
        assert!(
            !put(
                &records,
                "approval/a-1",
                b"z".to_vec(),
                read[0].revision,
                ttl
            )
            .await
            .unwrap()
        );
        delete(&records, "approval/a-1").await.unwrap();
        assert!(list(&records, "approval/", false).await.unwrap().is_empty());
    }
}
