//! The report: every figure (serialisable to JSON), the targets judged
//! from them, and the tables people read.

use crate::bridge::{BridgeRow, ByUpstream, Upstream};
use crate::cache::{AtHitRatio, ByPath, CacheSeries, ResultCache};
use crate::freshness::{Freshness, Series};
use crate::jwt::{ByCredential, JwtRow, MAX_JWT_SLOWDOWN};
use crate::load::Throughput;
use crate::machine::{Build, Machine};
use crate::overhead::{ByDoor, ByTarget, McpRow, Overhead, SdkRow, SizeResult};
use crate::scale::{AtSize, Scale};
use crate::stats::Latency;
use crate::stores::{StoreAtSize, Stores};
use serde::Serialize;
use std::fmt::{self, Write as _};

/// The outcome of one target.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Met in this run.
    Pass,
    /// Missed in this run.
    Miss,
    /// Could not be judged (for example nginx is not installed).
    NotMeasured,
}

impl Verdict {
    pub(crate) fn label(self) -> &'static str {
        match self {
            Verdict::Pass => "MET ",
            Verdict::Miss => "MISS",
            Verdict::NotMeasured => "n/a ",
        }
    }

    pub(crate) fn of(pass: bool) -> Verdict {
        if pass { Verdict::Pass } else { Verdict::Miss }
    }
}

/// One target from the issue, judged against this run's figures.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Target {
    /// What is promised.
    pub name: String,
    /// Whether this run met it.
    pub verdict: Verdict,
    /// The figures compared.
    pub detail: String,
}

/// Everything one run measured. `Display` prints the tables; serde gives
/// the same figures as JSON.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    /// When, where and with which binaries.
    pub machine: Machine,
    /// Whether this was the short smoke-test run.
    pub quick: bool,
    /// Wall time of the whole run, in s.
    pub elapsed_secs: f64,
    /// 1. Per-call overhead.
    pub overhead: Overhead,
    /// 2. Registry scale.
    pub scale: Scale,
    /// 3. Freshness.
    pub freshness: Freshness,
    /// 4. The embedded and the etcd store side by side.
    pub stores: Stores,
    /// 5. The result cache: hit latency and executor load saved.
    pub cache: ResultCache,
    /// The targets, judged.
    pub targets: Vec<Target>,
    /// How to read the figures, and anything odd in this run.
    pub notes: Vec<String>,
}

/// What each part of a run measured.
#[derive(Debug)]
pub(crate) struct Parts {
    pub(crate) overhead: Overhead,
    pub(crate) scale: Scale,
    pub(crate) freshness: Freshness,
    pub(crate) stores: Stores,
    pub(crate) cache: ResultCache,
}

impl Report {
    /// Assembles the report and judges the targets.
    pub(crate) fn new(machine: Machine, quick: bool, elapsed_secs: f64, parts: Parts) -> Report {
        let Parts {
            overhead,
            scale,
            freshness,
            stores,
            cache,
        } = parts;
        let targets = targets(&overhead, &scale, &freshness);
        let mut notes = notes(&machine, &overhead);
        notes.extend(cache_note(&cache));
        Report {
            machine,
            quick,
            elapsed_secs,
            overhead,
            scale,
            freshness,
            stores,
            cache,
            targets,
            notes,
        }
    }

    /// Whether every target that could be judged passed.
    pub fn all_pass(&self) -> bool {
        self.targets.iter().all(|t| t.verdict != Verdict::Miss)
    }
}

/// Judges the targets.
pub(crate) fn targets(overhead: &Overhead, scale: &Scale, freshness: &Freshness) -> Vec<Target> {
    let mut out = Vec::new();
    let nginx_missing = overhead.nginx.describe();
    for size in &overhead.sizes {
        out.extend(latency_targets(&size.label, &size.latency, &nginx_missing));
    }
    for size in &overhead.sizes {
        out.extend(throughput_targets(
            &size.label,
            &size.throughput,
            &nginx_missing,
        ));
    }
    if let Some(mtls) = &overhead.mtls {
        let label = "mTLS on both hops";
        let nginx_missing = mtls.nginx.describe();
        out.extend(latency_targets(label, &mtls.latency, &nginx_missing));
        out.extend(throughput_targets(label, &mtls.throughput, &nginx_missing));
    }
    if let Some(jwt) = &overhead.jwt {
        out.extend(jwt_targets(jwt));
    }
    if let Some(sdk) = &overhead.sdk {
        out.extend(sdk_targets(sdk));
    }
    if let Some(mcp) = &overhead.mcp {
        for bridge in &overhead.bridges {
            out.extend(bridge_targets(bridge, mcp));
        }
    }
    out.push(Target {
        name: format!(
            "publish at {} tools <= 2x publish at {}",
            thousands(scale.large.tools as u64),
            thousands(scale.small.tools as u64)
        ),
        verdict: Verdict::of(scale.publish_ratio <= 2.0),
        detail: format!(
            "{} vs {} per register+deregister ({})",
            fmt_us(scale.large.publish.change_us),
            fmt_us(scale.small.publish.change_us),
            fmt_ratio(scale.publish_ratio)
        ),
    });
    out.push(series_target(
        "SIGKILL -> de-exposed < 1 s",
        &freshness.sigkill_to_unlisted,
        1000.0,
    ));
    out.push(series_target(
        "NOT_SERVING -> de-exposed < 100 ms",
        &freshness.not_serving_to_unlisted,
        100.0,
    ));
    out
}

/// toolmesh's p50 and p99 at concurrency 1 against nginx's (`label`
/// names the row); not judged without nginx (`nginx_missing` says why).
fn latency_targets(label: &str, latency: &ByTarget<Latency>, nginx_missing: &str) -> Vec<Target> {
    type Pick = fn(&Latency) -> f64;
    let percentiles: [(&str, Pick); 2] = [("p50", |l| l.p50_us), ("p99", |l| l.p99_us)];
    percentiles
        .into_iter()
        .map(|(which, pick)| {
            let name = format!("toolmesh {which} at concurrency 1 <= nginx's ({label})");
            let tm = pick(&latency.toolmesh);
            match &latency.nginx {
                Some(nginx) => Target {
                    name,
                    verdict: Verdict::of(tm <= pick(nginx)),
                    detail: format!(
                        "{} vs {} ({})",
                        fmt_us(tm),
                        fmt_us(pick(nginx)),
                        fmt_ratio(tm / pick(nginx))
                    ),
                },
                None => Target {
                    name,
                    verdict: Verdict::NotMeasured,
                    detail: nginx_missing.to_owned(),
                },
            }
        })
        .collect()
}

