//! What each caller's agent sessions have done, kept only as far as a declared precondition needs it.
//!
//! A tool may declare preconditions ("edit_file needs read_file on the same
//! path first"). A session belongs to one caller: it is keyed by the
//! caller's identity (tenant and principal) and the session id, so another
//! caller naming the same id sees nothing of it. Only (tool, argument)
//! pairs that some precondition of the current snapshot names are kept,
//! as SHA-256 digests of the argument's canonical JSON, never the value.
//! The store is bounded by sessions and bytes per caller and in total;
//! when full it forgets idle and then least recently used sessions, so a
//! call never fails because the store is full.

use crate::Principal;
use crate::digest::value_sha256;
use arc_swap::ArcSwapOption;
use serde_json::Value;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::time::Instant;
use toolmesh::Snapshot;
use toolmesh::pb::{Precondition, ToolSpec};

mod shared;
pub use shared::SharedSessions;

/// Longest value shown in a precondition message, in characters.
const MAX_SHOWN_CHARS: usize = 80;
/// Bytes charged per kept fact beyond its strings (digest, set and index overhead).
const FACT_OVERHEAD: usize = 96;
/// Bytes charged per session beyond its key (map and index entries).
const SESSION_OVERHEAD: usize = 160;

/// The (tool, argument) pairs that any precondition in one snapshot names;
/// an empty argument stands for "any successful call of the tool".
/// Computed once per snapshot ([`Declared::of`], or memoised by
/// [`Sessions::declared_for`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Declared {
    by_tool: HashMap<String, Vec<String>>,
}

impl Declared {
    /// What the preconditions of `specs` name.
    pub fn from_specs<'a>(specs: impl IntoIterator<Item = &'a ToolSpec>) -> Self {
        let mut by_tool: HashMap<String, Vec<String>> = HashMap::new();
        for p in specs.into_iter().flat_map(|s| &s.preconditions) {
            let arguments = by_tool.entry(p.tool.clone()).or_default();
            if !arguments.contains(&p.same_argument) {
                arguments.push(p.same_argument.clone());
            }
        }
        Declared { by_tool }
    }

    /// What the preconditions of every tool in `snapshot` name.
    pub fn of(snapshot: &Snapshot) -> Self {
        Declared::from_specs(snapshot.entries().map(|e| e.def.spec()))
    }

    /// True when no precondition names anything: nothing is ever kept.
    pub fn is_empty(&self) -> bool {
        self.by_tool.is_empty()
    }

    /// The arguments of `tool` some precondition names (`""`: any call).
    pub fn arguments_of(&self, tool: &str) -> &[String] {
        self.by_tool.get(tool).map_or(&[], Vec::as_slice)
    }
}

/// How much the store keeps; the defaults suit one dispatcher.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionLimits {
    /// Sessions idle this long are forgotten.
    pub idle: Duration,
    /// Sessions one caller may have at once; its least recently used goes first.
    pub sessions_per_caller: usize,
    /// Bytes one caller's sessions may take (by the store's own accounting).
    pub bytes_per_caller: usize,
    /// Sessions kept in total.
    pub sessions: usize,
    /// Bytes kept in total.
    pub bytes: usize,
    /// Facts kept per session; beyond this the session forgets its oldest.
    pub facts_per_session: usize,
}

impl Default for SessionLimits {
    fn default() -> Self {
        SessionLimits {
            idle: Duration::from_secs(3600),
            sessions_per_caller: 1_000,
            bytes_per_caller: 4 << 20,
            sessions: 100_000,
            bytes: 64 << 20,
            facts_per_session: 1_000,
        }
    }
}

/// What the store holds now, by its own accounting.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SessionUsage {
    /// Sessions kept.
    pub sessions: usize,
    /// Bytes charged for them.
    pub bytes: usize,
}

/// Why a call may not run yet; each message says what to call first.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PreconditionError {
    /// The call carries no session id, so no earlier call can count.
    #[error(
        "{tool} needs {needs} earlier in the same session; send a session_id in the call context and call {first} first"
    )]
    NoSession {
        /// The tool called.
        tool: String,
        /// What it needs, e.g. `a successful read_file call with the same path`.
        needs: String,
        /// The tool to call first.
        first: String,
    },
    /// This caller's session has no matching earlier call.
    #[error(
        "{tool} needs {needs} earlier in this session; call {first}{on} first, then call {tool} again"
    )]
    NotYet {
        /// The tool called.
        tool: String,
        /// What it needs.
        needs: String,
        /// The tool to call first.
        first: String,
        /// ` on path "a.txt"`, or empty.
        on: String,
    },
    /// The facts are kept by the registry, which did not answer.
    #[error(
        "the preconditions of {tool} cannot be checked now: the registry that keeps session facts did not answer ({reason}); call again in a few seconds"
    )]
    Unavailable {
        /// The tool called.
        tool: String,
        /// What went wrong.
        reason: String,
    },
}

