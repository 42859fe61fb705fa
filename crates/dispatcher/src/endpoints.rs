//! One pooled connection per executor endpoint, with its load (calls in flight)
//! and its outlier state — for the instance as a whole, and for each tool on
//! it — so a fault is ejected at the granularity the evidence supports.

use crate::executor_connection::ExecutorConnection;
use dashmap::DashMap;
use std::sync::{
    Arc,
    atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering},
};
use std::time::Duration;
use tokio::time::Instant;

/// What one attempt's outcome says about where it ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Health {
    /// The instance answered (even with a tool error).
    Good,
    /// A failure, of the instance or of one tool on it.
    Bad(Scope),
    /// Says nothing about the instance (cancelled by the caller, …).
    Neutral,
}

/// What a failure is evidence against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Scope {
    /// The host is gone or broken: connection refused or reset, GOAWAY.
    Instance,
    /// The tool's handler failed on that instance: an UNAVAILABLE status
    /// it returned, EXECUTOR_FAILED, a panic, a timeout.
    Tool,
}

/// Consecutive failures, ejection and probation of one thing: an instance,
/// or one tool on an instance.
#[derive(Debug, Default)]
struct Outlier {
    consecutive_failures: AtomicU32,
    times_ejected: AtomicU32,
    /// Milliseconds after the pool's origin until which it is ejected; 0
    /// when in rotation.
    ejected_until_ms: AtomicU64,
    /// Back from an ejection: its next result decides (one failure ejects again).
    probing: AtomicBool,
}

impl Outlier {
    fn ejected_until(&self) -> u64 {
        self.ejected_until_ms.load(Ordering::Relaxed)
    }

    fn good(&self, now_ms: u64) {
        self.consecutive_failures.store(0, Ordering::Relaxed);
        if self.ejected_until() <= now_ms {
            self.probing.store(false, Ordering::Relaxed);
        }
    }

    /// Counts a failure; returns the end of a new ejection, if it ejects.
    fn bad(&self, policy: &EjectionPolicy, now_ms: u64, may_eject: bool) -> Option<u64> {
        let failures = self.consecutive_failures.fetch_add(1, Ordering::Relaxed) + 1;
        if !may_eject || now_ms < self.ejected_until() {
            return None;
        }
        let probe_failed = self.probing.load(Ordering::Relaxed);
        if failures < policy.after_failures && !probe_failed {
            return None;
        }
        let times = self.times_ejected.fetch_add(1, Ordering::Relaxed) + 1;
        let ejection = policy.base.saturating_mul(times).min(policy.max);
        let until = now_ms + ejection.as_millis() as u64;
        self.ejected_until_ms.store(until, Ordering::Relaxed);
        self.consecutive_failures.store(0, Ordering::Relaxed);
        self.probing.store(true, Ordering::Relaxed);
        Some(until)
    }
}

/// State of one executor endpoint.
#[derive(Debug)]
pub(crate) struct Endpoint {
    connection: ExecutorConnection,
    in_flight: AtomicU32,
    host: Outlier,
    /// Per-tool state, created at a tool's first failure here.
    tools: DashMap<Arc<str>, Arc<Outlier>>,
    /// Whether `tools` has ever held an entry (skips the map lookup).
    has_tool_state: AtomicBool,
}

impl Endpoint {
    /// The connection to the executor.
    pub(crate) fn connection(&self) -> &ExecutorConnection {
        &self.connection
    }

    pub(crate) fn in_flight(&self) -> u32 {
        self.in_flight.load(Ordering::Relaxed)
    }

    /// Counts a call in flight until the guard drops.
    pub(crate) fn start_call(self: &Arc<Self>) -> InFlight {
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        InFlight(self.clone())
    }

    fn tool(&self, tool: &str) -> Option<Arc<Outlier>> {
        if !self.has_tool_state.load(Ordering::Relaxed) {
            return None;
        }
        self.tools.get(tool).map(|t| t.clone())
    }

    fn tool_or_new(&self, tool: &str) -> Arc<Outlier> {
        if let Some(found) = self.tool(tool) {
            return found;
        }
        self.has_tool_state.store(true, Ordering::Relaxed);
        self.tools.entry(tool.into()).or_default().clone()
    }

    /// When the later of the instance's and `tool`'s ejections ends.
    fn ejected_until(&self, tool: &str) -> u64 {
        let host = self.host.ejected_until();
        self.tool(tool)
            .map_or(host, |t| t.ejected_until().max(host))
    }
}

