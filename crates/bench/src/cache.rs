//! Result cache: a cache hit beside a miss and a direct executor call, and the executor load the cache saves at a given hit ratio.

use crate::cpu::Meter;
use crate::error::BenchError;
use crate::load::{self, Calls, Client, Throughput, Window, Workload};
use crate::procs::{self, Proc, Ready, SpawnOptions, TempDir};
use crate::stats::{self, Latency};
use crate::{Binaries, Plan, mesh};
use serde::Serialize;
use std::borrow::Cow;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use toolmesh_transport::Tls;

/// The cached tool: the acceptance fixture's read-only, idempotent lookup.
const TOOL: &str = "acc_lookup";
/// Its version.
const VERSION: &str = "1.0.0";
/// Keys that repeat; every one is answered once before measuring.
const HOT_KEYS: u64 = 16;
/// The hit ratios measured, in percent.
const HIT_PERCENTS: [u32; 3] = [0, 50, 90];
/// Calls kept in flight while measuring a hit ratio.
const IN_FLIGHT: usize = 32;
/// How a ledger line names the cached tool (serde_json's compact output).
const LEDGER_TOOL: &str = "\"tool\":\"acc_lookup\"";

/// Every caller may call every tool (and register: the fixture is one);
/// `acc_lookup`'s answers stay fresh for the whole run; the bench reads
/// the executor's execute token as the dispatcher caller.
const POLICY: &str = r#"
[auth]
allow_anonymous = true
anonymous = { principal = "anonymous", tenant = "bench", roles = ["agent", "admin", "executor"] }

# mesh::DISPATCHER_TOKEN, with which the bench reads the execute token
[[callers]]
token = "bench-dispatcher"
principal = "bench-dispatcher"
roles = ["dispatcher"]

[[grants]]
name = "everything"
tools = ["*"]

[[cache.tools]]
tool = "acc_lookup"
ttl_ms = 600000
"#;

/// One figure for each way of answering an `acc_lookup` call.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct ByPath<T> {
    /// Invoke with a key answered before: the dispatcher's cache answers.
    pub hit: T,
    /// Invoke with a key never used before: the dispatcher looks the key
    /// up, runs the tool and stores its answer.
    pub miss: T,
    /// Execute on the executor itself (no dispatcher, no cache).
    pub direct: T,
}

/// One latency series at concurrency 1, and how often the tool ran in it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct CacheSeries {
    /// The calls' latency.
    pub latency: Latency,
    /// Executions the fixture's ledger counted during the timed calls.
    pub executions: u64,
}

/// The same mix of keys at one hit ratio.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AtHitRatio {
    /// Share of calls that repeat a hot key (0 to 1).
    pub hit_ratio: f64,
    /// Calls made while counting (warm-up and the calls still in flight at
    /// the end of a window included).
    pub calls: u64,
    /// Executions the ledger counted over those calls.
    pub executions: u64,
    /// `executions` per 1,000 calls.
    pub executions_per_1000: f64,
    /// Executor load saved: 1 − executions / calls.
    pub load_saved: f64,
    /// Calls per second at [`IN_FLIGHT`] calls in flight.
    pub throughput: Throughput,
}

/// Part 5 of the report.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ResultCache {
    /// The tool measured.
    pub tool: String,
    /// Rounds in which the series took turns.
    pub rounds: usize,
    /// Warm-up calls per latency series.
    pub warmup_calls: usize,
    /// Keys that repeat in the hit-ratio mixes.
    pub hot_keys: u64,
    /// Latency at concurrency 1 and executions, per way of answering.
    pub latency: ByPath<CacheSeries>,
    /// Warm-up before each throughput window, in ms.
    pub throughput_warmup_ms: f64,
    /// Measuring time per hit ratio over all rounds, in ms.
    pub throughput_window_ms: f64,
    /// One row per hit ratio, 0 % first.
    pub hit_ratios: Vec<AtHitRatio>,
}

