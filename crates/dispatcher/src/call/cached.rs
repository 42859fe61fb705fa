//! Cache: a read-only, idempotent tool's answer reused while fresh, identical calls in flight coalesced, and a stale answer served (and marked) when the tool fails.
//!
//! This stage runs only after every check (resolve, authorize, validate,
//! admit), so a cached answer never hides a disable, a revoked grant, a
//! narrowed schema or a rate limit. Answers are filed under the contract
//! that made them (name@version and the definition's fingerprint), so a
//! tool re-registered under the same name@version with another spec never
//! gets the old spec's answers. A caller that joins an identical call in
//! flight keeps its own deadline and cancellation: it waits only its own
//! time, and neither the hang-up nor the shorter deadline of the caller
//! running the call fails it.

use super::admit::Admitted;
use super::mark::{CacheUse, Mark};
use super::reached::Refused;
use super::service::{Answered, Call, Outcome, Service};
use crate::error::CallError;
use crate::metrics::Metrics;
use crate::result_cache::{Deadline, Flown, Key, ResultCache};
use serde_json::Value;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;
use toolmesh::Principal;
use toolmesh::digest::value_digest;
use toolmesh::pb::{ErrorCode, ToolResult};
use toolmesh::{ToolDef, ToolErrorExt};
use toolmesh_policy::{CacheRule, CacheScope};
use toolmesh_transport::{Bound, call_budget};

/// The caller of a cached call, as far as the cache needs it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Caller<'a> {
    /// The tool as the caller named it.
    pub(crate) tool: &'a str,
    /// When its call started.
    pub(crate) started: Instant,
    /// The deadline it sent, if any.
    pub(crate) timeout: Option<Duration>,
}

/// The cache layer: an admitted call to a tool the policy caches goes
/// through the result cache (an answer from the cache streams nothing);
/// any other goes straight to the service within, with no cache work at
/// all. It runs only after every check, so a cached answer never hides a
/// refusal.
pub(crate) struct Cached<'p, S> {
    pub(crate) cache: &'p ResultCache,
    pub(crate) metrics: &'p Metrics,
    pub(crate) inner: S,
}

impl<S: Service> Service for Cached<'_, S> {
    fn check(&self, call: &Call<'_>) -> impl Future<Output = Result<Admitted, Refused>> + Send {
        self.inner.check(call)
    }

    async fn send(&self, call: &Call<'_>, admitted: &Admitted) -> Answered {
        let policy = &admitted.authorized().policy;
        let def = &admitted.resolved().entry.def;
        let Some(rule) = rule(policy.cache().rule_for(def.name()), def) else {
            return self.inner.send(call, admitted).await;
        };
        let request = call.request;
        let key = match admitted.validated.arguments.tree(&request.arguments) {
            Ok(tree) => key(def, rule.scope, call.who, tree),
            Err(e) => return Answered::new(Outcome::Failed(e), Default::default()),
        };
        let caller = Caller {
            tool: &request.tool,
            started: call.started,
            timeout: call.caller_timeout,
        };
        // What the tool's own run made of the call, when this caller ran it.
        let mut ran = None;
        // Boxed: only cached tools take this path; unboxed, its state would
        // enlarge every call's future.
        let cached = Box::pin(run(
            self.cache,
            rule,
            key,
            policy.cache().max_bytes,
            caller,
            async {
                let answered = self.inner.send(call, admitted).await;
                ran = Some((answered.sent, answered.marks));
                answered.outcome.into_result()
            },
        ));
        let (outcome, used) = cached.await;
        self.metrics.cache(used.name());
        let (sent, mut marks) = ran.unwrap_or_default();
        marks.push(Mark::Cache(used));
        Answered {
            outcome,
            sent,
            marks,
        }
    }
}

/// The rule under which `def`'s answers may be cached, if any: the
/// policy names it and the tool says it is read-only and idempotent.
pub(crate) fn rule<'a>(rule: Option<&'a CacheRule>, def: &ToolDef) -> Option<&'a CacheRule> {
    rule.filter(|_| def.read_only() && def.idempotent())
}

/// The key of a call: the definition it is made to (name@version and
/// fingerprint), who shares the answer, and the SHA-256 of the canonical
/// arguments (key order and spacing do not matter).
pub(crate) fn key(
    def: &Arc<ToolDef>,
    scope: CacheScope,
    who: &Principal,
    arguments: &Value,
) -> Arc<Key> {
    let scope = match scope {
        CacheScope::Global => String::new(),
        CacheScope::Tenant => format!("t:{}", who.tenant),
        CacheScope::Principal => format!("p:{}/{}", who.tenant, who.name),
    };
    let call = format!("{scope}\n{}", value_digest(arguments));
    Arc::new(Key::new(def.clone(), call))
}

