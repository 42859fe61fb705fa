//! Rate limits (governor GCRA buckets) and concurrency quotas from the policy's `[[limits]]`.
//!
//! Every entry whose `tool` pattern matches a call applies, and all must
//! admit it. `per = "caller"` gives each caller one bucket (and one
//! in-flight count) for all the tools the entry matches; `per = "tool"`
//! gives each tool one bucket shared by every caller.

use crate::config::Scope;
use governor::{DefaultKeyedRateLimiter, Quota, clock::Clock};
use std::{
    collections::HashMap,
    fmt,
    num::NonZeroU32,
    sync::{
        Arc, Mutex, MutexGuard,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};
use toolmesh::ToolPattern;

/// The retry hint given when a concurrency quota is full (no bucket can
/// say when a running call will finish).
pub const CONCURRENCY_RETRY_HINT: Duration = Duration::from_millis(250);
/// Every this many checks, buckets idle long enough to be full again are dropped.
const SWEEP_EVERY: u64 = 4096;

/// One validated `[[limits]]` entry.
#[derive(Debug, Clone)]
pub(crate) struct LimitRule {
    /// 1-based position in the file, for messages.
    pub(crate) index: usize,
    pub(crate) tool: ToolPattern,
    pub(crate) scope: Scope,
    /// Calls per second and burst.
    pub(crate) rate: Option<(f64, NonZeroU32)>,
    pub(crate) max_concurrent: Option<u32>,
}

impl LimitRule {
    fn subject(&self) -> String {
        if self.tool.as_str() == "*" {
            "every tool".into()
        } else if self.tool.as_str().contains(['*', '?']) {
            format!("tools matching {}", self.tool)
        } else {
            self.tool.to_string()
        }
    }

    fn scope_text(&self) -> &'static str {
        match self.scope {
            Scope::Caller => "per caller",
            Scope::Tool => "per tool, shared by all callers",
        }
    }
}

impl fmt::Display for LimitRule {
    /// `[[limits]] #1: send_email: 1 call/s, burst 3, at most 2 in flight, per caller`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "[[limits]] #{}: {}:", self.index, self.subject())?;
        if let Some((rate, burst)) = self.rate {
            write!(f, " {}, burst {burst},", rate_text(rate))?;
        }
        if let Some(max) = self.max_concurrent {
            write!(f, " at most {max} in flight,")?;
        }
        write!(f, " {}", self.scope_text())
    }
}

fn rate_text(per_sec: f64) -> String {
    if per_sec >= 1.0 {
        format!("{per_sec} call(s)/s")
    } else {
        let every = format!("{:.3}", 1.0 / per_sec);
        format!(
            "1 call every {} s",
            every.trim_end_matches('0').trim_end_matches('.')
        )
    }
}

/// Which kind of limit refused a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LimitKind {
    /// A rate bucket is empty.
    Rate,
    /// Too many calls are in flight.
    Concurrency,
}

/// A call refused by a limit: when to retry, and a message for the model.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct Limited {
    /// Do not try again before this (never zero).
    pub retry_after: Duration,
    /// Which limit, what it allows, and when to retry.
    pub message: String,
    /// Rate or concurrency.
    pub kind: LimitKind,
}

type SlotKey = (usize, String);

struct Inner {
    rules: Vec<(LimitRule, Option<DefaultKeyedRateLimiter<String>>)>,
    in_flight: Mutex<HashMap<SlotKey, u32>>,
    checks: AtomicU64,
}

impl Inner {
    fn slots(&self) -> MutexGuard<'_, HashMap<SlotKey, u32>> {
        // Counts are updated in single statements; a poisoned lock is still consistent.
        self.in_flight.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The limits of one policy, with their live buckets and in-flight counts.
///
/// Cheap to clone (shared state). A reloaded policy starts with fresh
/// buckets and counts; permits taken under the old one release into it.
#[derive(Clone)]
pub struct Limits {
    inner: Arc<Inner>,
}

impl fmt::Debug for Limits {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list()
            .entries(self.inner.rules.iter().map(|(rule, _)| rule.to_string()))
            .finish()
    }
}

/// Admission to run one call. Holding it occupies a concurrency slot in
/// every matching quota; dropping it (however the call ends) frees them.
#[must_use = "the concurrency slot is released as soon as the permit is dropped"]
pub struct Permit {
    inner: Option<Arc<Inner>>,
    slots: Vec<SlotKey>,
}