/// (tool, argument, digest of its canonical JSON); ("t", "", zeros) = any call of t.
type Fact = (Arc<str>, Arc<str>, [u8; 32]);
/// (tenant/principal, session id).
type Key = (Arc<str>, Arc<str>);
/// The [`Declared`] set of one snapshot.
#[derive(Debug)]
struct DeclaredMemo {
    epoch: Arc<str>,
    version: u64,
    declared: Arc<Declared>,
}

#[derive(Debug)]
struct Session {
    facts: HashSet<Fact>,
    /// Insertion order of `facts`, to forget the oldest at the cap.
    order: Vec<Fact>,
    bytes: usize,
    touched: Instant,
    /// Position in the least-recently-used index.
    seq: u64,
}

#[derive(Debug, Default)]
struct Usage {
    sessions: usize,
    bytes: usize,
    /// This caller's sessions by last use.
    lru: BTreeMap<u64, Arc<str>>,
}

#[derive(Debug, Default)]
struct Store {
    sessions: HashMap<Key, Session>,
    callers: HashMap<Arc<str>, Usage>,
    /// Every session by last use.
    lru: BTreeMap<u64, Key>,
    bytes: usize,
    next_seq: u64,
}

/// Successful calls per (caller, session), as far as preconditions need them.
#[derive(Debug, Default)]
pub struct Sessions {
    limits: SessionLimits,
    store: Mutex<Store>,
    /// The [`Declared`] set of the last snapshot asked about: (epoch, version).
    declared: ArcSwapOption<DeclaredMemo>,
}

impl Sessions {
    /// An empty store with these limits.
    pub fn new(limits: SessionLimits) -> Self {
        Sessions {
            limits,
            ..Sessions::default()
        }
    }

    /// The [`Declared`] set of `snapshot`, computed once per snapshot
    /// (a lock-free read while the snapshot stays the same).
    pub fn declared_for(&self, snapshot: &Snapshot) -> Arc<Declared> {
        if let Some(memo) = self.declared.load().as_ref()
            && *memo.epoch == *snapshot.epoch()
            && memo.version == snapshot.version()
        {
            return memo.declared.clone();
        }
        let declared = Arc::new(Declared::of(snapshot));
        self.declared.store(Some(Arc::new(DeclaredMemo {
            epoch: snapshot.epoch().into(),
            version: snapshot.version(),
            declared: declared.clone(),
        })));
        declared
    }

    /// The limits this store keeps to.
    pub fn limits(&self) -> SessionLimits {
        self.limits
    }

    /// What the store holds now.
    pub fn usage(&self) -> SessionUsage {
        let store = lock(&self.store);
        SessionUsage {
            sessions: store.sessions.len(),
            bytes: store.bytes,
        }
    }

    /// What one caller's sessions hold now.
    pub fn usage_of(&self, who: &Principal) -> SessionUsage {
        let store = lock(&self.store);
        store
            .callers
            .get(who.key().as_str())
            .map_or_else(SessionUsage::default, |u| SessionUsage {
                sessions: u.sessions,
                bytes: u.bytes,
            })
    }

    /// Remembers a successful call of `tool` by `who` in `session_id`:
    /// only the arguments `declared` names for `tool`, as digests. Keeps
    /// nothing when the call has no session id or no precondition names
    /// the tool. Never fails: a full store forgets old sessions instead.
    pub fn record(
        &self,
        who: &Principal,
        session_id: &str,
        tool: &str,
        arguments: &Value,
        declared: &Declared,
    ) {
        if session_id.is_empty() {
            return;
        }
        let facts = facts_of(tool, arguments, declared);
        if facts.is_empty() {
            return;
        }
        let caller: Arc<str> = who.key().into();
        let key: Key = (caller.clone(), session_id.into());
        let now = Instant::now();
        let mut store = lock(&self.store);
        store.forget_idle(now, self.limits.idle);
        if !store.sessions.contains_key(&key) {
            let bytes = SESSION_OVERHEAD + key.0.len() + key.1.len();
            store.open(key.clone(), bytes, now);
        }
        store.touch(&key, now);
        for fact in facts {
            store.add_fact(&key, fact, self.limits.facts_per_session);
        }
        store.shrink(&caller, &key, &self.limits);
    }