/// toolmesh's calls/s against nginx's at each number in flight above 1
/// (one call in flight is the latency targets' CPU figure, not a
/// throughput target).
fn throughput_targets(
    label: &str,
    throughput: &[ByTarget<Throughput>],
    nginx_missing: &str,
) -> Vec<Target> {
    throughput
        .iter()
        .filter(|r| r.toolmesh.in_flight > 1)
        .map(|row| {
            let name = format!(
                "toolmesh calls/s at {} in flight >= nginx's ({label})",
                row.toolmesh.in_flight
            );
            let tm = row.toolmesh.calls_per_sec;
            match &row.nginx {
                Some(nginx) => Target {
                    name,
                    verdict: Verdict::of(tm >= nginx.calls_per_sec),
                    detail: format!(
                        "{} vs {} ({})",
                        fmt_rate(tm),
                        fmt_rate(nginx.calls_per_sec),
                        fmt_ratio(tm / nginx.calls_per_sec)
                    ),
                },
                None => Target {
                    name,
                    verdict: Verdict::NotMeasured,
                    detail: nginx_missing.to_owned(),
                },
            }
        })
        .collect()
}

/// The SDK may cost at most this much latency over a hand-written server…
const SDK_MAX_LATENCY_RATIO: f64 = 1.25;
/// …and keep at least this share of its throughput.
const SDK_MIN_THROUGHPUT_RATIO: f64 = 0.8;

/// The executor SDK against the hand-written tonic echo.
fn sdk_targets(sdk: &SdkRow) -> Vec<Target> {
    let [s, r] = &sdk.latency;
    let mut out = vec![Target {
        name: format!(
            "executor SDK p50 at concurrency 1 <= {SDK_MAX_LATENCY_RATIO}x hand-written tonic"
        ),
        verdict: Verdict::of(s.p50_us <= SDK_MAX_LATENCY_RATIO * r.p50_us),
        detail: format!(
            "{} vs {} ({})",
            fmt_us(s.p50_us),
            fmt_us(r.p50_us),
            fmt_ratio(s.p50_us / r.p50_us)
        ),
    }];
    // One call in flight is the latency target's; throughput targets start above.
    for [s, r] in sdk.throughput.iter().filter(|[s, _]| s.in_flight > 1) {
        out.push(Target {
            name: format!(
                "executor SDK calls/s at {} in flight >= {SDK_MIN_THROUGHPUT_RATIO}x hand-written tonic",
                s.in_flight
            ),
            verdict: Verdict::of(s.calls_per_sec >= SDK_MIN_THROUGHPUT_RATIO * r.calls_per_sec),
            detail: format!(
                "{} vs {} ({})",
                fmt_rate(s.calls_per_sec),
                fmt_rate(r.calls_per_sec),
                fmt_ratio(s.calls_per_sec / r.calls_per_sec)
            ),
        });
    }
    out
}

/// What the MCP door adds to gRPC Invoke, p50 at concurrency 1 (HTTP/1.1):
/// what a bridge may add at most.
fn door_adds_us(mcp: &McpRow) -> f64 {
    mcp.latency.mcp_http1.p50_us - mcp.latency.invoke.p50_us
}

/// The bridge may add to a call no more than the MCP door adds to gRPC
/// Invoke (p50 at concurrency 1, the door over HTTP/1.1): for each way the
/// bridge reaches its upstream, bridged minus the SDK executor through the
/// row's own door.
fn bridge_targets(bridge: &BridgeRow, mcp: &McpRow) -> Vec<Target> {
    let door_adds = door_adds_us(mcp);
    let native = bridge.latency.native.p50_us;
    let kind = bridge.upstream.label();
    bridge
        .latency
        .bridged
        .iter()
        .map(|bridged| {
            let adds = bridged.figure.p50_us - native;
            Target {
                name: format!(
                    "{kind} bridge ({}) adds <= what the MCP door adds, p50 at concurrency 1",
                    bridged.over
                ),
                verdict: Verdict::of(adds <= door_adds),
                detail: format!(
                    "{} over the SDK executor vs {} MCP over gRPC Invoke",
                    fmt_delta_us(adds),
                    fmt_delta_us(door_adds)
                ),
            }
        })
        .collect()
}

fn series_target(name: &str, series: &Series, limit_ms: f64) -> Target {
    let n = series.samples_ms.len();
    Target {
        name: format!("{name} (max of {n})"),
        verdict: Verdict::of(n > 0 && series.timeouts == 0 && series.max_ms < limit_ms),
        detail: format!(
            "max {}, median {}{}",
            fmt_ms(series.max_ms),
            fmt_ms(series.median_ms),
            timeouts(series)
        ),
    }
}

fn timeouts(series: &Series) -> String {
    match series.timeouts {
        0 => String::new(),
        n => format!(", {n} timed out after {}", fmt_ms(series.limit_ms)),
    }
}

/// How to read the figures, and warnings about this run.
fn notes(machine: &Machine, overhead: &Overhead) -> Vec<String> {
    let mut notes = vec![
        format!(
            "The load generator, the servers and nginx share this machine's {} cores: every figure includes the client's own cost, and at saturation the targets compete for CPU.",
            machine.nproc
        ),
        "x direct / x nginx is the figure divided by direct's / nginx's: for latency lower is better, for calls/s higher is better.".to_owned(),
        "toolmesh = `toolmesh serve` (registry+dispatcher in one process, serving gRPC thread per core, its default); the dispatcher parses and validates the arguments against the tool's schema before calling the executor, which (SDK) parses and validates them again; the executor is the same process in all three columns.".to_owned(),
        "nginx: 1 worker, HTTP/2 listener, grpc_pass to an upstream with keepalive 512 and keepalive_requests 1000000 (nginx does not multiplex upstream gRPC streams: one upstream connection per call in flight).".to_owned(),
    ];
    for size in &overhead.sizes {
        if let Some(note) = nagle_note(size) {
            notes.push(note);
        }
    }
    for size in &overhead.sizes {
        let mut failed = Vec::new();
        let mut add = |who: &str, errors: u64| {
            if errors > 0 {
                failed.push(format!("{who} {errors}"));
            }
        };
        add("direct", size.latency.direct.errors as u64);
        add("toolmesh", size.latency.toolmesh.errors as u64);
        if let Some(n) = size.latency.nginx {
            add("nginx", n.errors as u64);
        }
        for row in &size.throughput {
            add(
                &format!("direct@{}", row.direct.in_flight),
                row.direct.errors,
            );
            add(
                &format!("toolmesh@{}", row.toolmesh.in_flight),
                row.toolmesh.errors,
            );
            if let Some(n) = &row.nginx {
                add(&format!("nginx@{}", n.in_flight), n.errors);
            }
        }
        if !failed.is_empty() {
            notes.push(format!(
                "WARNING: failed calls ({}): {}; they are left out of the figures.",
                size.label,
                failed.join(", ")
            ));
        }
    }
    notes
}