/// Starts `toolmesh serve` with a policy caching `acc_lookup` and the
/// acceptance fixture with a ledger, measures, and stops them.
pub(crate) async fn run(
    plan: &Plan,
    bins: &Binaries,
    logs: &Path,
) -> Result<ResultCache, BenchError> {
    let dir = TempDir::new("bench-cache").map_err(|e| BenchError::io("create a temp dir", e))?;
    let mut mesh = Mesh::start(bins, logs, &dir).await?;
    let hot = lookup(&hot_key(0));
    load::check_works(&mesh.dispatcher, &hot, "the toolmesh dispatcher").await?;
    load::check_works(&mesh.direct, &hot, "the executor").await?;
    let hot_keys = usize::try_from(HOT_KEYS).unwrap_or(usize::MAX);
    load::warm_up(&mesh.dispatcher, &KeyMix::new(100, "warm"), hot_keys).await;
    let latency = measure_latency(plan, &mut mesh).await?;
    let hit_ratios = measure_hit_ratios(plan, &mut mesh).await?;
    mesh.stop().await;
    Ok(ResultCache {
        tool: TOOL.to_owned(),
        rounds: plan.rounds.max(1),
        warmup_calls: plan.latency_warmup,
        hot_keys: HOT_KEYS,
        latency,
        throughput_warmup_ms: stats::ms(plan.throughput_warmup),
        throughput_window_ms: stats::ms(plan.throughput_window),
        hit_ratios,
    })
}

/// `toolmesh serve`, the fixture, a client of each, and the ledger.
struct Mesh {
    serve: Proc,
    fixture: Proc,
    dispatcher: Client,
    direct: Client,
    ledger: Ledger,
}

impl Mesh {
    /// Writes the policy into `dir`, starts both processes and waits until
    /// the dispatcher lists the tool.
    async fn start(bins: &Binaries, logs: &Path, dir: &TempDir) -> Result<Mesh, BenchError> {
        let policy = dir.join("policy.toml");
        std::fs::write(&policy, POLICY)
            .map_err(|e| BenchError::io(format!("write {}", policy.display()), e))?;
        let ledger = dir.join("ledger.jsonl");
        let (policy, ledger_arg) = (policy.to_string_lossy(), ledger.to_string_lossy());
        let args = ["serve", "--listen", "127.0.0.1:0", "--policy", &*policy];
        let mut serve = spawn(bins, logs, "toolmesh serve (cache)", &bins.toolmesh, &args)?;
        let serve_addr = serve.listen_addr().await?;
        let args = ["example", "acceptance", "--registry", &serve_addr];
        let args = [&args[..], &["--ledger", &*ledger_arg]].concat();
        let mut fixture = spawn(bins, logs, "fixture (cache)", &bins.fixture, &args)?;
        let executor_addr = fixture.listen_addr().await?;
        let mut lister = mesh::dispatcher_client(&serve_addr, &Tls::none())?;
        mesh::wait_listed(&mut lister, TOOL, true, Duration::from_secs(15)).await?;
        let token = mesh::execute_token(&serve_addr, &executor_addr, &Tls::none()).await?;
        Ok(Mesh {
            serve,
            fixture,
            dispatcher: Client::dispatcher(&serve_addr, &Tls::none())?,
            direct: Client::executor(&executor_addr, &token, &Tls::none())?,
            ledger: Ledger::new(ledger),
        })
    }

    async fn stop(mut self) {
        self.fixture.kill_and_reap().await;
        self.serve.kill_and_reap().await;
    }
}

/// A bench child with the default options.
fn spawn(
    bins: &Binaries,
    logs: &Path,
    name: &str,
    program: &Path,
    args: &[&str],
) -> Result<Proc, BenchError> {
    procs::spawn(
        bins.parent_death,
        name,
        program,
        args,
        logs,
        SpawnOptions::default(),
    )
}

/// Hit, miss and direct at concurrency 1, taking turns in every round;
/// the ledger is read between series, so each counts its own executions.
async fn measure_latency(plan: &Plan, mesh: &mut Mesh) -> Result<ByPath<CacheSeries>, BenchError> {
    let rounds = plan.rounds.max(1);
    let per_round = plan.latency_calls.div_ceil(rounds);
    let hit = lookup(&hot_key(0));
    let miss = KeyMix::new(0, "miss");
    load::warm_up(&mesh.dispatcher, &hit, plan.latency_warmup).await;
    load::warm_up(&mesh.dispatcher, &miss, plan.latency_warmup).await;
    load::warm_up(&mesh.direct, &hit, plan.latency_warmup).await;
    let mut series = ByPath::<Counted>::default();
    for _ in 0..rounds {
        let (dispatcher, direct) = (&mesh.dispatcher, &mesh.direct);
        let ledger = &mut mesh.ledger;
        series
            .hit
            .record(dispatcher, &hit, per_round, ledger)
            .await?;
        series
            .miss
            .record(dispatcher, &miss, per_round, ledger)
            .await?;
        series
            .direct
            .record(direct, &hit, per_round, ledger)
            .await?;
    }
    Ok(ByPath {
        hit: series.hit.summary(),
        miss: series.miss.summary(),
        direct: series.direct.summary(),
    })
}

