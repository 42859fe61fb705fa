//! The etcd store with real etcd members and real toolmesh processes:
//! registry replicas over one etcd agree on (epoch, version) and content, a
//! dispatcher follows any replica, health watches move to a surviving
//! replica, big registrations are split across keys and transactions,
//! approvals and session facts work across dispatchers, and the mesh rides out an etcd leader
//! kill, a lost quorum and compaction. Needs an `etcd` binary
//! (`scripts/test` installs it); without one these tests fail, never skip.

use std::time::{Duration, Instant};
use tonic::transport::Channel;
use toolmesh::pb::{
    self, GetSnapshotRequest, HeartbeatRequest, RegisterRequest, ToolSpec,
    registry_client::RegistryClient,
};
use toolmesh_procs::EtcdCluster;
use toolmesh_system_tests::*;
use toolmesh_testkit::patient;

/// Lease of the test executors (etcd leases count whole seconds).
const TTL_MS: &str = "1000";

/// Starts an etcd cluster of `size`, failing loudly when etcd is missing.
async fn etcd(size: usize) -> EtcdCluster {
    EtcdCluster::start(size)
        .await
        .unwrap_or_else(|e| panic!("etcd tests need etcd: {e}"))
}

/// Turns on the machine: every test shares it (a read guard, taken before
/// its cluster starts) except the one that measures a large registration,
/// which runs alone (the write guard); beside another etcd test on two
/// loaded cores it timed the machine, not the mesh.
static TURNS: tokio::sync::RwLock<()> = tokio::sync::RwLock::const_new(());

/// A shared turn on the machine and an etcd cluster of `size` members.
async fn shared_etcd(size: usize) -> (tokio::sync::RwLockReadGuard<'static, ()>, EtcdCluster) {
    let turn = TURNS.read().await;
    (turn, etcd(size).await)
}

/// A registry replica over `store`, logging JSON lines (to read its
/// replica id); returns it and its address.
fn replica(store: &str) -> (Proc, String) {
    replica_with(store, &[])
}

/// [`replica`] with `extra` arguments.
fn replica_with(store: &str, extra: &[&str]) -> (Proc, String) {
    let mut args = vec![
        "registry",
        "--listen",
        "127.0.0.1:0",
        "--store",
        store,
        "--default-ttl-ms",
        TTL_MS,
        "--log-format",
        "json",
    ];
    args.extend_from_slice(extra);
    let proc = Proc::toolmesh("registry", &args);
    let addr = proc.listen_addr();
    (proc, addr)
}

/// The replica id a registry process announced.
fn replica_id(proc: &Proc) -> String {
    let line = proc.wait_for_line("\"replica\"", Duration::from_secs(10));
    let json: serde_json::Value = serde_json::from_str(&line).expect("a JSON log line");
    json["fields"]["replica"]
        .as_str()
        .expect("a replica field")
        .to_owned()
}

fn registry_client(addr: &str) -> RegistryClient<Channel> {
    RegistryClient::new(
        toolmesh_transport::channel(addr, &toolmesh_transport::Tls::none()).expect("valid address"),
    )
    .max_decoding_message_size(toolmesh_transport::MAX_SNAPSHOT_MESSAGE_BYTES)
}

/// The newest snapshot of the replica at `addr`, if it answers.
async fn snapshot(addr: &str) -> Option<pb::Snapshot> {
    let mut client = registry_client(addr);
    // As the mesh's dispatchers read it: execute tokens included.
    let request = with_token(
        GetSnapshotRequest { version: 0 },
        Some(DEV_DISPATCHER_TOKEN),
    );
    match tokio::time::timeout(
        patient(Duration::from_secs(2)),
        client.get_snapshot(request),
    )
    .await
    {
        Ok(Ok(response)) => Some(response.into_inner()),
        _ => None,
    }
}

/// Whether `tool` is exposed (enabled, some healthy instance) in `snapshot`.
fn exposed(snapshot: &pb::Snapshot, tool: &str) -> bool {
    snapshot
        .tools
        .iter()
        .any(|t| t.spec.as_ref().is_some_and(|s| s.name == tool) && t.exposed)
}

/// Whether `snapshot` knows `tool` (exposed or not).
fn known(snapshot: &pb::Snapshot, tool: &str) -> bool {
    snapshot
        .tools
        .iter()
        .any(|t| t.spec.as_ref().is_some_and(|s| s.name == tool))
}