/// A warning when calls of the result-cache part failed: they are left
/// out of its latency and calls/s, but not out of its executions per call.
fn cache_note(cache: &ResultCache) -> Option<String> {
    let l = &cache.latency;
    let mut failed: Vec<String> = [("hit", &l.hit), ("miss", &l.miss), ("direct", &l.direct)]
        .iter()
        .filter(|(_, s)| s.latency.errors > 0)
        .map(|(name, s)| format!("{name} {}", s.latency.errors))
        .collect();
    failed.extend(
        cache
            .hit_ratios
            .iter()
            .filter(|r| r.throughput.errors > 0)
            .map(|r| format!("{:.0} % hits {}", r.hit_ratio * 100.0, r.throughput.errors)),
    );
    (!failed.is_empty()).then(|| {
        format!(
            "WARNING: failed calls (result cache): {}; they are left out of the latency and calls/s figures.",
            failed.join(", ")
        )
    })
}

/// A warning when toolmesh's median sits near 40 ms while a direct call
/// takes well under 5 ms: the signature of Nagle's algorithm meeting the
/// peer's delayed ACK on a socket without TCP_NODELAY.
pub(crate) fn nagle_note(size: &SizeResult) -> Option<String> {
    let (tm, direct) = (size.latency.toolmesh.p50_us, size.latency.direct.p50_us);
    (tm >= 30_000.0 && direct < 5_000.0).then(|| format!(
        "WARNING ({} arguments): toolmesh's p50 is {} while a direct call takes {}; a median near 40 ms is the signature of Nagle's algorithm meeting delayed ACKs: a toolmesh server is answering on sockets without TCP_NODELAY (tonic ignores Server::tcp_nodelay for serve_with_incoming*; wrap the listener in TcpIncoming::from(listener).with_nodelay(Some(true))).",
        size.label,
        fmt_us(tm),
        fmt_us(direct)
    ))
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let m = &self.machine;
        m.heading(f, "toolmesh bench")?;
        writeln!(
            f,
            "toolmesh  {} ({})",
            m.toolmesh_exe,
            m.toolmesh_build.describe()
        )?;
        writeln!(
            f,
            "bench     {}{}, took {:.0} s",
            m.bench_build.describe(),
            if self.quick { ", QUICK run" } else { "" },
            self.elapsed_secs
        )?;
        writeln!(f, "nginx     {}", self.overhead.nginx.describe())?;
        for (who, build) in [
            ("the toolmesh binary", m.toolmesh_build),
            ("the bench", m.bench_build),
        ] {
            match build {
                Build::Release => {}
                Build::Debug => writeln!(
                    f,
                    "!!! WARNING: {who} is a DEBUG build: these figures say nothing about toolmesh. Build with `cargo build --release -p toolmesh-cli`. !!!"
                )?,
                Build::Unknown => writeln!(
                    f,
                    "!!! WARNING: cannot tell whether {who} is a release build. !!!"
                )?,
            }
        }
        if self.quick {
            writeln!(f, "(quick run: short series, for a smoke test only)")?;
        }
        writeln!(f)?;
        write_overhead(f, &self.overhead)?;
        write_scale(f, &self.scale)?;
        write_freshness(f, &self.freshness)?;
        write_stores(f, &self.stores)?;
        write_cache(f, &self.cache)?;
        writeln!(f, "Targets")?;
        let width = self.targets.iter().map(|t| t.name.len()).max().unwrap_or(0);
        for t in &self.targets {
            writeln!(
                f,
                "  {}  {:<width$}  {}",
                t.verdict.label(),
                t.name,
                t.detail
            )?;
        }
        writeln!(f)?;
        writeln!(f, "Notes")?;
        for note in &self.notes {
            writeln!(f, "  - {note}")?;
        }
        Ok(())
    }
}

fn write_overhead(f: &mut fmt::Formatter<'_>, o: &Overhead) -> fmt::Result {
    writeln!(
        f,
        "1. Per-call overhead: acc_echo, one HTTP/2 channel per target, the targets taking turns in {} round(s); latency over {} calls at concurrency 1 (pooled) after {} warm-up calls; calls/s = median of the rounds' windows, {} of measuring in all, each window after {} of warm-up",
        o.rounds,
        o.latency_calls,
        o.warmup_calls,
        fmt_ms(o.throughput_window_ms),
        fmt_ms(o.throughput_warmup_ms)
    )?;
    for size in &o.sizes {
        writeln!(f)?;
        writeln!(
            f,
            "   {} arguments ({})",
            size.label,
            fmt_bytes(size.argument_bytes as f64)
        )?;
        write!(f, "{}", overhead_table(size))?;
        if let Some(line) = proxy_cpu_line(size) {
            writeln!(f, "{line}")?;
        }
        writeln!(
            f,
            "   the dispatcher's JSON work on these arguments: {} per call with the schema's fast shape, {} on the full path (tree refusing duplicate keys, then jsonschema); measured in this process",
            fmt_us(size.json_work_us),
            fmt_us(size.json_full_us)
        )?;
        match &size.allocations {
            Some(a) => writeln!(
                f,
                "   heap allocations per call, counted in this process at concurrency 1: the dispatcher's pipeline in process (its gRPC call to the executor included) {:.0} ({}), beside a tonic client calling the executor directly {:.0} ({})",
                a.pipeline.allocations,
                fmt_bytes(a.pipeline.bytes),
                a.direct_client.allocations,
                fmt_bytes(a.direct_client.bytes)
            )?,
            None => writeln!(
                f,
                "   heap allocations per call: not counted (this build's allocator does not count; `toolmesh bench` counts)"
            )?,
        }
    }
    if let Some(mcp) = &o.mcp {
        writeln!(f)?;
        writeln!(
            f,
            "   MCP door: the same call as JSON-RPC `tools/call` at /mcp ({} arguments), beside gRPC Invoke on the same dispatcher",
            fmt_bytes(mcp.argument_bytes as f64)
        )?;
        write!(f, "{}", mcp_table(mcp))?;
    }
    if let Some(sdk) = &o.sdk {
        writeln!(f)?;
        writeln!(
            f,
            "   Executor SDK: the fixture's acc_echo called directly, beside a hand-written tonic server doing the same echo ({} arguments)",
            fmt_bytes(sdk.argument_bytes as f64)
        )?;
        write!(f, "{}", sdk_table(sdk))?;
    }
    for bridge in &o.bridges {
        writeln!(f)?;
        writeln!(
            f,
            "   {}{}",
            bridge_heading(bridge),
            o.mcp.as_ref().map_or(String::new(), |mcp| format!(
                "; the MCP door adds {} over gRPC Invoke in this run",
                fmt_delta_us(door_adds_us(mcp))
            ))
        )?;
        write!(f, "{}", bridge_table(bridge))?;
    }
    if let Some(mtls) = &o.mtls {
        writeln!(f)?;
        writeln!(
            f,
            "   mTLS: the same call with mutual TLS on both hops ({} arguments): toolmesh (agent -> dispatcher -> executor, client certificates required on each), nginx ({}: TLS listener requiring client certificates, grpc_pass grpcs:// presenting one), and the executor called directly over TLS",
            fmt_bytes(mtls.argument_bytes as f64),
            mtls.nginx.describe()
        )?;
        write!(f, "{}", figures_table(&mtls.latency, &mtls.throughput))?;
    }
    if let Some(jwt) = &o.jwt {
        writeln!(f)?;
        writeln!(
            f,
            "   JWT callers: the same call through toolmesh serve ({} arguments) by one caller presenting a static [[callers]] token, a static token as long as the RS256 JWT, an RS256 and an ES256 JWT of an [[issuers]] entry whose JWKS the bench serves on 127.0.0.1 (keys fetched once, cached; CPU: serve + executor, then serve alone; identify = the caller found from its header by the same policy in this process, JWTs verified once before)",
            fmt_bytes(jwt.argument_bytes as f64)
        )?;
        write!(f, "{}", jwt_table(jwt))?;
    }
    writeln!(f)
}

