//! The contract of the key-value seam, each body run over both backends:
//! what the registry's rules rely on from etcd, which the memory backend
//! must do alike. The etcd half needs an `etcd` binary (see
//! [`crate::backends`]).

use super::{Batch, Compare, EtcdKv, Event, Kv, KvError, MemoryKv, Op, Outcome, Txn, Watch};
use crate::backends::{etcd_cluster, on_both_backends};
use std::time::Duration;
use toolmesh_procs::EtcdCluster;
use toolmesh_testkit::{eventually, patient};

/// A backend under test, and the etcd member behind it (if any).
struct Under {
    kv: Box<dyn Kv>,
    _etcd: Option<EtcdCluster>,
}

/// The memory backend, its leases expired when due.
async fn memory() -> Under {
    let kv = MemoryKv::open(None).unwrap();
    tokio::spawn(kv.expire_on_time());
    Under {
        kv: Box::new(kv),
        _etcd: None,
    }
}

/// The etcd backend over a fresh one-member cluster.
async fn etcd() -> Under {
    let cluster = etcd_cluster().await;
    let options = toolmesh_etcd::ClientOptions::default();
    let client = toolmesh_etcd::Client::connect(&cluster.store_url(), options).unwrap();
    Under {
        kv: Box::new(EtcdKv::new(client, b"/probe".to_vec())),
        _etcd: Some(cluster),
    }
}

on_both_backends!(
    revisions_and_compares,
    leases,
    many_renewals_at_once,
    watches,
    large_ranges
);

fn put(key: &str, value: &str, lease: i64) -> Op {
    Op::Put {
        key: key.as_bytes().to_vec(),
        value: value.as_bytes().to_vec(),
        lease,
    }
}

/// How long a test waits for what a lease of a second brings.
fn a_while() -> Duration {
    patient(Duration::from_secs(10))
}

/// One revision per transaction that writes; create and mod revisions
/// per key; compares on revision, absence and value.
async fn revisions_and_compares(under: Under) {
    let kv = &*under.kv;
    let base = kv.revision().await.unwrap();
    let first = Txn {
        compare: vec![Compare::absent(b"/t/a".to_vec())],
        success: vec![put("/t/a", "1", 0), put("/t/b", "1", 0)],
    };
    assert_eq!(
        kv.txn(first.clone()).await.unwrap(),
        Outcome {
            succeeded: true,
            revision: base + 1
        }
    );
    assert!(!kv.txn(first).await.unwrap().succeeded);
    let a = kv.get(b"/t/a").await.unwrap().unwrap();
    assert_eq!((a.create_revision, a.mod_revision), (base + 1, base + 1));
    let again = Txn::if_unchanged(b"/t/a", base + 1, put("/t/a", "2", 0));
    assert_eq!(kv.txn(again).await.unwrap().revision, base + 2);
    let a = kv.get(b"/t/a").await.unwrap().unwrap();
    assert_eq!((a.create_revision, a.mod_revision), (base + 1, base + 2));
    let by_value = Txn {
        compare: vec![Compare::Value(b"/t/a".to_vec(), b"2".to_vec())],
        success: vec![Op::Delete {
            key: b"/t/a".to_vec(),
        }],
    };
    assert_eq!(kv.txn(by_value).await.unwrap().revision, base + 3);
    let nothing = Txn::write(Op::Delete {
        key: b"/t/a".to_vec(),
    });
    assert_eq!(
        kv.txn(nothing).await.unwrap().revision,
        base + 3,
        "no write, no revision"
    );
    let (entries, revision) = kv.range(b"/t/", true).await.unwrap();
    assert_eq!(revision, base + 3);
    let keys: Vec<Vec<u8>> = entries.into_iter().map(|e| e.key).collect();
    assert_eq!(keys, [b"/t/b".to_vec()]);
}

