//! Keeping a replica's snapshot in step with etcd: a full read, then a
//! watch from the next revision, one snapshot per revision; a full read
//! again after compaction; a probe that notices a silent watch or a lost
//! quorum and turns the replica not writable after a few seconds.

use super::Inner;
use super::model::Model;
use crate::keys::{PREFIX, Slot};
use crate::kv::{Batch, KvError, Op, Txn};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::{Instant, sleep};
use toolmesh::Snapshot;
use toolmesh_etcd::EtcdError;
use tracing::{info, warn};

/// How often the watch is checked against etcd's revision.
const PROBE: Duration = Duration::from_millis(500);
/// How long a probe may take before etcd counts as failing.
const PROBE_TIMEOUT: Duration = Duration::from_secs(1);
/// How long etcd may fail before the replica reports itself not writable.
const OUTAGE_GRACE: Duration = Duration::from_secs(2);
const MAX_BACKOFF: Duration = Duration::from_secs(1);

/// Tracks how long etcd has been failing; a watchdog turns the replica
/// not writable once that lasts [`OUTAGE_GRACE`].
pub(super) struct Outage {
    since: std::sync::Mutex<Option<Instant>>,
}

impl Default for Outage {
    fn default() -> Self {
        Outage {
            since: std::sync::Mutex::new(None),
        }
    }
}

impl Outage {
    fn since(&self) -> std::sync::MutexGuard<'_, Option<Instant>> {
        self.since
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn failed(&self, error: &dyn std::fmt::Display) {
        let mut since = self.since();
        if since.is_none() {
            warn!(%error, "etcd unavailable; serving the last snapshot");
            *since = Some(Instant::now());
        }
    }

    fn ok(&self, inner: &Inner) {
        if self.since().take().is_some() {
            info!("etcd reachable again");
        }
        if !*inner.writable.borrow() {
            inner.writable.send_replace(true);
        }
    }
}

/// Turns the replica not writable once etcd has failed for [`OUTAGE_GRACE`].
pub(super) async fn watchdog(inner: Arc<Inner>) {
    let run = async {
        loop {
            let failing = inner
                .outage
                .since()
                .is_some_and(|s| s.elapsed() >= OUTAGE_GRACE);
            if failing && *inner.writable.borrow() {
                warn!("etcd has had no leader for {OUTAGE_GRACE:?}; reporting NOT_SERVING");
                inner.writable.send_replace(false);
            }
            sleep(Duration::from_millis(100)).await;
        }
    };
    inner.shutdown.run_until_cancelled(run).await;
}

/// Runs until the store shuts down.
pub(super) async fn follow(inner: Arc<Inner>) {
    let outage = &inner.outage;
    let mut backoff = Duration::from_millis(50);
    let shutdown = inner.shutdown.clone();
    let run = async {
        loop {
            if let Err(error) = load(&inner).await {
                outage.failed(&error);
                sleep(backoff).await;
                backoff = (backoff * 2).min(MAX_BACKOFF);
                continue;
            }
            outage.ok(&inner);
            backoff = Duration::from_millis(50);
            // Watch until compaction forces a full read again.
            loop {
                let from = *inner.applied.borrow() + 1;
                match watch(&inner, from).await {
                    Err(KvError::Compacted { compacted }) => {
                        warn!(
                            compacted,
                            from,
                            "etcd compacted past this replica's revision; reading the store again"
                        );
                        break;
                    }
                    Err(error) => {
                        outage.failed(&error);
                        sleep(backoff).await;
                        backoff = (backoff * 2).min(MAX_BACKOFF);
                    }
                    Ok(()) => backoff = Duration::from_millis(50),
                }
            }
        }
    };
    shutdown.run_until_cancelled(run).await;
}

/// Reads the whole prefix and publishes it as one snapshot.
pub(super) async fn load(inner: &Inner) -> Result<(), KvError> {
    ensure_epoch(inner).await?;
    let (entries, revision) = inner.kv.range(PREFIX.as_bytes(), false).await?;
    let (model, touched) = Model::load(entries);
    let current = inner.published.current();
    if inner.in_process && current.epoch() == model.epoch {
        // Read again in this process (a watch started late): the newest
        // snapshot and what it missed, as one change.
        let touched = touched.with_all_of(&current);
        if let Some(snapshot) = model.snapshot(&current, touched, inner.next_version(revision)) {
            inner.published.publish(snapshot);
        }
        *inner.model() = model;
    } else {
        let base = Snapshot::empty(model.epoch.clone());
        let version = inner.next_version(revision);
        let snapshot = model.snapshot(&base, touched, version).unwrap_or_else(|| {
            let mut empty = base.next();
            empty.at_version(version);
            empty.finish()
        });
        *inner.model() = model;
        if current.epoch() != snapshot.epoch() || current.version() < snapshot.version() {
            inner.published.publish(snapshot);
        }
    }
    inner.applied.send_replace(revision);
    advance(&inner.progressed, revision);
    info!(revision, store = %inner.origin, "read the store");
    Ok(())
}

