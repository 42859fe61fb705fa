//! Execute from dispatchers only: the executor picks a secret, registers it,
//! the registry hands it to dispatchers alone, and calls without it are
//! refused — an agent that learns the endpoint cannot skip the dispatcher.

use std::sync::atomic::{AtomicBool, Ordering};
use tonic::Status;
use tonic::metadata::MetadataMap;

/// The token Execute calls must carry, and whether it is enforced.
#[derive(Debug)]
pub(crate) struct DispatcherOnly {
    token: String,
    enforced: AtomicBool,
}

impl DispatcherOnly {
    /// A fresh random token, enforced from the start (a registry that does
    /// not hand tokens to dispatchers turns it off: see [`Self::accepted`]).
    pub(crate) fn new() -> Self {
        let token = format!(
            "{}{}",
            uuid::Uuid::new_v4().simple(),
            uuid::Uuid::new_v4().simple()
        );
        DispatcherOnly {
            token,
            enforced: AtomicBool::new(true),
        }
    }

    /// The token to register.
    pub(crate) fn token(&self) -> &str {
        &self.token
    }

    /// Records whether the registry took the token (it then hands it to
    /// dispatchers); an older registry that ignores it cannot, so calls
    /// are not checked.
    pub(crate) fn accepted(&self, accepted: bool) {
        self.enforced.store(accepted, Ordering::Relaxed);
    }

    /// Admits a call that carries the token (compared in constant time).
    pub(crate) fn admit(&self, metadata: &MetadataMap) -> Result<(), Status> {
        if !self.enforced.load(Ordering::Relaxed) {
            return Ok(());
        }
        let presented = toolmesh_transport::bearer(metadata).unwrap_or_default();
        if same(presented.as_bytes(), self.token.as_bytes()) {
            Ok(())
        } else {
            Err(Status::unauthenticated(
                "this executor accepts Execute calls from toolmesh dispatchers only: call the tool through a dispatcher (Dispatcher.Invoke)",
            ))
        }
    }
}

/// Equal, in time that depends only on the lengths.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_bearer(token: &str) -> MetadataMap {
        let mut metadata = MetadataMap::new();
        toolmesh_transport::set_bearer(&mut metadata, token);
        metadata
    }

    /// Only the registered token passes while enforced; an older registry
    /// that did not take it turns the check off.
    #[test]
    fn only_the_token_passes() {
        let gate = DispatcherOnly::new();
        assert_eq!(gate.token().len(), 64);
        assert!(gate.admit(&with_bearer(gate.token())).is_ok());
        let refused = gate.admit(&with_bearer("guess")).unwrap_err();
        assert_eq!(refused.code(), tonic::Code::Unauthenticated);
        assert!(refused.message().contains("through a dispatcher"));
        assert!(gate.admit(&MetadataMap::new()).is_err());
        gate.accepted(false);
        assert!(gate.admit(&MetadataMap::new()).is_ok());
    }
}