/// Latency samples and the executions counted while taking them.
#[derive(Debug, Default)]
struct Counted {
    samples: load::Samples,
    executions: u64,
}

impl Counted {
    async fn record(
        &mut self,
        client: &Client,
        work: &impl Calls,
        calls: usize,
        ledger: &mut Ledger,
    ) -> Result<(), BenchError> {
        ledger.executions()?;
        self.samples.record(client, work, calls).await;
        self.executions += ledger.executions()?;
        Ok(())
    }

    fn summary(self) -> CacheSeries {
        CacheSeries {
            latency: self.samples.summary(),
            executions: self.executions,
        }
    }
}

/// Each hit ratio at [`IN_FLIGHT`] calls in flight, the ratios taking
/// turns in every round; executions counted over every call made.
async fn measure_hit_ratios(plan: &Plan, mesh: &mut Mesh) -> Result<Vec<AtHitRatio>, BenchError> {
    let rounds = plan.rounds.max(1);
    let window = plan.throughput_window / u32::try_from(rounds).unwrap_or(1);
    let mixes: Vec<KeyMix> = HIT_PERCENTS
        .iter()
        .map(|&p| KeyMix::new(p, &format!("cold{p}")))
        .collect();
    let mut windows: Vec<Vec<Window>> = mixes.iter().map(|_| Vec::new()).collect();
    let mut executions = vec![0u64; mixes.len()];
    for _ in 0..rounds {
        for (i, mix) in mixes.iter().enumerate() {
            mesh.ledger.executions()?;
            let w = load::throughput(
                &mesh.dispatcher,
                mix,
                IN_FLIGHT,
                plan.throughput_warmup,
                window,
                &Meter::default(),
            )
            .await;
            windows[i].push(w);
            executions[i] += mesh.ledger.executions()?;
        }
    }
    Ok(mixes
        .iter()
        .zip(windows)
        .zip(executions)
        .map(|((mix, windows), executions)| at_hit_ratio(mix, &windows, executions))
        .collect())
}

/// One hit ratio's row from its windows and the executions counted.
fn at_hit_ratio(mix: &KeyMix, windows: &[Window], executions: u64) -> AtHitRatio {
    let calls = mix.issued();
    let per_call = executions as f64 / calls.max(1) as f64;
    AtHitRatio {
        hit_ratio: f64::from(mix.hit_percent) / 100.0,
        calls,
        executions,
        executions_per_1000: 1000.0 * per_call,
        load_saved: 1.0 - per_call,
        throughput: Throughput::from_rounds(IN_FLIGHT, windows),
    }
}

/// The arguments of a lookup of `key`, without delay.
fn lookup(key: &str) -> Workload {
    Workload {
        tool: TOOL.into(),
        version: VERSION.into(),
        arguments: serde_json::json!({ "key": key }).to_string().into(),
    }
}

/// The `i`th hot key.
fn hot_key(i: u64) -> String {
    format!("hot-{}", i % HOT_KEYS)
}

/// `acc_lookup` calls of which `hit_percent` % repeat one of the
/// [`HOT_KEYS`] (in turn) and the others each use a key never used
/// before (`<label>-<n>`). Hot and cold calls are spread evenly (call `n`
/// is hot when `⌊(n+1)·p/100⌋ > ⌊n·p/100⌋`), so any run of calls has the
/// asked share to within one call. Clones share one call counter.
#[derive(Debug, Clone)]
pub(crate) struct KeyMix {
    hit_percent: u32,
    label: Arc<str>,
    issued: Arc<AtomicU64>,
}

impl KeyMix {
    /// A mix whose cold keys start with `label` (unique per mix).
    pub(crate) fn new(hit_percent: u32, label: &str) -> KeyMix {
        KeyMix {
            hit_percent: hit_percent.min(100),
            label: label.into(),
            issued: Arc::default(),
        }
    }

    /// Calls made so far.
    pub(crate) fn issued(&self) -> u64 {
        self.issued.load(Ordering::Relaxed)
    }

    /// The key of call `n`.
    fn key(&self, n: u64) -> String {
        let p = u64::from(self.hit_percent);
        let hot_before = n * p / 100;
        if (n + 1) * p / 100 > hot_before {
            hot_key(hot_before)
        } else {
            format!("{}-{n}", self.label)
        }
    }
}

