//! Fallback: when a tool is disabled, has no healthy executor, or keeps
//! failing in a way a retry could fix, the tool the policy names as its
//! stand-in answers instead — once (never a chain), only if it accepts
//! every argument the tool accepts and answers within the tool's output
//! contract, and for a tool that must not run twice only when the call
//! provably never reached an executor.

use super::admit::Admitted;
use super::mark::{FellBack, Mark};
use super::reached::Refused;
use super::service::{Answer, Answered, Call, Outcome, Service};
use crate::error::{CallError, Unpaired};
use crate::metrics::Metrics;
use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::sync::{Mutex, PoisonError};
use toolmesh::pb::{ErrorCode, InvokeRequest};
use toolmesh::{Snapshot, ToolDef, ToolRef, ToolResultExt};
use toolmesh_governance::Governance;
use toolmesh_policy::Policy;
use toolmesh_policy::fallback_policy::FallbackRule;
use tracing::{debug, warn};

/// Pairings remembered at most (one per primary and stand-in version).
const MAX_PAIRINGS: usize = 1024;

/// A stand-in the policy names for a call whose outcome calls for it.
pub(crate) struct Wanted {
    /// The tool called.
    pub(crate) def: Arc<ToolDef>,
    /// The policy's rule naming its stand-in.
    pub(crate) rule: FallbackRule,
    /// Why the tool did not answer.
    pub(crate) why: String,
}

/// The stand-in the policy names for the call `answer` answers, when its
/// outcome calls for one (an answered call returns before the policy is
/// read).
pub(crate) fn wanted(governance: &Governance, answer: &Answer) -> Option<Wanted> {
    let def = answer.reached.def()?;
    let answered = &answer.answered;
    // A call that needs no stand-in (most) reads no policy.
    let why = reason(def, &answered.outcome, answered.sent.attempts)?;
    let policy = governance.policy();
    let rule = policy.fallbacks().for_tool(def.name())?;
    Some(Wanted {
        def: def.clone(),
        rule: rule.clone(),
        why,
    })
}

/// The fallback layer: when the policy names a stand-in for the tool and
/// the tool's outcome calls for it, the stand-in's answer. The stand-in
/// passes every check itself; when it cannot be used the tool's own
/// failure stands.
pub(crate) struct Fallback<'p, S> {
    pub(crate) governance: &'p Governance,
    pub(crate) pairings: &'p Pairings,
    pub(crate) metrics: &'p Metrics,
    pub(crate) inner: S,
}

impl<S: Service> Service for Fallback<'_, S> {
    fn check(&self, call: &Call<'_>) -> impl Future<Output = Result<Admitted, Refused>> + Send {
        self.inner.check(call)
    }

    fn send(&self, call: &Call<'_>, admitted: &Admitted) -> impl Future<Output = Answered> + Send {
        self.inner.send(call, admitted)
    }

    async fn call(&self, call: &Call<'_>) -> Answer {
        // Boxed: rare, and its state would otherwise make every call's
        // future larger (the state of one call is allocated per call). The
        // tool's answer is moved in within this block, so no copy of it
        // stays in this future while the stand-in runs.
        let fall_back = {
            let answer = self.inner.call(call).await;
            match wanted(self.governance, &answer) {
                None => return answer,
                Some(wanted) => Box::pin(self.fall_back(call, answer, wanted)),
            }
        };
        fall_back.await
    }
}

