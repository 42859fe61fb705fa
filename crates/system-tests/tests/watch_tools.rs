//! WatchTools against real processes (`toolmesh serve`, example executors):
//! a caller's stream hears an executor's tools arrive when it registers and
//! leave when it is killed, and nothing for what did not change.

use std::collections::BTreeSet;
use std::time::Duration;
use tonic::Streaming;
use toolmesh::pb::{ToolsChange, WatchToolsRequest};
use toolmesh_system_tests::*;

/// The next message of `stream`, within a patient limit.
async fn next(stream: &mut Streaming<ToolsChange>) -> ToolsChange {
    tokio::time::timeout(
        toolmesh_testkit::patient(Duration::from_secs(10)),
        stream.message(),
    )
    .await
    .expect("a message in time")
    .expect("the stream is fine")
    .expect("the stream goes on")
}

/// Reads `stream` into `view` until `done` holds for it; every change on
/// the way leaves the acceptance executor's tools alone (their heartbeats
/// change nothing a caller sees).
async fn read_until(
    stream: &mut Streaming<ToolsChange>,
    view: &mut BTreeSet<String>,
    done: impl Fn(&BTreeSet<String>) -> bool,
) {
    while !done(view) {
        let change = next(stream).await;
        assert!(change.synced);
        for tool in change.tools {
            assert!(
                !tool.name.starts_with("acc_"),
                "{} did not change",
                tool.name
            );
            view.insert(tool.name);
        }
        for name in change.removed {
            assert!(!name.starts_with("acc_"), "{name} did not leave");
            view.remove(&name);
        }
    }
}

/// A watch starts with the caller's list, hears the knowledge executor's
/// tools when it registers (as ListTools then lists them) and hears them
/// go when it is SIGKILLed (its health fails, its lease expires).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_hears_registrations_and_expiries() {
    let mesh = acceptance(&[], &[]).await;
    let mut client = dispatcher(&mesh.addr);
    let mut watch = client
        .watch_tools(WatchToolsRequest::default())
        .await
        .expect("WatchTools")
        .into_inner();
    let first = next(&mut watch).await;
    assert!(first.synced && first.removed.is_empty());
    let mut view: BTreeSet<String> = first.tools.into_iter().map(|t| t.name).collect();
    let acceptance_tools: BTreeSet<String> =
        ACCEPTANCE_TOOLS.iter().map(|t| (*t).to_owned()).collect();
    assert_eq!(view, acceptance_tools);

    let knowledge = example("knowledge", &mesh.addr, &["--ttl-ms", "1000"]);
    read_until(&mut watch, &mut view, |view| view.contains("search_kb")).await;
    let listed: BTreeSet<String> = listed(&mut client)
        .await
        .expect("ListTools")
        .into_iter()
        .collect();
    read_until(&mut watch, &mut view, |view| *view == listed).await;

    knowledge.kill_now();
    read_until(&mut watch, &mut view, |view| *view == acceptance_tools).await;
}