/// What a bridge row measures, in a sentence.
fn bridge_heading(bridge: &BridgeRow) -> String {
    let (what, door) = match bridge.upstream {
        Upstream::Mcp => (
            "acc_echo as a plain MCP server behind `toolmesh bridge mcp` (over stdio, over Streamable HTTP)",
            "the MCP door (HTTP/1.1)",
        ),
        Upstream::Grpc => (
            "a unary Echo method of a gRPC service with server reflection behind `toolmesh bridge grpc`",
            "gRPC Invoke",
        ),
        Upstream::Openapi => (
            "POST /echo of an HTTP API serving /openapi.json behind `toolmesh bridge openapi`",
            "gRPC Invoke",
        ),
    };
    format!(
        "{} bridge: {what}, beside the SDK executor's acc_echo, each through {door}; and that server called directly ({} arguments)",
        bridge.upstream.label(),
        fmt_bytes(bridge.argument_bytes as f64)
    )
}

/// A bridge row: the SDK executor, each bridge with its ratio to it, and
/// the server called directly.
pub(crate) fn bridge_table(bridge: &BridgeRow) -> String {
    let mut header = vec!["".to_owned(), "SDK executor".to_owned()];
    for bridged in &bridge.latency.bridged {
        header.push(format!("bridge {}", bridged.over));
        header.push("x SDK".to_owned());
    }
    header.push("server direct".to_owned());
    let mut table = Table::new(header.iter().map(String::as_str).collect());
    let row = |name: String, v: ByUpstream<f64>, format: fn(f64) -> String| {
        let mut cells = vec![name, format(v.native)];
        for bridged in &v.bridged {
            cells.push(format(bridged.figure));
            cells.push(fmt_ratio(bridged.figure / v.native));
        }
        cells.push(format(v.direct));
        cells
    };
    let lat = &bridge.latency;
    let pick = |f: fn(&Latency) -> f64| lat.map(f);
    table.push(row("p50 @1".into(), pick(|l| l.p50_us), fmt_us));
    table.push(row("p99 @1".into(), pick(|l| l.p99_us), fmt_us));
    let t = &bridge.throughput;
    table.push(row(
        format!("calls/s @{}", t.native.in_flight),
        t.map(|t| t.calls_per_sec),
        fmt_rate,
    ));
    table.render("   ")
}

/// The SDK row: the SDK executor, the hand-written server, their ratio.
pub(crate) fn sdk_table(sdk: &SdkRow) -> String {
    let mut table = Table::new(vec!["", "SDK", "hand-written", "x hand-written"]);
    let row = |name: String, sdk: f64, raw: f64, format: fn(f64) -> String| {
        vec![name, format(sdk), format(raw), fmt_ratio(sdk / raw)]
    };
    let [s, r] = &sdk.latency;
    table.push(row("p50 @1".into(), s.p50_us, r.p50_us, fmt_us));
    table.push(row("p99 @1".into(), s.p99_us, r.p99_us, fmt_us));
    for [s, r] in &sdk.throughput {
        let name = format!("calls/s @{}", s.in_flight);
        table.push(row(name, s.calls_per_sec, r.calls_per_sec, fmt_rate));
    }
    table.render("   ")
}

/// The MCP row: Invoke, then MCP over HTTP/1.1 and HTTP/2, each with its
/// ratio to Invoke.
pub(crate) fn mcp_table(mcp: &McpRow) -> String {
    let mut table = Table::new(vec![
        "",
        "gRPC Invoke",
        "MCP HTTP/1.1",
        "x Invoke",
        "MCP HTTP/2",
        "x Invoke",
    ]);
    let row = |name: String, v: ByDoor<f64>, format: fn(f64) -> String| {
        vec![
            name,
            format(v.invoke),
            format(v.mcp_http1),
            fmt_ratio(v.mcp_http1 / v.invoke),
            format(v.mcp_http2),
            fmt_ratio(v.mcp_http2 / v.invoke),
        ]
    };
    let lat = &mcp.latency;
    for (name, pick) in [
        (
            "p50 @1",
            (|l| l.p50_us) as fn(&crate::stats::Latency) -> f64,
        ),
        ("p99 @1", |l| l.p99_us),
    ] {
        let v = ByDoor {
            invoke: pick(&lat.invoke),
            mcp_http1: pick(&lat.mcp_http1),
            mcp_http2: pick(&lat.mcp_http2),
        };
        table.push(row(name.to_owned(), v, fmt_us));
    }
    let t = &mcp.throughput;
    table.push(row(
        format!("calls/s @{}", t.invoke.in_flight),
        ByDoor {
            invoke: t.invoke.calls_per_sec,
            mcp_http1: t.mcp_http1.calls_per_sec,
            mcp_http2: t.mcp_http2.calls_per_sec,
        },
        fmt_rate,
    ));
    table.render("   ")
}

/// One size's table: a row per figure, a column per target and ratio.
pub(crate) fn overhead_table(size: &SizeResult) -> String {
    figures_table(&size.latency, &size.throughput)
}

/// A row per figure (latency, calls/s and CPU per call at each number in
/// flight), a column per target and ratio.
pub(crate) fn figures_table(
    latency: &ByTarget<Latency>,
    throughput: &[ByTarget<Throughput>],
) -> String {
    let with_nginx = latency.nginx.is_some();
    let mut header = vec!["", "direct"];
    if with_nginx {
        header.extend(["nginx", "x direct"]);
    }
    header.extend(["toolmesh", "x direct"]);
    if with_nginx {
        header.push("x nginx");
    }
    let mut table = Table::new(header);
    let lat = latency;
    let latency_row = |name: &str, pick: fn(&crate::stats::Latency) -> f64| {
        row(
            name,
            ByTarget {
                direct: pick(&lat.direct),
                nginx: lat.nginx.as_ref().map(pick),
                toolmesh: pick(&lat.toolmesh),
            },
            fmt_us,
        )
    };
    table.push(latency_row("p50 @1", |l| l.p50_us));
    table.push(latency_row("p90 @1", |l| l.p90_us));
    table.push(latency_row("p99 @1", |l| l.p99_us));
    for t in throughput {
        table.push(row(
            &format!("calls/s @{}", t.direct.in_flight),
            ByTarget {
                direct: t.direct.calls_per_sec,
                nginx: t.nginx.as_ref().map(|n| n.calls_per_sec),
                toolmesh: t.toolmesh.calls_per_sec,
            },
            fmt_rate,
        ));
    }
    for t in throughput {
        let total = |t: &Throughput| t.cpu_us_per_call.iter().sum::<f64>();
        if t.direct.cpu_us_per_call.is_empty() {
            continue;
        }
        table.push(row(
            &format!("CPU/call @{}", t.direct.in_flight),
            ByTarget {
                direct: total(&t.direct),
                nginx: t.nginx.as_ref().map(total),
                toolmesh: total(&t.toolmesh),
            },
            fmt_us,
        ));
    }
    table.render("   ")
}