impl<S: Service> Fallback<'_, S> {
    /// The stand-in's answer for `call`, whose `answer` calls for the
    /// stand-in `wanted`; else `answer`.
    async fn fall_back(&self, call: &Call<'_>, answer: Answer, wanted: Wanted) -> Answer {
        let Wanted { def, rule, why } = wanted;
        if call.relay.delivered() {
            // Like a retry: a caller that saw part of one answer never gets another.
            return answer;
        }
        let request = Arc::new(InvokeRequest {
            tool: rule.fallback.clone(),
            ..InvokeRequest::clone(call.request)
        });
        let stand_in = Call {
            request: &request,
            attempts_made: call.attempts_made + answer.answered.sent.attempts,
            ..*call
        };
        let admitted = match self.inner.check(&stand_in).await {
            Ok(admitted) => admitted,
            Err(refused) => {
                let refused = refused.error;
                debug!(call_id = %call.id, fallback = %rule.fallback, %refused, "fallback not usable");
                return answer;
            }
        };
        let to = &admitted.resolved().entry.def;
        if let Err(why_not) = self.pairings.check(&def, to) {
            warn!(call_id = %call.id, %why_not, "fallback refused: not a safe stand-in");
            return answer;
        }
        let to = to.label();
        let stand_in = Call {
            // The stand-in gets what is left of the caller's deadline.
            caller_timeout: call
                .caller_timeout
                .map(|t| t.saturating_sub(call.started.elapsed())),
            ..stand_in
        };
        let answered = self.inner.send(&stand_in, &admitted).await;
        self.metrics.fallback(def.name());
        let mut marks = answer.answered.marks;
        marks.extend(answered.marks);
        marks.push(Mark::FellBack(FellBack {
            from: def.label(),
            to,
            why,
        }));
        Answer {
            answered: Answered {
                outcome: answered.outcome,
                sent: answer.answered.sent.then(answered.sent),
                marks,
            },
            reached: admitted.sent(),
        }
    }
}

/// Why `def`'s outcome calls for its stand-in, if it does: disabled, no
/// healthy executor, or — for an idempotent tool, or when no attempt was
/// made — unreachable, out of time or UNAVAILABLE after its attempts.
pub(crate) fn reason(def: &ToolDef, outcome: &Outcome, attempts: u32) -> Option<String> {
    let may_repeat = def.idempotent() || attempts == 0;
    match outcome {
        Outcome::Failed(CallError::Disabled { reason, .. }) => {
            Some(format!("is disabled by an operator ({reason})"))
        }
        Outcome::Failed(CallError::NoHealthyInstance { .. }) => {
            Some("has no healthy executor right now".into())
        }
        Outcome::Failed(CallError::Unreachable { detail, .. }) if may_repeat => {
            Some(format!("could not be reached ({detail})"))
        }
        Outcome::Failed(CallError::TimedOut { .. }) if may_repeat => {
            Some("did not answer in time".into())
        }
        Outcome::Answered(result)
            if may_repeat && result.error_code() == ErrorCode::Unavailable =>
        {
            Some("answered UNAVAILABLE".into())
        }
        _ => None,
    }
}

/// Whether a stand-in may answer for a tool, remembered per pair of versions.
#[derive(Debug, Default)]
pub(crate) struct Pairings {
    checked: Mutex<HashMap<(String, String), Result<(), Unpaired>>>,
}

impl Pairings {
    /// `Ok` when `stand_in` accepts every argument `primary` accepts and
    /// answers within `primary`'s output schema; else why not.
    pub(crate) fn check(&self, primary: &ToolDef, stand_in: &ToolDef) -> Result<(), Unpaired> {
        let key = (primary.label(), stand_in.label());
        let mut checked = self.checked.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(known) = checked.get(&key) {
            return known.clone();
        }
        let verdict = compatible(primary, stand_in);
        if checked.len() >= MAX_PAIRINGS {
            checked.clear();
        }
        checked.insert(key, verdict.clone());
        verdict
    }
}

/// What `explain` says of `def`'s stand-in under `policy` in `snapshot`:
/// empty when the policy names none, else the stand-in and whether it may
/// answer.
pub(crate) fn describe(
    pairings: &Pairings,
    snapshot: &Snapshot,
    policy: &Policy,
    def: &ToolDef,
) -> String {
    let Some(rule) = policy.fallbacks().for_tool(def.name()) else {
        return String::new();
    };
    let stand_in = ToolRef::parse(&rule.fallback)
        .map_err(|e| e.to_string())
        .and_then(|r| snapshot.resolve(&r).map_err(|e| e.to_string()));
    match stand_in {
        Err(why) => format!("{}: not usable now ({why})", rule.fallback),
        Ok(entry) => match pairings.check(def, &entry.def) {
            Ok(()) => format!(
                "{} (when {} is disabled, has no healthy executor or keeps failing)",
                entry.def.label(),
                def.name()
            ),
            Err(why) => format!("{}: never used, {why}", entry.def.label()),
        },
    }
}