    /// Checks every precondition of `who` calling `tool` in `session_id`;
    /// the error tells the model what to call first.
    pub fn check(
        &self,
        who: &Principal,
        session_id: &str,
        tool: &str,
        preconditions: &[Precondition],
        arguments: &Value,
    ) -> Result<(), PreconditionError> {
        if preconditions.is_empty() {
            return Ok(());
        }
        let key: Key = (who.key().into(), session_id.into());
        let store = lock(&self.store);
        let session = store
            .sessions
            .get(&key)
            .filter(|s| Instant::now().duration_since(s.touched) < self.limits.idle);
        verdict(tool, session_id, preconditions, arguments, |fact| {
            session.is_some_and(|s| s.facts.contains(fact))
        })
    }
}

impl Store {
    fn open(&mut self, key: Key, bytes: usize, now: Instant) {
        let usage = self.callers.entry(key.0.clone()).or_default();
        usage.sessions += 1;
        usage.bytes += bytes;
        self.bytes += bytes;
        self.sessions.insert(
            key,
            Session {
                facts: HashSet::new(),
                order: Vec::new(),
                bytes,
                touched: now,
                seq: u64::MAX,
            },
        );
    }

    /// Moves `key` to the most recently used end of both indexes.
    fn touch(&mut self, key: &Key, now: Instant) {
        let seq = self.next_seq;
        self.next_seq += 1;
        let Some(session) = self.sessions.get_mut(key) else {
            return;
        };
        let old = std::mem::replace(&mut session.seq, seq);
        session.touched = now;
        self.lru.remove(&old);
        self.lru.insert(seq, key.clone());
        if let Some(usage) = self.callers.get_mut(&key.0) {
            usage.lru.remove(&old);
            usage.lru.insert(seq, key.1.clone());
        }
    }

    fn add_fact(&mut self, key: &Key, fact: Fact, cap: usize) {
        let Some(session) = self.sessions.get_mut(key) else {
            return;
        };
        if session.facts.contains(&fact) {
            return;
        }
        let mut delta = fact_bytes(&fact) as isize;
        if session.order.len() >= cap.max(1) {
            let oldest = session.order.remove(0);
            session.facts.remove(&oldest);
            delta -= fact_bytes(&oldest) as isize;
        }
        session.facts.insert(fact.clone());
        session.order.push(fact);
        session.bytes = session.bytes.saturating_add_signed(delta);
        self.bytes = self.bytes.saturating_add_signed(delta);
        if let Some(usage) = self.callers.get_mut(&key.0) {
            usage.bytes = usage.bytes.saturating_add_signed(delta);
        }
    }

    fn remove(&mut self, key: &Key) {
        let Some(session) = self.sessions.remove(key) else {
            return;
        };
        self.lru.remove(&session.seq);
        self.bytes = self.bytes.saturating_sub(session.bytes);
        let emptied = self.callers.get_mut(&key.0).is_some_and(|usage| {
            usage.lru.remove(&session.seq);
            usage.sessions = usage.sessions.saturating_sub(1);
            usage.bytes = usage.bytes.saturating_sub(session.bytes);
            usage.sessions == 0
        });
        if emptied {
            self.callers.remove(&key.0);
        }
    }

    /// Forgets sessions idle for `idle` or longer, oldest first.
    fn forget_idle(&mut self, now: Instant, idle: Duration) {
        while let Some(key) = self.lru.first_key_value().map(|(_, k)| k.clone()) {
            let stale = self
                .sessions
                .get(&key)
                .is_none_or(|s| now.duration_since(s.touched) >= idle);
            if !stale {
                break;
            }
            self.remove(&key);
        }
    }

    /// Brings `caller` and then the whole store back within the limits,
    /// forgetting least recently used sessions other than `keep` first.
    fn shrink(&mut self, caller: &Arc<str>, keep: &Key, limits: &SessionLimits) {
        loop {
            let over = self.callers.get(caller).and_then(|u| {
                (u.sessions > limits.sessions_per_caller || u.bytes > limits.bytes_per_caller)
                    .then(|| {
                        u.lru
                            .values()
                            .find(|id| **id != keep.1)
                            .map(|id| (caller.clone(), id.clone()))
                    })
                    .flatten()
            });
            match over {
                Some(victim) => self.remove(&victim),
                None => break,
            }
        }
        while self.sessions.len() > limits.sessions || self.bytes > limits.bytes {
            let Some(victim) = self.lru.values().find(|k| *k != keep).cloned() else {
                break;
            };
            self.remove(&victim);
        }
    }
}

