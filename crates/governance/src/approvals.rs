//! Approvals of high-risk calls: single-use tickets bound to one tool version, one argument digest and one caller.
//!
//! The flow: a call that needs approval gets [`Approvals::request`]ed (the
//! agent is told the ticket id), a person holding an approver role
//! [`approve`](Approvals::approve)s or [`deny`](Approvals::deny)s it, and
//! the agent's next identical call [`consume`](Approvals::consume)s it.
//! Time is `tokio::time`, so tests can run with a paused clock.

mod op;
mod record;
mod store;
mod summary;

pub use op::{ApprovalCall, ApprovalOp, Approve, Consume, Deny, List, Request};
pub use store::{PREFIX, StoredApprovals};
pub use summary::{MAX_NAME_CHARS, MAX_VALUE_CHARS, approval_summary};
pub use toolmesh_policy::approval::{
    ApprovalSettings, DEFAULT_MAX_OPEN_PER_CALLER, DEFAULT_TTL, MAX_TICKETS,
};

use std::{
    collections::HashMap,
    fmt,
    sync::{Mutex, MutexGuard},
    time::{Duration, SystemTime},
};
use tokio::time::Instant;
use toolmesh::Principal;

/// Longest denial reason kept, in characters; longer ones are cut.
pub const MAX_REASON_CHARS: usize = 500;
/// Longest lifetime used when settings ask for more than the clock can represent.
const MAX_TTL: Duration = Duration::from_secs(365 * 24 * 60 * 60);
/// Where a ticket stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApprovalState {
    /// Waiting for an approver.
    Pending,
    /// Approved and not yet used.
    Approved {
        /// The approver's name.
        by: String,
    },
    /// Refused.
    Denied {
        /// The approver's name.
        by: String,
        /// Why, as the approver wrote it.
        reason: String,
    },
    /// Approved and already consumed by the call it was for.
    Used,
}

impl fmt::Display for ApprovalState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ApprovalState::Pending => f.write_str("pending"),
            ApprovalState::Approved { by } => write!(f, "approved by {by}"),
            ApprovalState::Denied { by, reason } => write!(f, "denied by {by}: {reason}"),
            ApprovalState::Used => f.write_str("used"),
        }
    }
}

/// One approval request and what became of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApprovalTicket {
    /// Short id such as `a-12`, what the agent and the approver quote.
    pub id: String,
    /// The tool the call is for.
    pub tool: String,
    /// Its exact version.
    pub version: String,
    /// [`arguments_digest`](toolmesh::digest::arguments_digest) of the call's arguments.
    pub args_sha256: String,
    /// Who asked.
    pub caller: Principal,
    /// What the call would do, for the approver to read.
    pub summary: String,
    /// Wall-clock time of the request (for display and audit).
    pub requested_at: SystemTime,
    /// When the ticket stops being valid (`tokio::time`).
    pub expires_at: Instant,
    /// Where it stands.
    pub state: ApprovalState,
}

impl ApprovalTicket {
    /// Time left before the ticket expires (zero once it has).
    pub fn expires_in(&self) -> Duration {
        self.expires_at.saturating_duration_since(Instant::now())
    }

    fn expired(&self, now: Instant) -> bool {
        now >= self.expires_at
    }

    /// Pending, or approved and not yet used, and not expired.
    fn open(&self, now: Instant) -> bool {
        !self.expired(now)
            && matches!(
                self.state,
                ApprovalState::Pending | ApprovalState::Approved { .. }
            )
    }

    fn binds(&self, tool: &str, version: &str, args_sha256: &str, caller: &Principal) -> bool {
        self.tool == tool
            && self.version == version
            && self.args_sha256 == args_sha256
            && self.caller.same_identity(caller)
    }
}

/// Which part of a call differs from what an approval was for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mismatch {
    /// Another tool.
    Tool {
        /// The tool named by the call.
        called: String,
    },
    /// Another version of the same tool.
    Version {
        /// The version named by the call.
        called: String,
    },
    /// Other arguments.
    Arguments,
}