fn compatible(primary: &ToolDef, stand_in: &ToolDef) -> Result<(), Unpaired> {
    let (from, to) = (primary.label(), stand_in.label());
    if let Err(why) = toolmesh::schema::covers(stand_in.input_schema(), primary.input_schema()) {
        let why = Box::new(why);
        return Err(Unpaired::Input { from, to, why });
    }
    let Some(promised) = primary.output_schema() else {
        return Ok(());
    };
    let Some(given) = stand_in.output_schema() else {
        return Err(Unpaired::NoOutput { from, to });
    };
    toolmesh::schema::covers(promised, given).map_err(|why| Unpaired::Output {
        from,
        to,
        why: Box::new(why),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use toolmesh::ToolErrorExt;
    use toolmesh::pb::{ToolError, ToolResult, ToolSpec};

    fn def(name: &str, idempotent: bool, input: &str, output: &str) -> ToolDef {
        ToolDef::new(ToolSpec {
            name: name.into(),
            version: "1.0.0".into(),
            description: "d".into(),
            input_schema: input.into(),
            output_schema: output.into(),
            idempotent,
            ..ToolSpec::default()
        })
        .unwrap()
    }

    const QUERY: &str = r#"{"type":"object","properties":{"q":{"type":"string","maxLength":100}},"required":["q"],"additionalProperties":false}"#;
    const ANY_QUERY: &str =
        r#"{"type":"object","properties":{"q":{"type":"string"}},"required":["q"]}"#;

    fn unreachable() -> Outcome {
        Outcome::Failed(CallError::Unreachable {
            tool: "t".into(),
            attempts: 2,
            detail: "connection refused".into(),
        })
    }

    /// Outages call for the stand-in; a failure after the tool may have
    /// run does so only for idempotent tools; the tool's own verdict never.
    #[test]
    fn reasons() {
        let safe = def("a", true, QUERY, "");
        let once = def("b", false, QUERY, "");
        let none = Outcome::Failed(CallError::NoHealthyInstance {
            tool: "b".into(),
            registered: 1,
            retry_after: None,
        });
        assert!(reason(&once, &none, 0).is_some());
        assert!(reason(&safe, &unreachable(), 2).is_some());
        assert!(reason(&once, &unreachable(), 2).is_none());
        let unavailable = Outcome::Answered(ToolResult {
            error: Some(ToolError::new(ErrorCode::Unavailable, "busy")),
            ..ToolResult::default()
        });
        assert!(reason(&safe, &unavailable, 1).is_some());
        let refused = Outcome::Answered(ToolResult {
            error: Some(ToolError::new(ErrorCode::InvalidArguments, "no")),
            ..ToolResult::default()
        });
        assert!(reason(&safe, &refused, 1).is_none());
    }

    /// A stand-in must accept what the tool accepts and answer within its
    /// output schema; the verdict is remembered per pair.
    #[test]
    fn pairings() {
        let pairings = Pairings::default();
        let primary = def("search", true, QUERY, "");
        let wider = def("mirror", true, ANY_QUERY, "");
        assert_eq!(pairings.check(&primary, &wider), Ok(()));
        let why = pairings.check(&wider, &primary).unwrap_err().to_string();
        assert!(why.contains("may refuse arguments"), "{why}");
        let promised = def("typed", true, QUERY, r#"{"type":"object"}"#);
        let why = pairings.check(&promised, &wider).unwrap_err().to_string();
        assert!(why.contains("declares none"), "{why}");
    }
}
