//! Identical calls in flight coalesced into one, every caller keeping its own deadline and cancellation: a leader that goes away, or whose own shorter deadline cut the call short, fails nobody else — the joiners with time left fly again.
//!
//! The first caller of a key leads a flight: it runs its own call (with its
//! own deadline and relay). Callers of the same key that arrive while
//! it flies join it: they run nothing and wait for its answer, each only
//! until its own deadline (then it is out of time, alone). A joiner that
//! goes away just stops waiting. When the leader goes away (its caller hung
//! up) before an answer, or its answer is DEADLINE_EXCEEDED under a
//! deadline of its caller's that is earlier than a joiner's, that joiner
//! boards again: it leads a fresh flight or joins the one another survivor
//! just started. So at most one flight per key runs at a time, and an
//! answer reaches a caller only if it was made within that caller's time.

use super::{Key, lock};
use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use tokio::sync::watch;
use tokio::time::Instant;
use toolmesh::pb::{ErrorCode, ToolResult};
use tracing::debug;

/// When a caller's call must end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Deadline {
    pub(crate) at: Instant,
    /// Whether `at` is the caller's own deadline; else the tool's timeout
    /// bounds the call, alike for every caller of one contract.
    pub(crate) callers_own: bool,
}

/// How one caller's call went through its flights.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Flown {
    /// It led a flight: its own call ran and gave this.
    Ran(ToolResult),
    /// It joined another caller's flight, which gave this.
    Shared(ToolResult),
    /// Its own deadline passed while it waited for another caller's flight.
    OutOfTime,
}

/// Where a flight stands.
#[derive(Debug, Clone)]
enum Stage {
    Flying,
    /// Its call ended with this answer, run under the leader's deadline.
    Landed(Box<ToolResult>, Deadline),
    /// Its leader went away before an answer.
    Abandoned,
}

/// One flight: its leader sets the stage, joiners watch it.
type Flight = Arc<watch::Sender<Stage>>;

/// The flights in the air, by key.
#[derive(Debug, Default)]
pub(crate) struct Flights {
    flying: Mutex<HashMap<Arc<Key>, Flight>>,
}

/// What a caller found when boarding.
enum Boarding {
    /// No flight for the key: this caller leads a new one.
    Lead(Flight),
    /// One flies: this caller waits for it.
    Join(watch::Receiver<Stage>),
}

impl Flights {
    /// Runs `call` unless an identical call (same `key`) is in flight, in
    /// which case its answer is shared if it came within `deadline`'s
    /// caller's time; see the module's documentation.
    pub(crate) async fn coalesce<F>(&self, key: &Arc<Key>, deadline: Deadline, call: F) -> Flown
    where
        F: Future<Output = ToolResult>,
    {
        loop {
            let stage = match self.board(key) {
                Boarding::Lead(flight) => {
                    let lead = Lead {
                        flights: self,
                        key,
                        flight,
                        deadline,
                    };
                    let result = call.await;
                    lead.land(result.clone());
                    return Flown::Ran(result);
                }
                Boarding::Join(stage) => {
                    debug!(tool = %key.contract().def().label(), "joins the identical call in flight");
                    stage
                }
            };
            match tokio::time::timeout_at(deadline.at, landing(stage)).await {
                Err(_) => return Flown::OutOfTime,
                Ok(Stage::Landed(result, leaders))
                    if !cut_short_for(deadline, leaders, &result) =>
                {
                    return Flown::Shared(*result);
                }
                // Abandoned, or cut short by a deadline this caller does not share.
                Ok(_) => {}
            }
        }
    }

    /// Leads a new flight for `key`, or joins the one in the air.
    fn board(&self, key: &Arc<Key>) -> Boarding {
        let mut flying = lock(&self.flying);
        if let Some(flight) = flying.get(key) {
            return Boarding::Join(flight.subscribe());
        }
        let flight = Arc::new(watch::Sender::new(Stage::Flying));
        flying.insert(key.clone(), flight.clone());
        Boarding::Lead(flight)
    }

    /// Keys with a flight in the air.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        lock(&self.flying).len()
    }
}

/// How the flight `stage` watches ended (a flight whose leader vanished
/// without a word counts as abandoned).
async fn landing(mut stage: watch::Receiver<Stage>) -> Stage {
    match stage.wait_for(|s| !matches!(s, Stage::Flying)).await {
        Ok(landed) => landed.clone(),
        Err(_) => Stage::Abandoned,
    }
}