/// A lease's keys go when it expires or is revoked; keeping it alive
/// moves its deadline; a write on a gone lease is refused.
async fn leases(under: Under) {
    let kv = &*under.kv;
    let ttl = Duration::from_secs(1);
    let (short, granted) = kv.grant(ttl).await.unwrap();
    assert!(granted >= ttl, "{granted:?}");
    let (other, _) = kv.grant(ttl).await.unwrap();
    kv.txn(Txn::write(put("/t/s", "1", short))).await.unwrap();
    kv.txn(Txn::write(put("/t/o", "1", other))).await.unwrap();
    eventually("the short lease to expire", a_while(), || async {
        assert_eq!(kv.keep_alive(other).await.unwrap(), Some(granted));
        kv.get(b"/t/s").await.unwrap().is_none().then_some(())
    })
    .await;
    assert!(kv.get(b"/t/o").await.unwrap().is_some(), "kept alive");
    assert_eq!(kv.keep_alive(short).await.unwrap(), None);
    let refused = kv.txn(Txn::write(put("/t/s", "2", short))).await;
    // etcd's own refusal ("requested lease not found") reads as the memory
    // backend's.
    assert!(
        matches!(refused, Err(KvError::LeaseGone(id)) if id == short),
        "{refused:?}"
    );
    assert_eq!(kv.get(b"/t/s").await.unwrap(), None, "nothing written");
    kv.revoke(other).await.unwrap();
    assert!(kv.range(b"/t/", false).await.unwrap().0.is_empty());
}

/// Renewals of many leases at once, several of the same lease among
/// them, each get their own lease's answer; a revoked lease's renewal says
/// it is gone while the others go on.
async fn many_renewals_at_once(under: Under) {
    let kv = &*under.kv;
    let ttl = Duration::from_secs(5);
    let mut leases = Vec::new();
    for _ in 0..20 {
        leases.push(kv.grant(ttl).await.unwrap().0);
    }
    let gone = leases[7];
    kv.revoke(gone).await.unwrap();
    let renewals = (0..200).map(|i| {
        let lease = leases[i % leases.len()];
        async move { (lease, kv.keep_alive(lease).await.unwrap()) }
    });
    for (lease, answer) in futures_util::future::join_all(renewals).await {
        if lease == gone {
            assert_eq!(answer, None, "a revoked lease is renewed no more");
        } else {
            assert!(
                answer.is_some_and(|left| left >= ttl),
                "{lease:x}: {answer:?}"
            );
        }
    }
    for lease in leases {
        kv.revoke(lease).await.unwrap();
    }
}

/// The next batch of `watch`, within a while.
async fn next(watch: &mut dyn Watch) -> Batch {
    tokio::time::timeout(a_while(), watch.next())
        .await
        .expect("a batch in time")
        .unwrap()
}

/// A watch reports each later revision under its prefix, in order (a
/// lease's expiry too), and progress when asked.
async fn watches(under: Under) {
    let kv = &*under.kv;
    let base = kv.revision().await.unwrap();
    kv.txn(Txn::write(put("/p/a", "1", 0))).await.unwrap();
    let mut watch = kv.watch(b"/p/", base + 2).await.unwrap();
    kv.txn(Txn::write(put("/other", "x", 0))).await.unwrap();
    let (lease, _) = kv.grant(Duration::from_secs(1)).await.unwrap();
    kv.txn(Txn::write(put("/p/b", "2", lease))).await.unwrap();
    let batch = next(&mut *watch).await;
    assert_eq!(batch.revision, base + 3);
    assert!(
        matches!(&batch.events[..], [Event::Put(e)] if e.key == b"/p/b" && e.lease == lease),
        "{batch:?}"
    );
    let batch = next(&mut *watch).await;
    assert_eq!(
        batch.events,
        [Event::Delete {
            key: b"/p/b".to_vec(),
            revision: base + 4
        }],
        "expiry is a revision"
    );
    assert_eq!(kv.revision().await.unwrap(), base + 4);
    watch.request_progress();
    let progress = next(&mut *watch).await;
    assert!(progress.events.is_empty(), "{progress:?}");
    assert_eq!(progress.revision, base + 4);
}

/// A range over more keys than one etcd page holds reads every one, in key
/// order, at one revision (the registry's first read of 100,000
/// definitions is one such range).
async fn large_ranges(under: Under) {
    let kv = &*under.kv;
    let keys = 2_500;
    let mut last = 0;
    for batch in (0..keys).collect::<Vec<usize>>().chunks(100) {
        let success = batch
            .iter()
            .map(|i| put(&format!("/defs/{i:05}"), &format!("v{i}"), 0))
            .collect();
        last = kv
            .txn(Txn {
                compare: vec![],
                success,
            })
            .await
            .unwrap()
            .revision;
    }
    kv.txn(Txn::write(put("/other", "x", 0))).await.unwrap();
    let (entries, revision) = kv.range(b"/defs/", false).await.unwrap();
    assert_eq!(entries.len(), keys);
    assert!(
        revision > last,
        "read at {revision}, after the last write at {last}"
    );
    for (i, entry) in entries.iter().enumerate() {
        assert_eq!(entry.key, format!("/defs/{i:05}").into_bytes());
        assert_eq!(entry.value, format!("v{i}").into_bytes());
    }
}