/// Creates the cluster id once; every replica uses it as its epoch.
async fn ensure_epoch(inner: &Inner) -> Result<(), KvError> {
    let key = Slot::Epoch.key();
    if inner.kv.get(&key).await?.is_some() {
        return Ok(());
    }
    let id = uuid::Uuid::new_v4().to_string();
    let put = Op::Put {
        key: key.clone(),
        value: id.into_bytes(),
        lease: 0,
    };
    inner.kv.txn(Txn::if_unchanged(&key, 0, put)).await?;
    Ok(())
}

/// One watch from `from`; `Ok` when it should simply be opened again.
async fn watch(inner: &Inner, from: i64) -> Result<(), KvError> {
    let outage = &inner.outage;
    let mut stream = inner.kv.watch(PREFIX.as_bytes(), from).await?;
    outage.ok(inner);
    let mut probe = tokio::time::interval(PROBE);
    probe.tick().await;
    let mut lagging_since: Option<Instant> = None;
    loop {
        tokio::select! {
            batch = stream.next() => {
                apply(inner, batch?);
                lagging_since = None;
            }
            () = inner.progress.notified() => stream.request_progress(),
            _ = probe.tick() => {
                // A watch on a frozen or partitioned member stays silent:
                // ask the cluster (linearizable) where it is.
                let answer = tokio::time::timeout(PROBE_TIMEOUT, inner.kv.revision())
                    .await
                    .unwrap_or_else(|_| Err(KvError::Etcd(EtcdError::Unavailable {
                        endpoints: inner.origin.clone(),
                        last: format!("no answer to a read within {PROBE_TIMEOUT:?}"),
                    })));
                let revision = match answer {
                    Ok(revision) => revision,
                    Err(error) => {
                        outage.failed(&error);
                        return Err(error);
                    }
                };
                outage.ok(inner);
                if revision > *inner.progressed.borrow() {
                    // Changes to keys outside the prefix move etcd's
                    // revision too: a progress notification tells how far
                    // the watch has come.
                    stream.request_progress();
                    let since = *lagging_since.get_or_insert_with(Instant::now);
                    if since.elapsed() >= PROBE {
                        warn!(revision, applied = *inner.applied.borrow(), "etcd watch is silent; watching again");
                        return Ok(());
                    }
                } else {
                    lagging_since = None;
                }
            }
        }
    }
}

/// Applies a watch batch, publishing one snapshot per revision.
fn apply(inner: &Inner, batch: Batch) {
    if batch.events.is_empty() {
        // A progress notification: writes elsewhere in a shared etcd moved
        // its revision. It moves `progressed` only, never where the watch
        // resumes: etcd before 3.4.25 and 3.5.8 may answer a progress
        // request ahead of events it has not sent yet (etcd issue 15220).
        advance(&inner.progressed, batch.revision);
        return;
    }
    let mut model = inner.model();
    let mut events = batch.events.as_slice();
    while let Some(first) = events.first() {
        let revision = first.revision();
        let end = events
            .iter()
            .position(|e| e.revision() != revision)
            .unwrap_or(events.len());
        let (this, rest) = events.split_at(end);
        events = rest;
        if revision <= *inner.applied.borrow() {
            continue;
        }
        let mut touched = model.apply(this);
        let gone = std::mem::take(&mut touched.gone);
        let base = inner.published.current();
        // A revision that changed nothing a snapshot shows (a health claim,
        // an identical registration) publishes nothing.
        if let Some(snapshot) = model.snapshot(&base, touched, inner.next_version(revision)) {
            inner.published.publish(snapshot);
        }
        inner.count_expiries(gone);
        inner.applied.send_replace(revision);
        advance(&inner.progressed, revision);
    }
}

/// Raises `counter` to `revision` (never lowers it).
pub(super) fn advance(counter: &tokio::sync::watch::Sender<i64>, revision: i64) {
    counter.send_if_modified(|current| {
        let newer = revision > *current;
        if newer {
            *current = revision;
        }
        newer
    });
}
