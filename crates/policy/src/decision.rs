//! Access decisions: which grant lets a caller use a tool, why not, and whether an approval is needed.

use crate::{Policy, config::risk_name, policy::Grant};
use serde::Serialize;
use std::fmt;
use toolmesh::Principal;
use toolmesh::pb::{RiskLevel, ToolSpec};

/// How many grant names a deny reason lists before saying "and N more".
const NAMES_IN_REASON: usize = 3;

/// Whether an approval stands between an allowed caller and the call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalNeed {
    /// The call may go ahead.
    None,
    /// The call needs an approved ticket (from the approval book) first.
    Required,
    /// The call would need one, but the caller is in `pre_approved_principals`.
    PreApproved,
}

/// The outcome of [`Policy::decide`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "decision", rename_all = "snake_case")]
pub enum Decision {
    /// The caller may see and call the tool.
    Allow {
        /// The name of the first grant that allows it.
        rule: String,
        /// Whether an approval is needed too.
        approval: ApprovalNeed,
    },
    /// The caller may neither see nor call the tool.
    Deny {
        /// Why, naming the grants involved, and what to ask for; safe to show the caller.
        reason: String,
    },
}

impl Decision {
    /// Whether the tool is allowed (with or without approval).
    pub fn is_allowed(&self) -> bool {
        matches!(self, Decision::Allow { .. })
    }
}

/// What one grant says about one caller and one tool.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "verdict", rename_all = "snake_case")]
pub enum GrantVerdict {
    /// The grant applies to the caller, covers the tool and its risk.
    Allows,
    /// The grant is for other principals, tenants or roles.
    CallerNotCovered {
        /// Which condition fails, e.g. "needs one of the roles admin; the caller has agent".
        reason: String,
    },
    /// The grant applies to the caller but not to this tool.
    ToolNotCovered {
        /// What it does cover, e.g. "tools search_kb, get_*; tags kb".
        covers: String,
    },
    /// The grant covers the tool, but caps risk below the tool's.
    RiskCapped {
        /// The grant's `max_risk`.
        max_risk: String,
        /// The tool's risk.
        risk: String,
    },
}

/// One grant considered by [`explain`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GrantCheck {
    /// The grant's name.
    pub grant: String,
    /// What it says.
    pub verdict: GrantVerdict,
}

impl fmt::Display for GrantCheck {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.verdict {
            GrantVerdict::Allows => write!(f, "[allows] {:?}", self.grant),
            GrantVerdict::CallerNotCovered { reason } => {
                write!(f, "[skip]   {:?}: {reason}", self.grant)
            }
            GrantVerdict::ToolNotCovered { covers } => {
                write!(
                    f,
                    "[skip]   {:?}: covers {covers}, not this tool",
                    self.grant
                )
            }
            GrantVerdict::RiskCapped { max_risk, risk } => write!(
                f,
                "[skip]   {:?}: caps risk at {max_risk}; the tool is {risk}",
                self.grant
            ),
        }
    }
}

/// Everything behind one decision, for `toolmesh explain`: every grant in
/// file order and what it said, the decision, approval and limits.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Explanation {
    /// The caller.
    pub principal: Principal,
    /// The tool's name.
    pub tool: String,
    /// Its version.
    pub version: String,
    /// Its risk (`LOW`, `MEDIUM`, `HIGH`).
    pub risk: String,
    /// Its tags.
    pub tags: Vec<String>,
    /// Every grant, in file order.
    pub grants: Vec<GrantCheck>,
    /// The decision [`Policy::decide`] makes.
    pub decision: Decision,
    /// Why an approval is needed (or pre-approved), when it is.
    pub approval_reason: Option<String>,
    /// The `[[limits]]` entries that apply to the tool.
    pub limits: Vec<String>,
    /// How the allowing grant narrows the tool's arguments, one line per
    /// property (empty when it does not).
    pub argument_limits: Vec<String>,
}

impl fmt::Display for Explanation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "caller:   {}", self.principal)?;
        write!(
            f,
            "tool:     {}@{} (risk {}",
            self.tool, self.version, self.risk
        )?;
        if !self.tags.is_empty() {
            write!(f, ", tags {}", self.tags.join(", "))?;
        }
        writeln!(f, ")")?;
        if self.grants.is_empty() {
            writeln!(f, "grants:   none in the policy")?;
        } else {
            writeln!(f, "grants:")?;
            for check in &self.grants {
                writeln!(f, "  {check}")?;
            }
        }
        match &self.decision {
            Decision::Allow { rule, approval } => {
                write!(f, "decision: ALLOW by grant {rule:?}")?;
                match (approval, &self.approval_reason) {
                    (ApprovalNeed::None, _) => writeln!(f, "; no approval needed")?,
                    (ApprovalNeed::Required, Some(why)) => {
                        writeln!(f, "; approval required ({why})")?
                    }
                    (ApprovalNeed::PreApproved, Some(why)) => {
                        writeln!(f, "; pre-approved ({why})")?
                    }
                    (need, None) => writeln!(f, "; approval {need:?}")?,
                }
            }
            Decision::Deny { reason } => writeln!(f, "decision: DENY: {reason}")?,
        }
        for line in &self.argument_limits {
            writeln!(f, "argument: {line}")?;
        }
        if self.limits.is_empty() {
            write!(f, "limits:   none")
        } else {
            write!(f, "limits:")?;
            for limit in &self.limits {
                write!(f, "\n  {limit}")?;
            }
            Ok(())
        }
    }
}

