//! Watches one executor's `grpc.health.v1` status and reports, with flap
//! damping, when its instances should leave or rejoin rotation.

use std::collections::VecDeque;
use std::future::pending;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Semaphore;
use tokio::time::{Instant, sleep, sleep_until};
use tokio_util::sync::CancellationToken;
use tonic::{Code, Status};
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tracing::{debug, warn};

/// First wait before reconnecting a broken watch.
pub(crate) const INITIAL_BACKOFF: Duration = Duration::from_millis(50);
/// Longest wait between reconnection attempts.
pub(crate) const MAX_BACKOFF: Duration = Duration::from_secs(2);
/// Longest a watch being opened keeps its turn (see [`watch`]).
const OPENING_TURN: Duration = Duration::from_secs(1);
/// Recoveries within this window count towards flapping.
pub(crate) const FLAP_WINDOW: Duration = Duration::from_secs(30);
/// Recoveries within the window that make an instance a flapper.
pub(crate) const FLAP_THRESHOLD: usize = 3;
/// First hold-out of a flapping instance; doubles each time.
pub(crate) const FIRST_HOLD: Duration = Duration::from_secs(1);
/// Longest hold-out.
pub(crate) const MAX_HOLD: Duration = Duration::from_secs(30);

/// What one health message or error says about the executor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Observation {
    /// SERVING.
    Healthy,
    /// Not ready, with why.
    Unhealthy(String),
    /// The executor has no health service: assume healthy, stop watching.
    NoHealthService,
}

/// Reads a status from the `Watch` stream. Only SERVING is ready (gRFC A17).
pub(crate) fn classify_status(status: i32) -> Observation {
    match ServingStatus::try_from(status) {
        Ok(ServingStatus::Serving) => Observation::Healthy,
        Ok(other) => Observation::Unhealthy(format!("health status {}", other.as_str_name())),
        Err(_) => Observation::Unhealthy(format!("unknown health status {status}")),
    }
}

/// Reads an error from `Watch`: UNIMPLEMENTED means no health service;
/// anything else (NOT_FOUND from tonic-health, a broken connection) is "not ready".
pub(crate) fn classify_error(status: &Status) -> Observation {
    match status.code() {
        Code::Unimplemented => Observation::NoHealthService,
        code => Observation::Unhealthy(format!(
            "health watch failed: {code:?}: {}",
            status.message()
        )),
    }
}

/// Counts recoveries; a third one within 30 s earns a hold-out that doubles
/// (1 s, 2 s, 4 s … 30 s) until a quiet window forgives it.
#[derive(Debug)]
pub(crate) struct FlapDamper {
    recoveries: VecDeque<Instant>,
    next_hold: Duration,
}

impl Default for FlapDamper {
    fn default() -> Self {
        FlapDamper {
            recoveries: VecDeque::with_capacity(FLAP_THRESHOLD + 1),
            next_hold: FIRST_HOLD,
        }
    }
}

impl FlapDamper {
    /// Records an unhealthy→healthy transition at `now`; `Some(hold)` when
    /// the instance must stay out that long first.
    pub(crate) fn recovered(&mut self, now: Instant) -> Option<Duration> {
        while self
            .recoveries
            .front()
            .is_some_and(|t| now.saturating_duration_since(*t) > FLAP_WINDOW)
        {
            self.recoveries.pop_front();
        }
        if self.recoveries.is_empty() {
            self.next_hold = FIRST_HOLD;
        }
        self.recoveries.push_back(now);
        while self.recoveries.len() > FLAP_THRESHOLD {
            self.recoveries.pop_front();
        }
        (self.recoveries.len() >= FLAP_THRESHOLD).then(|| {
            let hold = self.next_hold;
            self.next_hold = (self.next_hold * 2).min(MAX_HOLD);
            hold
        })
    }
}

/// A change to report to the registry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Change {
    /// Take the instances out of rotation.
    Unhealthy,
    /// Put them back.
    Healthy,
    /// Healthy again, but flapping: kept out for this long.
    HeldOut(Duration),
}

/// The damped health of one executor: raw observations in, changes out.
#[derive(Debug)]
pub(crate) struct Damped {
    effective: bool,
    raw: bool,
    hold_until: Option<Instant>,
    damper: FlapDamper,
}

impl Default for Damped {
    /// Healthy: an executor counts as healthy as soon as it registers.
    fn default() -> Self {
        Damped {
            effective: true,
            raw: true,
            hold_until: None,
            damper: FlapDamper::default(),
        }
    }
}

impl Damped {
    /// Feeds one raw observation.
    pub(crate) fn observe(&mut self, healthy: bool, now: Instant) -> Option<Change> {
        self.raw = healthy;
        if !healthy {
            self.hold_until = None;
            return std::mem::replace(&mut self.effective, false).then_some(Change::Unhealthy);
        }
        if self.effective || self.hold_until.is_some() {
            return None;
        }
        match self.damper.recovered(now) {
            Some(hold) => {
                self.hold_until = Some(now + hold);
                Some(Change::HeldOut(hold))
            }
            None => {
                self.effective = true;
                Some(Change::Healthy)
            }
        }
    }

