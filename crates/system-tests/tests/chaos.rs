//! The chaos suite: a registry, a separate dispatcher and three replicas of
//! the acceptance executor as real OS processes, concurrent callers, and a
//! fault schedule — SIGKILL and restart a replica, SIGSTOP/SIGCONT one,
//! restart the registry, SIGTERM (drain) one — then the promises are checked:
//! deadlines hold, non-idempotent calls run at most once, idempotent calls
//! succeed, nothing crashes, and every tool comes back. A second run puts
//! the registry on etcd (two replicas, three members) and kills a replica
//! and the etcd leader under the same load.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use toolmesh::ErrorCodeExt;
use toolmesh::pb::{
    CallContext, ErrorCode, GetSnapshotRequest, InvokeRequest, registry_client::RegistryClient,
};
use toolmesh_system_tests::*;

const TTL_MS: u64 = 1000;
const CALLERS: usize = 8;
const DEADLINE: Duration = Duration::from_millis(1000);
/// Outcome of a call whose caller-side timer fired first.
const CALLER_TIMER: &str = "DEADLINE_EXCEEDED(caller timer)";

/// How far past its deadline a call may end (scheduling on 2 loaded cores).
const DEADLINE_SLACK: Duration = Duration::from_millis(150);

struct Replica {
    id: String,
    proc: Option<Proc>,
}

struct Mesh {
    registry_addr: String,
    registry: Proc,
    dispatcher_addr: String,
    dispatcher: Proc,
    replicas: Vec<Replica>,
    ledger: PathBuf,
}

impl Mesh {
    fn start(ledger: &Path) -> Mesh {
        let ttl = TTL_MS.to_string();
        let (registry, registry_addr) = registry(&["--default-ttl-ms", &ttl]);
        let (dispatcher, dispatcher_addr) = dispatcher_for(&registry_addr, &[]);
        let mut mesh = Mesh {
            registry_addr,
            registry,
            dispatcher_addr,
            dispatcher,
            replicas: (0..3)
                .map(|i| Replica {
                    id: format!("replica-{i}"),
                    proc: None,
                })
                .collect(),
            ledger: ledger.to_owned(),
        };
        for i in 0..3 {
            mesh.start_replica(i);
        }
        mesh
    }

    fn start_replica(&mut self, i: usize) {
        let ttl = TTL_MS.to_string();
        let ledger = self.ledger.to_str().unwrap().to_owned();
        let id = self.replicas[i].id.clone();
        let proc = example(
            "acceptance",
            &self.registry_addr,
            &[
                "--ttl-ms",
                &ttl,
                "--ledger",
                &ledger,
                "--executor-id",
                &id,
                "--grace-ms",
                "3000",
            ],
        );
        self.replicas[i].proc = Some(proc);
    }

    fn replica(&mut self, i: usize) -> &mut Proc {
        self.replicas[i].proc.as_mut().expect("replica running")
    }

    fn restart_registry(&mut self) {
        self.registry.kill9();
        let ttl = TTL_MS.to_string();
        self.registry = restart_on(
            "registry",
            &[
                "registry",
                "--listen",
                &self.registry_addr,
                "--default-ttl-ms",
                &ttl,
            ],
        );
    }
}

/// One finished call as the caller saw it.
#[derive(Debug, Clone)]
struct Call {
    tool: &'static str,
    call_id: String,
    /// Error code name, or "OK", or "grpc:<code>" for an RPC-level failure.
    outcome: String,
    latency: Duration,
    attempts: u32,
    /// When it started.
    started: Instant,
}

