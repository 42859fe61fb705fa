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
use crate::kv::{Compare, KvError, Op, Txn};
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
/// Long enough to ride out a few slow renewals on a loaded machine (at
/// 2 s, the burst of a dead replica's take-over at 10,000 executors let
/// the survivors' own sessions expire, and each expiry threw thousands of
/// watches back up for grabs), short enough that the executors a dead
/// replica watched are watched again well within their 10 s lease.
const SESSION_TTL: Duration = Duration::from_secs(5);
/// How often the session lease is renewed (a few tries within its TTL).
const SESSION_RENEW: Duration = Duration::from_secs(1);
/// Health watches a replica opens at once.
pub(super) const OPENING_WATCHES: usize = 64;
/// How often every executor's claim is looked at again, even without a
/// change.
const RECHECK: Duration = Duration::from_secs(1);
/// How long an unclaimed executor waits for the replicas holding fewer
/// claims before this one claims it anyway.
const CLAIM_GRACE: Duration = Duration::from_millis(500);
/// Releases of claims on gone executors written to the store at once.
const CONCURRENT_WRITES: usize = 16;
/// Claims written in one transaction at most (within etcd's default limit
/// of 128 operations).
const CLAIM_BATCH: usize = 64;
/// Claim transactions in flight at once: a dead replica's 3,333 executors
/// are 53 transactions, taken over in a few round trips.
const CONCURRENT_BATCHES: usize = 4;

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
                    Ok(None) => session_gone(&inner, session),
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
    let mut others = Others::default();
    let run = async {
        loop {
            let me = *session.borrow_and_update();
            applied.borrow_and_update();
            let full = me != last_session || Instant::now() >= next_full;
            if full {
                last_session = me;
                next_full = Instant::now() + RECHECK;
            }
            let due = held.due(others.fewest);
            let (items, claims) = inner.model().watch_items(full, due);
            others = Others::of(&claims, &inner.replica);
            let candidates = others.candidates(held.running.len(), &inner.replica);
            let mut writes = Vec::new();
            for item in items {
                writes.extend(held.look_at(&inner, item, me, &candidates));
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
}

/// The claims the other replicas hold, as this replica's model shows them.
#[derive(Debug, Default)]
struct Others {
    /// The fewest any other replica holds (`None`: this one is alone).
    fewest: Option<usize>,
    /// The other replicas holding that many.
    at_fewest: Vec<String>,
}

impl Others {
    /// From every replica's claim count, leaving out `me`.
    fn of(claims: &HashMap<String, usize>, me: &str) -> Others {
        let fewest = claims
            .iter()
            .filter(|(replica, _)| *replica != me)
            .map(|(_, count)| *count)
            .min();
        let at_fewest = claims
            .iter()
            .filter(|(replica, count)| *replica != me && Some(**count) == fewest)
            .map(|(replica, _)| replica.clone())
            .collect();
        Others { fewest, at_fewest }
    }

    /// The replicas that should claim an unwatched executor now, when
    /// this one (`me`) runs `mine` watches: those holding the fewest.
    fn candidates(&self, mine: usize, me: &str) -> Vec<String> {
        match self.fewest {
            Some(fewest) if mine > fewest => self.at_fewest.clone(),
            Some(fewest) if mine == fewest => {
                let mut all = self.at_fewest.clone();
                all.push(me.to_owned());
                all
            }
            _ => vec![me.to_owned()],
        }
    }
}

/// The replica among `candidates` that claims executor `id`: the one of
/// highest weight for the pair (rendezvous hashing), so replicas with the
/// same view agree without talking, a burst is split among them, and a
/// dead replica's executors are spread over the survivors.
fn chosen<'a>(id: &str, candidates: &'a [String]) -> Option<&'a str> {
    candidates
        .iter()
        .max_by_key(|replica| weight(id, replica))
        .map(String::as_str)
}

