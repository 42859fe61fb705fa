//! Audit records (one JSON line per call or decision) and the non-blocking sink that writes them.
//!
//! A record always carries the SHA-256 of the arguments; the raw arguments
//! only when the tool opts in with the tag [`RAW_ARGUMENTS_TAG`], and then
//! with every input-schema property marked `"x-sensitive": true` replaced
//! by [`REDACTED`].

#![forbid(unsafe_code)]

mod redact;

pub use redact::redact;

use serde::Serialize;
use serde_json::Value;
use std::{
    io::{self, BufWriter, Write},
    path::Path,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::{SystemTime, UNIX_EPOCH},
};
use tokio::sync::{mpsc, oneshot};
use toolmesh::Principal;
use toolmesh::digest::{arguments_digest, value_digest};
use toolmesh::{
    ErrorCodeExt, ToolDef, ToolErrorExt,
    pb::{ErrorCode, ToolResult, ToolSpec},
};

/// The spec tag with which a tool allows its (redacted) raw arguments in audit records.
pub const RAW_ARGUMENTS_TAG: &str = "audit:raw-arguments";
/// What replaces a sensitive value.
pub const REDACTED: &str = "[REDACTED]";
/// Records the sink queues before it starts dropping (and counting) them.
pub const DEFAULT_CAPACITY: usize = 4096;

/// What an audit record is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum AuditKind {
    /// A call was dispatched (whatever its outcome).
    Invoke,
    /// Policy refused a call (permission, approval or rate).
    Denied,
    /// A call asked for approval.
    ApprovalRequested,
    /// An approver approved.
    ApprovalGranted,
    /// An approver denied.
    ApprovalDenied,
    /// An operator started a rollout (canary) of a tool version.
    RolloutStarted,
    /// An operator changed a rollout's share.
    RolloutChanged,
    /// An operator promoted a rollout: every caller gets the canary.
    RolloutPromoted,
    /// An operator, or a dispatcher whose error check failed the canary
    /// (`rollout.automatic`), aborted a rollout.
    RolloutAborted,
    /// An admin disabled a tool (`reason` says why).
    ToolDisabled,
    /// An admin enabled a disabled tool again.
    ToolEnabled,
}

/// One audit line. Fields are public so the dispatcher fills what it knows;
/// unknown strings stay empty and every key is always present, except the
/// optional ones at the end.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AuditRecord {
    /// RFC 3339 UTC with milliseconds, e.g. `2026-11-01T12:00:00.250Z`.
    pub time: String,
    /// What the record is about.
    pub kind: AuditKind,
    /// The dispatcher's id of the call.
    pub call_id: String,
    /// The caller's trace id.
    pub trace_id: String,
    /// The agent session (run).
    pub session_id: String,
    /// The principal's name.
    pub caller: String,
    /// The principal's tenant.
    pub tenant: String,
    /// The tool's name.
    pub tool: String,
    /// The tool's version.
    pub version: String,
    /// The snapshot the call was resolved in (0 when none).
    pub snapshot_version: u64,
    /// The executor that served the last attempt (empty when none).
    pub executor_id: String,
    /// Attempts made (0 when the call never reached an executor).
    pub attempts: u32,
    /// `OK` or the error code's short name, e.g. `PERMISSION_DENIED` (see [`outcome_of`]).
    pub outcome: String,
    /// Wall time of the call.
    pub duration_ms: u64,
    /// [`arguments_digest`] of the arguments (taken when the record is
    /// written, unless set before).
    pub arguments_sha256: String,
    /// The arguments, redacted; only for tools tagged [`RAW_ARGUMENTS_TAG`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub arguments: Option<Value>,
    /// The approval ticket involved, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub approval_id: Option<String>,
    /// The grant that allowed the call, if known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rule: Option<String>,
    /// Why the call was refused, or the approver's reason.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// For a tool whose answers are cached: `hit`, `stale`, `coalesced`
    /// (another call's answer shared) or `miss` (the tool ran).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cache: Option<String>,
    /// When a stand-in (this record's tool) answered for the tool called:
    /// that tool, `name@version` (`[[fallbacks]]` in the policy).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fallback_for: Option<String>,
    /// For a call a rollout routed: `{"side": "canary"|"stable", "percent",
    /// "canary"}`; for a rollout decision: the rollout (`state`, `percent`,
    /// `tenants`, `principals`, `automatic`, the guard).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rollout: Option<Value>,
    /// For a caller known by a JWT: the token's issuer (`iss`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub issuer: Option<String>,
    /// For a caller known by a JWT: the token's subject (`sub`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub subject: Option<String>,
    /// Arguments whose digest is still to be taken: by the writer, off the
    /// call's thread (see [`to_json_line`](Self::to_json_line)).
    #[serde(skip)]
    digest_of: Option<Box<str>>,
}