/// Whether the flight's `result` is the leader's own deadline passing —
/// DEADLINE_EXCEEDED under a deadline of the leader's caller that is
/// earlier than this caller's — which this caller must not inherit. A
/// DEADLINE_EXCEEDED under the tool's own timeout is everyone's answer.
fn cut_short_for(mine: Deadline, leaders: Deadline, result: &ToolResult) -> bool {
    leaders.callers_own
        && mine.at > leaders.at
        && result
            .error
            .as_ref()
            .is_some_and(|e| e.code == ErrorCode::DeadlineExceeded as i32)
}

/// A caller leading a flight. However the lead ends — landed, or dropped
/// because its caller went away — the flight leaves the map and its
/// joiners hear how it ended, so no flight outlives its leader.
struct Lead<'a> {
    flights: &'a Flights,
    key: &'a Arc<Key>,
    flight: Flight,
    deadline: Deadline,
}

impl Lead<'_> {
    /// The call answered `result`.
    fn land(self, result: ToolResult) {
        self.end(Stage::Landed(Box::new(result), self.deadline));
    }

    /// Takes the flight out of the map and tells its joiners `how` it
    /// ended, unless they heard already.
    fn end(&self, how: Stage) {
        {
            let mut flying = lock(&self.flights.flying);
            if flying
                .get(self.key)
                .is_some_and(|f| Arc::ptr_eq(f, &self.flight))
            {
                flying.remove(self.key);
            }
        }
        self.flight.send_if_modified(|stage| {
            let flying = matches!(stage, Stage::Flying);
            if flying {
                *stage = how;
            }
            flying
        });
    }
}