/// What the proxy alone spends per call, from the CPU rows' parts.
fn proxy_cpu_line(size: &SizeResult) -> Option<String> {
    let proxy = |t: &Throughput| t.cpu_us_per_call.first().copied();
    let parts: Vec<String> = size
        .throughput
        .iter()
        .filter_map(|t| {
            let toolmesh = proxy(&t.toolmesh)?;
            Some(match t.nginx.as_ref().and_then(proxy) {
                Some(nginx) => format!(
                    "@{}: nginx {}, toolmesh {} ({})",
                    t.direct.in_flight,
                    fmt_us(nginx),
                    fmt_us(toolmesh),
                    fmt_ratio(toolmesh / nginx)
                ),
                None => format!("@{}: toolmesh {}", t.direct.in_flight, fmt_us(toolmesh)),
            })
        })
        .collect();
    let executor: Vec<String> = size
        .throughput
        .iter()
        .filter_map(|t| {
            let us = t.direct.cpu_us_per_call.get(1)?;
            Some(format!("@{}: {}", t.direct.in_flight, fmt_us(*us)))
        })
        .collect();
    (!parts.is_empty()).then(|| {
        format!(
            "   CPU/call = user+system time of the proxy's processes and the executor's (from /proc, over the calls/s windows) per call; the proxy alone {}; the executor per direct call {}",
            parts.join(", "),
            executor.join(", ")
        )
    })
}

fn row(name: &str, v: ByTarget<f64>, format: fn(f64) -> String) -> Vec<String> {
    let mut cells = vec![name.to_owned(), format(v.direct)];
    if let Some(n) = v.nginx {
        cells.extend([format(n), fmt_ratio(n / v.direct)]);
    }
    cells.extend([format(v.toolmesh), fmt_ratio(v.toolmesh / v.direct)]);
    if let Some(n) = v.nginx {
        cells.push(fmt_ratio(v.toolmesh / n));
    }
    cells
}

fn write_scale(f: &mut fmt::Formatter<'_>, s: &Scale) -> fmt::Result {
    writeln!(
        f,
        "2. Registry scale (in this process; watch_health off, fake endpoints, {} tools per executor)",
        s.large.tools / s.large.executors.max(1)
    )?;
    writeln!(
        f,
        "   registered {} tools over {} executors with {} gRPC clients in {:.2} s: {} registrations/s ({} tools/s)",
        thousands(s.large.tools as u64),
        thousands(s.large.executors as u64),
        s.register_clients,
        s.registration_secs,
        thousands(s.registrations_per_sec.round() as u64),
        thousands(s.tools_per_sec.round() as u64)
    )?;
    match (s.rss_before_bytes, s.rss_after_bytes, s.rss_bytes_per_tool) {
        (Some(before), Some(after), Some(per_tool)) => writeln!(
            f,
            "   resident memory {} -> {}: {} per registered tool",
            fmt_bytes(before as f64),
            fmt_bytes(after as f64),
            fmt_bytes(per_tool)
        )?,
        _ => writeln!(f, "   resident memory: /proc/self/statm not readable")?,
    }
    writeln!(f)?;
    let small = thousands(s.small.tools as u64) + " tools";
    let large = thousands(s.large.tools as u64) + " tools";
    let mut table = Table::new(vec!["", &small, &large, "ratio"]);
    let both = |name: &str, pick: fn(&AtSize) -> f64, format: fn(f64) -> String| {
        let (a, b) = (pick(&s.small), pick(&s.large));
        vec![name.to_owned(), format(a), format(b), fmt_ratio(b / a)]
    };
    table.push(both(
        "publish one change (register+deregister)",
        |a| a.publish.change_us,
        fmt_us,
    ));
    table.push(both(
        "  Registry::register (1 tool)",
        |a| a.publish.register_us,
        fmt_us,
    ));
    table.push(both(
        "  Registry::deregister",
        |a| a.publish.deregister_us,
        fmt_us,
    ));
    table.push(both(
        "change -> dispatcher in process (median)",
        |a| a.to_dispatcher_in_process.median_us,
        fmt_us,
    ));
    table.push(both(
        "change -> gRPC follower (median)",
        |a| a.to_follower_over_grpc.median_us,
        fmt_us,
    ));
    table.push(both(
        "ListTools in process, native p50",
        |a| a.list_tools.in_process_native.p50_us,
        fmt_us,
    ));
    table.push(both(
        "ListTools in process, OpenAI p50",
        |a| a.list_tools.in_process_openai.p50_us,
        fmt_us,
    ));
    table.push(both(
        "ListTools over gRPC p50",
        |a| a.list_tools.grpc_native.p50_us,
        fmt_us,
    ));
    table.push(both(
        "ListTools over gRPC p99",
        |a| a.list_tools.grpc_native.p99_us,
        fmt_us,
    ));
    table.push(both(
        "ListTools response size",
        |a| a.list_tools.response_bytes as f64,
        fmt_bytes,
    ));
    write!(f, "{}", table.render("   "))?;
    writeln!(
        f,
        "   (publish: medians of {} changes per registry after warm-up, the two registries taking turns in blocks; propagation over {} / {} changes; ListTools over {} calls; gRPC follower = follow_registry, as `toolmesh dispatcher` runs)",
        s.large.publish.changes,
        s.large.to_dispatcher_in_process.changes,
        s.large.to_follower_over_grpc.changes,
        s.large.list_tools.in_process_native.calls
    )?;
    write_paging(f, &s.paging)?;
    writeln!(f)
}

fn write_paging(f: &mut fmt::Formatter<'_>, p: &crate::Paging) -> fmt::Result {
    let pair = |l: &Latency| format!("{} / {}", fmt_us(l.p50_us), fmt_us(l.p99_us));
    writeln!(
        f,
        "   ListTools in pages at {} tools (pages of {}), p50 / p99:",
        p.tools, p.page_size
    )?;
    let rows = [
        (
            "every page (the full view), in process, native",
            &p.full_view,
        ),
        ("one page over gRPC, OpenAI shape", &p.page_grpc),
        ("first page of a new snapshot over gRPC", &p.first_page_grpc),
    ];
    for (what, latency) in rows {
        writeln!(f, "     {what:<58} {}", pair(latency))?;
    }
    writeln!(
        f,
        "     a caller seeing {} of {}, first page: names looked up {}; every tool decided {}",
        p.team_tools,
        p.tools,
        pair(&p.team_indexed),
        pair(&p.team_scanned)
    )
}