impl AuditRecord {
    /// A record stamped now for `who` calling `spec` with `arguments`
    /// (raw JSON text); outcome `OK` until set. Parses the input schema
    /// and the arguments only when the tool allows raw arguments; the
    /// digest is otherwise taken when the record is written.
    pub fn new(kind: AuditKind, who: &Principal, spec: &ToolSpec, arguments: &str) -> Self {
        let raw = allows_raw_arguments(spec)
            .then(|| serde_json::from_str::<Value>(&spec.input_schema).ok())
            .flatten();
        Self::build(kind, who, spec, arguments, None, raw.as_ref())
    }

    /// Like [`new`](Self::new), using the definition's already parsed
    /// schema and, when the caller has it, the already parsed arguments
    /// (which redacting raw arguments then does not parse again).
    pub fn for_def(
        kind: AuditKind,
        who: &Principal,
        def: &ToolDef,
        arguments: &str,
        parsed: Option<&Value>,
    ) -> Self {
        let schema = allows_raw_arguments(def.spec()).then(|| def.input_schema());
        Self::build(kind, who, def.spec(), arguments, parsed, schema)
    }

    fn build(
        kind: AuditKind,
        who: &Principal,
        spec: &ToolSpec,
        arguments: &str,
        parsed: Option<&Value>,
        schema: Option<&Value>,
    ) -> Self {
        // Redacted raw arguments need the tree now; otherwise the digest
        // (of the canonical JSON, so a parse) waits for the writer.
        let (arguments_sha256, raw, digest_of) = match schema {
            Some(schema) => {
                let owned = match parsed {
                    Some(_) => None,
                    None => serde_json::from_str::<Value>(arguments).ok(),
                };
                let parsed = parsed.or(owned.as_ref());
                let digest = match parsed {
                    Some(value) => value_digest(value),
                    None => arguments_digest(arguments),
                };
                (digest, parsed.map(|args| redact(schema, args)), None)
            }
            None => (String::new(), None, Some(arguments.into())),
        };
        AuditRecord {
            time: rfc3339(SystemTime::now()),
            kind,
            call_id: String::new(),
            trace_id: String::new(),
            session_id: String::new(),
            caller: who.name.clone(),
            tenant: who.tenant.clone(),
            tool: spec.name.clone(),
            version: spec.version.clone(),
            snapshot_version: 0,
            executor_id: String::new(),
            attempts: 0,
            outcome: "OK".into(),
            duration_ms: 0,
            arguments_sha256,
            arguments: raw,
            approval_id: None,
            rule: None,
            reason: None,
            cache: None,
            fallback_for: None,
            rollout: None,
            issuer: who.issued_by.as_ref().map(|i| i.issuer.clone()),
            subject: who.issued_by.as_ref().map(|i| i.subject.clone()),
            digest_of,
        }
    }

    /// Sets the arguments digest (a decision about arguments already
    /// digested, or none at all: empty).
    pub fn set_arguments_sha256(&mut self, digest: String) {
        self.arguments_sha256 = digest;
        self.digest_of = None;
    }

    /// The record of an operator's decision about `tool` (`version`, if it
    /// names one): no call, no arguments.
    fn decision(kind: AuditKind, actor: &str, tool: &str, version: String) -> Self {
        let spec = ToolSpec {
            name: tool.to_owned(),
            version,
            ..ToolSpec::default()
        };
        let who = Principal {
            name: actor.to_owned(),
            tenant: String::new(),
            roles: Vec::new(),
            anonymous: false,
            issued_by: None,
        };
        let mut record = Self::build(kind, &who, &spec, "", None, None);
        record.set_arguments_sha256(String::new());
        record
    }