    /// When a hold-out ends (if one is running).
    pub(crate) fn hold_until(&self) -> Option<Instant> {
        self.hold_until
    }

    /// The hold-out ended: back in rotation if still SERVING.
    pub(crate) fn hold_expired(&mut self) -> Option<Change> {
        self.hold_until = None;
        (self.raw && !std::mem::replace(&mut self.effective, true)).then_some(Change::Healthy)
    }

    /// No health service: healthy for good, damping or not.
    pub(crate) fn force_healthy(&mut self) -> Option<Change> {
        self.raw = true;
        self.hold_until = None;
        (!std::mem::replace(&mut self.effective, true)).then_some(Change::Healthy)
    }
}

/// Receives each health change of the watched executor: `true` for healthy,
/// with a reason for the log.
pub(crate) type Report = Box<dyn FnMut(bool, &str) + Send>;

/// Watches `endpoint` until `token` is cancelled or it turns out to have no
/// health service, reporting each change through `report`. A watch is
/// opened (connection, stream, first status) only with a turn of
/// `opening`, so a replica taking thousands over at once opens them a few
/// at a time instead of starving the machine (and etcd beside it).
pub(crate) async fn watch(
    endpoint: Arc<str>,
    tls: toolmesh_transport::Tls,
    token: CancellationToken,
    report: Report,
    opening: Arc<Semaphore>,
    flap_holds: prometheus_client::metrics::counter::Counter,
) {
    token
        .run_until_cancelled(run(endpoint, tls, report, opening, flap_holds))
        .await;
}

