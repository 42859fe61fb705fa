//! Who gets the canary: the caller's sticky bucket (SHA-256 of the tool
//! and the caller) against the share, after the tenant and principal
//! filters, and the words that say why.

use super::{BUCKETS, Rollout, RolloutState};
use sha2::{Digest, Sha256};

impl Rollout {
    /// Whether the canary goes to `caller`, and why (or why not).
    pub fn assign(&self, caller: &Caller<'_>) -> Assignment {
        if self.state != RolloutState::Active {
            return Assignment::NotActive(self.state);
        }
        if !self.tenants.is_empty() && !self.tenants.iter().any(|t| t == caller.tenant) {
            return Assignment::TenantNotCovered;
        }
        if !self.principals.is_empty() && !self.principals.iter().any(|p| p == caller.principal) {
            return Assignment::PrincipalNotCovered;
        }
        let Some(bucket) = bucket(&self.tool, caller) else {
            return Assignment::NoStickyKey;
        };
        if bucket < self.share.basis_points() {
            Assignment::Canary { bucket }
        } else {
            Assignment::OutsideShare { bucket }
        }
    }
}

/// What a caller's bucket hashes besides the tool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sticky<'a> {
    /// An authenticated caller: its tenant and principal.
    Principal,
    /// An anonymous caller: the session (agent run) it named.
    Session(&'a str),
    /// An anonymous caller without a session: nothing to stick to.
    None,
}

/// A caller as a rollout sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Caller<'a> {
    /// Its tenant.
    pub tenant: &'a str,
    /// Its principal's name.
    pub principal: &'a str,
    /// What its bucket is derived from.
    pub sticky: Sticky<'a>,
}

/// The caller's bucket for `tool`, in `0..BUCKETS`: the first eight bytes
/// of SHA-256 over (tool, kind, tenant, principal or session), each
/// length-prefixed, modulo [`BUCKETS`]. `None` without a sticky key.
pub fn bucket(tool: &str, caller: &Caller<'_>) -> Option<u32> {
    let (kind, id) = match caller.sticky {
        Sticky::Principal => ("principal", caller.principal),
        Sticky::Session(session) => ("session", session),
        Sticky::None => return None,
    };
    let mut hash = Sha256::new();
    for part in [tool, kind, caller.tenant, id] {
        hash.update((part.len() as u64).to_be_bytes());
        hash.update(part.as_bytes());
    }
    let digest = hash.finalize();
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    Some((u64::from_be_bytes(first) % u64::from(BUCKETS)) as u32)
}

/// Whether a rollout sends a caller to its canary, and why.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Assignment {
    /// Its bucket is inside the share.
    Canary {
        /// The caller's bucket.
        bucket: u32,
    },
    /// Its bucket is outside the share.
    OutsideShare {
        /// The caller's bucket.
        bucket: u32,
    },
    /// The rollout names tenants, not this caller's.
    TenantNotCovered,
    /// The rollout names principals, not this caller.
    PrincipalNotCovered,
    /// An anonymous caller without a session id.
    NoStickyKey,
    /// The rollout is promoted or aborted.
    NotActive(RolloutState),
}

impl Assignment {
    /// Whether the caller gets the canary.
    pub fn is_canary(self) -> bool {
        matches!(self, Assignment::Canary { .. })
    }

    /// Why, in words, for `rollout` (the caller's tenant and principal for
    /// the filters' sentences), as much as `audience` may read: only an
    /// operator learns which other tenants and principals a rollout covers
    /// and who changed it.
    pub fn describe(self, rollout: &Rollout, caller: &Caller<'_>, audience: Audience) -> String {
        let share = rollout.share;
        let bound = share.basis_points();
        let operator = audience == Audience::Operator;
        match self {
            Assignment::Canary { bucket } => format!(
                "this caller's bucket {bucket} (of {BUCKETS}) is below {bound}, so it is in the {share} that gets the canary"
            ),
            Assignment::OutsideShare { bucket } => format!(
                "this caller's bucket {bucket} (of {BUCKETS}) is not below {bound}, so it is outside the {share} that gets the canary"
            ),
            Assignment::TenantNotCovered if operator => format!(
                "the rollout covers tenants {} only, and this caller is of tenant {:?}",
                rollout.tenants.join(", "),
                caller.tenant
            ),
            Assignment::TenantNotCovered => format!(
                "the rollout does not cover this caller's tenant {:?}",
                caller.tenant
            ),
            Assignment::PrincipalNotCovered if operator => format!(
                "the rollout covers principals {} only, not {:?}",
                rollout.principals.join(", "),
                caller.principal
            ),
            Assignment::PrincipalNotCovered => format!(
                "the rollout does not cover this caller ({:?})",
                caller.principal
            ),
            Assignment::NoStickyKey => "an anonymous caller without a session id is never in a canary (send CallContext.session_id to be assigned by session)".to_owned(),
            Assignment::NotActive(RolloutState::Aborted) if operator => format!(
                "the rollout was aborted by {}{}: {}",
                rollout.changed_by,
                if rollout.automatic { " (automatically)" } else { "" },
                rollout.reason
            ),
            Assignment::NotActive(state) => format!("the rollout is {}", state.name()),
        }
    }
}