async fn caller(addr: String, stop: Instant, calls: Arc<Mutex<Vec<Call>>>, n: usize) {
    let mut client = dispatcher(&addr);
    let mut i = 0u64;
    while Instant::now() < stop {
        i += 1;
        let (tool, arguments) = if i.is_multiple_of(2) {
            ("acc_echo", format!(r#"{{"message":"c{n}-{i}"}}"#))
        } else {
            ("acc_charge", format!(r#"{{"account":"a{n}","cents":{i}}}"#))
        };
        let call_id = format!("chaos-{n}-{i}");
        let mut request = tonic::Request::new(InvokeRequest {
            tool: tool.into(),
            arguments,
            call_id: call_id.clone(),
            context: Some(CallContext {
                caller: format!("chaos-{n}"),
                ..Default::default()
            }),
            ..Default::default()
        });
        request.set_timeout(DEADLINE);
        let started = Instant::now();
        let (outcome, attempts) = match client.invoke(request).await {
            Ok(response) => {
                let response = response.into_inner();
                let code = response
                    .result
                    .as_ref()
                    .and_then(|r| r.error.as_ref())
                    .map_or(ErrorCode::Unspecified, |e| {
                        ErrorCode::try_from(e.code).unwrap_or(ErrorCode::Unspecified)
                    });
                let name = if code == ErrorCode::Unspecified {
                    "OK".to_owned()
                } else {
                    code.short_name().to_owned()
                };
                (name, response.attempts)
            }
            // The caller's own timer fired before the dispatcher's answer
            // (tonic enforces grpc-timeout on the client too): counted
            // apart, so the summary shows whether the answer came late.
            Err(status)
                if matches!(
                    status.code(),
                    tonic::Code::Cancelled | tonic::Code::DeadlineExceeded
                ) =>
            {
                (CALLER_TIMER.to_owned(), 0)
            }
            Err(status) => (format!("grpc:{:?}", status.code()), 0),
        };
        let latency = started.elapsed();
        calls.lock().unwrap().push(Call {
            tool,
            call_id,
            outcome,
            latency,
            attempts,
            started,
        });
        // A small pause keeps the 2-core machine from saturating.
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// Whether the registry's newest snapshot shows `executor` serving healthy.
/// Waits until every one of `executors` is a healthy instance in the
/// snapshot of the registry at `registry`.
async fn all_healthy(registry: &str, executors: &[String], within: Duration) {
    for id in executors {
        eventually(&format!("{id} healthy"), within, || {
            let (registry, id) = (registry.to_owned(), id.clone());
            async move { (instance_healthy(&registry, &id).await == Some(true)).then_some(()) }
        })
        .await;
    }
}

async fn instance_healthy(registry: &str, executor: &str) -> Option<bool> {
    let mut client = RegistryClient::new(
        toolmesh_transport::channel(registry, &toolmesh_transport::Tls::none()).ok()?,
    );
    let snapshot = client
        .get_snapshot(GetSnapshotRequest { version: 0 })
        .await
        .ok()?
        .into_inner();
    Some(snapshot.tools.iter().any(|t| {
        t.instances
            .iter()
            .any(|i| i.executor_id == executor && i.healthy)
    }))
}

/// Time until `executor` is no longer a healthy instance in the registry.
async fn time_to_out(registry: &str, executor: &str, since: Instant) -> Duration {
    eventually(
        &format!("{executor} out of rotation"),
        Duration::from_secs(5),
        || async { (instance_healthy(registry, executor).await == Some(false)).then_some(()) },
    )
    .await;
    since.elapsed()
}

/// The whole fault schedule under load, then every promise checked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_suite() {
    let dir = temp_dir("chaos");
    let ledger_path = dir.join("ledger.jsonl");
    let mut mesh = Mesh::start(&ledger_path);
    let mut client = dispatcher(&mesh.dispatcher_addr);
    until_listed(
        &mut client,
        &["acc_charge", "acc_echo"],
        Duration::from_secs(10),
    )
    .await;
    // Every replica registered before the load starts.
    let ids: Vec<String> = mesh.replicas.iter().map(|r| r.id.clone()).collect();
    all_healthy(&mesh.registry_addr, &ids, Duration::from_secs(10)).await;

    let calls = Arc::new(Mutex::new(Vec::new()));
    let started = Instant::now();
    let load_time = Duration::from_secs(20);
    let stop = started + load_time;
    let callers: Vec<_> = (0..CALLERS)
        .map(|n| tokio::spawn(caller(mesh.dispatcher_addr.clone(), stop, calls.clone(), n)))
        .collect();
    let at = |secs: f64| tokio::time::sleep_until((started + Duration::from_secs_f64(secs)).into());
    let mut faults: Vec<(String, String)> = Vec::new();

    at(2.0).await;
    let killed = Instant::now();
    mesh.replica(0).kill9();
    let kill_out = time_to_out(&mesh.registry_addr, "replica-0", killed).await;
    faults.push((
        "SIGKILL replica-0".into(),
        format!("out of rotation in {kill_out:?}"),
    ));
    at(4.0).await;
    mesh.start_replica(0);
    faults.push(("restart replica-0".into(), "started".into()));

    at(6.0).await;
    let stopped = Instant::now();
    mesh.replica(1).signal(libc::SIGSTOP);
    let stop_out = time_to_out(&mesh.registry_addr, "replica-1", stopped).await;
    faults.push((
        "SIGSTOP replica-1".into(),
        format!("out of rotation in {stop_out:?} (lease)"),
    ));
    at(8.5).await;
    mesh.replica(1).signal(libc::SIGCONT);
    faults.push(("SIGCONT replica-1".into(), "resumed".into()));

    at(10.0).await;
    mesh.restart_registry();
    faults.push((
        "restart registry".into(),
        "SIGKILL, then started on the same port".into(),
    ));

    at(14.0).await;
    let termed = Instant::now();
    let drain_window = (termed, started + Duration::from_secs(16));
    mesh.replica(2).signal(libc::SIGTERM);
    let term_out = time_to_out(&mesh.registry_addr, "replica-2", termed).await;
    faults.push((
        "SIGTERM replica-2".into(),
        format!("NOT_SERVING -> out of rotation in {term_out:?}"),
    ));
    let drained = mesh
        .replica(2)
        .wait_exit(toolmesh_testkit::patient(Duration::from_secs(5)));
    assert!(
        drained.is_some_and(|s| s.success()),
        "replica-2 drains and exits 0: {drained:?}"
    );
    at(16.0).await;
    mesh.start_replica(2);
    faults.push(("restart replica-2".into(), "started".into()));

    for handle in callers {
        handle.await.unwrap();
    }
    let faults_over = Instant::now();

    // Every tool exposed again, and every replica back, within 2 x TTL.
    let within = Duration::from_millis(2 * TTL_MS);
    until_listed(
        &mut client,
        &["acc_charge", "acc_echo", "acc_panic", "acc_sleep"],
        within,
    )
    .await;
    all_healthy(&mesh.registry_addr, &ids, within).await;
    let recovered = faults_over.elapsed();
    assert!(mesh.dispatcher.alive(), "the dispatcher did not crash");
    assert!(mesh.registry.alive(), "the registry did not crash");

    let calls = calls.lock().unwrap().clone();
    let ledger = ledger(&ledger_path);
    report_and_check(&calls, &ledger, &faults, recovered, Some(drain_window));
}

fn report_and_check(
    calls: &[Call],
    ledger: &[serde_json::Value],
    faults: &[(String, String)],
    recovered: Duration,
    drain_window: Option<(Instant, Instant)>,
) {
    let mut executions: HashMap<&str, usize> = HashMap::new();
    for line in ledger {
        if line["tool"] == "acc_charge" {
            *executions
                .entry(line["call_id"].as_str().unwrap_or(""))
                .or_default() += 1;
        }
    }
    let duplicates: Vec<(&str, usize)> = executions
        .iter()
        .filter(|(_, n)| **n > 1)
        .map(|(id, n)| (*id, *n))
        .collect();

    println!("\nchaos summary");
    println!("  faults:");
    for (fault, what) in faults {
        println!("    {fault:<20} {what}");
    }
    let mut worst_over = Duration::ZERO;
    let mut worst_latency = Duration::ZERO;
    for tool in ["acc_echo", "acc_charge"] {
        let of_tool: Vec<&Call> = calls.iter().filter(|c| c.tool == tool).collect();
        let ok = of_tool.iter().filter(|c| c.outcome == "OK").count();
        let retried = of_tool.iter().filter(|c| c.attempts > 1).count();
        let mut by_code: BTreeMap<&str, usize> = BTreeMap::new();
        for c in of_tool.iter().filter(|c| c.outcome != "OK") {
            *by_code.entry(c.outcome.as_str()).or_default() += 1;
        }
        println!(
            "  {tool:<11} calls {:>6}  ok {:>6} ({:.2}%)  retried {:>4}  failures {:?}",
            of_tool.len(),
            ok,
            100.0 * ok as f64 / of_tool.len().max(1) as f64,
            retried,
            by_code
        );
        for c in &of_tool {
            worst_latency = worst_latency.max(c.latency);
            worst_over = worst_over.max(c.latency.saturating_sub(DEADLINE));
        }
    }
    println!(
        "  worst latency {worst_latency:?} against a deadline of {DEADLINE:?} (over by {worst_over:?})"
    );
    println!(
        "  acc_charge executions {}  duplicates {}",
        executions.values().sum::<usize>(),
        duplicates.len()
    );
    println!("  every tool exposed again {recovered:?} after the faults stopped\n");

    assert!(calls.len() > 1000, "enough load: {} calls", calls.len());
    assert!(
        duplicates.is_empty(),
        "non-idempotent calls ran twice: {duplicates:?}"
    );
    assert!(
        worst_over <= DEADLINE_SLACK,
        "a call outlived its deadline by {worst_over:?}"
    );
    let echo: Vec<&Call> = calls.iter().filter(|c| c.tool == "acc_echo").collect();
    let echo_ok = echo.iter().filter(|c| c.outcome == "OK").count();
    let rate = echo_ok as f64 / echo.len() as f64;
    assert!(
        rate >= 0.99,
        "idempotent success {:.3}% < 99%",
        rate * 100.0
    );
    // A planned shutdown, with other replicas up, fails no call.
    if let Some(drain_window) = drain_window {
        let during_drain: Vec<&Call> = calls
            .iter()
            .filter(|c| c.started >= drain_window.0 && c.started <= drain_window.1)
            .collect();
        let drain_failures: Vec<&&Call> =
            during_drain.iter().filter(|c| c.outcome != "OK").collect();
        println!(
            "  during the SIGTERM drain: {} calls, {} failed",
            during_drain.len(),
            drain_failures.len()
        );
        assert!(!during_drain.is_empty());
        assert!(
            drain_failures.is_empty(),
            "calls failed during a planned shutdown: {drain_failures:?}"
        );
    }
    let explained = [
        "UNAVAILABLE",
        "DEADLINE_EXCEEDED",
        CALLER_TIMER,
        "EXECUTOR_FAILED",
    ];
    for c in calls.iter().filter(|c| c.outcome != "OK") {
        assert!(
            explained.contains(&c.outcome.as_str()),
            "{} {} failed without an explaining code: {}",
            c.tool,
            c.call_id,
            c.outcome
        );
    }
}

/// Failover survives a tool-level fault (real processes): replicas A and B
/// both serve `acc_charge` (not idempotent) and `acc_echo` (idempotent);
/// `acc_charge` answers UNAVAILABLE on both and `acc_echo` on A. Once
/// `acc_charge` has been ejected on one of them, every `acc_echo` still
/// succeeds, and B keeps taking first attempts of `acc_echo` (the fault
/// ejected a tool on an instance, never B as a whole).
#[tokio::test]
async fn tool_level_fault_failover() {
    let (_serve, addr) = serve(&[]);
    let _a = example(
        "acceptance",
        &addr,
        &[
            "--executor-id",
            "replica-a",
            "--unavailable",
            "acc_charge,acc_echo",
        ],
    );
    let _b = example(
        "acceptance",
        &addr,
        &["--executor-id", "replica-b", "--unavailable", "acc_charge"],
    );
    let mut client = dispatcher(&addr);
    until_listed(
        &mut client,
        &["acc_echo", "acc_charge"],
        Duration::from_secs(10),
    )
    .await;
    eventually("both replicas registered", Duration::from_secs(10), || {
        let addr = addr.clone();
        async move {
            let snapshot = RegistryClient::new(
                toolmesh_transport::channel(&addr, &toolmesh_transport::Tls::none()).ok()?,
            )
            .get_snapshot(GetSnapshotRequest::default())
            .await
            .ok()?
            .into_inner();
            snapshot
                .tools
                .iter()
                .all(|t| t.instances.len() == 2)
                .then_some(())
        }
    })
    .await;
    for i in 0..20 {
        let charge = invoke(
            &mut client,
            "acc_charge",
            &format!(r#"{{"account":"a{i}","cents":1}}"#),
            None,
        )
        .await;
        assert_eq!(
            code(&charge),
            ErrorCode::Unavailable as i32,
            "{}",
            message(&charge)
        );
        assert_eq!(
            charge.attempts, 1,
            "a non-idempotent call is never sent twice"
        );
    }
    let mut first_try_on_b = 0;
    for i in 0..30 {
        let echo = invoke(
            &mut client,
            "acc_echo",
            &format!(r#"{{"message":"m{i}"}}"#),
            None,
        )
        .await;
        assert_eq!(code(&echo), 0, "acc_echo m{i}: {}", message(&echo));
        if echo.attempts == 1 {
            assert_eq!(echo.executor_id, "replica-b");
            first_try_on_b += 1;
        }
    }
    println!(
        "tool-level fault: 30/30 acc_echo succeeded, {first_try_on_b} on the first attempt (replica-b)"
    );
    assert!(first_try_on_b > 0, "replica-b was ejected as a whole");
}

/// The mesh on etcd: three members, two registry replicas, a dispatcher
/// following both, and the three acceptance replicas registered through
/// both; under the same load, SIGKILL a registry replica, then the etcd
/// leader. Non-idempotent calls still run at most once, idempotent calls
/// succeed, and nothing stays hidden.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_on_etcd() {
    let dir = temp_dir("chaos-etcd");
    let ledger_path = dir.join("ledger.jsonl");
    let mut cluster = toolmesh_procs::EtcdCluster::start(3)
        .await
        .unwrap_or_else(|e| panic!("the etcd chaos run needs etcd: {e}"));
    let store = cluster.store_url();
    let ttl = TTL_MS.to_string();
    let replica = |name: &str| {
        Proc::toolmesh(
            name,
            &[
                "registry",
                "--listen",
                "127.0.0.1:0",
                "--store",
                &store,
                "--default-ttl-ms",
                &ttl,
            ],
        )
    };
    let mut registry_a = replica("registry-a");
    let mut registry_b = replica("registry-b");
    let registries = format!("{},{}", registry_a.listen_addr(), registry_b.listen_addr());
    let (mut dispatcher_proc, dispatcher_addr) = dispatcher_for(&registries, &[]);
    let ledger_arg = ledger_path.to_str().expect("utf-8 path").to_owned();
    let _executors: Vec<Proc> = (0..3)
        .map(|i| {
            example(
                "acceptance",
                &registries,
                &[
                    "--ttl-ms",
                    &ttl,
                    "--ledger",
                    &ledger_arg,
                    "--executor-id",
                    &format!("etcd-replica-{i}"),
                ],
            )
        })
        .collect();
    let mut client = dispatcher(&dispatcher_addr);
    until_listed(
        &mut client,
        &["acc_charge", "acc_echo"],
        Duration::from_secs(10),
    )
    .await;
    let replicas: Vec<String> = (0..3).map(|i| format!("etcd-replica-{i}")).collect();
    let registry_b_addr = registry_b.listen_addr();
    all_healthy(&registry_b_addr, &replicas, Duration::from_secs(10)).await;

    let calls = Arc::new(Mutex::new(Vec::new()));
    let started = Instant::now();
    let stop = started + Duration::from_secs(12);
    let callers: Vec<_> = (0..CALLERS)
        .map(|n| tokio::spawn(caller(dispatcher_addr.clone(), stop, calls.clone(), n)))
        .collect();
    let at = |secs: f64| tokio::time::sleep_until((started + Duration::from_secs_f64(secs)).into());
    let mut faults: Vec<(String, String)> = Vec::new();
    at(3.0).await;
    registry_a.kill9();
    faults.push((
        "SIGKILL registry-a".into(),
        "the dispatcher follows registry-b".into(),
    ));
    at(6.0).await;
    let etcd = toolmesh_etcd::Client::from_url(&store).expect("etcd client");
    let mut leader = None;
    for i in 0..cluster.len() {
        if let Ok(status) = etcd.status(&cluster.client_url(i)).await
            && status.header.is_some_and(|h| h.member_id == status.leader)
        {
            leader = Some(i);
        }
    }
    let leader = leader.expect("an etcd leader");
    cluster.kill(leader).await;
    faults.push((
        format!("SIGKILL etcd m{leader}"),
        "leader; a new one is elected".into(),
    ));
    for handle in callers {
        handle.await.unwrap();
    }
    let faults_over = Instant::now();
    until_listed(
        &mut client,
        &["acc_charge", "acc_echo", "acc_panic", "acc_sleep"],
        Duration::from_millis(2 * TTL_MS),
    )
    .await;
    let recovered = faults_over.elapsed();
    all_healthy(&registry_b_addr, &replicas, Duration::from_secs(5)).await;
    assert!(
        registry_b.alive(),
        "the surviving registry replica did not crash"
    );
    assert!(dispatcher_proc.alive(), "the dispatcher did not crash");
    let calls = calls.lock().unwrap().clone();
    let ledger = ledger(&ledger_path);
    report_and_check(&calls, &ledger, &faults, recovered, None);
}

/// A tool's only executor, starved of CPU (stopped outright, the extreme
/// case) long enough for calls to fail at the tool's own timeout, is never
/// ejected: once it runs again the next call reaches it and the tool stays
/// listed, instead of answering fast failures until an ejection (30 s)
/// ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_starved_only_executor_is_no_dead_end() {
    let mesh = acceptance(&[], &[]).await;
    let mut client = mesh.client.clone();
    let nap = r#"{"ms": 10}"#;
    assert_eq!(code(&invoke(&mut client, "acc_sleep", nap, None).await), 0);
    mesh.exec.signal(libc::SIGSTOP);
    // acc_sleep's own timeout is 1 s: each of these fails there, which
    // counts against the instance (more than the 5 failures that eject).
    for _ in 0..6 {
        let starved = invoke(&mut client, "acc_sleep", nap, None).await;
        assert_ne!(code(&starved), 0, "a stopped executor answered");
    }
    mesh.exec.signal(libc::SIGCONT);
    let back = invoke(&mut client, "acc_sleep", nap, Some(Duration::from_secs(20))).await;
    assert_eq!(code(&back), 0, "{}", message(&back));
    let names = listed(&mut client).await.unwrap();
    assert!(names.iter().any(|n| n == "acc_sleep"), "{names:?}");
}
