//! What each agent session has done so far, for tools that declare
//! preconditions ("edit_file needs read_file on the same path first").

use dashmap::DashMap;
use serde_json::Value;
use std::collections::HashSet;
use std::time::Duration;
use tokio::time::Instant;
use toolmesh::pb::Precondition;

/// Sessions idle this long are forgotten.
const IDLE: Duration = Duration::from_secs(3600);
/// Sessions kept at most; the idle ones go first when full.
const MAX_SESSIONS: usize = 100_000;
/// Facts kept per session at most.
const MAX_FACTS: usize = 10_000;

/// (tool, argument name, canonical JSON value); ("t", "", "") = any call of t.
type Fact = (String, String, String);

#[derive(Debug)]
struct Session {
    facts: HashSet<Fact>,
    touched: Instant,
}

/// Successful calls per session.
#[derive(Debug, Default)]
pub struct Sessions {
    map: DashMap<String, Session>,
}

impl Sessions {
    /// Remembers a successful call of `tool` with `arguments`.
    pub fn record(&self, session_id: &str, tool: &str, arguments: &Value) {
        if session_id.is_empty() {
            return;
        }
        if self.map.len() >= MAX_SESSIONS && !self.map.contains_key(session_id) {
            let now = Instant::now();
            self.map.retain(|_, s| now.duration_since(s.touched) < IDLE);
        }
        let mut session = self
            .map
            .entry(session_id.to_owned())
            .or_insert_with(|| Session {
                facts: HashSet::new(),
                touched: Instant::now(),
            });
        session.touched = Instant::now();
        if session.facts.len() >= MAX_FACTS {
            return;
        }
        session
            .facts
            .insert((tool.to_owned(), String::new(), String::new()));
        if let Value::Object(map) = arguments {
            for (name, value) in map.iter().filter(|(_, v)| !v.is_object() && !v.is_array()) {
                session
                    .facts
                    .insert((tool.to_owned(), name.clone(), value.to_string()));
            }
        }
    }

    /// Checks every precondition of a call; the error tells the model what
    /// to call first.
    pub fn check(
        &self,
        session_id: &str,
        tool: &str,
        preconditions: &[Precondition],
        arguments: &Value,
    ) -> Result<(), String> {
        if preconditions.is_empty() {
            return Ok(());
        }
        let needs = |p: &Precondition| {
            if p.same_argument.is_empty() {
                format!("a successful {} call", p.tool)
            } else {
                format!(
                    "a successful {} call with the same {}",
                    p.tool, p.same_argument
                )
            }
        };
        if session_id.is_empty() {
            let first = needs(&preconditions[0]);
            return Err(format!(
                "{tool} needs {first} earlier in the same session; send a session_id in the call context and call {} first",
                preconditions[0].tool
            ));
        }
        let session = self.map.get(session_id);
        for p in preconditions {
            let fact = if p.same_argument.is_empty() {
                (p.tool.clone(), String::new(), String::new())
            } else {
                let value = arguments
                    .get(&p.same_argument)
                    .map(Value::to_string)
                    .unwrap_or_default();
                (p.tool.clone(), p.same_argument.clone(), value)
            };
            let done = session.as_ref().is_some_and(|s| s.facts.contains(&fact));
            if !done {
                let on = if p.same_argument.is_empty() {
                    String::new()
                } else {
                    format!(" on {} {}", p.same_argument, fact.2)
                };
                return Err(format!(
                    "{tool} needs {} earlier in this session; call {}{on} first, then call {tool} again",
                    needs(p),
                    p.tool
                ));
            }
        }
        Ok(())
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

    /// Edit before read is refused with what to call first; a read of the
    /// same path in the same session satisfies it, another path or session does not.
    #[test]
    fn read_before_edit() {
        let sessions = Sessions::default();
        let edit = json!({"path": "a.txt", "old_string": "x", "new_string": "y"});
        let err = sessions
            .check("s1", "edit_file", &needs_read(), &edit)
            .unwrap_err();
        assert!(
            err.contains("call read_file on path \"a.txt\" first"),
            "{err}"
        );
        sessions.record("s1", "read_file", &json!({"path": "b.txt"}));
        assert!(
            sessions
                .check("s1", "edit_file", &needs_read(), &edit)
                .is_err()
        );
        sessions.record("s1", "read_file", &json!({"path": "a.txt"}));
        assert!(
            sessions
                .check("s1", "edit_file", &needs_read(), &edit)
                .is_ok()
        );
        assert!(
            sessions
                .check("s2", "edit_file", &needs_read(), &edit)
                .is_err()
        );
        let err = sessions
            .check("", "edit_file", &needs_read(), &edit)
            .unwrap_err();
        assert!(err.contains("send a session_id"), "{err}");
        assert!(sessions.check("", "x", &[], &edit).is_ok());
    }
}
