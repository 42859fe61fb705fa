//! What each caller's agent sessions have done, kept only as far as a declared precondition needs it.
//!
//! A tool may declare preconditions ("edit_file needs read_file on the same
//! path first"). A session belongs to one caller: it is keyed by the
//! caller's identity (tenant and principal) and the session id, so another
//! caller naming the same id sees nothing of it. Only (tool, argument)
//! pairs that some precondition of the current snapshot names are kept,
//! as SHA-256 digests of the argument's canonical JSON, never the value.
//! The facts live in the shared records ([`Sessions`]), bounded by
//! idle time, sessions per caller and facts per session; at a cap the
//! oldest go first, so a call never fails because the records are full.

use crate::digest::value_sha256;
use arc_swap::ArcSwapOption;
use serde_json::Value;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use toolmesh::Snapshot;
use toolmesh::pb::{Precondition, ToolSpec};

mod store;
pub use store::Sessions;

/// Longest value shown in a precondition message, in characters.
const MAX_SHOWN_CHARS: usize = 80;

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

/// How much is kept of each caller's sessions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionLimits {
    /// Sessions idle this long are forgotten.
    pub idle: Duration,
    /// Sessions one caller may have at once; its least recently written goes first.
    pub sessions_per_caller: usize,
    /// Facts kept per session; beyond this the session forgets its oldest.
    pub facts_per_session: usize,
}

impl Default for SessionLimits {
    fn default() -> Self {
        SessionLimits {
            idle: Duration::from_secs(3600),
            sessions_per_caller: 1_000,
            facts_per_session: 1_000,
        }
    }
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
/// The [`Declared`] set of one snapshot: (epoch, version).
#[derive(Debug)]
struct DeclaredMemo {
    epoch: Arc<str>,
    version: u64,
    declared: Arc<Declared>,
}

/// The [`Declared`] set of the last snapshot asked about, computed once
/// per snapshot (a lock-free read while the snapshot stays the same).
#[derive(Debug, Default)]
struct DeclaredCache {
    last: ArcSwapOption<DeclaredMemo>,
}

impl DeclaredCache {
    fn of(&self, snapshot: &Snapshot) -> Arc<Declared> {
        if let Some(memo) = self.last.load().as_ref()
            && *memo.epoch == *snapshot.epoch()
            && memo.version == snapshot.version()
        {
            return memo.declared.clone();
        }
        let declared = Arc::new(Declared::of(snapshot));
        self.last.store(Some(Arc::new(DeclaredMemo {
            epoch: snapshot.epoch().into(),
            version: snapshot.version(),
            declared: declared.clone(),
        })));
        declared
    }
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
