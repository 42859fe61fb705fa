//! The state of one call (the future `Dispatcher::call` returns)
//! is allocated for every call: it must stay small. Rare paths (fallback,
//! cache, streaming, shared session facts, approvals) are boxed where they
//! start so their state is paid only by the calls that take them; unboxed
//! they once made every call allocate and copy 50 KB.

use std::sync::Arc;
use toolmesh_dispatcher::{CallRequest, Dispatcher};

/// Under 16 KiB (it was 50,920 bytes before the rare paths were boxed;
/// tonic's own `Execute` future is about 3 KiB of it).
const MAX_CALL_STATE_BYTES: usize = 16 * 1024;

#[tokio::test]
async fn one_call_state_stays_small() {
    let (_tx, snapshots) = tokio::sync::watch::channel(Arc::new(toolmesh::Snapshot::empty("")));
    let (health, _) = tonic_health::server::health_reporter();
    let dispatcher = Dispatcher::new(Default::default(), snapshots, health);
    let who = toolmesh_testkit::principal("agent", "t", &[]);
    let call = dispatcher.call(CallRequest::new(&who, Default::default()));
    let size = std::mem::size_of_val(&call);
    assert!(
        size <= MAX_CALL_STATE_BYTES,
        "one call's future is {size} bytes; box the rare path that grew it"
    );
}

/// `caught_up` returns once calls and listings use a snapshot of the version
/// asked for (an operator's decision holds from then on), and not before.
#[tokio::test]
async fn caught_up_waits_for_the_installed_snapshot() {
    let first = Arc::new(toolmesh::Snapshot::empty("e"));
    let (publish, snapshots) = tokio::sync::watch::channel(first.clone());
    let (health, _) = tonic_health::server::health_reporter();
    let dispatcher = Dispatcher::new(Default::default(), snapshots, health);
    let next = first.next().finish();
    let version = next.version();
    assert!(version > first.version());
    let short = std::time::Duration::from_millis(50);
    assert!(
        !dispatcher.caught_up(version, short).await,
        "not published yet"
    );
    publish.send_replace(Arc::new(next));
    assert!(
        dispatcher
            .caught_up(
                version,
                toolmesh_testkit::patient(std::time::Duration::from_secs(5))
            )
            .await
    );
    assert_eq!(dispatcher.current_snapshot().version(), version);
}