/// Serves the call from `cache` under `rule`, running `call` only when no
/// fresh answer exists and no identical call is in flight (or the one in
/// flight cannot answer within `caller`'s time); says how.
pub(crate) async fn run(
    cache: &ResultCache,
    rule: &CacheRule,
    key: Arc<Key>,
    max_bytes: u64,
    caller: Caller<'_>,
    call: impl Future<Output = ToolResult>,
) -> (Outcome, CacheUse) {
    // Answers are kept while they may still stand in for a failure.
    let keep = rule.ttl + rule.stale_if_error;
    if let Some((result, age)) = cache.get(&key, keep)
        && age < rule.ttl
    {
        return (Outcome::Answered(result), CacheUse::Hit(age));
    }
    let (budget, bound) = call_budget(caller.timeout, key.contract().def().timeout());
    let deadline = Deadline {
        at: caller.started + budget,
        callers_own: bound == Bound::Caller,
    };
    let flown = cache.coalesce(&key, deadline, async {
        let result = call.await;
        if result.error.is_none() {
            cache.put(key.clone(), result.clone(), max_bytes);
        }
        result
    });
    let (result, used) = match flown.await {
        Flown::Ran(result) => (result, CacheUse::Miss),
        Flown::Shared(result) => (result, CacheUse::Coalesced),
        Flown::OutOfTime => {
            let tool = caller.tool.to_owned();
            let error = CallError::DeadlineExceeded { tool, budget };
            (error.to_tool_error().into_result(), CacheUse::Coalesced)
        }
    };
    if outage(&result)
        && !rule.stale_if_error.is_zero()
        && let Some((stale, age)) = cache.get(&key, keep)
    {
        let stale = marked_stale(stale, age, &result);
        return (Outcome::Answered(stale), CacheUse::Stale(age));
    }
    (Outcome::Answered(result), used)
}

/// Whether the tool failed in a way a stale answer may stand in for: no
/// executor, a broken one, or out of time — never the tool's own verdict.
fn outage(result: &ToolResult) -> bool {
    result.error.as_ref().is_some_and(|e| {
        [
            ErrorCode::Unavailable,
            ErrorCode::DeadlineExceeded,
            ErrorCode::ExecutorFailed,
        ]
        .iter()
        .any(|c| *c as i32 == e.code)
    })
}

/// A stale answer, saying so where the model reads it.
fn marked_stale(mut stale: ToolResult, age: Duration, failure: &ToolResult) -> ToolResult {
    let why = failure.error.as_ref().map_or("", |e| e.message.as_str());
    let note = format!(
        "[cached answer from {} ms ago, served because the tool failed just now ({why}); it may be out of date]",
        age.as_millis()
    );
    toolmesh::content::prepend_note(&mut stale, &note);
    stale
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use toolmesh::pb::{ToolError, ToolSpec};
    use toolmesh_testkit::principal;

    fn def(read_only: bool, idempotent: bool) -> Arc<ToolDef> {
        Arc::new(
            ToolDef::new(ToolSpec {
                name: "lookup".into(),
                version: "1.0.0".into(),
                description: "d".into(),
                input_schema: r#"{"type":"object"}"#.into(),
                read_only,
                idempotent,
                ..ToolSpec::default()
            })
            .unwrap(),
        )
    }

    /// Only a read-only and idempotent tool is cached, whatever the policy says.
    #[test]
    fn only_read_only_idempotent_tools() {
        let rule = CacheRule {
            tool: toolmesh::ToolPattern::parse("*").unwrap(),
            ttl: Duration::from_secs(1),
            stale_if_error: Duration::ZERO,
            scope: CacheScope::Tenant,
        };
        assert!(rule_for(&rule, true, true));
        assert!(!rule_for(&rule, false, true));
        assert!(!rule_for(&rule, true, false));
    }

    fn rule_for(r: &CacheRule, read_only: bool, idempotent: bool) -> bool {
        rule(Some(r), &def(read_only, idempotent)).is_some()
    }

    /// Keys ignore key order, and separate tenants or principals per scope.
    #[test]
    fn keys_by_scope_and_canonical_arguments() {
        let d = def(true, true);
        let a = json!({"q": 1, "r": 2});
        let b: Value = serde_json::from_str(r#"{"r":2,   "q":1}"#).unwrap();
        let (ann, bob, other) = (
            principal("ann", "acme", &[]),
            principal("bob", "acme", &[]),
            principal("ann", "zeta", &[]),
        );
        let k = |scope, who: &Principal, args: &Value| key(&d, scope, who, args);
        assert_eq!(
            k(CacheScope::Tenant, &ann, &a),
            k(CacheScope::Tenant, &bob, &b)
        );
        assert_ne!(
            k(CacheScope::Tenant, &ann, &a),
            k(CacheScope::Tenant, &other, &a)
        );
        assert_ne!(
            k(CacheScope::Principal, &ann, &a),
            k(CacheScope::Principal, &bob, &a)
        );
        assert_eq!(
            k(CacheScope::Global, &ann, &a),
            k(CacheScope::Global, &other, &a)
        );
        assert_ne!(
            k(CacheScope::Global, &ann, &a),
            k(CacheScope::Global, &ann, &json!({}))
        );
    }

    /// Outages may be covered by a stale answer; a tool's own error is not.
    #[test]
    fn stale_only_for_outages() {
        let failed = |code: ErrorCode| ToolResult {
            error: Some(ToolError {
                code: code as i32,
                message: "down".into(),
                ..ToolError::default()
            }),
            ..ToolResult::default()
        };
        assert!(outage(&failed(ErrorCode::Unavailable)));
        assert!(!outage(&failed(ErrorCode::ToolError)));
        assert!(!outage(&ToolResult::default()));
        let stale = marked_stale(
            ToolResult {
                output: "42".into(),
                ..ToolResult::default()
            },
            Duration::from_millis(1500),
            &failed(ErrorCode::Unavailable),
        );
        assert!(
            stale.output.starts_with("[cached answer from 1500 ms ago"),
            "{}",
            stale.output
        );
        assert!(stale.output.ends_with("\n42"));
    }
}
