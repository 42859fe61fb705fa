//! The whole benchmark in its quick form against the `toolmesh` binary of
//! this build profile: every phase runs, the report prints and serialises,
//! and no process the bench started is left running.

use toolmesh_bench::{BenchOptions, NginxStatus, Upstream, Verdict};
use toolmesh_testkit::{fixture_bin, toolmesh_bin};

/// Each test checks that nothing it started is left running among this
/// process's children, so they run one at a time.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Processes (not zombies) whose parent is this test process.
fn live_children() -> Vec<String> {
    let me = std::process::id().to_string();
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // pid (comm) state ppid …; comm may contain spaces, so split after ')'.
        let Some((head, rest)) = stat.rsplit_once(')') else {
            continue;
        };
        let fields: Vec<&str> = rest.split_whitespace().collect();
        if fields.get(1) == Some(&me.as_str()) && fields.first() != Some(&"Z") {
            found.push(head.to_owned());
        }
    }
    found
}

/// A quick run measures every part, judges every target, writes its JSON,
/// and cleans up after itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quick_run_end_to_end() {
    let _alone = ONE_AT_A_TIME.lock().await;
    let json =
        std::env::temp_dir().join(format!("toolmesh-bench-quick-{}.json", std::process::id()));
    let report = toolmesh_bench::run(BenchOptions {
        toolmesh_exe: toolmesh_bin(),
        fixture_exe: fixture_bin(),
        // Drop guards only: what this test checks is that they clean up.
        parent_death: None,
        quick: true,
        json: Some(json.clone()),
    })
    .await
    .expect("the quick bench runs");
    let text = report.to_string();
    println!("{text}");

    for heading in [
        "1. Per-call overhead",
        "2. Registry scale",
        "3. Freshness",
        "4. Stores side by side",
        "Executor SDK",
        "MCP bridge",
        "5. Result cache",
        "Targets",
    ] {
        assert!(text.contains(heading), "{heading} missing");
    }
    assert_eq!(report.overhead.sizes.len(), 2);
    for size in &report.overhead.sizes {
        assert!(size.latency.direct.calls > 0 && size.latency.toolmesh.calls > 0);
        assert_eq!(size.latency.toolmesh.errors, 0, "{}", size.label);
        // One call in flight (the CPU a latency-target call costs), 32, 128.
        let in_flight: Vec<usize> = size
            .throughput
            .iter()
            .map(|r| r.toolmesh.in_flight)
            .collect();
        assert_eq!(in_flight, [1, 32, 128]);
        assert!(size.json_work_us > 0.0, "{}", size.label);
        for row in &size.throughput {
            assert!(row.direct.calls_per_sec > 0.0 && row.toolmesh.calls_per_sec > 0.0);
        }
    }
    assert_eq!(
        report.scale.large.list_tools.listed,
        report.scale.large.tools
    );
    assert_eq!(report.freshness.sigkill_to_unlisted.samples_ms.len(), 2);
    // p50 and p99 per size, throughput per size and setting, the mTLS
    // row's p50, p99 and throughput, the SDK's three, one per bridged path
    // (MCP over stdio and over HTTP, gRPC, OpenAPI), one per JWT algorithm,
    // then publish and the two freshness targets.
    assert_eq!(report.targets.len(), 4 + 4 + 3 + 3 + 4 + 2 + 3);
    // The mTLS row: every target answered every call, nginx included.
    let mtls = report.overhead.mtls.as_ref().expect("the mTLS row");
    assert!(text.contains("mTLS: the same call with mutual TLS on both hops"));
    assert!(
        matches!(mtls.nginx, NginxStatus::Measured { .. }),
        "nginx was not measured with TLS: {:?}",
        mtls.nginx
    );
    let nginx = mtls
        .latency
        .nginx
        .as_ref()
        .expect("nginx measured over TLS");
    for (target, l) in [
        ("direct", &mtls.latency.direct),
        ("nginx", nginx),
        ("toolmesh", &mtls.latency.toolmesh),
    ] {
        assert!(l.calls > 0 && l.errors == 0, "mTLS {target}: {l:?}");
    }
    let at_32: Vec<usize> = mtls
        .throughput
        .iter()
        .map(|r| r.toolmesh.in_flight)
        .collect();
    assert_eq!(at_32, [32]);
    assert!(mtls.throughput[0].toolmesh.calls_per_sec > 0.0);
    assert_eq!(mtls.throughput[0].toolmesh.errors, 0);
    // The JWT row: both static-token callers and both JWT callers answered
    // every call (a refused token would count as an error), and each was
    // identified in process (a refusal there fails the run).
    let jwt = report.overhead.jwt.as_ref().expect("the JWT row");
    for (caller, l) in [
        ("static token", &jwt.latency.static_token),
        ("long token", &jwt.latency.long_token),
        ("RS256", &jwt.latency.rs256),
        ("ES256", &jwt.latency.es256),
    ] {
        assert!(l.calls > 0 && l.errors == 0, "JWT row, {caller}: {l:?}");
    }
    assert!(jwt.throughput.es256.calls_per_sec > 0.0 && jwt.throughput.es256.errors == 0);
    let identify = jwt.identify_us;
    for us in [
        identify.static_token,
        identify.long_token,
        identify.rs256,
        identify.es256,
    ] {
        assert!(us > 0.0 && us.is_finite(), "{identify:?}");
    }
    let sdk = report.overhead.sdk.as_ref().expect("the SDK row");
    assert!(sdk.latency.iter().all(|l| l.calls > 0 && l.errors == 0));
    // Every path of every bridge row answered every call: the MCP row
    // over stdio and Streamable HTTP, the gRPC and OpenAPI rows over theirs.
    let rows: Vec<_> = report.overhead.bridges.iter().map(|b| b.upstream).collect();
    assert_eq!(rows, [Upstream::Mcp, Upstream::Grpc, Upstream::Openapi]);
    for bridge in &report.overhead.bridges {
        let over: Vec<&str> = bridge.latency.bridged.iter().map(|b| b.over).collect();
        let expected: &[&str] = match bridge.upstream {
            Upstream::Mcp => &["stdio", "Streamable HTTP"],
            Upstream::Grpc => &["gRPC"],
            Upstream::Openapi => &["HTTP"],
        };
        assert_eq!(over, expected, "{:?}", bridge.upstream);
        let lat = &bridge.latency;
        let paths = std::iter::once(("native", &lat.native))
            .chain(lat.bridged.iter().map(|b| (b.over, &b.figure)))
            .chain(std::iter::once(("direct", &lat.direct)));
        for (path, l) in paths {
            assert!(
                l.calls > 0 && l.errors == 0,
                "{:?} {path}: {l:?}",
                bridge.upstream
            );
        }
        let t = &bridge.throughput;
        assert!(t.bridged.iter().all(|b| b.figure.calls_per_sec > 0.0));
        assert!(t.bridged.iter().all(|b| b.figure.errors == 0));
        // The target is judged for each bridged path.
        for b in &lat.bridged {
            let name = format!("{} bridge ({})", bridge.upstream.label(), b.over);
            assert!(
                report.targets.iter().any(|t| t.name.starts_with(&name)),
                "no target for {name}"
            );
        }
    }
    assert_eq!(report.stores.embedded.len(), 2);
    // etcd is part of the comparison too: scripts/prepare/etcd.sh installs it.
    assert_eq!(
        report.stores.etcd.len(),
        2,
        "the etcd store was not measured ({:?}): run the tests with scripts/test",
        report.stores.etcd_missing
    );
    assert!(report.stores.failover.is_some());
    let cache = &report.cache.latency;
    assert!(cache.hit.latency.calls > 0 && cache.miss.latency.calls > 0);
    assert_eq!(cache.hit.executions, 0, "every hit answered from the cache");
    assert_eq!(cache.miss.executions, cache.miss.latency.calls as u64);
    let ratios: Vec<f64> = report
        .cache
        .hit_ratios
        .iter()
        .map(|r| r.hit_ratio)
        .collect();
    assert_eq!(ratios, [0.0, 0.5, 0.9]);
    for row in &report.cache.hit_ratios {
        assert!(row.throughput.calls_per_sec > 0.0 && row.throughput.errors == 0);
        // Hot and cold keys are spread evenly: the saving is the ratio.
        assert!((row.load_saved - row.hit_ratio).abs() < 0.01, "{row:?}");
    }
    // nginx is part of the comparison: scripts/prepare/nginx.sh installs it,
    // and a run without it fails here rather than quietly leaving it out.
    assert!(
        matches!(report.overhead.nginx, NginxStatus::Measured { .. }),
        "nginx was not measured ({:?}): run the tests with scripts/test, whose scripts/prepare/nginx.sh installs it",
        report.overhead.nginx
    );
    assert!(report.overhead.sizes[0].latency.nginx.is_some());
    // CPU per call: every target's executor spends some, a proxy in front
    // spends some, a direct call has no proxy.
    for size in &report.overhead.sizes {
        for t in &size.throughput {
            let nginx = t.nginx.as_ref().expect("nginx measured");
            for (target, cpu) in [
                ("toolmesh", &t.toolmesh.cpu_us_per_call),
                ("nginx", &nginx.cpu_us_per_call),
            ] {
                assert!(
                    cpu.len() == 2 && cpu[0] > 0.0 && cpu[1] > 0.0,
                    "{target}: {cpu:?}"
                );
            }
            assert_eq!(t.direct.cpu_us_per_call.first(), Some(&0.0));
            assert!(t.direct.cpu_us_per_call[1] > 0.0, "{:?}", t.direct);
        }
        // This test binary's allocator does not count: said, not zero.
        assert_eq!(size.allocations, None);
    }
    assert!(
        report
            .targets
            .iter()
            .filter(|t| t.name.contains("nginx"))
            .all(|t| t.verdict != Verdict::NotMeasured)
    );

    let written: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).expect("JSON report written"))
            .expect("valid JSON");
    let _ = std::fs::remove_file(&json);
    assert_eq!(written["quick"], true);
    assert!(written["overhead"]["sizes"][1]["latency"]["toolmesh"]["p50_us"].is_number());
    assert!(written["scale"]["publish_ratio"].is_number());
    assert!(written["cache"]["hit_ratios"][2]["load_saved"].is_number());

    let children = live_children();
    assert!(children.is_empty(), "left running: {children:?}");
}