async fn run(
    endpoint: Arc<str>,
    tls: toolmesh_transport::Tls,
    mut report: Report,
    opening: Arc<Semaphore>,
    flap_holds: prometheus_client::metrics::counter::Counter,
) {
    let channel = match toolmesh_transport::executor_channel(&endpoint, &tls) {
        Ok(channel) => channel,
        Err(error) => {
            warn!(%endpoint, %error, "cannot watch executor health; assuming healthy");
            return;
        }
    };
    let mut client = HealthClient::new(channel);
    let mut damped = Damped::default();
    let mut backoff = INITIAL_BACKOFF;
    let mut emit = |damped_change: Option<Change>, reason: &str| match damped_change {
        Some(Change::Unhealthy) => report(false, reason),
        Some(Change::Healthy) => report(true, reason),
        Some(Change::HeldOut(hold)) => {
            flap_holds.inc();
            warn!(%endpoint, hold_ms = hold.as_millis() as u64, "executor is flapping; held out of rotation");
        }
        None => {}
    };
    // Whether the last watch broke after it had delivered and was opened
    // again at once: the next break waits its backoff whatever it was.
    let mut reopened = false;
    loop {
        // Whether this watch has delivered a status: a watch that did and
        // then broke (a GOAWAY, a connection the peer recycled) is opened
        // again once, at once, before the break counts, so an executor
        // that is still SERVING does not leave rotation for a connection's
        // sake, and one that died is out as soon as its port refuses.
        let mut delivered = false;
        // The turn goes back with the first status, or after a moment
        // when the executor does not answer (a stopped one must not keep
        // the others waiting).
        let mut turn = Arc::clone(&opening).acquire_owned().await.ok();
        let give_back = Instant::now() + OPENING_TURN;
        let opened = client.watch(HealthCheckRequest {
            service: String::new(),
        });
        tokio::pin!(opened);
        let opened = loop {
            tokio::select! {
                opened = &mut opened => break opened,
                () = sleep_until_some(turn.is_some().then_some(give_back)) => drop(turn.take()),
            }
        };
        let ended = match opened {
            Err(status) => classify_error(&status),
            Ok(response) => {
                let mut stream = response.into_inner();
                loop {
                    let hold = damped.hold_until();
                    tokio::select! {
                        message = stream.message() => match message {
                            Ok(Some(message)) => {
                                delivered = true;
                                turn.take();
                                backoff = INITIAL_BACKOFF;
                                let observation = classify_status(message.status);
                                debug!(%endpoint, ?observation, "health update");
                                match observation {
                                    Observation::Healthy => emit(damped.observe(true, Instant::now()), "SERVING"),
                                    Observation::Unhealthy(reason) => emit(damped.observe(false, Instant::now()), &reason),
                                    Observation::NoHealthService => {}
                                }
                            }
                            Ok(None) => break Observation::Unhealthy("the health stream ended".into()),
                            Err(status) => break classify_error(&status),
                        },
                        () = sleep_until_some(hold) => emit(damped.hold_expired(), "hold-out over, SERVING"),
                        () = sleep_until_some(turn.is_some().then_some(give_back)) => drop(turn.take()),
                    }
                }
            }
        };
        match ended {
            Observation::NoHealthService => {
                debug!(%endpoint, "executor has no health service; assuming healthy");
                emit(damped.force_healthy(), "no health service");
                return;
            }
            Observation::Unhealthy(reason) if delivered => {
                debug!(%endpoint, %reason, "health watch broke; watching again before it counts");
                if !reopened {
                    reopened = true;
                    continue;
                }
            }
            Observation::Unhealthy(reason) => emit(damped.observe(false, Instant::now()), &reason),
            Observation::Healthy => {}
        }
        reopened = false;
        sleep(jittered(backoff)).await;
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

async fn sleep_until_some(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => sleep_until(deadline).await,
        None => pending().await,
    }
}

/// Between half and all of `backoff`, so a fleet does not reconnect in step.
fn jittered(backoff: Duration) -> Duration {
    backoff.mul_f64(rand::random_range(0.5..=1.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// SERVING is healthy; NOT_SERVING, SERVICE_UNKNOWN, UNKNOWN and garbage
    /// are not; UNIMPLEMENTED means no health service; NOT_FOUND and
    /// UNAVAILABLE errors are not ready.
    #[test]
    fn classification() {
        assert_eq!(
            classify_status(ServingStatus::Serving as i32),
            Observation::Healthy
        );
        for status in [
            ServingStatus::NotServing as i32,
            ServingStatus::ServiceUnknown as i32,
            ServingStatus::Unknown as i32,
            42,
        ] {
            assert!(matches!(classify_status(status), Observation::Unhealthy(_)));
        }
        assert_eq!(
            classify_error(&Status::unimplemented("no")),
            Observation::NoHealthService
        );
        for status in [Status::not_found("x"), Status::unavailable("refused")] {
            assert!(matches!(classify_error(&status), Observation::Unhealthy(_)));
        }
    }

    /// The third recovery within 30 s is held out 1 s, then 2 s, 4 s …
    /// capped at 30 s; a quiet 30 s forgives.
    #[test]
    fn flap_damper_growth_and_forgiveness() {
        let t0 = Instant::now();
        let s = Duration::from_secs(1);
        let mut damper = FlapDamper::default();
        assert_eq!(damper.recovered(t0), None);
        assert_eq!(damper.recovered(t0 + s), None);
        let holds: Vec<Option<Duration>> = (2..10).map(|i| damper.recovered(t0 + i * s)).collect();
        let secs = |n| Some(Duration::from_secs(n));
        assert_eq!(
            holds,
            [
                secs(1),
                secs(2),
                secs(4),
                secs(8),
                secs(16),
                secs(30),
                secs(30),
                secs(30)
            ]
        );
        let later = t0 + 60 * s;
        assert_eq!(damper.recovered(later), None, "quiet window forgives");
        assert_eq!(damper.recovered(later + s), None);
        assert_eq!(
            damper.recovered(later + 2 * s),
            secs(1),
            "hold restarts at 1 s"
        );
        // Recoveries spread wider than the window never count as flapping.
        let mut slow = FlapDamper::default();
        for i in 0..6 {
            assert_eq!(slow.recovered(t0 + i * 16 * s), None);
        }
    }

    /// Healthy at start; NOT_SERVING takes it out at once; a flapper's third
    /// recovery is held out until the hold ends; falling again cancels the hold.
    #[test]
    fn damped_state_machine() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut d = Damped::default();
        assert_eq!(d.observe(true, t0), None, "already healthy at registration");
        assert_eq!(d.observe(false, t0), Some(Change::Unhealthy));
        assert_eq!(d.observe(false, t0), None);
        assert_eq!(d.observe(true, t0 + ms(10)), Some(Change::Healthy));
        assert_eq!(d.observe(false, t0 + ms(20)), Some(Change::Unhealthy));
        assert_eq!(d.observe(true, t0 + ms(30)), Some(Change::Healthy));
        assert_eq!(d.observe(false, t0 + ms(40)), Some(Change::Unhealthy));
        assert_eq!(
            d.observe(true, t0 + ms(50)),
            Some(Change::HeldOut(FIRST_HOLD))
        );
        assert_eq!(d.hold_until(), Some(t0 + ms(50) + FIRST_HOLD));
        assert_eq!(d.observe(true, t0 + ms(60)), None, "still held");
        assert_eq!(d.hold_expired(), Some(Change::Healthy));
        assert_eq!(d.observe(false, t0 + ms(70)), Some(Change::Unhealthy));
        assert_eq!(
            d.observe(true, t0 + ms(80)),
            Some(Change::HeldOut(2 * FIRST_HOLD))
        );
        assert_eq!(d.observe(false, t0 + ms(90)), None, "already out");
        assert_eq!(d.hold_until(), None, "falling again cancels the hold");
        assert_eq!(d.hold_expired(), None, "not SERVING, stays out");
        assert_eq!(d.force_healthy(), Some(Change::Healthy));
    }
}
