//! Route: choosing an instance — power of two choices on calls in flight
//! among the healthy, non-ejected, non-full instances, avoiding those
//! already tried — and whether a tool is in rotation at all.

use crate::endpoints::{Endpoint, Endpoints};
use std::{sync::Arc, time::Duration};
use toolmesh::{Instance, ToolEntry};

/// The instance chosen for one attempt.
#[derive(Debug)]
pub(crate) struct Pick {
    pub(crate) instance: Instance,
    pub(crate) endpoint: Arc<Endpoint>,
}

/// Why no instance could be chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct NoInstance {
    /// Instances registered for the tool.
    pub(crate) registered: usize,
    /// When the first ejected instance returns, if any is ejected.
    pub(crate) retry_after: Option<Duration>,
}

/// Picks an instance for `entry`: among those able to take the call, the
/// ones not in `tried` first; when every untried instance is ejected, one of
/// those rather than none, or than the one that just failed on a retry
/// (never a dead end, as Envoy's panic threshold and gRPC's outlier
/// detection avoid).
pub(crate) fn pick(
    entry: &ToolEntry,
    pool: &Endpoints,
    tried: &[Arc<str>],
    per_instance_limit: u32,
) -> Result<Pick, NoInstance> {
    let tool = entry.def.name();
    let mut fresh = Vec::with_capacity(entry.instances.len());
    let mut ejected = Vec::new();
    let mut again = Vec::new();
    for instance in entry.healthy_instances() {
        let Some(endpoint) = pool.get(&instance.endpoint) else {
            continue;
        };
        if endpoint.in_flight() >= per_instance_limit {
            continue;
        }
        let tier = match (
            pool.ejected(&endpoint, tool),
            tried.contains(&instance.endpoint),
        ) {
            (false, false) => &mut fresh,
            (true, false) => &mut ejected,
            (false, true) => &mut again,
            (true, true) => continue,
        };
        tier.push((instance, endpoint));
    }
    let candidates = if !fresh.is_empty() {
        fresh
    } else if !ejected.is_empty() {
        ejected
    } else {
        again
    };
    let chosen = match candidates.len() {
        0 => {
            let retry_after = entry
                .healthy_instances()
                .filter_map(|i| pool.ejection_left(&i.endpoint, tool))
                .min();
            return Err(NoInstance {
                registered: entry.instances.len(),
                retry_after,
            });
        }
        1 => &candidates[0],
        n => {
            let a = rand::random_range(0..n);
            let b = (a + 1 + rand::random_range(0..n - 1)) % n;
            let (x, y) = (&candidates[a], &candidates[b]);
            if y.1.in_flight() < x.1.in_flight() {
                y
            } else {
                x
            }
        }
    };
    Ok(Pick {
        instance: chosen.0.clone(),
        endpoint: chosen.1.clone(),
    })
}

/// Whether some healthy instance of `entry` is in rotation here for it.
pub(crate) fn in_rotation(entry: &ToolEntry, pool: &Endpoints) -> bool {
    let tool = entry.def.name();
    entry.exposed()
        && entry
            .healthy_instances()
            .any(|i| !pool.is_ejected(&i.endpoint, tool))
}