/// `bench compare` in its quick form, this build against itself: both
/// stands answer every call at every size and setting, serve's CPU is
/// measured for each, the report prints both columns and their ratio, and
/// nothing it started is left running.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compare_runs_two_builds_taking_turns() {
    let _alone = ONE_AT_A_TIME.lock().await;
    let report = toolmesh_bench::run_compare(toolmesh_bench::CompareOptions {
        baseline_exe: toolmesh_bin(),
        toolmesh_exe: toolmesh_bin(),
        fixture_exe: fixture_bin(),
        quick: true,
        json: None,
        parent_death: None,
    })
    .await
    .expect("the comparison runs");
    let text = report.to_string();
    println!("{text}");
    assert_eq!(report.rounds, 2);
    let sizes: Vec<usize> = report.sizes.iter().map(|s| s.argument_bytes).collect();
    assert!(sizes[0] < 1_000 && sizes[1] > 9_000, "{sizes:?}");
    for size in &report.sizes {
        for latency in &size.latency {
            assert!(latency.calls > 0 && latency.errors == 0, "{latency:?}");
        }
        let in_flight: Vec<usize> = size.throughput.iter().map(|t| t[0].in_flight).collect();
        assert_eq!(in_flight, [1, 32, 128]);
        for build in size.throughput.iter().flatten() {
            assert!(build.calls_per_sec > 0.0 && build.errors == 0, "{build:?}");
            assert!(build.cpu_us_per_call[0] > 0.0, "serve's CPU: {build:?}");
        }
    }
    for row in ["baseline", "this build", "x baseline", "serve CPU/call @32"] {
        assert!(text.contains(row), "{row} missing");
    }
    let children = live_children();
    assert!(children.is_empty(), "left running: {children:?}");
}