/// Who reads an [`Assignment::describe`] sentence.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Audience {
    /// An operator (the `admin` role): every filter and decision.
    Operator,
    /// The caller itself: only what concerns it.
    Caller,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rollout::example;

    fn caller(principal: &str) -> Caller<'_> {
        Caller {
            tenant: "acme",
            principal,
            sticky: Sticky::Principal,
        }
    }

    /// A caller's bucket is the same every time, differs between tools, and
    /// 20 % of 10,000 principals land in a 20 % share (within a point).
    #[test]
    fn buckets_are_sticky_and_spread() {
        let alice = caller("alice");
        assert_eq!(bucket("search_kb", &alice), bucket("search_kb", &alice));
        let r = example(2000);
        let names: Vec<String> = (0..10_000).map(|i| format!("p-{i}")).collect();
        let canary = names
            .iter()
            .filter(|n| r.assign(&caller(n)).is_canary())
            .count();
        assert!((1900..=2100).contains(&canary), "{canary} of 10000");
        let moved = names
            .iter()
            .filter(|n| bucket("search_kb", &caller(n)) != bucket("other", &caller(n)))
            .count();
        assert!(moved > 9_000, "buckets depend on the tool: {moved}");
        let session = Caller {
            sticky: Sticky::Session("run-1"),
            ..caller("anonymous")
        };
        assert_eq!(bucket("t", &session), bucket("t", &session));
        let none = Caller {
            sticky: Sticky::None,
            ..caller("anonymous")
        };
        assert_eq!(r.assign(&none), Assignment::NoStickyKey);
    }

    /// Raising the share only adds callers: nobody in the canary at 5 %
    /// leaves it at 50 %.
    #[test]
    fn growing_share_keeps_canary_callers() {
        let (small, large) = (example(500), example(5000));
        for i in 0..2000 {
            let name = format!("p-{i}");
            if small.assign(&caller(&name)).is_canary() {
                assert!(large.assign(&caller(&name)).is_canary(), "{name}");
            }
        }
    }

    /// Filters come before the bucket; an aborted rollout gives nobody the
    /// canary, and each refusal says why.
    #[test]
    fn filters_and_states() {
        let mut r = example(BUCKETS);
        assert!(r.assign(&caller("alice")).is_canary());
        r.tenants = vec!["globex".into()];
        let no = r.assign(&caller("alice"));
        assert_eq!(no, Assignment::TenantNotCovered);
        assert!(
            no.describe(&r, &caller("alice"), Audience::Operator)
                .contains("globex")
        );
        let told = no.describe(&r, &caller("alice"), Audience::Caller);
        assert!(!told.contains("globex") && told.contains("acme"), "{told}");
        r.tenants = vec!["acme".into()];
        r.principals = vec!["bob".into()];
        assert_eq!(r.assign(&caller("alice")), Assignment::PrincipalNotCovered);
        assert!(r.assign(&caller("bob")).is_canary());
        r.state = RolloutState::Aborted;
        r.reason = "errors".into();
        let aborted = r.assign(&caller("bob"));
        assert_eq!(aborted, Assignment::NotActive(RolloutState::Aborted));
        assert!(
            aborted
                .describe(&r, &caller("bob"), Audience::Operator)
                .contains("errors")
        );
        r.changed_by = "ops-lead".into();
        let told = aborted.describe(&r, &caller("bob"), Audience::Caller);
        assert!(
            !told.contains("ops-lead") && !told.contains("errors"),
            "{told}"
        );
    }
}