/// Whether ejecting `address` is allowed for `entry`: only while another
/// healthy instance stays in rotation. The last one, a tool's only instance
/// included, is never ejected (as outlier detection's maximum ejection
/// share keeps some hosts): a slow or starved executor keeps answering
/// calls rather than the tool answering fast failures until an ejection
/// ends; one that is gone leaves rotation through its health.
pub(crate) fn may_eject(entry: &ToolEntry, pool: &Endpoints, address: &str) -> bool {
    let tool = entry.def.name();
    entry
        .healthy_instances()
        .filter(|i| &*i.endpoint != address)
        .any(|i| !pool.is_ejected(&i.endpoint, tool))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::endpoints::{EjectionPolicy, Health, Scope};
    use toolmesh::{ToolDef, pb::ToolSpec};

    fn entry(endpoints: &[&str]) -> ToolEntry {
        let def = ToolDef::new(ToolSpec {
            name: "t".into(),
            version: "1.0.0".into(),
            description: "t".into(),
            input_schema: "{}".into(),
            ..ToolSpec::default()
        })
        .unwrap();
        ToolEntry {
            def: Arc::new(def),
            instances: endpoints
                .iter()
                .map(|e| Instance {
                    executor_id: format!("x-{e}").into(),
                    endpoint: (*e).into(),
                    service: "s".into(),
                    healthy: true,
                    execute_token: "".into(),
                })
                .collect(),
            disabled: None,
        }
    }

    fn pool() -> Endpoints {
        Endpoints::new(EjectionPolicy {
            after_failures: 1,
            base: Duration::from_secs(30),
            max: Duration::from_secs(300),
        })
    }

    /// The less loaded of two instances wins; tried ones are avoided.
    #[tokio::test]
    async fn prefers_less_loaded_and_untried() {
        let pool = pool();
        let e = entry(&["127.0.0.1:1", "127.0.0.1:2"]);
        let busy = pool.get(&"127.0.0.1:1".into()).unwrap();
        let _guards: Vec<_> = (0..3).map(|_| busy.start_call()).collect();
        for _ in 0..20 {
            assert_eq!(
                &*pick(&e, &pool, &[], 100).unwrap().instance.endpoint,
                "127.0.0.1:2"
            );
        }
        let tried: Vec<Arc<str>> = vec!["127.0.0.1:2".into()];
        assert_eq!(
            &*pick(&e, &pool, &tried, 100).unwrap().instance.endpoint,
            "127.0.0.1:1"
        );
        assert!(pick(&e, &pool, &[], 3).is_ok(), "the idle one has room");
        let all_full = entry(&["127.0.0.1:1"]);
        assert_eq!(pick(&all_full, &pool, &[], 3).unwrap_err().registered, 1);
    }

    /// Ejected instances are skipped, and the last one in rotation of a
    /// replicated tool is never ejected.
    #[tokio::test]
    async fn ejection_and_its_guard() {
        let pool = pool();
        let e = entry(&["127.0.0.1:1", "127.0.0.1:2"]);
        let first = pool.get(&"127.0.0.1:1".into()).unwrap();
        assert!(may_eject(&e, &pool, "127.0.0.1:1"));
        assert!(pool.record(&first, "t", Health::Bad(Scope::Instance), true));
        for _ in 0..10 {
            assert_eq!(
                &*pick(&e, &pool, &[], 100).unwrap().instance.endpoint,
                "127.0.0.1:2"
            );
        }
        assert!(!may_eject(&e, &pool, "127.0.0.1:2"), "last one stays");
        assert!(in_rotation(&e, &pool));
        let single = entry(&["127.0.0.1:9"]);
        assert!(
            !may_eject(&single, &pool, "127.0.0.1:9"),
            "an only instance stays"
        );
        // Ejected all the same (two failures racing): calls still reach it.
        let only = entry(&["127.0.0.1:1"]);
        assert!(!in_rotation(&only, &pool));
        assert_eq!(
            &*pick(&only, &pool, &[], 100).unwrap().instance.endpoint,
            "127.0.0.1:1",
            "no dead end when every instance is ejected"
        );
    }

    /// On a retry, an ejected instance that was not tried beats the one
    /// that just failed; a first attempt never goes to an ejected one.
    #[tokio::test]
    async fn no_dead_end_on_retry() {
        let pool = pool();
        let e = entry(&["127.0.0.1:1", "127.0.0.1:2"]);
        let second = pool.get(&"127.0.0.1:2".into()).unwrap();
        assert!(pool.record(&second, "t", Health::Bad(Scope::Tool), true));
        let tried: Vec<Arc<str>> = vec!["127.0.0.1:1".into()];
        for _ in 0..10 {
            assert_eq!(
                &*pick(&e, &pool, &tried, 100).unwrap().instance.endpoint,
                "127.0.0.1:2",
                "the ejected, untried one"
            );
            assert_eq!(
                &*pick(&e, &pool, &[], 100).unwrap().instance.endpoint,
                "127.0.0.1:1",
                "first attempts stay in rotation"
            );
        }
    }
}