/// Explains [`Policy::decide`] for `who` and `spec`: every grant considered
/// and why it matched or not, plus approval and limits.
pub fn explain(policy: &Policy, who: &Principal, spec: &ToolSpec) -> Explanation {
    let risk = spec_risk(spec);
    let grants = policy
        .grants
        .iter()
        .map(|g| GrantCheck {
            grant: g.name.clone(),
            verdict: verdict(g, who, spec, risk),
        })
        .collect();
    let decision = decide(policy, who, spec);
    let (approval_reason, argument_limits) = match &decision {
        Decision::Allow { rule, .. } => (
            approval(policy, who, spec, risk).1,
            policy
                .narrowing(rule, &spec.name)
                .map(|n| {
                    let schema = serde_json::from_str(&spec.input_schema).unwrap_or_default();
                    n.notes(&schema)
                })
                .unwrap_or_default(),
        ),
        Decision::Deny { .. } => (None, Vec::new()),
    };
    Explanation {
        principal: who.clone(),
        tool: spec.name.clone(),
        version: spec.version.clone(),
        risk: risk_name(risk).into(),
        tags: spec.tags.clone(),
        grants,
        decision,
        approval_reason,
        limits: policy.limits().describe(&spec.name),
        argument_limits,
    }
}

/// The risk a decision uses ([`toolmesh::spec::effective_risk`]).
pub(crate) fn spec_risk(spec: &ToolSpec) -> RiskLevel {
    toolmesh::spec::effective_risk(spec.risk)
}

impl Policy {
    /// Whether `who` may see and call the tool of `spec`, by which grant,
    /// and whether the call needs an approval. A spec whose risk is
    /// UNSPECIFIED reads as LOW; an unknown risk number reads as HIGH.
    pub fn decide(&self, who: &Principal, spec: &ToolSpec) -> Decision {
        decide(self, who, spec)
    }
}

fn decide(policy: &Policy, who: &Principal, spec: &ToolSpec) -> Decision {
    let risk = spec_risk(spec);
    // Fast path for ListTools, which decides every tool: no text is built
    // unless the answer is a deny.
    if let Some(grant) = policy.grants.iter().find(|g| allows(g, who, spec, risk)) {
        return Decision::Allow {
            rule: grant.name.clone(),
            approval: approval(policy, who, spec, risk).0,
        };
    }
    let verdicts: Vec<(&Grant, GrantVerdict)> = policy
        .grants
        .iter()
        .map(|g| (g, verdict(g, who, spec, risk)))
        .collect();
    Decision::Deny {
        reason: deny_reason(who, spec, risk, &verdicts),
    }
}

/// The same answer as `verdict(..) == Allows`, without building any text.
fn allows(grant: &Grant, who: &Principal, spec: &ToolSpec, risk: RiskLevel) -> bool {
    grant.covers(who)
        && (grant.tools.iter().any(|p| p.matches(&spec.name))
            || grant.tags.iter().any(|t| spec.tags.contains(t)))
        && (risk as i32) <= (grant.max_risk as i32)
}

fn verdict(grant: &Grant, who: &Principal, spec: &ToolSpec, risk: RiskLevel) -> GrantVerdict {
    if !grant.principals.is_empty() && !grant.principals.contains(&who.name) {
        return GrantVerdict::CallerNotCovered {
            reason: format!(
                "is for principals {}, not {}",
                grant.principals.join(", "),
                who.name
            ),
        };
    }
    if !grant.tenants.is_empty() && !grant.tenants.contains(&who.tenant) {
        return GrantVerdict::CallerNotCovered {
            reason: format!(
                "is for tenants {}, not {}",
                grant.tenants.join(", "),
                who.tenant
            ),
        };
    }
    if !grant.roles.is_empty() && !who.has_any_role(&grant.roles) {
        let has = if who.roles.is_empty() {
            "none".to_owned()
        } else {
            who.roles.join(", ")
        };
        return GrantVerdict::CallerNotCovered {
            reason: format!(
                "needs one of the roles {}; the caller has {has}",
                grant.roles.join(", ")
            ),
        };
    }
    let by_name = grant.tools.iter().any(|p| p.matches(&spec.name));
    let by_tag = grant.tags.iter().any(|t| spec.tags.contains(t));
    if !by_name && !by_tag {
        return GrantVerdict::ToolNotCovered {
            covers: covers(grant),
        };
    }
    if (risk as i32) > (grant.max_risk as i32) {
        return GrantVerdict::RiskCapped {
            max_risk: risk_name(grant.max_risk).into(),
            risk: risk_name(risk).into(),
        };
    }
    GrantVerdict::Allows
}