fn write_freshness(f: &mut fmt::Formatter<'_>, fr: &Freshness) -> fmt::Result {
    writeln!(
        f,
        "3. Freshness (separate processes: toolmesh registry, toolmesh dispatcher --registry, executors; ListTools polled every {}; leases {} ms)",
        fmt_ms(fr.poll_ms),
        fr.lease_ttl_ms
    )?;
    let mut table = Table::new(vec!["", "median", "max", "samples"]);
    for (name, series) in [
        ("(a) SIGKILL -> unlisted", &fr.sigkill_to_unlisted),
        ("(b) NOT_SERVING -> unlisted", &fr.not_serving_to_unlisted),
        (
            "(c) Register -> first successful Invoke",
            &fr.register_to_invocable,
        ),
    ] {
        let samples = series
            .samples_ms
            .iter()
            .map(|s| format!("{s:.1}"))
            .collect::<Vec<_>>()
            .join(", ");
        table.push(vec![
            name.to_owned(),
            fmt_ms(series.median_ms),
            fmt_ms(series.max_ms),
            format!("{samples} ms{}", timeouts(series)),
        ]);
    }
    write!(f, "{}", table.render("   "))?;
    writeln!(f)
}

fn write_stores(f: &mut fmt::Formatter<'_>, st: &Stores) -> fmt::Result {
    writeln!(
        f,
        "4. Stores side by side (each registry a `toolmesh registry` process; {} clients registering; etcd: one member on this machine)",
        st.register_clients
    )?;
    let mut table = Table::new(vec![
        "",
        "tools",
        "registrations/s",
        "change -> follower p50",
        "p99",
        "registry RSS",
        "etcd RSS",
    ]);
    let rows = |store: &str, sizes: &[StoreAtSize], table: &mut Table| {
        for at in sizes {
            table.push(vec![
                store.to_owned(),
                at.tools.to_string(),
                fmt_rate(at.registrations_per_sec),
                fmt_us(at.propagation.p50_us),
                fmt_us(at.propagation.p99_us),
                at.registry_rss_bytes
                    .map_or("-".into(), |b| fmt_bytes(b as f64)),
                at.etcd_rss_bytes
                    .map_or("-".into(), |b| fmt_bytes(b as f64)),
            ]);
        }
    };
    rows("embedded", &st.embedded, &mut table);
    rows("etcd", &st.etcd, &mut table);
    write!(f, "{}", table.render("   "))?;
    if let Some(missing) = &st.etcd_missing {
        writeln!(f, "   etcd store not measured: {missing}")?;
    }
    if let Some(failover) = &st.failover {
        let mut table = Table::new(vec!["failover on etcd", "median", "max", "samples"]);
        for (name, series) in [
            (
                "replica SIGKILL -> follower on the other replica",
                &failover.replica_kill_to_follower,
            ),
            (
                "etcd leader SIGKILL -> first Register",
                &failover.leader_kill_to_registration,
            ),
        ] {
            table.push(vec![
                name.to_owned(),
                fmt_ms(series.median_ms),
                fmt_ms(series.max_ms),
                format!("{}{}", series.samples_ms.len(), timeouts(series)),
            ]);
        }
        write!(f, "{}", table.render("   "))?;
    }
    writeln!(f)
}

fn write_cache(f: &mut fmt::Formatter<'_>, c: &ResultCache) -> fmt::Result {
    writeln!(
        f,
        "5. Result cache: {} through `toolmesh serve` whose policy caches it (TTL 10 min), the acceptance fixture counting executions in its ledger; the series taking turns in {} round(s)",
        c.tool, c.rounds
    )?;
    write!(f, "{}", cache_latency_table(&c.latency))?;
    writeln!(
        f,
        "   (concurrency 1 after {} warm-up calls each; hit = the same key every call, answered from the dispatcher's cache; miss = a key never used before every call: the dispatcher looks it up, runs the tool, stores the answer; direct = Execute on the fixture with its execute token; every execution appends a ledger line (open, write, flush), which misses and direct calls pay)",
        c.warmup_calls
    )?;
    writeln!(f)?;
    write!(f, "{}", cache_ratio_table(&c.hit_ratios))?;
    writeln!(
        f,
        "   (hit ratio = share of calls repeating one of {} hot keys answered before measuring, the others a key never used before, spread evenly; executions counted from the ledger over every call of the windows, warm-up and the calls in flight at the end included; calls/s = median of the rounds' windows, {} of measuring per ratio in all, each window after {} of warm-up)",
        c.hot_keys,
        fmt_ms(c.throughput_window_ms),
        fmt_ms(c.throughput_warmup_ms)
    )?;
    writeln!(f)
}

/// Hit, miss and direct at concurrency 1, with the hit's ratio to each.
pub(crate) fn cache_latency_table(l: &ByPath<CacheSeries>) -> String {
    let mut table = Table::new(vec![
        "",
        "cache hit",
        "miss",
        "direct",
        "hit / miss",
        "hit / direct",
    ]);
    type Pick = fn(&crate::stats::Latency) -> f64;
    let picks: [(&str, Pick); 3] = [
        ("p50 @1", |l| l.p50_us),
        ("p90 @1", |l| l.p90_us),
        ("p99 @1", |l| l.p99_us),
    ];
    for (name, pick) in picks {
        let (hit, miss, direct) = (
            pick(&l.hit.latency),
            pick(&l.miss.latency),
            pick(&l.direct.latency),
        );
        table.push(vec![
            name.to_owned(),
            fmt_us(hit),
            fmt_us(miss),
            fmt_us(direct),
            fmt_ratio(hit / miss),
            fmt_ratio(hit / direct),
        ]);
    }
    let runs = |s: &CacheSeries| {
        let calls = s.latency.calls + s.latency.errors;
        format!("{:.2}", s.executions as f64 / calls.max(1) as f64)
    };
    table.push(vec![
        "executions per call".to_owned(),
        runs(&l.hit),
        runs(&l.miss),
        runs(&l.direct),
    ]);
    table.render("   ")
}

/// One row per hit ratio: executions, load saved, calls/s and its ratio
/// to the first row's (0 %).
pub(crate) fn cache_ratio_table(rows: &[AtHitRatio]) -> String {
    let in_flight = rows.first().map_or(0, |r| r.throughput.in_flight);
    let rate = format!("calls/s @{in_flight}");
    let mut table = Table::new(vec![
        "hit ratio",
        "calls",
        "executions per 1,000 calls",
        "executor load saved",
        &rate,
        "x 0 %",
    ]);
    let base = rows
        .first()
        .map_or(f64::NAN, |r| r.throughput.calls_per_sec);
    for r in rows {
        table.push(vec![
            format!("{:.0} %", r.hit_ratio * 100.0),
            thousands(r.calls),
            format!("{:.1}", r.executions_per_1000),
            format!("{:.1} %", r.load_saved * 100.0),
            fmt_rate(r.throughput.calls_per_sec),
            fmt_ratio(r.throughput.calls_per_sec / base),
        ]);
    }
    table.render("   ")
}