/// Waits until every replica in `addrs` publishes the same snapshot
/// (version, epoch and content) satisfying `check`; returns it.
async fn agreed(addrs: &[&str], what: &str, check: impl Fn(&pb::Snapshot) -> bool) -> pb::Snapshot {
    let mut polled = false;
    let check = &check;
    eventually(what, Duration::from_secs(10), || {
        // A snapshot may be megabytes: asking for two every 10 ms would
        // load the replicas more than the change being waited for.
        let again = std::mem::replace(&mut polled, true);
        async move {
            if again {
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            let mut first: Option<pb::Snapshot> = None;
            for addr in addrs {
                let s = snapshot(addr).await?;
                if !check(&s) {
                    return None;
                }
                match &first {
                    Some(f) if *f != s => return None,
                    Some(_) => {}
                    None => first = Some(s),
                }
            }
            first
        }
    })
    .await
}

/// The acceptance executor registered through `registries`.
fn executor(registries: &str, id: &str) -> Proc {
    executor_with_ttl(registries, id, TTL_MS)
}

/// The acceptance executor with a lease of `ttl_ms`.
fn executor_with_ttl(registries: &str, id: &str, ttl_ms: &str) -> Proc {
    example(
        "acceptance",
        registries,
        &["--ttl-ms", ttl_ms, "--executor-id", id],
    )
}

/// 1. Two replicas on one etcd: an executor registers through A, a
///    dispatcher follows B and invokes it; A and B publish the same
///    (epoch, version) and content, and the executor's execute token (kept
///    in etcd) guards it against calls that skip the dispatcher.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_agree_and_serve() {
    let (_turn, cluster) = shared_etcd(1).await;
    let store = cluster.store_url();
    let (_a, a) = replica(&store);
    let (_b, b) = replica(&store);
    let _exec = executor(&a, "acc-1");
    let (_d, d) = dispatcher_for(&b, &[]);
    let mut client = dispatcher(&d);
    until_listed(&mut client, &ACCEPTANCE_TOOLS, Duration::from_secs(10)).await;
    let response = invoke(&mut client, "acc_echo", r#"{"message":"hi"}"#, None).await;
    assert_eq!(code(&response), 0, "{}", message(&response));
    let both = agreed(&[&a, &b], "A and B agree", |s| exposed(s, "acc_echo")).await;
    assert!(both.version > 0 && !both.epoch.is_empty(), "{both:?}");
    // The executor's execute token went through etcd: a dispatcher reader
    // of either replica sees it, and the executor refuses calls without it.
    let instance = both
        .tools
        .iter()
        .find(|t| t.spec.as_ref().is_some_and(|s| s.name == "acc_echo"))
        .map(|t| t.instances[0].clone())
        .expect("an instance of acc_echo");
    assert_eq!(instance.execute_token.len(), 64, "{instance:?}");
    let mut direct = pb::executor_client::ExecutorClient::new(
        toolmesh_transport::channel(&instance.endpoint, &toolmesh_transport::Tls::none()).unwrap(),
    );
    let execute = pb::ExecuteRequest {
        tool: "acc_echo".into(),
        arguments: r#"{"message":"direct"}"#.into(),
        ..Default::default()
    };
    for token in [None, Some("a-guess")] {
        let refused = direct
            .execute(with_token(execute.clone(), token))
            .await
            .unwrap_err();
        assert_eq!(refused.code(), tonic::Code::Unauthenticated, "{token:?}");
    }
    let accepted = direct
        .execute(with_token(execute, Some(&instance.execute_token)))
        .await
        .unwrap()
        .into_inner();
    assert!(accepted.result.unwrap().error.is_none());
}

/// An etcd shared with other applications: writes outside the prefix move
/// etcd's revision past anything this replica's watch sees, yet a
/// registration right after them completes (the watch reports its
/// progress) instead of waiting out read-your-writes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_complete_in_a_shared_etcd() {
    let (_turn, cluster) = shared_etcd(1).await;
    let store = cluster.store_url();
    let (_a, a) = replica(&store);
    register_once(&a, "shared-0")
        .await
        .expect("first registration");
    let other = toolmesh_etcd::Client::from_url(&store).expect("etcd client");
    for i in 0..3 {
        for j in 0..5 {
            other
                .put(format!("/elsewhere/{i}/{j}").as_bytes(), b"x".to_vec(), 0)
                .await
                .expect("a foreign write");
        }
        let started = Instant::now();
        register_once(&a, &format!("shared-{}", i + 1))
            .await
            .expect("registration after foreign writes");
        // Without progress notifications it waits for some later change
        // under the prefix (a health verdict, about 2 s here) or fails
        // after 5 s.
        let took = started.elapsed();
        eprintln!("registration after foreign writes: {took:?}");
        assert!(took < Duration::from_millis(1500), "took {took:?}");
    }
}

/// 6. SIGKILL an executor: its tools leave every replica's snapshot within
///    lease TTL + 1 s (the health watch usually sees it much sooner).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_executor_leaves_every_replica() {
    let (_turn, cluster) = shared_etcd(1).await;
    let store = cluster.store_url();
    let (_a, a) = replica(&store);
    let (_b, b) = replica(&store);
    let mut exec = executor(&format!("{a},{b}"), "acc-6");
    agreed(&[&a, &b], "acc_echo exposed", |s| exposed(s, "acc_echo")).await;
    let killed = Instant::now();
    exec.kill9();
    agreed(&[&a, &b], "acc_echo gone", |s| !exposed(s, "acc_echo")).await;
    let took = killed.elapsed();
    assert!(
        took < Duration::from_millis(2000),
        "tools left after {took:?}; lease 1 s + 1 s allowed"
    );
    eprintln!("scenario 6: SIGKILL -> gone from both replicas in {took:?}");
}

/// An executor served in this test process whose health the test flips,
/// registered (and kept alive) through `registries`.
struct FakeExecutor {
    reporter: tonic_health::server::HealthReporter,
    id: String,
    _heartbeats: tokio::task::JoinHandle<()>,
}

impl FakeExecutor {
    async fn start(
        registries: &str,
        id: &str,
        tools: Vec<ToolSpec>,
    ) -> (FakeExecutor, pb::RegisterResponse) {
        let (reporter, health) = tonic_health::server::health_reporter();
        reporter
            .set_service_status("", tonic_health::ServingStatus::Serving)
            .await;
        let addr =
            toolmesh_testkit::serve_router(tonic::transport::Server::builder().add_service(health))
                .await;
        let mut client = registry_client(registries)
            .max_encoding_message_size(toolmesh_transport::MAX_SNAPSHOT_MESSAGE_BYTES);
        let registered = client
            .register(RegisterRequest {
                executor_id: id.to_owned(),
                service: "fake".to_owned(),
                endpoint: addr.to_string(),
                tools,
                lease_ttl_ms: 2000,
                execute_token: String::new(),
            })
            .await
            .expect("register")
            .into_inner();
        let lease_id = registered.lease_id.clone();
        let heartbeats = tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_millis(300)).await;
                let _ = client
                    .heartbeat(HeartbeatRequest {
                        lease_id: lease_id.clone(),
                    })
                    .await;
            }
        });
        (
            FakeExecutor {
                reporter,
                id: id.to_owned(),
                _heartbeats: heartbeats,
            },
            registered,
        )
    }
}