fn covers(grant: &Grant) -> String {
    let mut parts = Vec::new();
    if !grant.tools.is_empty() {
        let tools: Vec<_> = grant.tools.iter().map(|p| p.as_str()).collect();
        parts.push(format!("tools {}", tools.join(", ")));
    }
    if !grant.tags.is_empty() {
        parts.push(format!("tags {}", grant.tags.join(", ")));
    }
    parts.join("; ")
}

fn name_list<'a>(names: impl Iterator<Item = &'a str>) -> String {
    let names: Vec<_> = names.collect();
    let mut text = names
        .iter()
        .take(NAMES_IN_REASON)
        .map(|n| format!("{n:?}"))
        .collect::<Vec<_>>()
        .join(", ");
    if names.len() > NAMES_IN_REASON {
        text.push_str(&format!(" and {} more", names.len() - NAMES_IN_REASON));
    }
    text
}

fn deny_reason(
    who: &Principal,
    spec: &ToolSpec,
    risk: RiskLevel,
    verdicts: &[(&Grant, GrantVerdict)],
) -> String {
    let tool = &spec.name;
    let capped: Vec<_> = verdicts
        .iter()
        .filter_map(|(g, v)| match v {
            GrantVerdict::RiskCapped { max_risk, .. } => Some((g.name.as_str(), max_risk)),
            _ => None,
        })
        .collect();
    let for_caller: Vec<_> = verdicts
        .iter()
        .filter(|(_, v)| !matches!(v, GrantVerdict::CallerNotCovered { .. }))
        .map(|(g, _)| *g)
        .collect();
    let mut reason = if let Some((first, max)) = capped.first() {
        let grants = if capped.len() == 1 {
            format!("grant {first:?} caps risk at {max}")
        } else {
            format!(
                "grants {} cap risk below it",
                name_list(capped.iter().map(|(n, _)| *n))
            )
        };
        format!(
            "{tool} is {} risk and {grants}; ask an operator for a grant with max_risk = \"{}\"",
            risk_name(risk),
            risk_name(risk)
        )
    } else if !for_caller.is_empty() {
        let what: Vec<_> = for_caller.iter().map(|g| covers(g)).collect();
        format!(
            "no grant gives {who} the tool {tool}: the grants for this caller ({}) cover {}; ask an operator to grant {tool}",
            name_list(for_caller.iter().map(|g| g.name.as_str())),
            what.join(" | ")
        )
    } else if verdicts.is_empty() {
        format!(
            "the policy has no grants, so {who} may use no tool; ask an operator to add a [[grants]] entry"
        )
    } else {
        format!(
            "no grant applies to {who}: none of the {} grant(s) names this principal, tenant or roles; ask an operator to add a [[grants]] entry",
            verdicts.len()
        )
    };
    if who.anonymous {
        reason.push_str(
            "; anonymous callers get only what is granted to the anonymous identity: authenticate with `authorization: Bearer <token>` for your own grants",
        );
    }
    reason
}

/// Whether the call needs approval, and why.
fn approval(
    policy: &Policy,
    who: &Principal,
    spec: &ToolSpec,
    risk: RiskLevel,
) -> (ApprovalNeed, Option<String>) {
    let rules = &policy.approval;
    let why = if let Some(t) = rules
        .require_for_risk
        .filter(|t| (risk as i32) >= (*t as i32))
    {
        format!(
            "risk {} is at or above approval.require_for_risk = {:?}",
            risk_name(risk),
            risk_name(t)
        )
    } else if let Some(p) = rules
        .require_for_tools
        .iter()
        .find(|p| p.matches(&spec.name))
    {
        format!(
            "{} matches approval.require_for_tools {:?}",
            spec.name,
            p.as_str()
        )
    } else {
        return (ApprovalNeed::None, None);
    };
    if !who.anonymous && rules.pre_approved_principals.contains(&who.name) {
        let why = format!(
            "{why}, but {} is in approval.pre_approved_principals",
            who.name
        );
        (ApprovalNeed::PreApproved, Some(why))
    } else {
        (ApprovalNeed::Required, Some(why))
    }
}
