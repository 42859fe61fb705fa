//! Session facts kept among the registry's shared records, so that every dispatcher following it judges a precondition alike.
//!
//! Facts are kept as digests (the registry never sees a caller, a
//! session id or an argument): one record
//! per (caller, session), read for a check and written with a compare on
//! its revision for a record, only for tools that preconditions involve.
//! The oldest facts and sessions go first at the caps.

use super::{Declared, DeclaredCache, Fact, PreconditionError, SessionLimits, facts_of, verdict};
use crate::digest::{hex, sha256};
use crate::records::{RecordStore, RecordsError, unix_ms, until_written};
use serde_json::Value;
use std::sync::Arc;
use std::time::{Duration, SystemTime};
use toolmesh::Principal;
use toolmesh::Snapshot;
use toolmesh::pb::{self, Precondition, shared_record};

/// Where sessions live among the shared records.
const PREFIX: &str = "session/";
/// Defaults (for a limit of 0) and ceilings of the limits a session
/// record is kept under.
const DEFAULT_IDLE: Duration = Duration::from_secs(3600);
const MAX_IDLE: Duration = Duration::from_secs(7 * 24 * 3600);
const DEFAULT_CAP: usize = 1_000;
const MAX_CAP: usize = 10_000;

/// Session facts in the shared records, under this dispatcher's limits.
pub struct Sessions {
    book: Arc<dyn RecordStore>,
    limits: SessionLimits,
    declared: DeclaredCache,
}

impl std::fmt::Debug for Sessions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sessions")
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

impl Sessions {
    /// Facts kept in `book`, bounded by `limits`.
    pub fn new(book: Arc<dyn RecordStore>, limits: SessionLimits) -> Self {
        Sessions {
            book,
            limits,
            declared: DeclaredCache::default(),
        }
    }

    /// The [`Declared`] set of `snapshot`, computed once per snapshot
    /// (a lock-free read while the snapshot stays the same).
    pub fn declared_for(&self, snapshot: &Snapshot) -> Arc<Declared> {
        self.declared.of(snapshot)
    }

    /// Checks every precondition of `who` calling `tool` in `session_id`
    /// against the session's facts; the error tells the model what to
    /// call first, or that the records could not be read.
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

