//! This replica's session lease, and the health watches it holds: each
//! executor's `grpc.health.v1` status is watched by exactly one replica,
//! claimed under that replica's session lease (so the claim vanishes when
//! the replica dies and another takes it over), and its verdicts are written
//! to the store so every replica's snapshot agrees.

use super::Inner;
use super::model::WatchItem;
use crate::codec;
use crate::health_watch;
use crate::keys::{HealthRecord, Slot};
use crate::kv::{Compare, Op, Txn};
use futures_util::{StreamExt, stream};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

/// The session lease's TTL: how long a dead replica's health watches stay
/// unwatched before another replica takes them over.
const SESSION_TTL: Duration = Duration::from_secs(2);
/// How often the session lease is renewed.
const SESSION_RENEW: Duration = Duration::from_millis(500);
/// How often every executor's claim is looked at again, even without a
/// change.
const RECHECK: Duration = Duration::from_secs(1);
/// How long an unclaimed executor waits for the replicas holding fewer
/// claims before this one claims it anyway.
const CLAIM_GRACE: Duration = Duration::from_millis(500);
/// Claims and releases written to the store at once (enough to take a
/// dead replica's thousands over within the lease, few enough not to
/// crowd etcd's own heartbeats on a loaded machine).
const CONCURRENT_WRITES: usize = 16;

/// Keeps a session lease alive, granting a new one when it was lost.
pub(super) async fn keep_session(inner: Arc<Inner>) {
    let run = async {
        loop {
            let session = *inner.session.borrow();
            if session == 0 {
                match inner.kv.grant(SESSION_TTL).await {
                    Ok((id, _)) => {
                        debug!(session = id, "registry session lease granted");
                        if inner.config.watch_health && !inner.in_process {
                            announce(&inner, id).await;
                        }
                        inner.session.send_replace(id);
                    }
                    Err(error) => debug!(%error, "no session lease yet"),
                }
            } else {
                match inner.kv.keep_alive(session).await {
                    Ok(None) => {
                        warn!(
                            "registry session lease expired; its health watches go to other replicas"
                        );
                        inner.session.send_replace(0);
                    }
                    Ok(Some(_)) => {}
                    Err(error) => debug!(%error, "session lease not renewed"),
                }
            }
            tokio::time::sleep(SESSION_RENEW).await;
        }
    };
    inner.shutdown.run_until_cancelled(run).await;
}

/// Tells the other replicas this one is up, under its session lease, so
/// that it gets its share of the health watches from the first burst on
/// (without, the others learn of it only once it holds a claim).
async fn announce(inner: &Inner, session: i64) {
    let put = Op::Put {
        key: Slot::Replica(&inner.replica).key(),
        value: Vec::new(),
        lease: session,
    };
    if let Err(error) = inner.kv.txn(Txn::write(put)).await {
        debug!(%error, "replica not announced; the others learn of it by its claims");
    }
}

/// One health watch this replica runs.
struct Running {
    lease: i64,
    /// The session lease its claim was made under.
    session: i64,
    stop: CancellationToken,
}

