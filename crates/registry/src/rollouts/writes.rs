//! Rollout changes over the key-value seam: decided against the stored
//! rollout, written only if its key is still at the revision read, tried
//! again when another writer came first.

use super::{RolloutRequest, apply, now_ms};
use crate::codec;
use crate::error::RegistryError;
use crate::keys::Slot;
use crate::kv::{Kv, Op, Txn};
use toolmesh::{Rollout, Snapshot};

/// How many times a change is decided again after losing a race.
const TRIES: usize = 3;

/// A tool's stored rollout and the revision of its key (0: none).
pub(crate) async fn stored(
    kv: &dyn Kv,
    tool: &str,
) -> Result<(Option<Rollout>, i64), RegistryError> {
    let Some(entry) = kv.get(&Slot::Rollout(tool).key()).await? else {
        return Ok((None, 0));
    };
    // One this build cannot read counts as none (and may be replaced).
    let rollout = codec::decode::<Rollout>(&entry.value)
        .inspect_err(|problem| tracing::warn!(tool, %problem, "stored rollout left out"))
        .ok();
    Ok((rollout, entry.mod_revision))
}

/// Applies `request` to the stored rollout against `snapshot` and keeps
/// the result; the revision that holds it, and it.
pub(crate) async fn write(
    kv: &dyn Kv,
    snapshot: &Snapshot,
    request: &RolloutRequest,
) -> Result<(i64, Rollout), RegistryError> {
    let key = Slot::Rollout(&request.tool).key();
    for _ in 0..TRIES {
        let (current, revision) = stored(kv, &request.tool).await?;
        let rollout = apply(current.as_ref(), request, snapshot, now_ms())?;
        let put = Op::Put {
            key: key.clone(),
            value: codec::encode(&rollout),
            lease: 0,
        };
        let outcome = kv.txn(Txn::if_unchanged(&key, revision, put)).await?;
        if outcome.succeeded {
            return Ok((outcome.revision, rollout));
        }
    }
    Err(RegistryError::Contended("the rollout"))
}