/// Decrements an endpoint's in-flight count when dropped.
#[derive(Debug)]
pub(crate) struct InFlight(Arc<Endpoint>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Outlier-ejection settings.
#[derive(Debug, Clone, Copy)]
pub(crate) struct EjectionPolicy {
    pub(crate) after_failures: u32,
    pub(crate) base: Duration,
    pub(crate) max: Duration,
}

/// The pool of endpoints known to this dispatcher.
#[derive(Debug)]
pub(crate) struct Endpoints {
    map: DashMap<Arc<str>, Arc<Endpoint>>,
    origin: Instant,
    policy: EjectionPolicy,
    /// When the latest-ending ejection ends (ms after `origin`; 0 = none yet).
    last_ejection_end_ms: AtomicU64,
    /// TLS of the connections to executors.
    tls: toolmesh_transport::Tls,
}

impl Endpoints {
    pub(crate) fn new(policy: EjectionPolicy) -> Self {
        Endpoints {
            map: DashMap::new(),
            origin: Instant::now(),
            policy,
            last_ejection_end_ms: AtomicU64::new(0),
            tls: toolmesh_transport::Tls::none(),
        }
    }

    /// The same pool, connecting to executors with `tls`.
    pub(crate) fn with_tls(self, tls: toolmesh_transport::Tls) -> Self {
        Endpoints { tls, ..self }
    }

    /// The endpoint for `address`, creating its (lazily connecting) channel
    /// on first use. `None` when the address cannot be a URI.
    pub(crate) fn get(&self, address: &Arc<str>) -> Option<Arc<Endpoint>> {
        if let Some(found) = self.map.get(address) {
            return Some(found.clone());
        }
        let connection = ExecutorConnection::new(address, &self.tls).ok()?;
        let endpoint = self
            .map
            .entry(address.clone())
            .or_insert_with(|| {
                Arc::new(Endpoint {
                    connection,
                    in_flight: AtomicU32::new(0),
                    host: Outlier::default(),
                    tools: DashMap::new(),
                    has_tool_state: AtomicBool::new(false),
                })
            })
            .clone();
        Some(endpoint)
    }

    /// Forgets endpoints no snapshot names any more.
    pub(crate) fn retain(&self, keep: impl Fn(&str) -> bool) {
        self.map.retain(|address, _| keep(address));
    }

    fn now_ms(&self) -> u64 {
        self.origin.elapsed().as_millis() as u64 + 1
    }

    /// Whether `address` is ejected for `tool` right now (as an instance,
    /// or for that tool). An ejection that has run out is back, on probation.
    pub(crate) fn is_ejected(&self, address: &str, tool: &str) -> bool {
        self.map
            .get(address)
            .is_some_and(|e| self.ejected(&e, tool))
    }

    /// Whether an ejection is in force now or ended within `recently`:
    /// only then can a tool's rotation have changed without a snapshot.
    pub(crate) fn ejections_recent(&self, recently: Duration) -> bool {
        let last_end = self.last_ejection_end_ms.load(Ordering::Relaxed);
        last_end != 0 && self.now_ms() <= last_end + recently.as_millis() as u64
    }

    /// Whether `endpoint` is ejected for `tool` right now.
    pub(crate) fn ejected(&self, endpoint: &Endpoint, tool: &str) -> bool {
        self.now_ms() < endpoint.ejected_until(tool)
    }

    /// Endpoints ejected now, as an instance or for some tool on them.
    pub(crate) fn ejected_now(&self) -> usize {
        let now = self.now_ms();
        self.map
            .iter()
            .filter(|e| {
                e.host.ejected_until() > now || e.tools.iter().any(|t| t.ejected_until() > now)
            })
            .count()
    }

    /// Calls in flight to `address` (0 when never called).
    pub(crate) fn in_flight(&self, address: &str) -> u32 {
        self.map.get(address).map_or(0, |e| e.in_flight())
    }

    /// Time left of an ejection of `address` for `tool`, if ejected.
    pub(crate) fn ejection_left(&self, address: &str, tool: &str) -> Option<Duration> {
        let endpoint = self.map.get(address).map(|e| e.clone())?;
        let until = endpoint.ejected_until(tool);
        let now = self.now_ms();
        (until > now).then(|| Duration::from_millis(until - now))
    }

    /// Records an attempt of `tool` on `endpoint`. Returns true when this
    /// call ejected the endpoint (or the tool on it). `may_eject` is false
    /// when ejecting would leave a tool with no instance in rotation while
    /// its other instances are healthy.
    pub(crate) fn record(
        &self,
        endpoint: &Endpoint,
        tool: &str,
        health: Health,
        may_eject: bool,
    ) -> bool {
        let now = self.now_ms();
        let ejected = match health {
            Health::Neutral => None,
            Health::Good => {
                // An answer proves the host; it clears this tool's record only.
                endpoint.host.good(now);
                if let Some(state) = endpoint.tool(tool) {
                    state.good(now);
                }
                None
            }
            Health::Bad(Scope::Instance) => endpoint.host.bad(&self.policy, now, may_eject),
            Health::Bad(Scope::Tool) => {
                endpoint.tool_or_new(tool).bad(&self.policy, now, may_eject)
            }
        };
        if let Some(until) = ejected {
            self.last_ejection_end_ms
                .fetch_max(until, Ordering::Relaxed);
        }
        ejected.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOST: Health = Health::Bad(Scope::Instance);

    fn pool() -> Endpoints {
        Endpoints::new(EjectionPolicy {
            after_failures: 5,
            base: Duration::from_secs(30),
            max: Duration::from_secs(300),
        })
    }

    /// Five consecutive failures eject for 30 s; a success in between resets
    /// the count; the guard can forbid ejection.
    #[tokio::test(start_paused = true)]
    async fn ejects_after_consecutive_failures() {
        let pool = pool();
        let address: Arc<str> = "127.0.0.1:1".into();
        let e = pool.get(&address).unwrap();
        assert!(!pool.ejections_recent(Duration::from_secs(1)));
        for _ in 0..4 {
            assert!(!pool.record(&e, "t", HOST, true));
        }
        assert!(!pool.record(&e, "t", Health::Good, true));
        for _ in 0..4 {
            assert!(!pool.record(&e, "t", HOST, true));
        }
        assert!(!pool.record(&e, "t", HOST, false), "guard forbids ejection");
        assert!(pool.record(&e, "t", HOST, true));
        assert!(pool.is_ejected(&address, "t"));
        assert!(pool.is_ejected(&address, "other"), "the whole instance");
        tokio::time::advance(Duration::from_secs(29)).await;
        assert!(pool.is_ejected(&address, "t"));
        tokio::time::advance(Duration::from_secs(2)).await;
        assert!(!pool.is_ejected(&address, "t"), "back after 30 s");
        assert!(pool.ejections_recent(Duration::from_secs(2)), "just ended");
        tokio::time::advance(Duration::from_secs(5)).await;
        assert!(!pool.ejections_recent(Duration::from_secs(2)));
    }

    /// A tool-level fault ejects that tool on that instance only; the
    /// instance keeps serving its other tools.
    #[tokio::test(start_paused = true)]
    async fn tool_faults_eject_only_the_tool() {
        let pool = pool();
        let address: Arc<str> = "127.0.0.1:3".into();
        let e = pool.get(&address).unwrap();
        for _ in 0..4 {
            assert!(!pool.record(&e, "t_write", Health::Bad(Scope::Tool), true));
            // Successes of another tool do not clear t_write's record.
            assert!(!pool.record(&e, "t_read", Health::Good, true));
        }
        assert!(pool.record(&e, "t_write", Health::Bad(Scope::Tool), true));
        assert!(pool.is_ejected(&address, "t_write"));
        assert!(!pool.is_ejected(&address, "t_read"));
        assert!(pool.ejection_left(&address, "t_read").is_none());
        assert!(pool.ejection_left(&address, "t_write").is_some());
    }

    /// A failed probe ejects again at once, for 30 s × times ejected, capped.
    #[tokio::test(start_paused = true)]
    async fn failed_probe_ejects_again_longer() {
        let pool = pool();
        let address: Arc<str> = "127.0.0.1:2".into();
        let e = pool.get(&address).unwrap();
        for _ in 0..5 {
            pool.record(&e, "t", HOST, true);
        }
        tokio::time::advance(Duration::from_secs(31)).await;
        assert!(!pool.is_ejected(&address, "t"));
        assert!(pool.record(&e, "t", HOST, true), "probe failure ejects");
        let left = pool.ejection_left(&address, "t").unwrap();
        assert!(
            left > Duration::from_secs(59) && left <= Duration::from_secs(60),
            "{left:?}"
        );
        for _ in 0..20 {
            tokio::time::advance(Duration::from_secs(301)).await;
            pool.record(&e, "t", HOST, true);
        }
        assert!(pool.ejection_left(&address, "t").unwrap() <= Duration::from_secs(300));
        tokio::time::advance(Duration::from_secs(301)).await;
        pool.record(&e, "t", Health::Good, true);
        assert!(
            !pool.record(&e, "t", HOST, true),
            "a good probe clears probation"
        );
    }
}