impl Drop for Running {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// Claims unwatched executors and runs the watches this replica holds.
/// Each change to the store is looked at for the executors it changed;
/// every executor is looked at again once a [`RECHECK`] and when the
/// session changes.
pub(super) async fn watch_claimed(inner: Arc<Inner>) {
    let mut applied = inner.applied.subscribe();
    let mut session = inner.session.subscribe();
    let mut held = Held::default();
    let mut last_session = 0;
    let mut next_full = Instant::now();
    let mut fewest = None;
    let run = async {
        loop {
            let me = *session.borrow_and_update();
            applied.borrow_and_update();
            let full = me != last_session || Instant::now() >= next_full;
            if full {
                last_session = me;
                next_full = Instant::now() + RECHECK;
            }
            let due = held.due(fewest);
            let (items, claims) = inner.model().watch_items(full, due);
            fewest = claims
                .iter()
                .filter(|(replica, _)| **replica != inner.replica)
                .map(|(_, count)| *count)
                .min();
            let mut writes = Vec::new();
            for item in items {
                writes.extend(held.look_at(&inner, item, me, fewest));
            }
            held.write(&inner, writes, me).await;
            inner
                .metrics
                .health_watches
                .set(i64::try_from(held.running.len()).unwrap_or(i64::MAX));
            // Never sooner than a moment from now: a look that left an
            // executor overdue must not spin.
            let soonest = Instant::now() + Duration::from_millis(10);
            let wake = held
                .next_due()
                .map_or(next_full, |due| due.min(next_full))
                .max(soonest);
            tokio::select! {
                _ = applied.changed() => {}
                _ = session.changed() => {}
                () = tokio::time::sleep_until(wake) => {}
            }
        }
    };
    inner.shutdown.run_until_cancelled(run).await;
}

/// The watches this replica runs, and the unclaimed executors it left to
/// replicas holding fewer claims, since when.
#[derive(Default)]
struct Held {
    running: HashMap<Arc<str>, Running>,
    deferred: HashMap<Arc<str>, Instant>,
    /// When the first of `deferred` runs out of grace.
    first_due: Option<Instant>,
    /// Claims decided in this look, not yet written.
    claiming: usize,
}

/// A write to the store a look decided on.
enum ClaimWrite {
    /// Claim the watch of an unwatched executor.
    Claim {
        id: Arc<str>,
        lease: i64,
        endpoint: String,
    },
    /// Give up the claim on an executor that is gone.
    Release(Arc<str>),
}

impl Held {
    /// The executors left to others that are due another look (a change
    /// to one is looked at anyway): as many as this replica may claim
    /// before it holds more than `fewest`, and each whose grace ran out.
    /// So a burst of registrations is shared as the claims come in rather
    /// than left to whichever replica's grace runs out first.
    fn due(&mut self, fewest: Option<usize>) -> Vec<Arc<str>> {
        let room = fewest.map_or(usize::MAX, |fewest| {
            (fewest + 1).saturating_sub(self.running.len())
        });
        let mut due: Vec<Arc<str>> = self.deferred.keys().take(room).cloned().collect();
        if self.first_due.is_some_and(|first| first <= Instant::now()) {
            due.extend(
                self.deferred
                    .iter()
                    .filter(|(_, since)| since.elapsed() >= CLAIM_GRACE)
                    .map(|(id, _)| id.clone()),
            );
            self.first_due = None;
        }
        due
    }

    /// When the next of the executors left to others runs out of grace.
    fn next_due(&mut self) -> Option<Instant> {
        if self.first_due.is_none() {
            self.first_due = self
                .deferred
                .values()
                .min()
                .map(|since| *since + CLAIM_GRACE);
        }
        self.first_due
    }

    /// Starts, keeps or stops the watch of one executor, or says which
    /// claim to write. `fewest`: the fewest claims another replica holds.
    fn look_at(
        &mut self,
        inner: &Arc<Inner>,
        item: WatchItem,
        me: i64,
        fewest: Option<usize>,
    ) -> Option<ClaimWrite> {
        let WatchItem { id, exec, holder } = item;
        let Some((lease, endpoint)) = exec else {
            self.deferred.remove(&id);
            return self.running.remove(&id).map(|_| ClaimWrite::Release(id));
        };
        // A claim this replica just won may not be applied to the model
        // yet: its watch keeps running (stopping it could cancel the first
        // verdict's write, and the watch reports only changes after it).
        let mine = me != 0
            && match &holder {
                Some(holder) => holder == &inner.replica,
                None => self.running.get(&id).is_some_and(|r| r.session == me),
            };
        if !mine {
            self.running.remove(&id);
            if holder.is_some() || me == 0 {
                self.deferred.remove(&id);
                return None;
            }
            if !self.my_turn(&id, fewest) {
                return None;
            }
            self.deferred.remove(&id);
            self.claiming += 1;
            return Some(ClaimWrite::Claim {
                id,
                lease,
                endpoint,
            });
        }
        if self.running.get(&id).is_none_or(|r| r.lease != lease) {
            let running = start(inner, id.clone(), lease, endpoint, me);
            self.running.insert(id, running);
        }
        None
    }

    /// Writes `writes` to the store, [`CONCURRENT_WRITES`] at a time (a
    /// dead replica's thousands of executors are claimed in a second or
    /// two, not one transaction after another), and starts the watches
    /// whose claims were won under session `me`.
    async fn write(&mut self, inner: &Arc<Inner>, writes: Vec<ClaimWrite>, me: i64) {
        let mut done = stream::iter(writes)
            .map(|write| async move {
                match write {
                    ClaimWrite::Claim {
                        id,
                        lease,
                        endpoint,
                    } => {
                        let won = claim(inner, &id, me).await;
                        won.then_some((id, lease, endpoint))
                    }
                    ClaimWrite::Release(id) => {
                        release(inner, &id).await;
                        None
                    }
                }
            })
            .buffer_unordered(CONCURRENT_WRITES);
        while let Some(outcome) = done.next().await {
            if let Some((id, lease, endpoint)) = outcome {
                debug!(executor_id = &*id, "health watch claimed");
                let running = start(inner, id.clone(), lease, endpoint, me);
                self.running.insert(id, running);
            }
        }
        self.claiming = 0;
    }

