//! One pooled channel per executor endpoint, with its load (calls in flight)
//! and its outlier state (consecutive failures, ejection, probing).

use dashmap::DashMap;
use std::sync::{
    Arc,
    atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering},
};
use std::time::Duration;
use tokio::time::Instant;
use tonic::transport::Channel;

/// How one attempt ended, as far as the instance's health is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Health {
    /// The instance answered (even with a tool error).
    Good,
    /// Connection failure, UNAVAILABLE or EXECUTOR_FAILED.
    Bad,
    /// Says nothing about the instance (cancelled by the caller, …).
    Neutral,
}

/// State of one executor endpoint.
#[derive(Debug)]
pub(crate) struct Endpoint {
    channel: Channel,
    in_flight: AtomicU32,
    consecutive_failures: AtomicU32,
    times_ejected: AtomicU32,
    /// Milliseconds after the pool's origin until which the endpoint is
    /// ejected; 0 when it is in rotation.
    ejected_until_ms: AtomicU64,
    /// Back from an ejection: its next result decides (one failure ejects again).
    probing: AtomicBool,
}

impl Endpoint {
    pub(crate) fn channel(&self) -> Channel {
        self.channel.clone()
    }

    pub(crate) fn in_flight(&self) -> u32 {
        self.in_flight.load(Ordering::Relaxed)
    }

    /// Counts a call in flight until the guard drops.
    pub(crate) fn start_call(self: &Arc<Self>) -> InFlight {
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        InFlight(self.clone())
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
    /// TLS of the channels to executors.
    tls: toolmesh::grpc::Tls,
}

impl Endpoints {
    pub(crate) fn new(policy: EjectionPolicy) -> Self {
        Endpoints {
            map: DashMap::new(),
            origin: Instant::now(),
            policy,
            last_ejection_end_ms: AtomicU64::new(0),
            tls: toolmesh::grpc::Tls::none(),
        }
    }

    /// The same pool, opening its channels with `tls`.
    pub(crate) fn with_tls(self, tls: toolmesh::grpc::Tls) -> Self {
        Endpoints { tls, ..self }
    }

