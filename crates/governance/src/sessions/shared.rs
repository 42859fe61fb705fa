//! Session facts kept among the registry's shared records, so that every dispatcher following it judges a precondition alike.
//!
//! The same facts and rules as the local store, kept as digests (the
//! registry never sees a caller, a session id or an argument): one record
//! per (caller, session), read for a check and written with a compare on
//! its revision for a record, only for tools that preconditions involve.
//! The oldest facts and sessions go first at the caps.

use super::{Declared, Fact, PreconditionError, SessionLimits, facts_of, verdict};
use crate::Principal;
use crate::digest::{hex, sha256};
use crate::shared_records::{SharedBook, SharedError, unix_ms, until_written};
use serde_json::Value;
use std::sync::Arc;
use std::time::{Duration, SystemTime};
use toolmesh::pb::{self, Precondition, shared_record};

/// Where sessions live among the shared records.
const PREFIX: &str = "session/";
/// Defaults (for a limit of 0) and ceilings of the limits a session
/// record is kept under.
const DEFAULT_IDLE: Duration = Duration::from_secs(3600);
const MAX_IDLE: Duration = Duration::from_secs(7 * 24 * 3600);
const DEFAULT_CAP: usize = 1_000;
const MAX_CAP: usize = 10_000;

/// Session facts in a registry's store, under this dispatcher's limits.
#[derive(Clone)]
pub struct SharedSessions {
    book: Arc<dyn SharedBook>,
    limits: SessionLimits,
}

impl std::fmt::Debug for SharedSessions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedSessions")
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

impl SharedSessions {
    /// Facts kept in `book`, bounded by `limits` (idle time, sessions
    /// per caller, facts per session; the byte bounds are the local
    /// store's alone).
    pub fn new(book: Arc<dyn SharedBook>, limits: SessionLimits) -> Self {
        SharedSessions { book, limits }
    }

    /// As [`Sessions::check`](super::Sessions::check), against the
    /// registry's facts.
    pub async fn check(
        &self,
        who: &Principal,
        session_id: &str,
        tool: &str,
        preconditions: &[Precondition],
        arguments: &Value,
    ) -> Result<(), PreconditionError> {
        if preconditions.is_empty() || session_id.is_empty() {
            return verdict(tool, session_id, preconditions, arguments, |_| false);
        }
        let (_, session) = self
            .read(&SessionKey::of(who, session_id).session)
            .await
            .map_err(|e| PreconditionError::Unavailable {
                tool: tool.to_owned(),
                reason: e.to_string(),
            })?;
        verdict(tool, session_id, preconditions, arguments, |fact| {
            session.facts.contains(&fact_digest(fact))
        })
    }

    /// As [`Sessions::record`](super::Sessions::record), in the registry's
    /// facts; the error says why the registry could not take them.
    pub async fn record(
        &self,
        who: &Principal,
        session_id: &str,
        tool: &str,
        arguments: &Value,
        declared: &Declared,
    ) -> Result<(), SharedError> {
        if session_id.is_empty() {
            return Ok(());
        }
        let facts: Vec<String> = facts_of(tool, arguments, declared)
            .iter()
            .map(fact_digest)
            .collect();
        if facts.is_empty() {
            return Ok(());
        }
        self.record_facts(&SessionKey::of(who, session_id), facts)
            .await
    }

    /// The session's record and its revision (0 and empty when there is none).
    async fn read(&self, key: &str) -> Result<(i64, pb::SessionRecord), SharedError> {
        let records = self.book.list(key, false).await?;
        Ok(records
            .into_iter()
            .find(|r| r.key == key)
            .and_then(|r| match r.value {
                Some(shared_record::Value::Session(session)) => Some((r.revision, session)),
                _ => None,
            })
            .unwrap_or_default())
    }

    /// Adds the facts to the session (dropping its oldest beyond the cap)
    /// and writes it back unless nothing changed and it was written
    /// recently; runs again on the fresh record when another dispatcher
    /// got there first.
    async fn record_facts(&self, key: &SessionKey, facts: Vec<String>) -> Result<(), SharedError> {
        let idle = match self.limits.idle {
            Duration::ZERO => DEFAULT_IDLE,
            idle => idle.min(MAX_IDLE),
        };
        let facts_per_session = cap(self.limits.facts_per_session);
        until_written("the session's facts", || {
            self.record_once(key, &facts, idle, facts_per_session)
        })
        .await
    }

    /// One try: `None` when another dispatcher wrote the session first.
    async fn record_once(
        &self,
        key: &SessionKey,
        facts: &[String],
        idle: Duration,
        facts_per_session: usize,
    ) -> Result<Option<()>, SharedError> {
        let (revision, mut stored) = self.read(&key.session).await?;
        let mut changed = false;
        for fact in facts {
            if !stored.facts.contains(fact) {
                stored.facts.push(fact.clone());
                changed = true;
            }
        }
        let excess = stored.facts.len().saturating_sub(facts_per_session);
        stored.facts.drain(..excess);
        let now = unix_ms(SystemTime::now());
        // Refresh an unchanged record once per half idle time, not per call.
        let fresh = now.saturating_sub(stored.written_ms) < (idle / 2).as_millis() as u64;
        if !changed && fresh {
            return Ok(Some(()));
        }
        if revision == 0 {
            self.make_room(key).await?;
        }
        stored.written_ms = now;
        let record = pb::SharedRecord {
            key: key.session.clone(),
            revision,
            value: Some(shared_record::Value::Session(stored)),
        };
        Ok(self.book.compare_and_put(record, idle).await?.then_some(()))
    }

    /// Before a caller opens one more session: forgets its least recently
    /// written sessions until it has room for one.
    async fn make_room(&self, key: &SessionKey) -> Result<(), SharedError> {
        let mut sessions = self.book.list(&key.caller, true).await?;
        let over = (sessions.len() + 1).saturating_sub(cap(self.limits.sessions_per_caller));
        if over == 0 {
            return Ok(());
        }
        sessions.sort_by_key(|r| r.revision);
        for victim in sessions.iter().take(over) {
            self.book.delete(&victim.key).await?;
        }
        Ok(())
    }
}

/// Where one session's record lives: under its caller's prefix, both
/// named by digests.
struct SessionKey {
    /// `session/<caller digest>/`: every session of the caller.
    caller: String,
    /// `session/<caller digest>/<session digest>`.
    session: String,
}

impl SessionKey {
    fn of(who: &Principal, session_id: &str) -> SessionKey {
        let caller = who.key();
        let prefix = format!(
            "{PREFIX}{}/",
            hex(&sha256(format!("caller\0{caller}").as_bytes()))
        );
        SessionKey {
            session: format!(
                "{prefix}{}",
                hex(&sha256(
                    format!("session\0{caller}\0{session_id}").as_bytes()
                ))
            ),
            caller: prefix,
        }
    }
}

fn cap(limit: usize) -> usize {
    match limit {
        0 => DEFAULT_CAP,
        n => n.min(MAX_CAP),
    }
}

/// The digest a fact travels as: of its tool, argument name and value digest.
fn fact_digest((tool, argument, value): &Fact) -> String {
    let mut bytes = Vec::with_capacity(tool.len() + argument.len() + 34);
    bytes.extend_from_slice(tool.as_bytes());
    bytes.push(0);
    bytes.extend_from_slice(argument.as_bytes());
    bytes.push(0);
    bytes.extend_from_slice(value);
    hex(&sha256(&bytes))
}