    /// Whether to claim `id` now: when no other replica holds fewer claims
    /// than this one, or when it has waited [`CLAIM_GRACE`] for them. So
    /// watches spread over the replicas (and a dead one's over the
    /// survivors), and none stays unwatched for long.
    fn my_turn(&mut self, id: &Arc<str>, fewest: Option<usize>) -> bool {
        if fewest.is_none_or(|fewest| self.running.len() + self.claiming <= fewest) {
            return true;
        }
        let since = *self.deferred.entry(id.clone()).or_insert_with(|| {
            let now = Instant::now();
            self.first_due = Some(
                self.first_due
                    .map_or(now + CLAIM_GRACE, |first| first.min(now + CLAIM_GRACE)),
            );
            now
        });
        since.elapsed() >= CLAIM_GRACE
    }
}

/// Claims the health watch of `id` under session lease `session`.
async fn claim(inner: &Inner, id: &str, session: i64) -> bool {
    let key = Slot::Watcher(id).key();
    let put = Op::Put {
        key: key.clone(),
        value: inner.replica.clone().into_bytes(),
        lease: session,
    };
    let txn = Txn::if_unchanged(&key, 0, put);
    inner.kv.txn(txn).await.is_ok_and(|r| r.succeeded)
}

/// Gives up the claim on a gone executor (only if still ours).
async fn release(inner: &Inner, id: &str) {
    let key = Slot::Watcher(id).key();
    let txn = Txn {
        compare: vec![Compare::Value(
            key.clone(),
            inner.replica.clone().into_bytes(),
        )],
        success: vec![Op::Delete { key }],
    };
    if let Err(error) = inner.kv.txn(txn).await {
        debug!(%error, "health claim not released; it goes with the session lease");
    }
}

/// Starts watching `id`'s health; verdicts are written in order, attached
/// to the executor's lease (so they vanish with its registration); the
/// claim was made under the session lease `session`.
fn start(inner: &Arc<Inner>, id: Arc<str>, lease: i64, endpoint: String, session: i64) -> Running {
    let stop = inner.shutdown.child_token();
    let (tx, mut rx) = mpsc::unbounded_channel::<(bool, String)>();
    let report: health_watch::Report = Box::new(move |healthy, reason| {
        let _ = tx.send((healthy, reason.to_owned()));
    });
    tokio::spawn(health_watch::watch(
        endpoint.as_str().into(),
        inner.config.tls.clone(),
        stop.clone(),
        report,
        inner.metrics.flap_holds.clone(),
    ));
    let writer = inner.clone();
    let writer_stop = stop.clone();
    tokio::spawn(async move {
        let write = async {
            let mut first = true;
            while let Some((healthy, reason)) = rx.recv().await {
                let record = HealthRecord {
                    lease,
                    healthy,
                    reason: reason.clone(),
                };
                let key = Slot::Health(&id).key();
                let value = codec::encode(&record);
                // A watch taken over from another replica starts with the
                // verdict that replica stored: reading it is cheaper for
                // etcd than writing it again (no proposal, no event to
                // every replica), and a dead replica's thousands of
                // executors are taken over at once.
                if std::mem::take(&mut first)
                    && matches!(writer.kv.get(&key).await, Ok(Some(stored)) if stored.value == value)
                {
                    continue;
                }
                let put = Op::Put { key, value, lease };
                match writer.kv.txn(Txn::write(put)).await.map(|o| o.revision) {
                    Ok(version) => {
                        writer.metrics.transition(healthy);
                        info!(
                            executor_id = &*id,
                            healthy, reason, version, "executor health changed"
                        );
                    }
                    Err(error) => warn!(executor_id = &*id, %error, "health verdict not stored"),
                }
            }
        };
        writer_stop.run_until_cancelled(write).await;
    });
    Running {
        lease,
        session,
        stop,
    }
}