/// A small valid tool spec.
fn spec(name: &str, schema_bytes: usize) -> ToolSpec {
    let pad = "x".repeat(schema_bytes.saturating_sub(100));
    ToolSpec {
        name: name.to_owned(),
        version: "1.0.0".to_owned(),
        description: format!("{name}: a test tool"),
        input_schema: format!(
            r#"{{"type":"object","description":"{pad}","properties":{{"q":{{"type":"string"}}}}}}"#
        ),
        timeout_ms: 1000,
        ..ToolSpec::default()
    }
}

/// Which replica holds the health watch of `executor_id`.
async fn watcher_of(etcd: &toolmesh_etcd::Client, executor_id: &str) -> Option<String> {
    let kv = etcd
        .get(format!("/toolmesh/watcher/{executor_id}").as_bytes())
        .await
        .ok()??;
    Some(String::from_utf8_lossy(&kv.value).into_owned())
}

/// 2. SIGKILL the replica that watches an executor's health: the other
///    takes the watch over, and a later NOT_SERVING on that executor still
///    de-exposes its tool within 1 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_watch_moves_to_a_surviving_replica() {
    let (_turn, cluster) = shared_etcd(1).await;
    let store = cluster.store_url();
    let etcd = toolmesh_etcd::Client::from_url(&store).expect("etcd client");
    let (a_proc, a) = replica(&store);
    let (b_proc, b) = replica(&store);
    let mut procs = vec![
        (replica_id(&a_proc), a_proc, a.clone()),
        (replica_id(&b_proc), b_proc, b.clone()),
    ];
    let (fake, _) =
        FakeExecutor::start(&format!("{a},{b}"), "fake-2", vec![spec("fake_tool", 200)]).await;
    agreed(&[&a, &b], "fake_tool exposed", |s| exposed(s, "fake_tool")).await;
    let holder = eventually("a watch claim", Duration::from_secs(10), || {
        watcher_of(&etcd, &fake.id)
    })
    .await;
    let i = procs
        .iter()
        .position(|(id, _, _)| *id == holder)
        .expect("the claim names a replica");
    let (_, mut killed, _) = procs.remove(i);
    let (survivor_id, _survivor, survivor) = &procs[0];
    killed.kill9();
    let killed_at = Instant::now();
    eventually(
        "the survivor takes the watch over",
        Duration::from_secs(10),
        || async {
            (watcher_of(&etcd, &fake.id).await.as_deref() == Some(survivor_id.as_str()))
                .then_some(())
        },
    )
    .await;
    eprintln!(
        "scenario 2: watch taken over {:?} after the kill",
        killed_at.elapsed()
    );
    // The new watch sees SERVING first: the tool stays (or is again) exposed.
    eventually(
        "fake_tool exposed under the new watch",
        Duration::from_secs(5),
        || async {
            snapshot(survivor)
                .await
                .filter(|s| exposed(s, "fake_tool"))
                .map(drop)
        },
    )
    .await;
    let flipped = Instant::now();
    fake.reporter
        .set_service_status("", tonic_health::ServingStatus::NotServing)
        .await;
    eventually("NOT_SERVING de-exposes", Duration::from_secs(1), || async {
        (!exposed(&snapshot(survivor).await?, "fake_tool")).then_some(())
    })
    .await;
    eprintln!(
        "scenario 2: NOT_SERVING -> de-exposed in {:?}",
        flipped.elapsed()
    );
}

/// How many of `executors` each replica in `replicas` holds the health
/// watch of, once every one is claimed by one of them.
async fn watches_by_replica(
    etcd: &toolmesh_etcd::Client,
    executors: &[String],
    replicas: &[String],
    what: &str,
) -> Vec<usize> {
    eventually(what, Duration::from_secs(15), || async {
        let mut held = vec![0; replicas.len()];
        for id in executors {
            let holder = watcher_of(etcd, id).await?;
            held[replicas.iter().position(|r| *r == holder)?] += 1;
        }
        Some(held)
    })
    .await
}

/// Health watches are spread over the replicas (each watches its share,
/// not whichever claimed first), and a killed replica's share is taken
/// over by the survivors, again spread, within a few seconds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_watches_are_shared_among_replicas() {
    let (_turn, cluster) = shared_etcd(1).await;
    let store = cluster.store_url();
    let etcd = toolmesh_etcd::Client::from_url(&store).expect("etcd client");
    let mut procs = Vec::new();
    let mut addrs = Vec::new();
    for _ in 0..3 {
        let (proc, addr) = replica(&store);
        procs.push(proc);
        addrs.push(addr);
    }
    let ids: Vec<String> = procs.iter().map(replica_id).collect();
    let mut fakes = Vec::new();
    for i in 0..12 {
        let (fake, _) = FakeExecutor::start(
            &addrs.join(","),
            &format!("shared-{i}"),
            vec![spec(&format!("shared_tool_{i}"), 200)],
        )
        .await;
        fakes.push(fake);
    }
    let executors: Vec<String> = fakes.iter().map(|f| f.id.clone()).collect();
    let held = watches_by_replica(&etcd, &executors, &ids, "every executor watched").await;
    eprintln!("health watches per replica: {held:?}");
    assert!(
        held.iter().all(|n| (2..=6).contains(n)),
        "12 executors over 3 replicas should be about 4 each: {held:?}"
    );
    let busiest = (0..3).max_by_key(|i| held[*i]).unwrap();
    procs[busiest].kill9();
    let killed_at = Instant::now();
    let survivors: Vec<String> = (0..3)
        .filter(|i| *i != busiest)
        .map(|i| ids[i].clone())
        .collect();
    let after = watches_by_replica(
        &etcd,
        &executors,
        &survivors,
        "the survivors watch every executor",
    )
    .await;
    eprintln!(
        "health watches after a replica's death: {after:?}, {:?} after the kill",
        killed_at.elapsed()
    );
    assert!(
        after.iter().all(|n| (4..=8).contains(n)),
        "12 executors over 2 replicas should be about 6 each: {after:?}"
    );
}