    /// The endpoint for `address`, creating its (lazily connecting) channel
    /// on first use. `None` when the address cannot be a URI.
    pub(crate) fn get(&self, address: &Arc<str>) -> Option<Arc<Endpoint>> {
        if let Some(found) = self.map.get(address) {
            return Some(found.clone());
        }
        let channel = toolmesh::grpc::channel(address, &self.tls).ok()?;
        let endpoint = self
            .map
            .entry(address.clone())
            .or_insert_with(|| {
                Arc::new(Endpoint {
                    channel,
                    in_flight: AtomicU32::new(0),
                    consecutive_failures: AtomicU32::new(0),
                    times_ejected: AtomicU32::new(0),
                    ejected_until_ms: AtomicU64::new(0),
                    probing: AtomicBool::new(false),
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

    /// Whether `address` is ejected right now. An endpoint whose ejection has
    /// run out is back, on probation.
    pub(crate) fn is_ejected(&self, address: &str) -> bool {
        self.map.get(address).is_some_and(|e| self.ejected(&e))
    }

    /// Whether an ejection is in force now or ended within `recently`:
    /// only then can a tool's rotation have changed without a snapshot.
    pub(crate) fn ejections_recent(&self, recently: Duration) -> bool {
        let last_end = self.last_ejection_end_ms.load(Ordering::Relaxed);
        last_end != 0 && self.now_ms() <= last_end + recently.as_millis() as u64
    }

    pub(crate) fn ejected(&self, endpoint: &Endpoint) -> bool {
        let until = endpoint.ejected_until_ms.load(Ordering::Relaxed);
        until != 0 && self.now_ms() < until
    }

    /// Time left of an ejection, if ejected.
    pub(crate) fn ejection_left(&self, address: &str) -> Option<Duration> {
        let endpoint = self.map.get(address).map(|e| e.clone())?;
        let until = endpoint.ejected_until_ms.load(Ordering::Relaxed);
        let now = self.now_ms();
        (until > now).then(|| Duration::from_millis(until - now))
    }

    /// Records an attempt's outcome. Returns true when this call ejected the
    /// endpoint. `may_eject` is false when ejecting would leave a tool with
    /// no instance in rotation while its other instances are healthy.
    pub(crate) fn record(&self, endpoint: &Endpoint, health: Health, may_eject: bool) -> bool {
        match health {
            Health::Neutral => false,
            Health::Good => {
                endpoint.consecutive_failures.store(0, Ordering::Relaxed);
                if !self.ejected(endpoint) {
                    endpoint.probing.store(false, Ordering::Relaxed);
                }
                false
            }
            Health::Bad => {
                let failures = endpoint
                    .consecutive_failures
                    .fetch_add(1, Ordering::Relaxed)
                    + 1;
                if !may_eject || self.ejected(endpoint) {
                    return false;
                }
                let probe_failed = endpoint.probing.load(Ordering::Relaxed);
                if failures < self.policy.after_failures && !probe_failed {
                    return false;
                }
                let times = endpoint.times_ejected.fetch_add(1, Ordering::Relaxed) + 1;
                let ejection = self.policy.base.saturating_mul(times).min(self.policy.max);
                let until = self.now_ms() + ejection.as_millis() as u64;
                endpoint.ejected_until_ms.store(until, Ordering::Relaxed);
                self.last_ejection_end_ms
                    .fetch_max(until, Ordering::Relaxed);
                endpoint.consecutive_failures.store(0, Ordering::Relaxed);
                endpoint.probing.store(true, Ordering::Relaxed);
                true
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
            assert!(!pool.record(&e, Health::Bad, true));
        }
        assert!(!pool.record(&e, Health::Good, true));
        for _ in 0..4 {
            assert!(!pool.record(&e, Health::Bad, true));
        }
        assert!(
            !pool.record(&e, Health::Bad, false),
            "guard forbids ejection"
        );
        assert!(pool.record(&e, Health::Bad, true));
        assert!(pool.is_ejected(&address));
        tokio::time::advance(Duration::from_secs(29)).await;
        assert!(pool.is_ejected(&address));
        tokio::time::advance(Duration::from_secs(2)).await;
        assert!(!pool.is_ejected(&address), "back after 30 s");
        assert!(pool.ejections_recent(Duration::from_secs(2)), "just ended");
        tokio::time::advance(Duration::from_secs(5)).await;
        assert!(!pool.ejections_recent(Duration::from_secs(2)));
    }

    /// A failed probe ejects again at once, for 30 s × times ejected, capped.
    #[tokio::test(start_paused = true)]
    async fn failed_probe_ejects_again_longer() {
        let pool = pool();
        let address: Arc<str> = "127.0.0.1:2".into();
        let e = pool.get(&address).unwrap();
        for _ in 0..5 {
            pool.record(&e, Health::Bad, true);
        }
        tokio::time::advance(Duration::from_secs(31)).await;
        assert!(!pool.is_ejected(&address));
        assert!(pool.record(&e, Health::Bad, true), "probe failure ejects");
        let left = pool.ejection_left(&address).unwrap();
        assert!(
            left > Duration::from_secs(59) && left <= Duration::from_secs(60),
            "{left:?}"
        );
        for _ in 0..20 {
            tokio::time::advance(Duration::from_secs(301)).await;
            pool.record(&e, Health::Bad, true);
        }
        assert!(pool.ejection_left(&address).unwrap() <= Duration::from_secs(300));
        tokio::time::advance(Duration::from_secs(301)).await;
        pool.record(&e, Health::Good, true);
        assert!(
            !pool.record(&e, Health::Bad, true),
            "a good probe clears probation"
        );
    }
}