impl Drop for Lead<'_> {
    fn drop(&mut self) {
        self.end(Stage::Abandoned);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::result_cache::key::tests::def;
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::time::Duration;
    use toolmesh::pb::ToolError;

    fn key() -> Arc<Key> {
        Arc::new(Key::new(def(""), "k".into()))
    }

    fn answer(text: &str) -> ToolResult {
        ToolResult {
            output: text.into(),
            ..ToolResult::default()
        }
    }

    fn deadline_exceeded() -> ToolResult {
        ToolResult {
            error: Some(ToolError {
                code: ErrorCode::DeadlineExceeded as i32,
                message: "out of time".into(),
                ..ToolError::default()
            }),
            ..ToolResult::default()
        }
    }

    /// A caller's own deadline, `ms` from now.
    fn own(ms: u64) -> Deadline {
        Deadline {
            at: Instant::now() + Duration::from_millis(ms),
            callers_own: true,
        }
    }

    /// A call that takes `ms` (or ends with DEADLINE_EXCEEDED at
    /// `deadline`, whichever comes first), counting its runs.
    async fn work(runs: &AtomicU32, ms: u64, deadline: Deadline) -> ToolResult {
        runs.fetch_add(1, Ordering::SeqCst);
        let done = Instant::now() + Duration::from_millis(ms);
        if done <= deadline.at {
            tokio::time::sleep_until(done).await;
            answer("done")
        } else {
            tokio::time::sleep_until(deadline.at).await;
            deadline_exceeded()
        }
    }

    /// The leader's short deadline cuts its own call short; a joiner with
    /// more time flies again and gets the answer.
    #[tokio::test(start_paused = true)]
    async fn a_leaders_deadline_is_its_own() {
        let (flights, key, runs) = (Flights::default(), key(), AtomicU32::new(0));
        let (short, long) = (own(300), own(5000));
        let leader = flights.coalesce(&key, short, work(&runs, 1000, short));
        let joiner = async {
            tokio::time::sleep(Duration::from_millis(10)).await;
            flights.coalesce(&key, long, work(&runs, 1000, long)).await
        };
        let (led, joined) = tokio::join!(leader, joiner);
        assert_eq!(led, Flown::Ran(deadline_exceeded()));
        assert_eq!(joined, Flown::Ran(answer("done")), "it ran again");
        assert_eq!(runs.load(Ordering::SeqCst), 2);
        assert_eq!(flights.len(), 0, "no flight outlives its calls");
    }

    /// A DEADLINE_EXCEEDED under the tool's own timeout is everyone's
    /// answer: shared, not run again.
    #[tokio::test(start_paused = true)]
    async fn the_tools_timeout_is_everyones() {
        let (flights, key, runs) = (Flights::default(), key(), AtomicU32::new(0));
        let tool_bound = Deadline {
            callers_own: false,
            ..own(300)
        };
        let leader = flights.coalesce(&key, tool_bound, work(&runs, 1000, tool_bound));
        let joiner = async {
            tokio::time::sleep(Duration::from_millis(10)).await;
            flights
                .coalesce(&key, own(5000), work(&runs, 1000, own(5000)))
                .await
        };
        let (_, joined) = tokio::join!(leader, joiner);
        assert_eq!(joined, Flown::Shared(deadline_exceeded()));
        assert_eq!(runs.load(Ordering::SeqCst), 1);
    }

    /// A joiner stops waiting at its own deadline; the flight goes on and
    /// its leader gets the answer.
    #[tokio::test(start_paused = true)]
    async fn a_joiner_waits_only_its_own_time() {
        let (flights, key, runs) = (Flights::default(), key(), AtomicU32::new(0));
        let long = own(5000);
        let leader = flights.coalesce(&key, long, work(&runs, 1000, long));
        let joiner = async {
            tokio::time::sleep(Duration::from_millis(10)).await;
            flights
                .coalesce(&key, own(300), work(&runs, 1, own(300)))
                .await
        };
        let (led, joined) = tokio::join!(leader, joiner);
        assert_eq!(
            (led, joined),
            (Flown::Ran(answer("done")), Flown::OutOfTime)
        );
        assert_eq!(runs.load(Ordering::SeqCst), 1);
    }

    /// A leader whose caller goes away fails nobody: its joiner flies
    /// again; a joiner that goes away changes nothing for the leader.
    #[tokio::test(start_paused = true)]
    async fn hang_ups_are_their_own() {
        let (flights, key, runs) = (Flights::default(), key(), AtomicU32::new(0));
        let long = own(5000);
        let leader = flights.coalesce(&key, long, work(&runs, 1000, long));
        let hung_up = tokio::time::timeout(Duration::from_millis(100), leader);
        let joiner = async {
            tokio::time::sleep(Duration::from_millis(10)).await;
            flights.coalesce(&key, long, work(&runs, 1000, long)).await
        };
        let (gone, joined) = tokio::join!(hung_up, joiner);
        assert!(gone.is_err(), "the leader's caller went away");
        assert_eq!(joined, Flown::Ran(answer("done")));
        assert_eq!(runs.load(Ordering::SeqCst), 2);

        let leader = flights.coalesce(&key, long, work(&runs, 1000, long));
        let joiner = async {
            tokio::time::sleep(Duration::from_millis(10)).await;
            flights.coalesce(&key, long, work(&runs, 1000, long)).await
        };
        let hung_up = tokio::time::timeout(Duration::from_millis(100), joiner);
        let (led, gone) = tokio::join!(leader, hung_up);
        assert!(gone.is_err(), "the joiner's caller went away");
        assert_eq!(led, Flown::Ran(answer("done")));
        assert_eq!(runs.load(Ordering::SeqCst), 3);
        assert_eq!(flights.len(), 0);
    }

    /// Identical calls in flight run once and share the answer; a later
    /// call runs again.
    #[tokio::test(start_paused = true)]
    async fn identical_calls_coalesce() {
        let (flights, key, runs) = (Flights::default(), key(), AtomicU32::new(0));
        let long = own(5000);
        let call = || flights.coalesce(&key, long, work(&runs, 100, long));
        let (a, b, c, d, e) = tokio::join!(call(), call(), call(), call(), call());
        let flown = [a, b, c, d, e];
        let ran = flown.iter().filter(|f| matches!(f, Flown::Ran(_))).count();
        let shared = flown
            .iter()
            .filter(|f| **f == Flown::Shared(answer("done")))
            .count();
        assert_eq!((ran, shared, runs.load(Ordering::SeqCst)), (1, 4, 1));
        flights.coalesce(&key, long, work(&runs, 1, long)).await;
        assert_eq!(runs.load(Ordering::SeqCst), 2);
        assert_eq!(flights.len(), 0, "no flight outlives its calls");
    }
}
