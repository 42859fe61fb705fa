//! This replica's session lease, and the health watches it holds: each
//! executor's `grpc.health.v1` status is watched by exactly one replica,
//! claimed under that replica's session lease (so the claim vanishes when
//! the replica dies and another takes it over), and its verdicts are written
//! to the store so every replica's snapshot agrees.

use super::Inner;
use crate::codec;
use crate::health_watch;
use crate::keys::{HealthRecord, Slot};
use crate::kv::{Compare, Op, Txn};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

/// The session lease's TTL: how long a dead replica's health watches stay
/// unwatched before another replica takes them over.
const SESSION_TTL: Duration = Duration::from_secs(2);
/// How often the session lease is renewed.
const SESSION_RENEW: Duration = Duration::from_millis(500);
/// How often claims are looked at even without a change.
const RECHECK: Duration = Duration::from_secs(1);

/// Keeps a session lease alive, granting a new one when it was lost.
pub(super) async fn keep_session(inner: Arc<Inner>) {
    let run = async {
        loop {
            let session = *inner.session.borrow();
            if session == 0 {
                match inner.kv.grant(SESSION_TTL).await {
                    Ok((id, _)) => {
                        debug!(session = id, "registry session lease granted");
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
pub(super) async fn watch_claimed(inner: Arc<Inner>) {
    let mut applied = inner.applied.subscribe();
    let mut session = inner.session.subscribe();
    let mut running: HashMap<Arc<str>, Running> = HashMap::new();
    let run = async {
        loop {
            let me = *session.borrow_and_update();
            applied.borrow_and_update();
            let (execs, watchers) = {
                let model = inner.model();
                let execs: Vec<(Arc<str>, i64, String)> = model
                    .execs
                    .iter()
                    .map(|(id, e)| (id.clone(), e.lease, e.record.endpoint.clone()))
                    .collect();
                (execs, model.watchers.clone())
            };
            let mut live = std::collections::HashSet::with_capacity(execs.len());
            for (id, lease, endpoint) in execs {
                live.insert(id.clone());
                let holder = watchers.get(&*id);
                // A claim this replica just won may not be applied to the
                // model yet: its watch keeps running (stopping it could
                // cancel the first verdict's write, and the watch reports
                // only changes after it).
                let mine = me != 0
                    && match holder {
                        Some(holder) => holder == &inner.replica,
                        None => running.get(&id).is_some_and(|r| r.session == me),
                    };
                if !mine {
                    running.remove(&id);
                    if holder.is_none() && me != 0 && claim(&inner, &id, me).await {
                        debug!(executor_id = &*id, "health watch claimed");
                        running.insert(id.clone(), start(&inner, id, lease, endpoint, me));
                    }
                    continue;
                }
                if running.get(&id).is_none_or(|r| r.lease != lease) {
                    running.insert(id.clone(), start(&inner, id, lease, endpoint, me));
                }
            }
            let gone: Vec<Arc<str>> = running
                .keys()
                .filter(|id| !live.contains(*id))
                .cloned()
                .collect();
            for id in gone {
                running.remove(&id);
                release(&inner, &id).await;
            }
            tokio::select! {
                _ = applied.changed() => {}
                _ = session.changed() => {}
                _ = tokio::time::sleep(RECHECK) => {}
            }
        }
    };
    inner.shutdown.run_until_cancelled(run).await;
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
            while let Some((healthy, reason)) = rx.recv().await {
                let record = HealthRecord {
                    lease,
                    healthy,
                    reason: reason.clone(),
                };
                let put = Op::Put {
                    key: Slot::Health(&id).key(),
                    value: codec::encode(&record),
                    lease,
                };
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