/// A well-mixed 64-bit weight of (`id`, `replica`), the same in every
/// process and build (FNV-1a, then the SplitMix64 finaliser).
fn weight(id: &str, replica: &str) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in id.bytes().chain([0]).chain(replica.bytes()) {
        hash = (hash ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash = (hash ^ (hash >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    hash = (hash ^ (hash >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    hash ^ (hash >> 31)
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
    /// claim to write. `candidates`: the replicas that should claim an
    /// unwatched executor now.
    fn look_at(
        &mut self,
        inner: &Arc<Inner>,
        item: WatchItem,
        me: i64,
        candidates: &[String],
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
            if !self.my_turn(&id, chosen(&id, candidates) == Some(&*inner.replica)) {
                return None;
            }
            self.deferred.remove(&id);
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

    /// Writes `writes` to the store and starts the watches whose claims
    /// were won under session `me`. Claims go [`CLAIM_BATCH`] to a
    /// transaction (a dead replica's thousands of executors are a few
    /// dozen proposals to etcd, not thousands), [`CONCURRENT_BATCHES`] at
    /// a time; releases [`CONCURRENT_WRITES`] at a time.
    async fn write(&mut self, inner: &Arc<Inner>, writes: Vec<ClaimWrite>, me: i64) {
        let mut claims = Vec::new();
        let mut releases = Vec::new();
        for write in writes {
            match write {
                ClaimWrite::Claim {
                    id,
                    lease,
                    endpoint,
                } => claims.push((id, lease, endpoint)),
                ClaimWrite::Release(id) => releases.push(id),
            }
        }
        let mut batches = Vec::new();
        while !claims.is_empty() {
            let rest = claims.split_off(claims.len().min(CLAIM_BATCH));
            batches.push(std::mem::replace(&mut claims, rest));
        }
        let mut won = stream::iter(batches)
            .map(|batch| claim_batch(inner, batch, me))
            .buffer_unordered(CONCURRENT_BATCHES);
        while let Some(won) = won.next().await {
            for (id, lease, endpoint) in won {
                debug!(executor_id = &*id, "health watch claimed");
                let running = start(inner, id.clone(), lease, endpoint, me);
                self.running.insert(id, running);
            }
        }
        stream::iter(releases)
            .for_each_concurrent(
                CONCURRENT_WRITES,
                |id| async move { release(inner, &id).await },
            )
            .await;
    }

    /// Whether to claim `id` now: when this replica is the one `chosen`
    /// for it, or when it has waited [`CLAIM_GRACE`] for that one. So
    /// watches spread over the replicas (and a dead one's over the
    /// survivors) without two replicas racing for each, and none stays
    /// unwatched for long.
    fn my_turn(&mut self, id: &Arc<str>, chosen: bool) -> bool {
        if chosen {
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

/// Claims the health watches of `batch` under session lease `session`:
/// all in one transaction when none is claimed yet, else one by one (the
/// others' claims stand); the claims won.
async fn claim_batch(
    inner: &Inner,
    batch: Vec<(Arc<str>, i64, String)>,
    session: i64,
) -> Vec<(Arc<str>, i64, String)> {
    let claim = |id: &str| {
        let key = Slot::Watcher(id).key();
        let put = Op::Put {
            key: key.clone(),
            value: inner.replica.clone().into_bytes(),
            lease: session,
        };
        (Compare::absent(key), put)
    };
    // Whether the claims were made; `None` when the session is gone
    // (nothing more can be claimed under it).
    let made = async |compare, success| match inner.kv.txn(Txn { compare, success }).await {
        Ok(outcome) => Some(outcome.succeeded),
        Err(KvError::LeaseGone(gone)) if gone == session => {
            session_gone(inner, session);
            None
        }
        Err(error) => {
            debug!(%error, "health claims not written");
            Some(false)
        }
    };
    if batch.len() > 1 {
        let (compare, success) = batch.iter().map(|(id, ..)| claim(id)).unzip();
        match made(compare, success).await {
            Some(true) => return batch,
            Some(false) => {}
            None => return Vec::new(),
        }
    }
    let mut won = Vec::new();
    for item in batch {
        let (compare, put) = claim(&item.0);
        match made(vec![compare], vec![put]).await {
            Some(true) => won.push(item),
            Some(false) => {}
            None => break,
        }
    }
    won
}

/// etcd no longer holds session lease `session`: stop claiming under it at
/// once (the session keeper grants a new one) rather than on its next
/// renewal, each claim until then one more refused transaction.
fn session_gone(inner: &Inner, session: i64) {
    let ended = inner.session.send_if_modified(|current| {
        let ours = *current == session;
        if ours {
            *current = 0;
        }
        ours
    });
    if ended {
        warn!("registry session lease expired; its health watches go to other replicas");
    }
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
        Arc::clone(&inner.opening_watches),
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
                // verdict that replica stored: when this replica's view of
                // the store holds the same, nothing is written (no
                // proposal, no event to every replica, no read of etcd),
                // and a dead replica's thousands of executors are taken
                // over at once.
                if std::mem::take(&mut first) && writer.model().health_of(&id) == Some(&record) {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn replicas(names: &[&str]) -> Vec<String> {
        names.iter().map(|n| (*n).to_owned()).collect()
    }

    /// Every replica with the same view chooses the same one, and a burst
    /// is split about evenly: among three, and among two survivors.
    #[test]
    fn a_burst_is_split_among_the_replicas_alike() {
        for names in [&["r-a", "r-b", "r-c"][..], &["r-a", "r-c"][..]] {
            let candidates = replicas(names);
            let mut reversed = candidates.clone();
            reversed.reverse();
            let mut share: HashMap<&str, usize> = HashMap::new();
            for e in 0..3_000 {
                let id = format!("org-{e:05}-1");
                let one = chosen(&id, &candidates).unwrap();
                assert_eq!(Some(one), chosen(&id, &reversed), "{id}");
                *share.entry(one).or_default() += 1;
            }
            let even = 3_000 / names.len();
            for name in names {
                let got = share.get(name).copied().unwrap_or(0);
                assert!(
                    got.abs_diff(even) < even / 10,
                    "{name} chosen for {got} of 3000 among {names:?}"
                );
            }
        }
    }

    /// The replicas holding the fewest claims are the candidates: this
    /// one alone when it holds fewer, with the others at parity, not at
    /// all when it holds more; alone, always.
    #[test]
    fn the_replicas_holding_fewest_claim() {
        let claims: HashMap<String, usize> = [("me", 4), ("b", 3), ("c", 3), ("d", 5)]
            .into_iter()
            .map(|(r, n)| (r.to_owned(), n))
            .collect();
        let others = Others::of(&claims, "me");
        assert_eq!(others.fewest, Some(3));
        let mut at = others.candidates(4, "me");
        at.sort();
        assert_eq!(at, replicas(&["b", "c"]));
        let mut at = others.candidates(3, "me");
        at.sort();
        assert_eq!(at, replicas(&["b", "c", "me"]));
        assert_eq!(others.candidates(2, "me"), replicas(&["me"]));
        let alone = Others::of(&HashMap::new(), "me");
        assert_eq!(alone.candidates(100, "me"), replicas(&["me"]));
    }
}
