//! The state of one call (the future `Dispatcher::invoke_traced` returns)
//! is allocated for every call: it must stay small. Rare paths (fallback,
//! cache, streaming, shared session facts, approvals) are boxed where they
//! start so their state is paid only by the calls that take them; unboxed
//! they once made every call allocate and copy 50 KB.

use std::sync::Arc;
use toolmesh_dispatcher::Dispatcher;
use toolmesh_governance::Principal;

/// Under 16 KiB (it was 50,920 bytes before the rare paths were boxed;
/// tonic's own `Execute` future is about 3 KiB of it).
const MAX_CALL_STATE_BYTES: usize = 16 * 1024;

#[tokio::test]
async fn one_call_state_stays_small() {
    let (_tx, snapshots) = tokio::sync::watch::channel(Arc::new(toolmesh::Snapshot::empty("")));
    let (health, _) = tonic_health::server::health_reporter();
    let dispatcher = Dispatcher::new(Default::default(), snapshots, health);
    let who = Principal {
        name: "agent".into(),
        tenant: "t".into(),
        roles: vec![],
        anonymous: false,
    };
    let call = dispatcher.invoke_traced(
        &who,
        Default::default(),
        None,
        toolmesh_telemetry::trace::Context::new(),
    );
    let size = std::mem::size_of_val(&call);
    assert!(
        size <= MAX_CALL_STATE_BYTES,
        "one call's future is {size} bytes; box the rare path that grew it"
    );
}