    /// The record of `admin` disabling `tool` for `reason`, or with no
    /// reason enabling it.
    pub fn tool_switch(admin: &str, tool: &str, reason: Option<&str>) -> Self {
        let kind = match reason {
            Some(_) => AuditKind::ToolDisabled,
            None => AuditKind::ToolEnabled,
        };
        let mut record = Self::decision(kind, admin, tool, String::new());
        record.reason = reason.map(str::to_owned);
        record
    }

    /// The record of a rollout decision: `actor` made `rollout` what it is
    /// now (`kind` says how); the reason of an abort in `reason`.
    pub fn rollout_decision(kind: AuditKind, actor: &str, rollout: &toolmesh::Rollout) -> Self {
        let mut record = Self::decision(kind, actor, &rollout.tool, rollout.canary.to_string());
        record.reason = (!rollout.reason.is_empty()).then(|| rollout.reason.clone());
        record.rollout = Some(serde_json::json!({
            "state": rollout.state.name(),
            "percent": rollout.share.percent_number(),
            "tenants": rollout.tenants,
            "principals": rollout.principals,
            "automatic": rollout.automatic,
            "max_error_margin": rollout.guard.max_error_margin,
            "min_calls": rollout.guard.min_calls,
            "window_ms": rollout.guard.window.as_millis() as u64,
        }));
        record
    }

    /// The record as one JSON line (no trailing newline).
    /// Takes the arguments digest first when it was left for now (as
    /// records of calls leave it for the writer thread).
    pub fn to_json_line(&mut self) -> String {
        if let Some(arguments) = self.digest_of.take() {
            self.arguments_sha256 = arguments_digest(&arguments);
        }
        // Strings, numbers and a serde_json::Value: serialisation cannot fail.
        serde_json::to_string(self).unwrap_or_default()
    }
}

/// Whether the tool opted in to raw (redacted) arguments in audit records.
pub fn allows_raw_arguments(spec: &ToolSpec) -> bool {
    spec.tags.iter().any(|t| t == RAW_ARGUMENTS_TAG)
}

/// `OK` for a successful result, else the error code's short name.
pub fn outcome_of(result: &ToolResult) -> String {
    match &result.error {
        Some(e) if e.error_code() != ErrorCode::Unspecified => e.error_code().short_name().into(),
        _ => "OK".into(),
    }
}

/// `time` as RFC 3339 UTC with milliseconds (times before 1970 read as 1970).
pub fn rfc3339(time: SystemTime) -> String {
    humantime::format_rfc3339_millis(time.max(UNIX_EPOCH)).to_string()
}

enum Msg {
    Record(Box<AuditRecord>),
    Flush(oneshot::Sender<()>),
}

#[derive(Debug, Default)]
struct Stats {
    written: AtomicU64,
    dropped: AtomicU64,
    write_errors: AtomicU64,
}

/// Where audit lines go. Cheap to clone; [`record`](Self::record) never
/// waits: records queue in a bounded channel for a writer thread of its own
/// (disk I/O never runs on the runtime's threads, and a batch of queued
/// records is written and flushed together), and when the queue is full
/// they are dropped and counted ([`dropped`](Self::dropped)).
#[derive(Debug, Clone)]
pub struct AuditSink {
    tx: mpsc::Sender<Msg>,
    stats: Arc<Stats>,
}

impl std::fmt::Debug for Msg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Msg::Record(_) => "Record",
            Msg::Flush(_) => "Flush",
        })
    }
}