impl fmt::Debug for Permit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Permit")
            .field("slots", &self.slots.len())
            .finish()
    }
}

impl Permit {
    /// A permit that holds no slot (for calls no quota applies to).
    pub fn unlimited() -> Self {
        Permit {
            inner: None,
            slots: Vec::new(),
        }
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        let Some(inner) = &self.inner else { return };
        if self.slots.is_empty() {
            return;
        }
        let mut counts = inner.slots();
        for slot in self.slots.drain(..) {
            if let Some(count) = counts.get_mut(&slot) {
                *count = count.saturating_sub(1);
                if *count == 0 {
                    counts.remove(&slot);
                }
            }
        }
    }
}

impl Limits {
    pub(crate) fn new(rules: Vec<LimitRule>) -> Self {
        let rules = rules
            .into_iter()
            .map(|rule| {
                let limiter = rule.rate.and_then(|(per_sec, burst)| {
                    Duration::try_from_secs_f64(1.0 / per_sec)
                        .ok()
                        .and_then(Quota::with_period)
                        .map(|q| DefaultKeyedRateLimiter::keyed(q.allow_burst(burst)))
                });
                (rule, limiter)
            })
            .collect();
        Limits {
            inner: Arc::new(Inner {
                rules,
                in_flight: Mutex::new(HashMap::new()),
                checks: AtomicU64::new(0),
            }),
        }
    }

    /// Whether the policy has no `[[limits]]` at all.
    pub fn is_empty(&self) -> bool {
        self.inner.rules.is_empty()
    }

    /// The limits that apply to `tool`, one line each (for `toolmesh explain`).
    pub fn describe(&self, tool: &str) -> Vec<String> {
        self.inner
            .rules
            .iter()
            .filter(|(rule, _)| rule.tool.matches(tool))
            .map(|(rule, _)| rule.to_string())
            .collect()
    }

    /// Admits one call of `tool` by `caller` (a stable caller key, such as
    /// [`Principal::key`](crate::Principal::key)), or says which limit refused it and when to
    /// retry. Concurrency is checked first so that a call refused for
    /// concurrency does not spend a rate token.
    pub fn check(&self, tool: &str, caller: &str) -> Result<Permit, Limited> {
        let inner = &self.inner;
        if inner.checks.fetch_add(1, Ordering::Relaxed) % SWEEP_EVERY == SWEEP_EVERY - 1 {
            for (_, limiter) in inner.rules.iter() {
                if let Some(limiter) = limiter {
                    limiter.retain_recent();
                }
            }
        }
        let key = |rule: &LimitRule| match rule.scope {
            Scope::Caller => caller.to_owned(),
            Scope::Tool => tool.to_owned(),
        };
        let matching = || {
            inner
                .rules
                .iter()
                .enumerate()
                .filter(|(_, (rule, _))| rule.tool.matches(tool))
        };
        let mut permit = Permit {
            inner: Some(Arc::clone(inner)),
            slots: Vec::new(),
        };
        {
            let mut counts = inner.slots();
            for (i, (rule, _)) in matching() {
                let Some(max) = rule.max_concurrent else {
                    continue;
                };
                let slot = (i, key(rule));
                let count = counts.entry(slot.clone()).or_insert(0);
                if *count >= max {
                    if *count == 0 {
                        counts.remove(&slot);
                    }
                    drop(counts);
                    return Err(Limited {
                        retry_after: CONCURRENCY_RETRY_HINT,
                        message: concurrency_message(rule, tool, caller, max),
                        kind: LimitKind::Concurrency,
                    });
                }
                *count += 1;
                permit.slots.push(slot);
            }
        }
        for (_, (rule, limiter)) in matching() {
            let Some(limiter) = limiter else { continue };
            if let Err(not_until) = limiter.check_key(&key(rule)) {
                let wait = not_until
                    .wait_time_from(limiter.clock().now())
                    .max(Duration::from_millis(1));
                return Err(Limited {
                    retry_after: wait,
                    message: rate_message(rule, tool, caller, wait),
                    kind: LimitKind::Rate,
                });
            }
        }
        Ok(permit)
    }
}