/// The snapshot watches a replica's metrics say were opened, started
/// (`start`) from a held snapshot (`delta`) or from nothing (`full`).
fn watches_opened(admin: &str, start: &str) -> f64 {
    let (status, body) = toolmesh_testkit::http(admin, "GET", "/metrics", &[], "");
    assert_eq!(status, 200, "{body}");
    let series = format!("toolmesh_registry_snapshot_watches_total{{start=\"{start}\"}}");
    sample(&body, &series).unwrap_or(0.0)
}

/// SIGKILL the registry replica that most dispatchers follow: they move
/// to the surviving replicas with deltas (no full snapshot is sent again),
/// no call fails meanwhile, and a tool registered after the kill reaches
/// every dispatcher.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_replica_hands_its_dispatchers_over_with_deltas() {
    let (_turn, cluster) = shared_etcd(1).await;
    let store = cluster.store_url();
    let metrics = ["--admin-listen", "127.0.0.1:0", "--public-metrics"];
    let mut replicas: Vec<(Proc, String, String)> = (0..3)
        .map(|_| {
            let (proc, addr) = replica_with(&store, &metrics);
            let admin = admin_addr(&proc);
            (proc, addr, admin)
        })
        .collect();
    let all = replicas
        .iter()
        .map(|(_, addr, _)| addr.as_str())
        .collect::<Vec<_>>()
        .join(",");
    // A lease that outlives the move of its heartbeats to a survivor.
    let _executor = executor_with_ttl(&all, "handover-1", "5000");
    let dispatchers: Vec<(Proc, String)> = (0..4).map(|_| dispatcher_for(&all, &[])).collect();
    for (_, addr) in &dispatchers {
        until_listed(
            &mut dispatcher(addr),
            &["acc_echo"],
            Duration::from_secs(30),
        )
        .await;
    }
    // Each dispatcher opened one watch on the replica it follows: the one
    // with the most has at least two of the four.
    let (killed_at, followers) = replicas
        .iter()
        .map(|(_, _, admin)| watches_opened(admin, "full") + watches_opened(admin, "delta"))
        .enumerate()
        .max_by(|a, b| a.1.total_cmp(&b.1))
        .expect("three replicas");
    assert!(followers >= 2.0, "four dispatchers over three replicas");
    let (mut killed, _, _) = replicas.remove(killed_at);
    let full_before: Vec<f64> = replicas
        .iter()
        .map(|(_, _, admin)| watches_opened(admin, "full"))
        .collect();
    let delta_before: f64 = replicas
        .iter()
        .map(|(_, _, admin)| watches_opened(admin, "delta"))
        .sum();

    let stop = Stop::default();
    let calls: Vec<_> = dispatchers
        .iter()
        .map(|(_, addr)| steady_calls(addr.clone(), stop.clone()))
        .collect();
    killed.kill9();
    eventually(
        "the killed replica's dispatchers reopen their watches on the others",
        Duration::from_secs(30),
        || async {
            let moved: f64 = replicas
                .iter()
                .map(|(_, _, admin)| watches_opened(admin, "delta"))
                .sum::<f64>()
                - delta_before;
            (moved >= followers).then_some(())
        },
    )
    .await;
    let survivors = replicas
        .iter()
        .map(|(_, addr, _)| addr.as_str())
        .collect::<Vec<_>>()
        .join(",");
    let (_late, _) =
        FakeExecutor::start(&survivors, "handover-late", vec![spec("late_tool", 200)]).await;
    for (_, addr) in &dispatchers {
        until_listed(
            &mut dispatcher(addr),
            &["late_tool"],
            Duration::from_secs(30),
        )
        .await;
    }
    stop.set();
    for handle in calls {
        let (made, failures) = handle.await.expect("the calls task");
        assert!(made > 0, "no call was made");
        assert!(
            failures.is_empty(),
            "calls failed during the handover: {failures:?}"
        );
    }
    let full_after: Vec<f64> = replicas
        .iter()
        .map(|(_, _, admin)| watches_opened(admin, "full"))
        .collect();
    assert_eq!(
        full_after, full_before,
        "no survivor sent a full snapshot again"
    );
}

