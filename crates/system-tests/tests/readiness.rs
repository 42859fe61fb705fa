//! A separate dispatcher is ready (grpc.health.v1 `""` and
//! `toolmesh.v1.Dispatcher` SERVING) only once it holds a snapshot from a
//! registry that let it read one; until then it stays alive
//! (`toolmesh.v1.Dispatcher.Liveness` SERVING) and its log says why: the
//! registry refused its credential, or the registry is unreachable.

use std::time::Duration;
use tonic_health::pb::health_check_response::ServingStatus;
use toolmesh_system_tests::*;
use toolmesh_transport::{DISPATCHER_HEALTH_SERVICE, DISPATCHER_LIVENESS_SERVICE};

/// Agents and dispatchers each have their own token; no anonymous caller
/// may read snapshots.
fn readiness_policy() -> String {
    PolicyBuilder::new()
        .anonymous("anonymous", "default", &["agent", "executor"])
        .caller(Caller::token("tok-agent", "agent-bot").roles(&["agent"]))
        .caller(Caller::token("tok-dispatcher", "dispatchers").roles(&["dispatcher"]))
        .grant("everyone: every tool", &[], &["*"])
        .build_toml()
}

/// The statuses of `""`, the dispatcher's own name and its liveness name.
async fn statuses(addr: &str) -> [i32; 3] {
    [
        health_status(addr, "").await,
        health_status(addr, DISPATCHER_HEALTH_SERVICE).await,
        health_status(addr, DISPATCHER_LIVENESS_SERVICE).await,
    ]
}

const SERVING: i32 = ServingStatus::Serving as i32;
const NOT_SERVING: i32 = ServingStatus::NotServing as i32;
/// Alive but not ready.
const WAITING: [i32; 3] = [NOT_SERVING, NOT_SERVING, SERVING];

/// Whether the log of `proc` read so far mentions `needle`.
fn logged(proc: &Proc, needle: &str) -> bool {
    proc.lines_read().iter().any(|line| line.contains(needle))
}

/// A dispatcher whose token the registry's policy gives no reading role is
/// alive, not ready, and logs the registry's refusal (not "unreachable");
/// one with the dispatcher token turns ready once it holds the snapshot.
#[tokio::test]
async fn refused_dispatcher_is_not_ready_and_says_why() {
    let dir = temp_dir("readiness-policy");
    let policy = dir.join("policy.toml");
    std::fs::write(&policy, readiness_policy()).unwrap();
    let (_registry, registry_addr) = registry(&["--policy", policy.to_str().unwrap()]);

    let (mut refused, refused_addr) = dispatcher_for(
        &registry_addr,
        &[
            "--registry-token",
            "tok-agent",
            "--health-listen",
            "127.0.0.1:0",
        ],
    );
    let refused_health = health_addr(&refused);
    let line = refused.wait_for_line("registry refused", Duration::from_secs(30));
    assert!(
        line.contains("ERROR") && line.contains("needs the role") && line.contains("dispatcher"),
        "the refusal names the role it needs, at error level: {line}"
    );
    assert!(
        !logged(&refused, "unreachable"),
        "a refusal is not an unreachable registry: {:#?}",
        refused.lines_read()
    );
    assert_eq!(statuses(&refused_addr).await, WAITING, "main port");
    assert_eq!(statuses(&refused_health).await, WAITING, "health port");
    assert!(
        refused.wait_exit(Duration::from_millis(100)).is_none(),
        "a refused dispatcher stays up"
    );

    let (_allowed, allowed_addr) =
        dispatcher_for(&registry_addr, &["--registry-token", "tok-dispatcher"]);
    eventually(
        "the dispatcher with the dispatcher token is ready",
        Duration::from_secs(10),
        || {
            let addr = allowed_addr.clone();
            async move { (statuses(&addr).await == [SERVING; 3]).then_some(()) }
        },
    )
    .await;
    assert_eq!(statuses(&refused_addr).await, WAITING, "still refused");
}

/// A dispatcher whose registry does not answer is alive, not ready, and
/// logs the registry unreachable (not refused) and that it has no snapshot
/// to serve (it said "serving the last snapshot", which it did not have).
#[tokio::test]
async fn dispatcher_without_its_registry_is_not_ready() {
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let nowhere = closed.local_addr().unwrap().to_string();
    drop(closed);
    let (dispatcher, addr) = dispatcher_for(&nowhere, &[]);
    let said = dispatcher.wait_for_line("registry unreachable", Duration::from_secs(30));
    assert!(
        said.contains("no snapshot yet") && !said.contains("serving the last snapshot"),
        "{said}"
    );
    assert!(
        !logged(&dispatcher, "registry refused"),
        "{:#?}",
        dispatcher.lines_read()
    );
    assert_eq!(statuses(&addr).await, WAITING);
}