/// Why an approval operation failed; every message says what to do next.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ApprovalError {
    /// No ticket has this id (never issued, or purged long after expiry).
    #[error(
        "there is no approval {id}: check the id, or call the tool again to get a new approval request"
    )]
    Unknown {
        /// The id given.
        id: String,
    },
    /// The ticket's time ran out.
    #[error("approval {id} for {tool} expired; call the tool again to request a new approval")]
    Expired {
        /// The ticket.
        id: String,
        /// Its tool.
        tool: String,
    },
    /// The would-be approver holds none of the approver roles.
    #[error(
        "{who} cannot decide approval {id}: that needs one of the roles [{roles}]; ask someone who holds one"
    )]
    NotApprover {
        /// The ticket.
        id: String,
        /// The would-be approver.
        who: String,
        /// The approver roles, comma-separated.
        roles: String,
    },
    /// A caller tried to approve its own request.
    #[error("{who} requested approval {id} and cannot also approve it; ask another approver")]
    SelfApproval {
        /// The ticket.
        id: String,
        /// The caller.
        who: String,
    },
    /// The approver acts for another tenant.
    #[error("approval {id} belongs to tenant {tenant}; ask an approver of that tenant")]
    OtherTenant {
        /// The ticket.
        id: String,
        /// The ticket's tenant.
        tenant: String,
    },
    /// Approve or deny of a ticket that was already decided.
    #[error("approval {id} is already {state}; nothing to do (a new call makes a new request)")]
    AlreadyDecided {
        /// The ticket.
        id: String,
        /// What it is now.
        state: String,
    },
    /// Consume of a ticket nobody approved yet.
    #[error(
        "approval {id} for {tool} is still waiting for an approver; ask one to approve it, then call again with the same arguments"
    )]
    Pending {
        /// The ticket.
        id: String,
        /// Its tool.
        tool: String,
    },
    /// Consume of a denied ticket.
    #[error(
        "approval {id} for {tool} was denied by {by}: {reason}; change the call, then request a new approval"
    )]
    Denied {
        /// The ticket.
        id: String,
        /// Its tool.
        tool: String,
        /// The approver.
        by: String,
        /// The approver's reason.
        reason: String,
    },
    /// Consume of a ticket that was already used.
    #[error(
        "approval {id} was already used; each approval allows one call: request a new approval"
    )]
    Used {
        /// The ticket.
        id: String,
    },
    /// Consume by another caller than the requester.
    #[error(
        "approval {id} was requested by another caller; approvals cannot be shared: request your own"
    )]
    WrongCaller {
        /// The ticket.
        id: String,
    },
    /// Consume for another call than the approved one.
    #[error("{}", mismatch_message(id, tool, version, mismatch))]
    Mismatch {
        /// The ticket.
        id: String,
        /// The approved tool.
        tool: String,
        /// The approved version.
        version: String,
        /// What differs.
        mismatch: Mismatch,
    },
    /// This caller already has as many open tickets as it may.
    #[error(
        "you have {open} open approvals, the most one caller may have; wait until approvers decide them or they expire, or withdraw one with `toolmesh deny ID`"
    )]
    TooManyForCaller {
        /// The caller's open tickets.
        open: usize,
    },
    /// The registry that keeps this dispatcher's approvals cannot be reached.
    #[error(
        "approvals are kept by the registry, which did not answer ({reason}); call again in a few seconds"
    )]
    Unavailable {
        /// What went wrong.
        reason: String,
    },
    /// Too many tickets are open.
    #[error(
        "{limit} approvals are already open; ask approvers to clear the queue, or try again once old ones expire"
    )]
    TooMany {
        /// [`MAX_TICKETS`].
        limit: usize,
    },
}

fn mismatch_message(id: &str, tool: &str, version: &str, mismatch: &Mismatch) -> String {
    match mismatch {
        Mismatch::Tool { called } => format!(
            "approval {id} was for {tool}, not {called}; request a new approval for {called}"
        ),
        Mismatch::Version { called } => format!(
            "approval {id} was for {tool}@{version}, not {tool}@{called}; request a new approval for that version"
        ),
        Mismatch::Arguments => {
            format!("approval {id} was for {tool} with different arguments; request a new approval")
        }
    }
}

#[derive(Debug)]
struct State {
    settings: ApprovalSettings,
    tickets: HashMap<String, ApprovalTicket>,
    next_id: u64,
}