/// A plain table: first column left-aligned, the rest right-aligned.
pub(crate) struct Table {
    rows: Vec<Vec<String>>,
}

impl Table {
    pub(crate) fn new(header: Vec<&str>) -> Table {
        Table {
            rows: vec![header.into_iter().map(str::to_owned).collect()],
        }
    }

    pub(crate) fn push(&mut self, row: Vec<String>) {
        self.rows.push(row);
    }

    /// Every row on its own line, each prefixed with `indent`.
    pub(crate) fn render(&self, indent: &str) -> String {
        let columns = self.rows.iter().map(Vec::len).max().unwrap_or(0);
        let widths: Vec<usize> = (0..columns)
            .map(|c| {
                self.rows
                    .iter()
                    .filter_map(|r| r.get(c))
                    .map(|cell| cell.chars().count())
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        let mut out = String::new();
        for row in &self.rows {
            let mut line = String::from(indent);
            for (c, cell) in row.iter().enumerate() {
                let pad = widths[c].saturating_sub(cell.chars().count());
                if c == 0 {
                    line.push_str(cell);
                    line.push_str(&" ".repeat(pad));
                } else {
                    line.push_str("  ");
                    line.push_str(&" ".repeat(pad));
                    line.push_str(cell);
                }
            }
            let _ = writeln!(out, "{}", line.trim_end());
        }
        out
    }
}

/// Microseconds, in the unit that reads best.
pub(crate) fn fmt_us(us: f64) -> String {
    if !us.is_finite() {
        "-".to_owned()
    } else if us < 10.0 {
        format!("{us:.1} µs")
    } else if us < 1_000.0 {
        format!("{us:.0} µs")
    } else if us < 1_000_000.0 {
        format!("{:.2} ms", us / 1e3)
    } else {
        format!("{:.2} s", us / 1e6)
    }
}

/// Milliseconds, in the unit that reads best.
/// A difference in µs with its sign: `+12 µs`, `-3.1 µs`.
pub(crate) fn fmt_delta_us(us: f64) -> String {
    let sign = if us < 0.0 { '-' } else { '+' };
    format!("{sign}{}", fmt_us(us.abs()))
}

pub(crate) fn fmt_ms(ms: f64) -> String {
    fmt_us(ms * 1e3)
}

/// A ratio such as `1.65x`; `-` when it cannot be computed.
pub(crate) fn fmt_ratio(ratio: f64) -> String {
    if ratio.is_finite() {
        format!("{ratio:.2}x")
    } else {
        "-".to_owned()
    }
}

/// Calls per second with thousands separators.
pub(crate) fn fmt_rate(per_sec: f64) -> String {
    if per_sec.is_finite() {
        format!("{}/s", thousands(per_sec.round().max(0.0) as u64))
    } else {
        "-".to_owned()
    }
}

/// Bytes in B, KiB or MiB.
pub(crate) fn fmt_bytes(bytes: f64) -> String {
    if bytes < 1024.0 {
        format!("{bytes:.0} B")
    } else if bytes < 1024.0 * 1024.0 {
        format!("{:.1} KiB", bytes / 1024.0)
    } else {
        format!("{:.1} MiB", bytes / (1024.0 * 1024.0))
    }
}

/// `12345` as `12,345`.
pub(crate) fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, ch) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(ch);
    }
    out
}

/// The row's table: a column per credential, each JWT beside the static
/// token as a ratio.
fn jwt_table(row: &JwtRow) -> String {
    let mut table = Table::new(vec![
        "",
        "static token",
        "long token",
        "x static",
        "RS256 JWT",
        "x static",
        "ES256 JWT",
        "x static",
    ]);
    let line = |name: String, v: ByCredential<f64>, format: fn(f64) -> String| {
        let mut cells = vec![name, format(v.static_token)];
        for other in [v.long_token, v.rs256, v.es256] {
            cells.push(format(other));
            cells.push(fmt_ratio(other / v.static_token));
        }
        cells
    };
    let l = &row.latency;
    table.push(line("p50 @1".to_owned(), l.map(|l| l.p50_us), fmt_us));
    table.push(line("p99 @1".to_owned(), l.map(|l| l.p99_us), fmt_us));
    let t = &row.throughput;
    let in_flight = t.static_token.in_flight;
    table.push(line(
        format!("calls/s @{in_flight}"),
        t.map(|t| t.calls_per_sec),
        fmt_rate,
    ));
    if !t.static_token.cpu_us_per_call.is_empty() {
        table.push(line(
            format!("CPU/call @{in_flight}"),
            t.map(|t| t.cpu_us_per_call.iter().sum()),
            fmt_us,
        ));
        table.push(line(
            format!("serve CPU/call @{in_flight}"),
            t.map(|t| t.cpu_us_per_call.first().copied().unwrap_or_default()),
            fmt_us,
        ));
    }
    table.push(line(
        "identify in process".to_owned(),
        row.identify_us,
        fmt_us,
    ));
    table.render("   ")
}