/// A replica on etcd counts what it sees happen: the registration it
/// wrote, and the health changes of the executor whose health it watches.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_counts_registrations_and_health_changes() {
    let (_turn, cluster) = shared_etcd(1).await;
    let store = cluster.store_url();
    let proc = Proc::toolmesh(
        "registry",
        &[
            "registry",
            "--listen",
            "127.0.0.1:0",
            "--store",
            &store,
            "--admin-listen",
            "127.0.0.1:0",
            "--public-metrics",
        ],
    );
    let (addr, admin) = (proc.listen_addr(), admin_addr(&proc));
    let (fake, _) = FakeExecutor::start(&addr, "counted-1", vec![spec("counted_tool", 100)]).await;
    agreed(&[&addr], "counted_tool exposed", |s| {
        exposed(s, "counted_tool")
    })
    .await;
    fake.reporter
        .set_service_status("", tonic_health::ServingStatus::NotServing)
        .await;
    let scrape = || {
        let (status, body) = toolmesh_testkit::http(&admin, "GET", "/metrics", &[], "");
        assert_eq!(status, 200, "{body}");
        body
    };
    let unhealthy = "toolmesh_registry_health_transitions_total{to=\"unhealthy\"}";
    eventually(
        "the health change counted",
        Duration::from_secs(10),
        || async { (sample(&scrape(), unhealthy) == Some(1.0)).then_some(()) },
    )
    .await;
    let metrics = scrape();
    assert_eq!(
        sample(&metrics, "toolmesh_registry_registrations_total"),
        Some(1.0),
        "{metrics}"
    );
    assert_eq!(
        sample(&metrics, "toolmesh_registry_flap_holds_total"),
        Some(0.0),
        "{metrics}"
    );
}

/// 8. A registration of 1,024 tools with large schemas succeeds with the
///    etcd store (split across keys and transactions under etcd's request
///    size and operation limits), and every replica agrees on it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_tools_with_large_schemas() {
    let _alone = TURNS.write().await;
    let cluster = etcd(1).await;
    let store = cluster.store_url();
    let (_a, a) = replica(&store);
    let (_b, b) = replica(&store);
    let tools: Vec<ToolSpec> = (0..1024)
        .map(|i| spec(&format!("big_{i:04}"), 7 * 1024))
        .collect();
    let started = Instant::now();
    let (_fake, registered) = FakeExecutor::start(&a, "fake-8", tools).await;
    assert!(
        registered.rejected.is_empty(),
        "{:?}",
        registered.rejected.first()
    );
    eprintln!(
        "scenario 8: 1,024 tools (7 KiB schemas, 7 MiB in all) registered in {:?}",
        started.elapsed()
    );
    let both = agreed(&[&a, &b], "1,024 tools on both", |s| {
        s.tools.iter().filter(|t| t.exposed).count() == 1024
    })
    .await;
    assert_eq!(both.tools.len(), 1024);
}

/// Invokes `tool` through the dispatcher at `addr` with an approval id.
async fn invoke_approved(
    addr: &str,
    tool: &str,
    arguments: &str,
    approval: &str,
) -> pb::InvokeResponse {
    dispatcher(addr)
        .invoke(pb::InvokeRequest {
            tool: tool.to_owned(),
            arguments: arguments.to_owned(),
            approval_id: approval.to_owned(),
            ..Default::default()
        })
        .await
        .expect("invoke RPC")
        .into_inner()
}

/// 7. An approval requested through dispatcher 1 (following replica A) is
///    approved by an operator through dispatcher 2 (following replica B)
///    and used through dispatcher 2, once: a second use through either
///    dispatcher is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approval_across_dispatchers() {
    let (_turn, cluster) = shared_etcd(1).await;
    let store = cluster.store_url();
    let (_a, a) = replica(&store);
    let (_b, b) = replica(&store);
    let _support = example("support", &format!("{a},{b}"), &["--ttl-ms", TTL_MS]);
    let (_d1, d1) = dispatcher_for(&a, &[]);
    let (_d2, d2) = dispatcher_for(&b, &[]);
    for d in [&d1, &d2] {
        until_listed(&mut dispatcher(d), &["send_email"], Duration::from_secs(10)).await;
    }
    let args = r#"{"to": "ada@example.com", "subject": "Hi", "body": "b", "priority": "normal"}"#;
    let asked = invoke_approved(&d1, "send_email", args, "").await;
    assert_eq!(
        code(&asked),
        pb::ErrorCode::ApprovalRequired as i32,
        "{}",
        message(&asked)
    );
    let id = asked
        .result
        .and_then(|r| r.error)
        .map(|e| e.approval_id)
        .unwrap_or_default();
    assert!(!id.is_empty());
    let mut governance = pb::governance_client::GovernanceClient::new(
        toolmesh_transport::channel(&d2, &toolmesh_transport::Tls::none()).expect("address"),
    );
    let listed = governance
        .list_approvals(with_token(
            pb::ListApprovalsRequest {},
            Some("dev-approver"),
        ))
        .await
        .expect("list through dispatcher 2")
        .into_inner()
        .approvals;
    assert!(listed.iter().any(|t| t.id == id), "{listed:?}");
    governance
        .approve(with_token(
            pb::ApproveRequest { id: id.clone() },
            Some("dev-approver"),
        ))
        .await
        .expect("approve through dispatcher 2");
    let used = invoke_approved(&d2, "send_email", args, &id).await;
    assert_eq!(code(&used), 0, "{}", message(&used));
    for d in [&d1, &d2] {
        let again = invoke_approved(d, "send_email", args, &id).await;
        assert_ne!(code(&again), 0, "a used approval was accepted again");
        assert!(
            message(&again).contains("already used"),
            "{}",
            message(&again)
        );
    }
}

/// Invokes `tool` through the dispatcher at `addr` in agent session `session`.
async fn invoke_in_session(
    addr: &str,
    tool: &str,
    arguments: serde_json::Value,
    session: &str,
) -> pb::InvokeResponse {
    dispatcher(addr)
        .invoke(pb::InvokeRequest {
            tool: tool.to_owned(),
            arguments: arguments.to_string(),
            context: Some(pb::CallContext {
                session_id: session.to_owned(),
                ..Default::default()
            }),
            ..Default::default()
        })
        .await
        .expect("invoke RPC")
        .into_inner()
}