fn fact_bytes(fact: &Fact) -> usize {
    FACT_OVERHEAD + fact.0.len() + fact.1.len()
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // Every update leaves the maps consistent between statements that can
    // panic only on allocation failure, so a poisoned lock is still usable.
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

/// The facts a successful call of `tool` establishes, as far as `declared`
/// names them: one per named argument the call sent.
fn facts_of(tool: &str, arguments: &Value, declared: &Declared) -> Vec<Fact> {
    let names = declared.arguments_of(tool);
    if names.is_empty() {
        return Vec::new();
    }
    let tool: Arc<str> = tool.into();
    names
        .iter()
        .filter_map(|name| {
            if name.is_empty() {
                return Some((tool.clone(), "".into(), [0; 32]));
            }
            let value = arguments.get(name)?;
            Some((tool.clone(), name.as_str().into(), value_sha256(value)))
        })
        .collect()
}

/// The fact precondition `p` needs of a call with `arguments`; None when
/// the call does not send the argument it names (nothing can match).
fn wanted(p: &Precondition, arguments: &Value) -> Option<Fact> {
    let digest = if p.same_argument.is_empty() {
        [0; 32]
    } else {
        value_sha256(arguments.get(&p.same_argument)?)
    };
    Some((
        p.tool.as_str().into(),
        p.same_argument.as_str().into(),
        digest,
    ))
}

/// Judges `preconditions` of a call of `tool` given which facts its
/// session `held`; the error tells the model what to call first.
fn verdict(
    tool: &str,
    session_id: &str,
    preconditions: &[Precondition],
    arguments: &Value,
    held: impl Fn(&Fact) -> bool,
) -> Result<(), PreconditionError> {
    let Some(first) = preconditions.first() else {
        return Ok(());
    };
    if session_id.is_empty() {
        return Err(PreconditionError::NoSession {
            tool: tool.to_owned(),
            needs: needs(first),
            first: first.tool.clone(),
        });
    }
    for p in preconditions {
        if wanted(p, arguments).is_some_and(|fact| held(&fact)) {
            continue;
        }
        let on = if p.same_argument.is_empty() {
            String::new()
        } else {
            format!(
                " on {} {}",
                p.same_argument,
                shown(arguments.get(&p.same_argument))
            )
        };
        return Err(PreconditionError::NotYet {
            tool: tool.to_owned(),
            needs: needs(p),
            first: p.tool.clone(),
            on,
        });
    }
    Ok(())
}

fn needs(p: &Precondition) -> String {
    if p.same_argument.is_empty() {
        format!("a successful {} call", p.tool)
    } else {
        format!(
            "a successful {} call with the same {}",
            p.tool, p.same_argument
        )
    }
}

/// The call's value of the argument, shortened for a message.
fn shown(value: Option<&Value>) -> String {
    let Some(value) = value else {
        return "(which this call does not send)".to_owned();
    };
    let text = value.to_string();
    if text.chars().count() > MAX_SHOWN_CHARS {
        text.chars()
            .take(MAX_SHOWN_CHARS - 1)
            .chain(['…'])
            .collect()
    } else {
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

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

    fn who(name: &str, tenant: &str) -> Principal {
        Principal {
            name: name.into(),
            tenant: tenant.into(),
            roles: vec![],
            anonymous: false,
            issued_by: None,
        }
    }

    /// Edit before read is refused with what to call first; a read of the
    /// same path in the same session satisfies it, another path or session does not.
    #[test]
    fn read_before_edit() {
        let sessions = Sessions::default();
        let a = who("agent-a", "acme");
        let d = declared();
        let edit = json!({"path": "a.txt", "old_string": "x", "new_string": "y"});
        let err = sessions
            .check(&a, "s1", "edit_file", &needs_read(), &edit)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("call read_file on path \"a.txt\" first"),
            "{err}"
        );
        sessions.record(&a, "s1", "read_file", &json!({"path": "b.txt"}), &d);
        assert!(
            sessions
                .check(&a, "s1", "edit_file", &needs_read(), &edit)
                .is_err()
        );
        sessions.record(&a, "s1", "read_file", &json!({"path": "a.txt"}), &d);
        assert!(
            sessions
                .check(&a, "s1", "edit_file", &needs_read(), &edit)
                .is_ok()
        );
        assert!(
            sessions
                .check(&a, "s2", "edit_file", &needs_read(), &edit)
                .is_err()
        );
        let err = sessions
            .check(&a, "", "edit_file", &needs_read(), &edit)
            .unwrap_err();
        assert!(err.to_string().contains("send a session_id"), "{err}");
        assert!(sessions.check(&a, "", "x", &[], &edit).is_ok());
    }

    /// A session belongs to its caller: B naming A's session id (or A's
    /// name in another tenant) does not see A's read.
    #[test]
    fn a_session_of_a_is_invisible_to_b() {
        let sessions = Sessions::default();
        let d = declared();
        let a = who("agent-a", "acme");
        let edit = json!({"path": "a.txt"});
        sessions.record(&a, "s1", "read_file", &edit, &d);
        assert!(
            sessions
                .check(&a, "s1", "edit_file", &needs_read(), &edit)
                .is_ok()
        );
        for other in [who("agent-b", "acme"), who("agent-a", "globex")] {
            let err = sessions
                .check(&other, "s1", "edit_file", &needs_read(), &edit)
                .unwrap_err();
            assert!(
                matches!(err, PreconditionError::NotYet { .. }),
                "{other}: {err}"
            );
        }
    }

    /// Only what a precondition names is kept, as a digest: calls of tools
    /// no precondition names keep nothing, and a named tool keeps only the
    /// named argument (bytes do not grow with the other arguments).
    #[test]
    fn undeclared_fields_are_not_kept() {
        let sessions = Sessions::default();
        let d = declared();
        let a = who("agent-a", "acme");
        let big = "x".repeat(100_000);
        sessions.record(&a, "s1", "search", &json!({"q": big}), &d);
        sessions.record(&a, "s1", "search", &json!({"q": 1}), &Declared::default());
        assert_eq!(sessions.usage(), SessionUsage::default());
        sessions.record(
            &a,
            "s1",
            "read_file",
            &json!({"path": "a.txt", "blob": big}),
            &d,
        );
        let usage = sessions.usage();
        assert_eq!(usage.sessions, 1);
        assert!(usage.bytes < 1_000, "{usage:?}");
        let store = lock(&sessions.store);
        let facts: Vec<_> = store.sessions.values().flat_map(|s| &s.facts).collect();
        assert_eq!(facts.len(), 1);
        assert_eq!(&*facts[0].1, "path");
        assert_eq!(facts[0].2, value_sha256(&json!("a.txt")));
    }

    /// 10,000 calls with 900 KB arguments and fresh session ids, from one
    /// caller and from many, keep the store within its limits, and the
    /// latest session still works.
    #[test]
    fn memory_stays_bounded() {
        let limits = SessionLimits {
            sessions_per_caller: 100,
            bytes_per_caller: 64 << 10,
            sessions: 1_000,
            bytes: 256 << 10,
            ..SessionLimits::default()
        };
        let sessions = Sessions::new(limits);
        let d = declared();
        // The 900 KB sit in an undeclared field; the declared path is short.
        let arguments = json!({"path": "a.txt", "content": "p".repeat(900_000)});
        let a = who("agent-a", "acme");
        for i in 0..10_000 {
            let caller = if i % 2 == 0 {
                a.clone()
            } else {
                who(&format!("bot-{i}"), "acme")
            };
            sessions.record(&caller, &format!("s-{i}"), "read_file", &arguments, &d);
            let usage = sessions.usage();
            assert!(usage.sessions <= limits.sessions, "{usage:?}");
            assert!(usage.bytes <= limits.bytes, "{usage:?}");
            let mine = sessions.usage_of(&a);
            assert!(mine.sessions <= limits.sessions_per_caller, "{mine:?}");
            assert!(mine.bytes <= limits.bytes_per_caller, "{mine:?}");
        }
        let usage = sessions.usage();
        let store = lock(&sessions.store);
        let counted: usize = store.sessions.values().map(|s| s.bytes).sum();
        assert_eq!(counted, usage.bytes);
        assert_eq!(store.lru.len(), usage.sessions);
        drop(store);
        assert!(
            sessions
                .check(&a, "s-9998", "edit_file", &needs_read(), &arguments)
                .is_ok()
        );
    }

    /// Sessions idle past the limit are forgotten.
    #[tokio::test(start_paused = true)]
    async fn idle_sessions_are_forgotten() {
        let sessions = Sessions::default();
        let d = declared();
        let a = who("agent-a", "acme");
        let args = json!({"path": "a.txt"});
        sessions.record(&a, "s1", "read_file", &args, &d);
        tokio::time::advance(Duration::from_secs(3600)).await;
        assert!(
            sessions
                .check(&a, "s1", "edit_file", &needs_read(), &args)
                .is_err()
        );
        sessions.record(&a, "s2", "read_file", &args, &d);
        assert_eq!(sessions.usage().sessions, 1);
    }

    /// The declared set comes from the snapshot's preconditions, is
    /// computed once per snapshot, and is recomputed for the next one.
    #[test]
    fn declared_follows_the_snapshot() {
        let sessions = Sessions::default();
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