fn rate_message(rule: &LimitRule, tool: &str, caller: &str, wait: Duration) -> String {
    let (per_sec, burst) = rule.rate.unwrap_or((0.0, NonZeroU32::MIN));
    let whose = match rule.scope {
        Scope::Caller => format!("for {caller}"),
        Scope::Tool => "for all callers together".to_owned(),
    };
    format!(
        "{tool} is over its rate limit {whose}: {} allows {}, burst {burst} ([[limits]] #{}); retry after {} ms",
        rule.subject(),
        rate_text(per_sec),
        rule.index,
        wait.as_millis().max(1)
    )
}

fn concurrency_message(rule: &LimitRule, tool: &str, caller: &str, max: u32) -> String {
    let whose = match rule.scope {
        Scope::Caller => format!("{caller} already has"),
        Scope::Tool => "all callers together already have".to_owned(),
    };
    format!(
        "{whose} {max} call(s) of {} in flight, the most [[limits]] #{} allows; retry {tool} when one finishes",
        rule.subject(),
        rule.index
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(tool: &str, scope: Scope, rate: Option<(f64, u32)>, max: Option<u32>) -> LimitRule {
        LimitRule {
            index: 1,
            tool: ToolPattern::parse(tool).unwrap(),
            scope,
            rate: rate.map(|(r, b)| (r, NonZeroU32::new(b).unwrap())),
            max_concurrent: max,
        }
    }

    /// A burst of 3 admits 3 calls per caller, then refuses with retry_after > 0; callers are separate.
    /// (Rates are one call per 10 s, so a descheduled test thread cannot refill a bucket.)
    #[test]
    fn rate_limit_then_retry_after() {
        let limits = Limits::new(vec![rule(
            "send_email",
            Scope::Caller,
            Some((0.1, 3)),
            None,
        )]);
        for _ in 0..3 {
            drop(limits.check("send_email", "bot").unwrap());
        }
        let err = limits.check("send_email", "bot").unwrap_err();
        assert_eq!(err.kind, LimitKind::Rate);
        assert!(err.retry_after > Duration::ZERO);
        assert!(err.retry_after <= Duration::from_secs(10));
        assert!(
            err.message
                .starts_with("send_email is over its rate limit for bot: send_email allows 1 call every 10 s, burst 3 ([[limits]] #1); retry after"),
            "{}",
            err.message
        );
        // Another caller has its own bucket; another tool is not limited.
        drop(limits.check("send_email", "other").unwrap());
        drop(limits.check("search_kb", "bot").unwrap());
    }

    /// `per = "tool"` shares one bucket among all callers of that tool.
    #[test]
    fn per_tool_bucket_is_shared() {
        let limits = Limits::new(vec![rule("*", Scope::Tool, Some((0.1, 1)), None)]);
        drop(limits.check("a", "bot").unwrap());
        let err = limits.check("a", "other").unwrap_err();
        assert!(
            err.message.contains("for all callers together"),
            "{}",
            err.message
        );
        assert!(err.retry_after > Duration::from_secs(5));
        drop(limits.check("b", "bot").unwrap());
    }

    /// A concurrency quota refuses the extra call and frees its slot when a permit drops.
    #[test]
    fn concurrency_released_on_drop() {
        let limits = Limits::new(vec![rule("send_*", Scope::Caller, None, Some(2))]);
        let first = limits.check("send_email", "bot").unwrap();
        let _second = limits.check("send_sms", "bot").unwrap();
        let err = limits.check("send_email", "bot").unwrap_err();
        assert_eq!(err.kind, LimitKind::Concurrency);
        assert_eq!(err.retry_after, CONCURRENCY_RETRY_HINT);
        assert_eq!(
            err.message,
            "bot already has 2 call(s) of tools matching send_* in flight, the most [[limits]] #1 allows; retry send_email when one finishes"
        );
        let _other = limits.check("send_email", "other").unwrap();
        drop(first);
        let _third = limits.check("send_email", "bot").unwrap();
        assert!(limits.check("send_email", "bot").is_err());
    }

    /// A call refused by a rate limit does not keep the concurrency slot it took.
    #[test]
    fn refused_call_frees_its_slot() {
        let limits = Limits::new(vec![rule("x", Scope::Caller, Some((0.1, 1)), Some(1))]);
        drop(limits.check("x", "bot").unwrap());
        assert_eq!(limits.check("x", "bot").unwrap_err().kind, LimitKind::Rate);
        assert!(limits.inner.slots().is_empty());
    }
}