/// Session facts are shared: `read_file` through dispatcher 1 (following
/// replica A) satisfies `edit_file`'s precondition through dispatcher 2
/// (following replica B) in the same session, and only there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_facts_across_dispatchers() {
    let (_turn, cluster) = shared_etcd(1).await;
    let store = cluster.store_url();
    let (_a, a) = replica(&store);
    let (_b, b) = replica(&store);
    let dir = temp_dir("etcd-sessions");
    std::fs::write(dir.join("notes.txt"), "one two three\n").unwrap();
    let root = dir.path().to_str().unwrap();
    let _files = example(
        "files",
        &format!("{a},{b}"),
        &["--ttl-ms", TTL_MS, "--files-root", root],
    );
    let (_d1, d1) = dispatcher_for(&a, &[]);
    let (_d2, d2) = dispatcher_for(&b, &[]);
    for d in [&d1, &d2] {
        until_listed(&mut dispatcher(d), &["edit_file"], Duration::from_secs(10)).await;
    }
    let edit = serde_json::json!({"path": "notes.txt", "old_string": "two", "new_string": "2"});
    let early = invoke_in_session(&d2, "edit_file", edit.clone(), "s-1").await;
    assert_eq!(
        code(&early),
        pb::ErrorCode::PreconditionFailed as i32,
        "{}",
        message(&early)
    );
    let read = serde_json::json!({"path": "notes.txt"});
    let done = invoke_in_session(&d1, "read_file", read, "s-1").await;
    assert_eq!(code(&done), 0, "{}", message(&done));
    let elsewhere = invoke_in_session(&d2, "edit_file", edit.clone(), "s-2").await;
    assert_eq!(
        code(&elsewhere),
        pb::ErrorCode::PreconditionFailed as i32,
        "another session does not share the read: {}",
        message(&elsewhere)
    );
    let edited = invoke_in_session(&d2, "edit_file", edit, "s-1").await;
    assert_eq!(code(&edited), 0, "{}", message(&edited));
    let text = std::fs::read_to_string(dir.join("notes.txt")).unwrap();
    assert_eq!(text, "one 2 three\n");
}

/// Registers a throwaway executor (no health service: assumed healthy)
/// through `registries`; whether it worked.
async fn register_once(registries: &str, id: &str) -> Result<(), tonic::Status> {
    let mut request = tonic::Request::new(RegisterRequest {
        executor_id: id.to_owned(),
        service: "probe".to_owned(),
        endpoint: "127.0.0.1:9".to_owned(),
        tools: vec![spec("probe_tool", 200)],
        lease_ttl_ms: 2000,
        execute_token: String::new(),
    });
    request.set_timeout(Duration::from_secs(5));
    registry_client(registries)
        .register(request)
        .await
        .map(|_| ())
}

/// The health the replica at `addr` reports for toolmesh.v1.Registry.
async fn registry_health(addr: &str) -> Option<i32> {
    let channel = toolmesh_transport::channel(addr, &toolmesh_transport::Tls::none()).ok()?;
    let mut client = tonic_health::pb::health_client::HealthClient::new(channel);
    let request = tonic_health::pb::HealthCheckRequest {
        service: "toolmesh.v1.Registry".to_owned(),
    };
    let response = tokio::time::timeout(Duration::from_secs(2), client.check(request))
        .await
        .ok()?
        .ok()?;
    Some(response.into_inner().status)
}