/// A JWT caller's calls/s at [`JWT_IN_FLIGHT`] in flight is no more than
/// [`MAX_JWT_SLOWDOWN`] below the static-token caller's, per algorithm.
fn jwt_targets(row: &JwtRow) -> Vec<Target> {
    let (t, l) = (&row.throughput, &row.latency);
    let floor = 1.0 - MAX_JWT_SLOWDOWN;
    [("RS256", &t.rs256, &l.rs256), ("ES256", &t.es256, &l.es256)]
        .into_iter()
        .map(|(algorithm, jwt, latency)| Target {
            name: format!(
                "{algorithm} JWT caller calls/s at {} in flight >= {floor}x a static-token caller",
                jwt.in_flight
            ),
            verdict: Verdict::of(jwt.calls_per_sec >= floor * t.static_token.calls_per_sec),
            detail: format!(
                "{} vs {} ({}); p50 at concurrency 1 {}; a static token as long as the RS256 JWT {}",
                fmt_rate(jwt.calls_per_sec),
                fmt_rate(t.static_token.calls_per_sec),
                fmt_ratio(jwt.calls_per_sec / t.static_token.calls_per_sec),
                fmt_delta_us(latency.p50_us - l.static_token.p50_us),
                fmt_ratio(t.long_token.calls_per_sec / t.static_token.calls_per_sec)
            ),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::load::Throughput;
    use crate::stats::Latency;

    /// Units switch at 10 µs, 1 ms and 1 s; differences carry their sign;
    /// ratios and rates read well; impossible ratios print as a dash.
    #[test]
    fn number_formatting() {
        assert_eq!(fmt_us(4.25), "4.2 µs");
        assert_eq!(fmt_us(85.4), "85 µs");
        assert_eq!(fmt_us(1_234.0), "1.23 ms");
        assert_eq!(fmt_us(2_500_000.0), "2.50 s");
        assert_eq!(fmt_delta_us(12.4), "+12 µs");
        assert_eq!(fmt_delta_us(-18.9), "-19 µs");
        assert_eq!(fmt_delta_us(-3.04), "-3.0 µs");
        assert_eq!(fmt_ms(0.5), "500 µs");
        assert_eq!(fmt_ratio(1.6549), "1.65x");
        assert_eq!(fmt_ratio(f64::INFINITY), "-");
        assert_eq!(fmt_ratio(f64::NAN), "-");
        assert_eq!(fmt_rate(12_345.4), "12,345/s");
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1_000), "1,000");
        assert_eq!(thousands(1_234_567), "1,234,567");
        assert_eq!(fmt_bytes(512.0), "512 B");
        assert_eq!(fmt_bytes(3_584.0), "3.5 KiB");
        assert_eq!(fmt_bytes(5.0 * 1024.0 * 1024.0), "5.0 MiB");
    }

    fn latency(p50: f64) -> Latency {
        Latency {
            calls: 10,
            errors: 0,
            p50_us: p50,
            p90_us: p50 * 1.5,
            p99_us: p50 * 2.0,
            mean_us: p50,
            max_us: p50 * 3.0,
        }
    }

    fn rate(in_flight: usize, calls_per_sec: f64) -> Throughput {
        Throughput {
            in_flight,
            calls_per_sec,
            rounds_calls_per_sec: vec![calls_per_sec],
            calls: 1,
            errors: 0,
            cpu_us_per_call: Vec::new(),
        }
    }

    /// With nginx every figure has a ratio to direct and to nginx; without
    /// it the nginx columns are left out.
    #[test]
    fn overhead_table_columns() {
        let mut size = SizeResult {
            json_work_us: 5.0,
            json_full_us: 9.0,
            allocations: None,
            label: "small".into(),
            argument_bytes: 100,
            latency: ByTarget {
                direct: latency(100.0),
                nginx: Some(latency(150.0)),
                toolmesh: latency(200.0),
            },
            throughput: vec![ByTarget {
                direct: rate(32, 10_000.0),
                nginx: Some(rate(32, 8_000.0)),
                toolmesh: rate(32, 5_000.0),
            }],
        };
        let text = overhead_table(&size);
        let p50 = text.lines().find(|l| l.contains("p50 @1")).unwrap();
        for cell in ["100 µs", "150 µs", "1.50x", "200 µs", "2.00x", "1.33x"] {
            assert!(p50.contains(cell), "{cell} in {p50}");
        }
        let calls = text.lines().find(|l| l.contains("calls/s @32")).unwrap();
        for cell in ["10,000/s", "8,000/s", "0.80x", "5,000/s", "0.50x", "0.62x"] {
            assert!(calls.contains(cell), "{cell} in {calls}");
        }
        assert!(
            !text.contains("CPU/call"),
            "not measured, not shown: {text}"
        );
        assert_eq!(proxy_cpu_line(&size), None);
        let t = &mut size.throughput[0];
        t.direct.cpu_us_per_call = vec![0.0, 20.0];
        t.nginx.as_mut().unwrap().cpu_us_per_call = vec![10.0, 20.0];
        t.toolmesh.cpu_us_per_call = vec![25.0, 20.0];
        let text = overhead_table(&size);
        let cpu = text.lines().find(|l| l.contains("CPU/call @32")).unwrap();
        for cell in ["20 µs", "30 µs", "1.50x", "45 µs", "2.25x"] {
            assert!(cpu.contains(cell), "{cell} in {cpu}");
        }
        let line = proxy_cpu_line(&size).unwrap();
        assert!(
            line.contains("@32: nginx 10 µs, toolmesh 25 µs (2.50x)"),
            "{line}"
        );
        assert!(
            line.contains("the executor per direct call @32: 20 µs"),
            "{line}"
        );
        size.latency.nginx = None;
        size.throughput[0].nginx = None;
        let text = overhead_table(&size);
        assert!(!text.contains("nginx"), "{text}");
        assert!(text.lines().next().unwrap().contains("toolmesh"));
    }

    /// The Nagle warning fires on a ~40 ms median over a sub-ms direct call only.
    #[test]
    fn nagle_signature() {
        let mut size = SizeResult {
            json_work_us: 5.0,
            json_full_us: 9.0,
            allocations: None,
            label: "small".into(),
            argument_bytes: 100,
            latency: ByTarget {
                direct: latency(150.0),
                nginx: None,
                toolmesh: latency(44_000.0),
            },
            throughput: Vec::new(),
        };
        assert!(nagle_note(&size).is_some_and(|n| n.contains("TCP_NODELAY")));
        size.latency.toolmesh = latency(400.0);
        assert!(nagle_note(&size).is_none());
    }

    /// The cache tables: the hit's ratios to miss and direct, executions
    /// per call, and each hit ratio's rate against 0 %.
    #[test]
    fn cache_tables() {
        let series = |p50, executions| CacheSeries {
            latency: latency(p50),
            executions,
        };
        let text = cache_latency_table(&ByPath {
            hit: series(100.0, 0),
            miss: series(400.0, 10),
            direct: series(200.0, 10),
        });
        let p50 = text.lines().find(|l| l.contains("p50 @1")).unwrap();
        for cell in ["100 µs", "400 µs", "200 µs", "0.25x", "0.50x"] {
            assert!(p50.contains(cell), "{cell} in {p50}");
        }
        let runs = text.lines().find(|l| l.contains("executions")).unwrap();
        assert!(runs.contains("0.00") && runs.contains("1.00"), "{runs}");
        let row = |hit_ratio: f64, calls_per_sec| AtHitRatio {
            hit_ratio,
            calls: 2_000,
            executions: ((1.0 - hit_ratio) * 2_000.0) as u64,
            executions_per_1000: (1.0 - hit_ratio) * 1_000.0,
            load_saved: hit_ratio,
            throughput: rate(32, calls_per_sec),
        };
        let text = cache_ratio_table(&[row(0.0, 1_000.0), row(0.9, 3_000.0)]);
        assert!(text.lines().next().unwrap().contains("calls/s @32"));
        let ninety = text.lines().find(|l| l.starts_with("   90 %")).unwrap();
        for cell in ["2,000", "100.0", "90.0 %", "3,000/s", "3.00x"] {
            assert!(ninety.contains(cell), "{cell} in {ninety}");
        }
    }

    /// Right-aligned numeric columns line up whatever the cell widths.
    #[test]
    fn table_alignment() {
        let mut t = Table::new(vec!["", "a", "b"]);
        t.push(vec!["row one".into(), "1".into(), "22 µs".into()]);
        t.push(vec!["r2".into(), "333".into(), "4".into()]);
        let text = t.render("");
        let lines: Vec<&str> = text.lines().collect();
        let width = |l: &str| l.chars().count();
        assert_eq!(width(lines[1]), width(lines[2]));
        assert!(lines[2].starts_with("r2     "));
    }
}