impl AuditSink {
    /// A sink writing to `writer` from a thread of its own, queueing at most
    /// `capacity` records (at least 1). The thread ends, flushing, once
    /// every clone of the sink is dropped.
    ///
    /// # Errors
    /// When the thread cannot be started.
    pub fn to_writer<W: Write + Send + 'static>(writer: W, capacity: usize) -> io::Result<Self> {
        let (tx, rx) = mpsc::channel(capacity.max(1));
        let stats = Arc::new(Stats::default());
        let written = Arc::clone(&stats);
        std::thread::Builder::new()
            .name("audit-writer".into())
            .spawn(move || write_loop(BufWriter::new(writer), rx, &written))?;
        Ok(AuditSink { tx, stats })
    }

    /// A sink writing to standard output. Same errors as [`to_writer`](Self::to_writer).
    pub fn stdout(capacity: usize) -> io::Result<Self> {
        Self::to_writer(io::stdout(), capacity)
    }

    /// A sink appending to the file at `path` (created if missing).
    pub async fn append_to_file(path: &Path, capacity: usize) -> io::Result<Self> {
        let file = tokio::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .await
            .map_err(|e| {
                io::Error::new(
                    e.kind(),
                    format!(
                        "cannot open audit log {} for appending: {e}; check the path and its permissions",
                        path.display()
                    ),
                )
            })?;
        Self::to_writer(file.into_std().await, capacity)
    }

    /// Queues one record; drops (and counts) it if the queue is full or the writer is gone.
    pub fn record(&self, record: AuditRecord) {
        if self.tx.try_send(Msg::Record(Box::new(record))).is_err() {
            let dropped = self.stats.dropped.fetch_add(1, Ordering::Relaxed) + 1;
            if dropped.is_power_of_two() {
                tracing::warn!(
                    dropped,
                    "audit queue is full or its writer stopped: audit records are being dropped"
                );
            }
        }
    }

    /// Queues one record, waiting for room rather than dropping it, and
    /// returns once it is written and flushed: for the rare decisions an
    /// operator waits on, never for calls.
    pub async fn keep(&self, record: AuditRecord) {
        if self.tx.send(Msg::Record(Box::new(record))).await.is_err() {
            self.stats.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        self.flush().await;
    }

    /// Waits until every record queued before this call is written and flushed.
    pub async fn flush(&self) {
        let (ack, done) = oneshot::channel();
        if self.tx.send(Msg::Flush(ack)).await.is_ok() {
            let _ = done.await;
        }
    }

    /// Records written so far.
    pub fn written(&self) -> u64 {
        self.stats.written.load(Ordering::Relaxed)
    }

    /// Records dropped so far because the queue was full.
    pub fn dropped(&self) -> u64 {
        self.stats.dropped.load(Ordering::Relaxed)
    }

    /// Records lost to write errors so far.
    pub fn write_errors(&self) -> u64 {
        self.stats.write_errors.load(Ordering::Relaxed)
    }
}