/// Calls acc_echo through `addr` every 20 ms until `stop`; the failures.
fn steady_calls(addr: String, stop: Stop) -> tokio::task::JoinHandle<(usize, Vec<String>)> {
    tokio::spawn(async move {
        let mut client = dispatcher(&addr);
        let (mut calls, mut failures) = (0, Vec::new());
        while !stop.is_set() {
            let response = invoke(
                &mut client,
                "acc_echo",
                r#"{"message":"steady"}"#,
                Some(Duration::from_secs(2)),
            )
            .await;
            calls += 1;
            if code(&response) != 0 {
                failures.push(message(&response));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        (calls, failures)
    })
}

/// Records every replica's snapshot versions until `stop`; panics if one
/// goes backwards.
fn versions_never_go_back(addrs: Vec<String>, stop: Stop) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut last = vec![0u64; addrs.len()];
        while !stop.is_set() {
            for (i, addr) in addrs.iter().enumerate() {
                if let Some(s) = snapshot(addr).await {
                    assert!(
                        s.version >= last[i],
                        "{addr}: version {} after {}",
                        s.version,
                        last[i]
                    );
                    last[i] = s.version;
                }
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
}

/// A stop flag shared with background tasks.
#[derive(Clone, Default)]
struct Stop(std::sync::Arc<std::sync::atomic::AtomicBool>);

impl Stop {
    fn set(&self) {
        self.0.store(true, std::sync::atomic::Ordering::Relaxed);
    }

    fn is_set(&self) -> bool {
        self.0.load(std::sync::atomic::Ordering::Relaxed)
    }
}

/// The index of the etcd leader among the cluster's members.
async fn leader(cluster: &EtcdCluster, client: &toolmesh_etcd::Client) -> usize {
    eventually("an etcd leader", Duration::from_secs(10), || async {
        for i in 0..cluster.len() {
            let status = client.status(&cluster.client_url(i)).await.ok()?;
            let me = status.header.map(|h| h.member_id)?;
            if status.leader == me {
                return Some(i);
            }
        }
        None
    })
    .await
}

/// 3. Three etcd members, the leader SIGKILLed under steady registrations
///    and calls: registrations resume within about a second, no replica's
///    snapshot version goes backwards, and no call fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_leader_kill() {
    let (_turn, mut cluster) = shared_etcd(3).await;
    let store = cluster.store_url();
    let client = toolmesh_etcd::Client::from_url(&store).expect("etcd client");
    let (_a, a) = replica(&store);
    let (_b, b) = replica(&store);
    let both = format!("{a},{b}");
    let _exec = executor(&both, "acc-3");
    let (_d, d) = dispatcher_for(&both, &[]);
    until_listed(&mut dispatcher(&d), &["acc_echo"], Duration::from_secs(10)).await;
    let stop = Stop::default();
    let calls = steady_calls(d.clone(), stop.clone());
    let versions = versions_never_go_back(vec![a.clone(), b.clone()], stop.clone());
    let registrations = {
        let (stop, both) = (stop.clone(), both.clone());
        tokio::spawn(async move {
            let mut ok_at = Vec::new();
            let mut n = 0;
            while !stop.is_set() {
                n += 1;
                if register_once(&both, &format!("probe-{}", n % 4))
                    .await
                    .is_ok()
                {
                    ok_at.push(Instant::now());
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            ok_at
        })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    let leader = leader(&cluster, &client).await;
    let killed = Instant::now();
    cluster.kill(leader).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    stop.set();
    let ok_at = registrations.await.expect("registrations task");
    let (calls, failures) = calls.await.expect("calls task");
    versions.await.expect("versions never went backwards");
    let resumed = ok_at
        .iter()
        .find(|t| **t > killed)
        .map(|t| t.duration_since(killed))
        .expect("registrations resumed after the leader kill");
    eprintln!(
        "scenario 3: leader SIGKILL -> first registration after {resumed:?}; {calls} calls, {} failed",
        failures.len()
    );
    // "About a second": an election takes ~0.1 s; a registration that was
    // in flight to the dead leader waits out its 1 s request timeout.
    assert!(
        resumed < Duration::from_secs(2),
        "registrations resumed after {resumed:?}"
    );
    assert!(failures.is_empty(), "calls failed: {failures:?}");
}

/// 4. Two of three members SIGSTOPped (no quorum): replicas report
///    NOT_SERVING, registrations answer UNAVAILABLE, the dispatcher keeps
///    serving the last snapshot and calls keep succeeding; after SIGCONT
///    everything converges without help.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_quorum_then_back() {
    let (_turn, cluster) = shared_etcd(3).await;
    let store = cluster.store_url();
    let (_a, a) = replica(&store);
    let (_b, b) = replica(&store);
    let both = format!("{a},{b}");
    // Leases keep running while etcd has no quorum (a paused leader that
    // resumes expires what ran out), so the executor's lease must outlast
    // the outage: the default 10 s does.
    let _exec = executor_with_ttl(&both, "acc-4", "10000");
    let (_d, d) = dispatcher_for(&both, &[]);
    until_listed(&mut dispatcher(&d), &["acc_echo"], Duration::from_secs(10)).await;
    let stop = Stop::default();
    let calls = steady_calls(d.clone(), stop.clone());
    cluster.signal(1, libc::SIGSTOP);
    cluster.signal(2, libc::SIGSTOP);
    let lost = Instant::now();
    for addr in [&a, &b] {
        eventually(
            "replica reports NOT_SERVING",
            Duration::from_secs(15),
            || async {
                (registry_health(addr).await? == tonic_health::ServingStatus::NotServing as i32)
                    .then_some(())
            },
        )
        .await;
    }
    eprintln!(
        "scenario 4: quorum lost -> both replicas NOT_SERVING after {:?}",
        lost.elapsed()
    );
    let refused = register_once(&a, "probe-4")
        .await
        .expect_err("no registration without quorum");
    assert_eq!(refused.code(), tonic::Code::Unavailable, "{refused:?}");
    assert!(refused.message().contains("retry"), "{}", refused.message());
    cluster.signal(1, libc::SIGCONT);
    cluster.signal(2, libc::SIGCONT);
    let back = Instant::now();
    for addr in [&a, &b] {
        eventually("replica SERVING again", Duration::from_secs(15), || async {
            (registry_health(addr).await? == tonic_health::ServingStatus::Serving as i32)
                .then_some(())
        })
        .await;
    }
    eventually(
        "registrations work again",
        Duration::from_secs(10),
        || async { register_once(&b, "probe-4b").await.ok() },
    )
    .await;
    // The probe's endpoint serves nothing, so its health watch may take it
    // out: what must converge is that both replicas know it.
    agreed(&[&a, &b], "both replicas converge", |s| {
        known(s, "probe_tool") && exposed(s, "acc_echo")
    })
    .await;
    eprintln!(
        "scenario 4: SIGCONT -> converged after {:?}",
        back.elapsed()
    );
    stop.set();
    let (calls, failures) = calls.await.expect("calls task");
    assert!(
        failures.is_empty(),
        "{} of {calls} calls failed: {:?}",
        failures.len(),
        failures.first()
    );
}

/// 5. Compaction while a replica is cut off from etcd (its only member
///    SIGSTOPped): once back it publishes the same state as the replica
///    that stayed connected, reading the store again when its watch start
///    was compacted away.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compaction_while_disconnected() {
    let (_turn, cluster) = shared_etcd(3).await;
    let client = toolmesh_etcd::Client::from_url(&cluster.store_url()).expect("etcd client");
    let only = |i: usize| cluster.client_url(i).replace("http://", "etcd://");
    let (_a, a) = replica(&format!(
        "{},{}",
        only(0),
        cluster.client_url(1).replace("http://", "")
    ));
    let (b_proc, b) = replica(&only(2));
    let (_fake, _) = FakeExecutor::start(&a, "fake-5a", vec![spec("before_cut", 200)]).await;
    agreed(&[&a, &b], "both see before_cut", |s| {
        exposed(s, "before_cut")
    })
    .await;
    cluster.signal(2, libc::SIGSTOP);
    let (_fake2, _) = FakeExecutor::start(&a, "fake-5b", vec![spec("during_cut", 200)]).await;
    registry_client(&a)
        .disable_tool(pb::DisableToolRequest {
            tool: "before_cut".to_owned(),
            reason: "compaction test".to_owned(),
        })
        .await
        .expect("disable through A");
    let revision = client
        .range_prefix(b"/toolmesh/")
        .await
        .expect("read etcd")
        .header
        .map_or(0, |h| h.revision);
    client.compact(revision).await.expect("compact");
    cluster.signal(2, libc::SIGCONT);
    let both = agreed(&[&a, &b], "B resyncs after compaction", |s| {
        exposed(s, "during_cut") && !exposed(s, "before_cut")
    })
    .await;
    assert!(both.version >= u64::try_from(revision).unwrap_or(0));
    // etcd refuses a watch from before the compaction: the replica's cue
    // to read the whole store again (when its member applied the
    // compaction before the replica watched again; otherwise the member's
    // history still bridged the gap and the watch caught up).
    let refused = match client.watch_prefix(b"/toolmesh/", 1).await {
        Ok(mut stream) => stream.next().await.err(),
        Err(error) => Some(error),
    };
    assert!(
        matches!(refused, Some(toolmesh_etcd::EtcdError::Compacted { .. })),
        "{refused:?}"
    );
    let resynced = b_proc
        .wait_line("compacted", Duration::from_millis(10))
        .is_ok();
    eprintln!("scenario 5: B converged (full resync after compaction: {resynced})");
}

/// The rollout of `tool` in `snapshot` in state `state`, if it is there.
fn rollout_in(snapshot: &pb::Snapshot, tool: &str, state: pb::RolloutState) -> Option<pb::Rollout> {
    snapshot
        .rollouts
        .iter()
        .find(|r| r.tool == tool && r.state == state as i32)
        .cloned()
}

/// `acc_echo` through the dispatcher at `addr` in session `session`: the
/// version that ran, or none while the dispatcher cannot run it yet (it
/// follows its replica, which may be a step behind).
async fn echo_version(addr: &str, session: &str) -> Option<String> {
    let request = pb::InvokeRequest {
        tool: "acc_echo".into(),
        arguments: r#"{"message":"hi"}"#.into(),
        context: Some(pb::CallContext {
            session_id: session.into(),
            ..Default::default()
        }),
        ..Default::default()
    };
    let response = dispatcher(addr).invoke(request).await.ok()?.into_inner();
    (code(&response) == 0).then_some(response.tool_version)
}

/// Rollouts live in etcd: started through replica A, every replica
/// publishes the same one and a dispatcher following B routes by it; a
/// replica started again reads it back; an abort through B reaches A.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rollouts_live_in_etcd() {
    let (_turn, cluster) = shared_etcd(1).await;
    let store = cluster.store_url();
    let (mut a_proc, a) = replica(&store);
    let (_b, b) = replica(&store);
    let _v1 = executor(&a, "acc-v1");
    let _v2 = example(
        "acceptance",
        &a,
        &[
            "--ttl-ms",
            TTL_MS,
            "--executor-id",
            "acc-v2",
            "--tool-version",
            "2.0.0",
        ],
    );
    let (_d, d) = dispatcher_for(&b, &[]);
    let two_versions = |s: &pb::Snapshot| {
        s.tools
            .iter()
            .filter(|t| t.exposed && t.spec.as_ref().is_some_and(|s| s.name == "acc_echo"))
            .count()
            == 2
    };
    agreed(&[&a, &b], "both versions on A and B", two_versions).await;
    let start = pb::UpdateRolloutRequest {
        action: pb::RolloutAction::Start as i32,
        tool: "acc_echo@2.0.0".into(),
        basis_points: 10_000,
        ..Default::default()
    };
    registry_client(&a)
        .update_rollout(start)
        .await
        .expect("start through A");
    agreed(&[&a, &b], "the rollout on A and B", |s| {
        rollout_in(s, "acc_echo", pb::RolloutState::Active).is_some()
    })
    .await;
    eventually(
        "the dispatcher routes to the canary",
        Duration::from_secs(10),
        || async { (echo_version(&d, "run-1").await? == "2.0.0").then_some(()) },
    )
    .await;

    a_proc.kill9();
    let (_a2, a2) = replica(&store);
    agreed(&[&a2, &b], "a new replica reads the rollout back", |s| {
        rollout_in(s, "acc_echo", pb::RolloutState::Active).is_some() && two_versions(s)
    })
    .await;
    let abort = pb::UpdateRolloutRequest {
        action: pb::RolloutAction::Abort as i32,
        tool: "acc_echo".into(),
        reason: "etcd test".into(),
        ..Default::default()
    };
    registry_client(&b)
        .update_rollout(abort)
        .await
        .expect("abort through B");
    let both = agreed(&[&a2, &b], "the abort on both", |s| {
        rollout_in(s, "acc_echo", pb::RolloutState::Aborted).is_some()
    })
    .await;
    let aborted = rollout_in(&both, "acc_echo", pb::RolloutState::Aborted).unwrap();
    assert_eq!(
        (aborted.reason.as_str(), aborted.basis_points),
        ("etcd test", 10_000)
    );
    let listed = registry_client(&a2)
        .list_rollouts(pb::ListRolloutsRequest::default())
        .await
        .expect("ListRollouts through the new replica")
        .into_inner();
    assert_eq!(listed.rollouts.len(), 1);
    assert_eq!(listed.rollouts[0].stable_version, "1.0.0");
    eventually(
        "the dispatcher routes to stable",
        Duration::from_secs(10),
        || async { (echo_version(&d, "run-1").await? == "1.0.0").then_some(()) },
    )
    .await;
}