/// The approval rules over a set of tickets. The tickets live in the
/// shared records ([`StoredApprovals`]); a book of them is rebuilt for
/// each operation ([`Approvals::from_tickets`]) and what the rules changed
/// is written back.
#[derive(Debug)]
pub struct Approvals {
    state: Mutex<State>,
}

impl Default for Approvals {
    fn default() -> Self {
        Approvals::new(ApprovalSettings::default())
    }
}

impl Approvals {
    /// An empty store.
    pub fn new(settings: ApprovalSettings) -> Self {
        Approvals {
            state: Mutex::new(State {
                settings,
                tickets: HashMap::new(),
                next_id: 1,
            }),
        }
    }

    /// Who may approve, and the lifetime of tickets requested now.
    pub fn settings(&self) -> ApprovalSettings {
        self.lock().settings.clone()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock cannot leave a ticket half-written
        // (every update is one assignment), so a poisoned lock is still usable.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Asks for approval of one call. A repeated request for the same
    /// binding (tool, version, arguments, caller) returns the open ticket
    /// (pending, or approved and unused) instead of making another.
    pub fn request(
        &self,
        tool: &str,
        version: &str,
        args_sha256: &str,
        caller: &Principal,
        summary: &str,
    ) -> Result<ApprovalTicket, ApprovalError> {
        let now = Instant::now();
        let mut state = self.lock();
        purge(&mut state, now);
        if let Some(open) = state
            .tickets
            .values()
            .find(|t| t.open(now) && t.binds(tool, version, args_sha256, caller))
        {
            return Ok(open.clone());
        }
        let open = state
            .tickets
            .values()
            .filter(|t| t.open(now) && t.caller.same_identity(caller))
            .count();
        if open >= state.settings.max_open_per_caller {
            return Err(ApprovalError::TooManyForCaller { open });
        }
        if state.tickets.len() >= MAX_TICKETS {
            // Closed tickets (used, denied, expired) make room before anyone is refused.
            state.tickets.retain(|_, t| t.open(now));
        }
        if state.tickets.len() >= MAX_TICKETS {
            return Err(ApprovalError::TooMany { limit: MAX_TICKETS });
        }
        let id = format!("a-{}", state.next_id);
        state.next_id += 1;
        let ticket = ApprovalTicket {
            id: id.clone(),
            tool: tool.to_owned(),
            version: version.to_owned(),
            args_sha256: args_sha256.to_owned(),
            caller: caller.clone(),
            summary: summary.to_owned(),
            requested_at: SystemTime::now(),
            expires_at: now
                .checked_add(state.settings.ttl)
                .or_else(|| now.checked_add(MAX_TTL))
                .unwrap_or(now),
            state: ApprovalState::Pending,
        };
        state.tickets.insert(id, ticket.clone());
        Ok(ticket)
    }

    /// One ticket by id, in whatever state.
    pub fn get(&self, id: &str) -> Option<ApprovalTicket> {
        self.lock().tickets.get(id).cloned()
    }

    /// Tickets waiting for an approver, oldest first.
    pub fn list_pending(&self) -> Vec<ApprovalTicket> {
        let now = Instant::now();
        let mut state = self.lock();
        purge(&mut state, now);
        let mut pending: Vec<_> = state
            .tickets
            .values()
            .filter(|t| t.state == ApprovalState::Pending && !t.expired(now))
            .cloned()
            .collect();
        pending.sort_by_key(|t| (t.expires_at, id_number(&t.id)));
        pending
    }

    /// The pending tickets `who` may see, oldest first: an approver (a
    /// holder of one of `approver_roles`) sees those of its own tenant,
    /// anyone sees its own requests; never another tenant's.
    pub fn list_for(&self, who: &Principal, approver_roles: &[String]) -> Vec<ApprovalTicket> {
        let approver = !who.anonymous && who.has_any_role(approver_roles);
        self.list_pending()
            .into_iter()
            .filter(|t| t.caller.same_identity(who) || (approver && t.caller.tenant == who.tenant))
            .collect()
    }

    /// Approves a pending ticket. The approver must hold an approver role,
    /// act for the same tenant, and not be the requester.
    pub fn approve(&self, id: &str, approver: &Principal) -> Result<ApprovalTicket, ApprovalError> {
        self.decide(id, approver, |ticket| {
            if ticket.caller.same_identity(approver) {
                return Err(ApprovalError::SelfApproval {
                    id: id.to_owned(),
                    who: approver.name.clone(),
                });
            }
            Ok(ApprovalState::Approved {
                by: approver.name.clone(),
            })
        })
    }

    /// Denies a pending ticket, with a reason the agent will read. The same
    /// rules as [`approve`](Self::approve) apply, except that a requester
    /// may withdraw (deny) its own request.
    pub fn deny(
        &self,
        id: &str,
        approver: &Principal,
        reason: &str,
    ) -> Result<ApprovalTicket, ApprovalError> {
        let reason = if reason.trim().is_empty() {
            "no reason given".to_owned()
        } else {
            reason.chars().take(MAX_REASON_CHARS).collect()
        };
        self.decide(id, approver, |_| {
            Ok(ApprovalState::Denied {
                by: approver.name.clone(),
                reason: reason.clone(),
            })
        })
    }

    fn decide(
        &self,
        id: &str,
        approver: &Principal,
        verdict: impl FnOnce(&ApprovalTicket) -> Result<ApprovalState, ApprovalError>,
    ) -> Result<ApprovalTicket, ApprovalError> {
        let now = Instant::now();
        let mut state = self.lock();
        purge(&mut state, now);
        let roles = state.settings.approver_roles.clone();
        let ticket = state
            .tickets
            .get_mut(id)
            .ok_or_else(|| ApprovalError::Unknown { id: id.to_owned() })?;
        if ticket.expired(now) {
            return Err(ApprovalError::Expired {
                id: id.to_owned(),
                tool: ticket.tool.clone(),
            });
        }
        let withdrawing = ticket.caller.same_identity(approver);
        if approver.anonymous || (!withdrawing && !approver.has_any_role(&roles)) {
            return Err(ApprovalError::NotApprover {
                id: id.to_owned(),
                who: approver.name.clone(),
                roles: roles.join(", "),
            });
        }
        if ticket.caller.tenant != approver.tenant {
            return Err(ApprovalError::OtherTenant {
                id: id.to_owned(),
                tenant: ticket.caller.tenant.clone(),
            });
        }
        if ticket.state != ApprovalState::Pending {
            return Err(ApprovalError::AlreadyDecided {
                id: id.to_owned(),
                state: ticket.state.to_string(),
            });
        }
        ticket.state = verdict(ticket)?;
        Ok(ticket.clone())
    }

    /// Uses an approved ticket for exactly the call it was for: same tool,
    /// version, arguments digest and caller, before it expires, once.
    pub fn consume(
        &self,
        id: &str,
        tool: &str,
        version: &str,
        args_sha256: &str,
        caller: &Principal,
    ) -> Result<(), ApprovalError> {
        let now = Instant::now();
        let mut state = self.lock();
        purge(&mut state, now);
        let ticket = state
            .tickets
            .get_mut(id)
            .ok_or_else(|| ApprovalError::Unknown { id: id.to_owned() })?;
        // Checked first, so a caller learns nothing about others' tickets.
        if !ticket.caller.same_identity(caller) {
            return Err(ApprovalError::WrongCaller { id: id.to_owned() });
        }
        if ticket.expired(now) {
            return Err(ApprovalError::Expired {
                id: id.to_owned(),
                tool: ticket.tool.clone(),
            });
        }
        match &ticket.state {
            ApprovalState::Approved { .. } => {}
            ApprovalState::Pending => {
                return Err(ApprovalError::Pending {
                    id: id.to_owned(),
                    tool: ticket.tool.clone(),
                });
            }
            ApprovalState::Denied { by, reason } => {
                return Err(ApprovalError::Denied {
                    id: id.to_owned(),
                    tool: ticket.tool.clone(),
                    by: by.clone(),
                    reason: reason.clone(),
                });
            }
            ApprovalState::Used => return Err(ApprovalError::Used { id: id.to_owned() }),
        }
        let mismatch = if ticket.tool != tool {
            Some(Mismatch::Tool {
                called: tool.to_owned(),
            })
        } else if ticket.version != version {
            Some(Mismatch::Version {
                called: version.to_owned(),
            })
        } else if ticket.args_sha256 != args_sha256 {
            Some(Mismatch::Arguments)
        } else {
            None
        };
        if let Some(mismatch) = mismatch {
            return Err(ApprovalError::Mismatch {
                id: id.to_owned(),
                tool: ticket.tool.clone(),
                version: ticket.version.clone(),
                mismatch,
            });
        }
        ticket.state = ApprovalState::Used;
        Ok(())
    }
}

/// Drops tickets that expired more than one TTL ago (until then an expired
/// ticket still answers "expired" rather than "unknown").
fn purge(state: &mut State, now: Instant) {
    let grace = state.settings.ttl;
    state
        .tickets
        .retain(|_, t| now < t.expires_at.checked_add(grace).unwrap_or(t.expires_at));
}

fn id_number(id: &str) -> u64 {
    id.strip_prefix("a-")
        .and_then(|n| n.parse().ok())
        .unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    use toolmesh_testkit::principal;

    /// `p`'s namesake in `tenant`.
    fn in_tenant(mut p: Principal, tenant: &str) -> Principal {
        p.tenant = tenant.into();
        p
    }

    /// `p` asks to run `wipe@1.0.0` with arguments digest `digest`.
    fn ask(
        approvals: &Approvals,
        digest: &str,
        p: &Principal,
    ) -> Result<ApprovalTicket, ApprovalError> {
        approvals.request("wipe", "1.0.0", digest, p, "")
    }

    fn store() -> Approvals {
        Approvals::new(ApprovalSettings::default())
    }

    /// Requested, listed, approved, then consumed exactly once by the exact call.
    #[tokio::test(start_paused = true)]
    async fn request_approve_consume_once() {
        let approvals = store();
        let bot = principal("support-bot", "acme", &["agent"]);
        let alice = principal("alice", "acme", &["approver"]);
        let t = approvals
            .request("send_email", "1.0.0", "d1", &bot, "email bob@x")
            .unwrap();
        assert_eq!(t.id, "a-1");
        assert_eq!(t.state, ApprovalState::Pending);
        assert_eq!(t.expires_in(), DEFAULT_TTL);
        // The same binding again returns the same ticket; another binding a new one.
        let again = approvals
            .request("send_email", "1.0.0", "d1", &bot, "email bob@x")
            .unwrap();
        assert_eq!(again.id, "a-1");
        let other = approvals
            .request("send_email", "1.0.0", "d2", &bot, "email eve@x")
            .unwrap();
        assert_eq!(other.id, "a-2");
        let pending: Vec<_> = approvals.list_pending().into_iter().map(|t| t.id).collect();
        assert_eq!(pending, ["a-1", "a-2"]);

        let err = approvals
            .consume("a-1", "send_email", "1.0.0", "d1", &bot)
            .unwrap_err();
        assert!(matches!(err, ApprovalError::Pending { .. }), "{err}");
        assert!(err.to_string().contains("ask one to approve it"), "{err}");

        let approved = approvals.approve("a-1", &alice).unwrap();
        assert_eq!(
            approved.state,
            ApprovalState::Approved { by: "alice".into() }
        );
        assert_eq!(approvals.list_pending().len(), 1);
        // Approved but unused: a repeated request still points at it.
        let same = approvals
            .request("send_email", "1.0.0", "d1", &bot, "email bob@x")
            .unwrap();
        assert_eq!(same.id, "a-1");

        approvals
            .consume("a-1", "send_email", "1.0.0", "d1", &bot)
            .unwrap();
        let err = approvals
            .consume("a-1", "send_email", "1.0.0", "d1", &bot)
            .unwrap_err();
        assert_eq!(err, ApprovalError::Used { id: "a-1".into() });
        assert!(err.to_string().contains("request a new approval"), "{err}");
        let err = approvals.approve("a-1", &alice).unwrap_err();
        assert!(err.to_string().contains("already used"), "{err}");
    }

    /// A ticket is bound to its tool, version, arguments and caller; each mismatch says what to do.
    #[tokio::test(start_paused = true)]
    async fn consume_is_bound_to_the_call() {
        let approvals = store();
        let bot = principal("support-bot", "acme", &["agent"]);
        let other_bot = principal("other-bot", "acme", &["agent"]);
        let alice = principal("alice", "acme", &["approver"]);
        approvals
            .request("send_email", "1.0.0", "d1", &bot, "")
            .unwrap();
        approvals.approve("a-1", &alice).unwrap();
        let cases: [(&str, &str, &str, &Principal, &str); 4] = [
            (
                "send_sms",
                "1.0.0",
                "d1",
                &bot,
                "approval a-1 was for send_email, not send_sms; request a new approval for send_sms",
            ),
            (
                "send_email",
                "1.1.0",
                "d1",
                &bot,
                "approval a-1 was for send_email@1.0.0, not send_email@1.1.0",
            ),
            (
                "send_email",
                "1.0.0",
                "d2",
                &bot,
                "approval a-1 was for send_email with different arguments; request a new approval",
            ),
            (
                "send_email",
                "1.0.0",
                "d1",
                &other_bot,
                "requested by another caller",
            ),
        ];
        for (tool, version, digest, caller, text) in cases {
            let err = approvals
                .consume("a-1", tool, version, digest, caller)
                .unwrap_err();
            assert!(err.to_string().contains(text), "{err}");
        }
        // None of the mismatches used the ticket up.
        approvals
            .consume("a-1", "send_email", "1.0.0", "d1", &bot)
            .unwrap();
        let err = approvals
            .consume("a-9", "send_email", "1.0.0", "d1", &bot)
            .unwrap_err();
        assert!(
            err.to_string().contains("there is no approval a-9"),
            "{err}"
        );
    }

    /// Tickets expire after the TTL: neither approvable nor usable, and a new request makes a new ticket.
    #[tokio::test(start_paused = true)]
    async fn tickets_expire() {
        let approvals = Approvals::new(ApprovalSettings {
            ttl: Duration::from_secs(60),
            ..ApprovalSettings::default()
        });
        let bot = principal("support-bot", "acme", &["agent"]);
        let alice = principal("alice", "acme", &["approver"]);
        approvals.request("wipe", "1.0.0", "d", &bot, "").unwrap();
        approvals.request("wipe", "1.0.0", "e", &bot, "").unwrap();
        approvals.approve("a-2", &alice).unwrap();
        tokio::time::advance(Duration::from_secs(59)).await;
        assert_eq!(approvals.list_pending().len(), 1);
        tokio::time::advance(Duration::from_secs(1)).await;
        assert!(approvals.list_pending().is_empty());
        let err = approvals.approve("a-1", &alice).unwrap_err();
        assert_eq!(
            err.to_string(),
            "approval a-1 for wipe expired; call the tool again to request a new approval"
        );
        let err = approvals
            .consume("a-2", "wipe", "1.0.0", "e", &bot)
            .unwrap_err();
        assert!(matches!(err, ApprovalError::Expired { .. }), "{err}");
        let fresh = approvals.request("wipe", "1.0.0", "d", &bot, "").unwrap();
        assert_eq!(fresh.id, "a-3");
        // Long after expiry the old ticket is purged and reads as unknown.
        tokio::time::advance(Duration::from_secs(120)).await;
        assert!(matches!(
            approvals.approve("a-1", &alice),
            Err(ApprovalError::Unknown { .. })
        ));
    }

    /// Only approvers of the same tenant may decide, never on their own request; deny carries the reason.
    #[tokio::test(start_paused = true)]
    async fn who_may_decide() {
        let approvals = store();
        let bot = principal("support-bot", "acme", &["agent"]);
        let approver_bot = principal("oncall", "acme", &["agent", "approver"]);
        let alice = principal("alice", "acme", &["approver"]);
        let foreign = principal("bob", "globex", &["approver"]);

        let helper = principal("helper", "acme", &["agent"]);
        approvals.request("wipe", "1.0.0", "d", &bot, "").unwrap();
        let err = approvals.approve("a-1", &helper).unwrap_err();
        assert!(matches!(err, ApprovalError::NotApprover { .. }), "{err}");
        assert!(err.to_string().contains("roles [approver]"), "{err}");
        let err = approvals.approve("a-1", &foreign).unwrap_err();
        assert!(
            err.to_string().contains("ask an approver of that tenant"),
            "{err}"
        );

        approvals
            .request("wipe", "1.0.0", "d", &approver_bot, "")
            .unwrap();
        let err = approvals.approve("a-2", &approver_bot).unwrap_err();
        assert_eq!(
            err.to_string(),
            "oncall requested approval a-2 and cannot also approve it; ask another approver"
        );

        let denied = approvals.deny("a-1", &alice, "not today").unwrap();
        assert_eq!(
            denied.state,
            ApprovalState::Denied {
                by: "alice".into(),
                reason: "not today".into()
            }
        );
        let err = approvals
            .consume("a-1", "wipe", "1.0.0", "d", &bot)
            .unwrap_err();
        assert!(
            err.to_string().contains("denied by alice: not today"),
            "{err}"
        );
        let err = approvals.approve("a-1", &alice).unwrap_err();
        assert!(err.to_string().contains("already denied"), "{err}");
        // After a denial, asking again opens a new ticket.
        let again = approvals.request("wipe", "1.0.0", "d", &bot, "").unwrap();
        assert_eq!(again.id, "a-3");
        // A requester may withdraw its own request.
        approvals.deny("a-3", &bot, "").unwrap();
    }

    /// One caller at its cap gets "you have N open approvals" while other
    /// callers still get theirs; a repeat of an open request is not a new
    /// one, and a decided or withdrawn ticket frees the slot.
    #[tokio::test(start_paused = true)]
    async fn open_approvals_are_capped_per_caller() {
        let approvals = Approvals::new(ApprovalSettings {
            max_open_per_caller: 3,
            ..ApprovalSettings::default()
        });
        let flood = principal("flood-bot", "acme", &["agent"]);
        let other = principal("support-bot", "acme", &["agent"]);
        let alice = principal("alice", "acme", &["approver"]);
        for d in ["d1", "d2", "d3"] {
            approvals.request("wipe", "1.0.0", d, &flood, "").unwrap();
        }
        let err = ask(&approvals, "d4", &flood).unwrap_err();
        assert_eq!(err, ApprovalError::TooManyForCaller { open: 3 });
        assert!(
            err.to_string().starts_with("you have 3 open approvals"),
            "{err}"
        );
        assert_eq!(ask(&approvals, "d1", &flood).unwrap().id, "a-1");
        let namesake = in_tenant(flood.clone(), "globex");
        ask(&approvals, "d4", &namesake).unwrap();
        ask(&approvals, "d4", &other).unwrap();
        approvals.deny("a-1", &alice, "no").unwrap();
        ask(&approvals, "d4", &flood).unwrap();
        approvals.approve("a-2", &alice).unwrap();
        approvals
            .consume("a-2", "wipe", "1.0.0", "d2", &flood)
            .unwrap();
        ask(&approvals, "d5", &flood).unwrap();
        assert!(ask(&approvals, "d6", &flood).is_err());
    }

    /// An approver lists only its own tenant's pending tickets, a caller
    /// only its own; deciding another tenant's ticket stays refused.
    #[tokio::test(start_paused = true)]
    async fn listing_is_scoped_by_tenant() {
        let approvals = store();
        let roles = ApprovalSettings::default().approver_roles;
        let acme_bot = principal("support-bot", "acme", &["agent"]);
        let globex_bot = principal("globex-bot", "globex", &["agent"]);
        let alice = principal("alice", "acme", &["approver"]);
        let bob = principal("bob", "globex", &["approver"]);
        let helper = principal("helper", "acme", &["agent"]);
        ask(&approvals, "d", &acme_bot).unwrap();
        ask(&approvals, "d", &globex_bot).unwrap();
        let ids = |p: &Principal| -> Vec<String> {
            approvals
                .list_for(p, &roles)
                .into_iter()
                .map(|t| t.id)
                .collect()
        };
        assert_eq!(ids(&alice), ["a-1"]);
        assert_eq!(ids(&bob), ["a-2"]);
        assert_eq!(ids(&acme_bot), ["a-1"]);
        assert_eq!(ids(&globex_bot), ["a-2"]);
        assert!(ids(&helper).is_empty());
        let mut anonymous = alice.clone();
        anonymous.anonymous = true;
        assert!(ids(&anonymous).is_empty());
        for err in [
            approvals.approve("a-2", &alice).unwrap_err(),
            approvals.deny("a-2", &alice, "no").unwrap_err(),
            approvals.approve("a-1", &bob).unwrap_err(),
        ] {
            assert!(matches!(err, ApprovalError::OtherTenant { .. }), "{err}");
        }
    }
}