    /// Remembers a successful call of `tool` by `who` in `session_id`:
    /// only the arguments `declared` names for `tool`, as digests. Keeps
    /// nothing when the call has no session id or no precondition names
    /// the tool; at a cap the oldest facts and sessions go. The error says
    /// why the records could not take them.
    pub async fn record(
        &self,
        who: &Principal,
        session_id: &str,
        tool: &str,
        arguments: &Value,
        declared: &Declared,
    ) -> Result<(), RecordsError> {
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
    async fn read(&self, key: &str) -> Result<(i64, pb::SessionRecord), RecordsError> {
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
    async fn record_facts(&self, key: &SessionKey, facts: Vec<String>) -> Result<(), RecordsError> {
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
    ) -> Result<Option<()>, RecordsError> {
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
    async fn make_room(&self, key: &SessionKey) -> Result<(), RecordsError> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::digest::value_sha256;
    use crate::records::MemoryRecords;
    use prost::Message;
    use serde_json::json;
    use toolmesh::pb::ToolSpec;
    use toolmesh_testkit::principal;

    fn needs_read() -> Vec<Precondition> {
        vec![Precondition {
            tool: "read_file".into(),
            same_argument: "path".into(),
        }]
    }

    fn declared() -> Declared {
        let edit = ToolSpec {
            name: "edit_file".into(),
            preconditions: needs_read(),
            ..ToolSpec::default()
        };
        Declared::from_specs([&edit])
    }

    /// Sessions over a fresh in-memory book, and the book.
    fn sessions(limits: SessionLimits) -> (Sessions, Arc<MemoryRecords>) {
        let book = Arc::new(MemoryRecords::new());
        (Sessions::new(book.clone(), limits), book)
    }

    /// Every session record in `book`, decoded.
    async fn session_records(book: &MemoryRecords) -> Vec<pb::SharedRecord> {
        book.list(PREFIX, false).await.unwrap()
    }

    /// Edit before read is refused with what to call first; a read of the
    /// same path in the same session satisfies it, another path or session does not.
    #[tokio::test]
    async fn read_before_edit() {
        let (sessions, _) = sessions(SessionLimits::default());
        let a = principal("agent-a", "acme", &[]);
        let d = declared();
        let edit = json!({"path": "a.txt", "old_string": "x", "new_string": "y"});
        let err = sessions
            .check(&a, "s1", "edit_file", &needs_read(), &edit)
            .await
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("call read_file on path \"a.txt\" first"),
            "{err}"
        );
        let read = |path: &'static str| json!({ "path": path });
        sessions
            .record(&a, "s1", "read_file", &read("b.txt"), &d)
            .await
            .unwrap();
        let needs = needs_read();
        let check = |session: &'static str| sessions.check(&a, session, "edit_file", &needs, &edit);
        assert!(check("s1").await.is_err());
        sessions
            .record(&a, "s1", "read_file", &read("a.txt"), &d)
            .await
            .unwrap();
        assert!(check("s1").await.is_ok());
        assert!(check("s2").await.is_err());
        let err = check("").await.unwrap_err();
        assert!(err.to_string().contains("send a session_id"), "{err}");
        assert!(sessions.check(&a, "", "x", &[], &edit).await.is_ok());
    }

    /// A session belongs to its caller: B naming A's session id (or A's
    /// name in another tenant) does not see A's read.
    #[tokio::test]
    async fn a_session_of_a_is_invisible_to_b() {
        let (sessions, _) = sessions(SessionLimits::default());
        let a = principal("agent-a", "acme", &[]);
        let edit = json!({"path": "a.txt"});
        sessions
            .record(&a, "s1", "read_file", &edit, &declared())
            .await
            .unwrap();
        assert!(
            sessions
                .check(&a, "s1", "edit_file", &needs_read(), &edit)
                .await
                .is_ok()
        );
        for other in [
            principal("agent-b", "acme", &[]),
            principal("agent-a", "globex", &[]),
        ] {
            let err = sessions
                .check(&other, "s1", "edit_file", &needs_read(), &edit)
                .await
                .unwrap_err();
            assert!(
                matches!(err, PreconditionError::NotYet { .. }),
                "{other}: {err}"
            );
        }
    }

    /// Only what a precondition names is kept, as a digest: calls of tools
    /// no precondition names keep nothing, and a named tool keeps only the
    /// named argument (a record does not grow with the other arguments).
    #[tokio::test]
    async fn undeclared_fields_are_not_kept() {
        let (sessions, book) = sessions(SessionLimits::default());
        let d = declared();
        let a = principal("agent-a", "acme", &[]);
        let big = "x".repeat(100_000);
        sessions
            .record(&a, "s1", "search", &json!({"q": big}), &d)
            .await
            .unwrap();
        sessions
            .record(&a, "s1", "search", &json!({"q": 1}), &Declared::default())
            .await
            .unwrap();
        assert!(session_records(&book).await.is_empty());
        let arguments = json!({"path": "a.txt", "blob": big});
        sessions
            .record(&a, "s1", "read_file", &arguments, &d)
            .await
            .unwrap();
        let records = session_records(&book).await;
        assert_eq!(records.len(), 1);
        assert!(records[0].encoded_len() < 1_000, "{records:?}");
        let Some(shared_record::Value::Session(session)) = &records[0].value else {
            panic!("not a session record: {records:?}");
        };
        let fact: Fact = (
            "read_file".into(),
            "path".into(),
            value_sha256(&json!("a.txt")),
        );
        assert_eq!(session.facts, [fact_digest(&fact)]);
    }

    /// 10,000 calls with 900 KB arguments and fresh session ids, from one
    /// caller and from many, keep each caller within its sessions and each
    /// session record small, and the latest session still works.
    #[tokio::test]
    async fn memory_stays_bounded() {
        let limits = SessionLimits {
            sessions_per_caller: 100,
            ..SessionLimits::default()
        };
        let (sessions, book) = sessions(limits);
        let d = declared();
        // The 900 KB sit in an undeclared field; the declared path is short.
        let arguments = json!({"path": "a.txt", "content": "p".repeat(900_000)});
        let a = principal("agent-a", "acme", &[]);
        let mine = SessionKey::of(&a, "").caller;
        for i in 0..10_000 {
            let caller = if i % 2 == 0 {
                a.clone()
            } else {
                principal(&format!("bot-{i}"), "acme", &[])
            };
            sessions
                .record(&caller, &format!("s-{i}"), "read_file", &arguments, &d)
                .await
                .unwrap();
            let held = book.list(&mine, true).await.unwrap().len();
            assert!(held <= limits.sessions_per_caller, "{held}");
        }
        let records = session_records(&book).await;
        assert_eq!(records.len(), limits.sessions_per_caller + 5_000);
        assert!(records.iter().all(|r| r.encoded_len() < 1_000));
        assert!(
            sessions
                .check(&a, "s-9998", "edit_file", &needs_read(), &arguments)
                .await
                .is_ok()
        );
    }

    /// Sessions idle past the limit are forgotten.
    #[tokio::test(start_paused = true)]
    async fn idle_sessions_are_forgotten() {
        let (sessions, book) = sessions(SessionLimits::default());
        let d = declared();
        let a = principal("agent-a", "acme", &[]);
        let args = json!({"path": "a.txt"});
        sessions
            .record(&a, "s1", "read_file", &args, &d)
            .await
            .unwrap();
        tokio::time::advance(Duration::from_secs(3600)).await;
        assert!(
            sessions
                .check(&a, "s1", "edit_file", &needs_read(), &args)
                .await
                .is_err()
        );
        sessions
            .record(&a, "s2", "read_file", &args, &d)
            .await
            .unwrap();
        assert_eq!(session_records(&book).await.len(), 1);
    }

    /// The declared set comes from the snapshot's preconditions, is
    /// computed once per snapshot, and is recomputed for the next one.
    #[test]
    fn declared_follows_the_snapshot() {
        let (sessions, _) = sessions(SessionLimits::default());
        let empty = Snapshot::empty("e1");
        assert!(sessions.declared_for(&empty).is_empty());
        let edit = ToolSpec {
            name: "edit_file".into(),
            version: "1.0.0".into(),
            description: "Edits.".into(),
            input_schema: r#"{"type":"object"}"#.into(),
            preconditions: needs_read(),
            ..ToolSpec::default()
        };
        let def = toolmesh::ToolDef::new(edit).unwrap();
        let mut next = empty.next();
        next.put(toolmesh::ToolEntry {
            def: Arc::new(def),
            instances: Arc::from(Vec::new()),
            disabled: None,
        });
        let snapshot = next.finish();
        let first = sessions.declared_for(&snapshot);
        assert_eq!(first.arguments_of("read_file"), ["path"]);
        assert!(first.arguments_of("edit_file").is_empty());
        assert!(Arc::ptr_eq(&first, &sessions.declared_for(&snapshot)));
        assert!(sessions.declared_for(&empty).is_empty());
    }
}