impl Calls for KeyMix {
    fn next_call(&self) -> Cow<'_, Workload> {
        let n = self.issued.fetch_add(1, Ordering::Relaxed);
        Cow::Owned(lookup(&self.key(n)))
    }
}

/// The fixture's ledger (one JSON line per execution), read on from where
/// the last count stopped.
#[derive(Debug)]
struct Ledger {
    path: PathBuf,
    /// Bytes counted so far (always at a line's end).
    offset: u64,
}

impl Ledger {
    fn new(path: PathBuf) -> Ledger {
        Ledger { path, offset: 0 }
    }

    /// Executions of the tool appended since the last count (none while
    /// the file does not exist yet).
    fn executions(&mut self) -> Result<u64, BenchError> {
        let context = || format!("read the ledger {}", self.path.display());
        let mut file = match std::fs::File::open(&self.path) {
            Ok(file) => file,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
            Err(e) => return Err(BenchError::io(context(), e)),
        };
        let mut text = Vec::new();
        file.seek(SeekFrom::Start(self.offset))
            .and_then(|_| file.read_to_end(&mut text))
            .map_err(|e| BenchError::io(context(), e))?;
        // A line still being written is counted next time.
        let complete = text.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
        self.offset += complete as u64;
        Ok(count_executions(&text[..complete]))
    }
}

/// Lines of `text` that record an execution of the tool.
fn count_executions(text: &[u8]) -> u64 {
    text.split(|b| *b == b'\n')
        .filter(|line| {
            line.windows(LEDGER_TOOL.len())
                .any(|w| w == LEDGER_TOOL.as_bytes())
        })
        .count() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(mix: &KeyMix, calls: u64) -> Vec<String> {
        (0..calls).map(|n| mix.key(n)).collect()
    }

    /// Each mix has exactly its share of hot keys in any 100 calls, hot
    /// keys take turns over the pool, and cold keys never repeat.
    #[test]
    fn key_mix_shares() {
        for percent in [0, 50, 90, 100] {
            let mix = KeyMix::new(percent, "cold");
            let all = keys(&mix, 1000);
            for block in all.chunks(100) {
                let hot = block.iter().filter(|k| k.starts_with("hot-")).count();
                assert_eq!(hot, percent as usize, "{percent} %");
            }
            let cold: Vec<_> = all.iter().filter(|k| k.starts_with("cold-")).collect();
            let unique: std::collections::HashSet<_> = cold.iter().collect();
            assert_eq!(unique.len(), cold.len(), "cold keys repeat at {percent} %");
        }
        let half = keys(&KeyMix::new(50, "c"), 6);
        assert_eq!(half, ["c-0", "hot-0", "c-2", "hot-1", "c-4", "hot-2"]);
        let all_hot = keys(&KeyMix::new(100, "c"), HOT_KEYS + 1);
        assert_eq!(all_hot[0], "hot-0");
        assert_eq!(all_hot[HOT_KEYS as usize], "hot-0", "the pool wraps");
        let distinct: std::collections::HashSet<_> = all_hot.iter().collect();
        assert_eq!(distinct.len() as u64, HOT_KEYS);
    }

    /// Calls through clones share one counter; each call is a lookup.
    #[test]
    fn key_mix_counts_calls() {
        let mix = KeyMix::new(90, "c");
        let other = mix.clone();
        let first = mix.next_call().into_owned();
        other.next_call();
        assert_eq!(mix.issued(), 2);
        assert_eq!(&*first.tool, TOOL);
        assert_eq!(&*first.arguments, r#"{"key":"c-0"}"#);
    }

    /// Only complete lines of the tool count; a partial line waits.
    #[test]
    fn ledger_counts_new_complete_lines() {
        let dir = TempDir::new("bench-cache-test").unwrap();
        let mut ledger = Ledger::new(dir.join("ledger.jsonl"));
        assert_eq!(ledger.executions().unwrap(), 0, "no file yet");
        let line = |tool: &str| format!(r#"{{"call_id":"x","tool":"{tool}","attempt":1}}"#);
        let text = format!("{}\n{}\n{}", line(TOOL), line("acc_echo"), line(TOOL));
        std::fs::write(dir.join("ledger.jsonl"), &text).unwrap();
        assert_eq!(ledger.executions().unwrap(), 1);
        std::fs::write(dir.join("ledger.jsonl"), text + "\n").unwrap();
        assert_eq!(ledger.executions().unwrap(), 1, "the finished line");
        assert_eq!(ledger.executions().unwrap(), 0);
    }
}
