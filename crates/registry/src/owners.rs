//! Tool-name ownership over the key-value seam: the first owner to register
//! a name claims it (a compare-and-create), and it is never replaced.

use crate::keys::Slot;
use crate::kv::{Compare, Kv, KvError, Op, Txn};

/// Most writes in one transaction (etcd's default limit is 128).
pub(crate) const MAX_TXN_OPS: usize = 100;

/// The owner holding `name`, if one claimed it.
pub(crate) async fn holder(kv: &dyn Kv, name: &str) -> Result<Option<String>, KvError> {
    let entry = kv.get(&Slot::Owner(name).key()).await?;
    Ok(entry.map(|e| String::from_utf8_lossy(&e.value).into_owned()))
}

/// Claims the unowned `names` for `owner`; returns those another owner
/// took first. One transaction per batch; a batch that loses a race is
/// claimed name by name.
pub(crate) async fn claim(
    kv: &dyn Kv,
    owner: &str,
    names: &[String],
) -> Result<Vec<String>, KvError> {
    let put = |name: &str| Op::Put {
        key: Slot::Owner(name).key(),
        value: owner.as_bytes().to_vec(),
        lease: 0,
    };
    let mut lost = Vec::new();
    for batch in names.chunks(MAX_TXN_OPS) {
        let txn = Txn {
            compare: batch
                .iter()
                .map(|n| Compare::absent(Slot::Owner(n).key()))
                .collect(),
            success: batch.iter().map(|n| put(n)).collect(),
        };
        if kv.txn(txn).await?.succeeded {
            continue;
        }
        for name in batch {
            let txn = Txn::if_unchanged(&Slot::Owner(name).key(), 0, put(name));
            if kv.txn(txn).await?.succeeded {
                continue;
            }
            if holder(kv, name).await?.as_deref() != Some(owner) {
                lost.push(name.clone());
            }
        }
    }
    Ok(lost)
}