/// The writer thread: writes what is queued, flushing whenever the queue
/// runs dry (and when asked), until every sender is gone.
fn write_loop<W: Write>(mut out: BufWriter<W>, mut rx: mpsc::Receiver<Msg>, stats: &Stats) {
    while let Some(first) = rx.blocking_recv() {
        let mut next = Some(first);
        while let Some(msg) = next.take() {
            match msg {
                Msg::Record(mut record) => {
                    let mut line = record.to_json_line().into_bytes();
                    line.push(b'\n');
                    match out.write_all(&line) {
                        Ok(()) => {
                            stats.written.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(e) => write_failed(stats, &e),
                    }
                }
                Msg::Flush(ack) => {
                    if let Err(e) = out.flush() {
                        write_failed(stats, &e);
                    }
                    let _ = ack.send(());
                }
            }
            next = rx.try_recv().ok();
        }
        if let Err(e) = out.flush() {
            write_failed(stats, &e);
        }
    }
    let _ = out.flush();
}

fn write_failed(stats: &Stats, error: &io::Error) {
    let errors = stats.write_errors.fetch_add(1, Ordering::Relaxed) + 1;
    if errors.is_power_of_two() {
        tracing::error!(errors, %error, "cannot write the audit log; records are being lost");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::time::Duration;
    use toolmesh_testkit::principal;

    fn spec(tags: &[&str]) -> ToolSpec {
        ToolSpec {
            name: "create_user".into(),
            version: "1.2.0".into(),
            input_schema: json!({
                "type": "object",
                "properties": {
                    "name": {"type": "string"},
                    "password": {"type": "string", "x-sensitive": true},
                    "profile": {
                        "type": "object",
                        "properties": {
                            "email": {"type": "string"},
                            "ssn": {"type": "string", "x-sensitive": true}
                        },
                        "additionalProperties": {"x-sensitive": true}
                    },
                    "keys": {"type": "array", "items": {"$ref": "#/$defs/key"}},
                    "pair": {"prefixItems": [{"type": "string"}, {"x-sensitive": true}]},
                    "either": {"anyOf": [{"type": "string"}, {"properties": {"pin": {"x-sensitive": true}}}]}
                },
                "$defs": {
                    "key": {"type": "object", "properties": {"id": {}, "secret": {"x-sensitive": true}}}
                }
            })
            .to_string(),
            tags: tags.iter().map(|t| t.to_string()).collect(),
            ..ToolSpec::default()
        }
    }

    const ARGS: &str = r#"{"name":"ann","password":"hunter2",
        "profile":{"email":"a@x","ssn":"123","note":"extra"},
        "keys":[{"id":1,"secret":"s1"},{"id":2,"secret":"s2"}],
        "pair":["label","hidden"],
        "either":{"pin":"0000"}}"#;

    /// A caller known by a JWT is recorded with its issuer and subject;
    /// a static-token caller's record has neither key.
    #[test]
    fn token_issuer_and_subject_are_recorded() {
        let plain = serde_json::to_value(AuditRecord::new(
            AuditKind::Invoke,
            &principal("support-bot", "acme", &["agent"]),
            &spec(&[]),
            "{}",
        ))
        .unwrap();
        assert!(plain.get("issuer").is_none() && plain.get("subject").is_none());
        let jwt = Principal {
            issued_by: Some(toolmesh::IssuedBy {
                issuer: "https://idp.example".into(),
                subject: "user-42".into(),
                missing_scopes: Default::default(),
                expires_at: None,
            }),
            ..principal("support-bot", "acme", &["agent"])
        };
        let record =
            serde_json::to_value(AuditRecord::new(AuditKind::Invoke, &jwt, &spec(&[]), "{}"))
                .unwrap();
        assert_eq!(record["issuer"], "https://idp.example");
        assert_eq!(record["subject"], "user-42");
    }

    /// Sensitive values are redacted at any depth: nested objects, additionalProperties, $ref'd array items, prefixItems, anyOf.
    #[test]
    fn nested_sensitive_values_are_redacted() {
        let record = AuditRecord::new(
            AuditKind::Invoke,
            &principal("support-bot", "acme", &["agent"]),
            &spec(&[RAW_ARGUMENTS_TAG]),
            ARGS,
        );
        assert_eq!(
            record.arguments,
            Some(json!({
                "name": "ann",
                "password": REDACTED,
                "profile": {"email": "a@x", "ssn": REDACTED, "note": REDACTED},
                "keys": [{"id": 1, "secret": REDACTED}, {"id": 2, "secret": REDACTED}],
                "pair": ["label", REDACTED],
                "either": {"pin": REDACTED}
            }))
        );
        // A sensitive root hides everything; a schema cycle terminates.
        assert_eq!(
            redact(&json!({"x-sensitive": true}), &json!({"a": 1})),
            json!(REDACTED)
        );
        let cyclic = json!({"$ref": "#", "properties": {"a": {"$ref": "#"}}});
        assert_eq!(
            redact(&cyclic, &json!({"a": {"a": 1}})),
            json!({"a": {"a": 1}})
        );
    }

    /// Every field is present in the JSON line; raw arguments appear only with the opt-in tag.
    #[test]
    fn record_json_fields() {
        let mut record = AuditRecord::new(
            AuditKind::ApprovalRequested,
            &principal("support-bot", "acme", &["agent"]),
            &spec(&[]),
            ARGS,
        );
        record.call_id = "c-1".into();
        record.approval_id = Some("a-3".into());
        let line: Value = serde_json::from_str(&record.to_json_line()).unwrap();
        let keys: Vec<_> = line.as_object().unwrap().keys().cloned().collect();
        for key in [
            "time",
            "kind",
            "call_id",
            "trace_id",
            "session_id",
            "caller",
            "tenant",
            "tool",
            "version",
            "snapshot_version",
            "executor_id",
            "attempts",
            "outcome",
            "duration_ms",
            "arguments_sha256",
            "approval_id",
        ] {
            assert!(keys.iter().any(|k| k == key), "{key} missing from {line}");
        }
        assert!(line.get("arguments").is_none(), "{line}");
        assert!(line.get("reason").is_none(), "{line}");
        assert_eq!(line["kind"], "approval_requested");
        assert_eq!(line["caller"], "support-bot");
        assert_eq!(line["tenant"], "acme");
        assert_eq!(line["outcome"], "OK");
        assert_eq!(line["arguments_sha256"], arguments_digest(ARGS));
        let time = line["time"].as_str().unwrap();
        assert!(time.ends_with('Z') && time.len() == 24, "{time}");
    }

    /// RFC 3339 formatting handles the epoch, leap days and year ends.
    #[test]
    fn rfc3339_dates() {
        let at = |secs: u64, ms: u64| {
            rfc3339(UNIX_EPOCH + Duration::from_secs(secs) + Duration::from_millis(ms))
        };
        assert_eq!(at(0, 0), "1970-01-01T00:00:00.000Z");
        assert_eq!(at(951_782_400, 5), "2000-02-29T00:00:00.005Z");
        assert_eq!(at(1_767_225_599, 999), "2025-12-31T23:59:59.999Z");
        assert_eq!(at(4_102_444_800, 0), "2100-01-01T00:00:00.000Z");
    }

    /// Outcome is "OK" or the error code's short name.
    #[test]
    fn outcome_names() {
        assert_eq!(outcome_of(&ToolResult::default()), "OK");
        let denied = toolmesh::pb::ToolError::new(ErrorCode::PermissionDenied, "no").into_result();
        assert_eq!(outcome_of(&denied), "PERMISSION_DENIED");
    }

    /// `keep` returns with the record in the file, no flush asked, even
    /// when more records than the queue holds are kept one after another.
    #[tokio::test]
    async fn kept_records_are_written_before_keep_returns() {
        let path =
            std::env::temp_dir().join(format!("toolmesh-audit-keep-{}.jsonl", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let sink = AuditSink::append_to_file(&path, 1).await.unwrap();
        for n in 1..=3 {
            sink.keep(AuditRecord::new(
                AuditKind::Invoke,
                &principal("support-bot", "acme", &["agent"]),
                &spec(&[]),
                "{}",
            ))
            .await;
            let text = std::fs::read_to_string(&path).unwrap();
            assert_eq!(text.lines().count(), n, "{text}");
        }
        assert_eq!(sink.dropped(), 0);
        let _ = std::fs::remove_file(&path);
    }

    /// The file sink appends one JSON line per record and flush waits for them.
    #[tokio::test]
    async fn file_sink_appends_lines() {
        let path =
            std::env::temp_dir().join(format!("toolmesh-audit-{}.jsonl", std::process::id()));
        let _ = std::fs::remove_file(&path);
        std::fs::write(&path, "{\"earlier\":true}\n").unwrap();
        let sink = AuditSink::append_to_file(&path, 16).await.unwrap();
        for kind in [AuditKind::Invoke, AuditKind::Denied] {
            sink.record(AuditRecord::new(
                kind,
                &principal("support-bot", "acme", &["agent"]),
                &spec(&[]),
                "{}",
            ));
        }
        sink.flush().await;
        assert_eq!(sink.written(), 2);
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 3);
        assert_eq!(lines[1]["kind"], "invoke");
        assert_eq!(lines[2]["kind"], "denied");
        let _ = std::fs::remove_file(&path);
    }

    /// A writer that tells when a write starts, then blocks until released
    /// (its sender dropped), then fails.
    struct Stalled {
        started: std::sync::mpsc::Sender<()>,
        release: std::sync::mpsc::Receiver<()>,
    }
    impl Write for Stalled {
        fn write(&mut self, _: &[u8]) -> io::Result<usize> {
            let _ = self.started.send(());
            let _ = self.release.recv();
            Err(io::ErrorKind::BrokenPipe.into())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    /// A stalled writer never blocks `record`: past the queue's capacity records are dropped and counted.
    #[tokio::test]
    async fn overflow_drops_and_counts() {
        let (started, write_started) = std::sync::mpsc::channel();
        let (release, released) = std::sync::mpsc::channel::<()>();
        let stalled = Stalled {
            started,
            release: released,
        };
        let sink = AuditSink::to_writer(stalled, 2).unwrap();
        let record = || {
            AuditRecord::new(
                AuditKind::Invoke,
                &principal("support-bot", "acme", &["agent"]),
                &spec(&[]),
                "{}",
            )
        };
        sink.record(record());
        // The writer takes it and, the queue being empty, flushes it: it is
        // stuck there from now on.
        write_started.recv().unwrap();
        for _ in 0..9 {
            sink.record(record());
        }
        // One record is stuck in the writer, two are queued.
        assert_eq!(sink.dropped(), 7);
        drop(release);
    }
}
