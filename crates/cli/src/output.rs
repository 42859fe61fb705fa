//! Printing for people (aligned tables) and for scripts (JSON).

use serde_json::{Value, json};
use std::collections::BTreeMap;
use tonic_health::pb::health_check_response::ServingStatus;
use toolmesh::pb::{
    ExplainResponse, InvokeResponse, Progress, RiskLevel, Snapshot, ToolError, ToolResult, ToolSpec,
};
use toolmesh::rollout::{Rollout, Share};
use toolmesh::{ErrorCodeExt, ToolErrorExt};

/// A tool name and its health.
pub(crate) type ToolHealth = (String, ServingStatus);

/// A plain aligned table.
pub(crate) struct Table {
    header: Vec<&'static str>,
    rows: Vec<Vec<String>>,
}

impl Table {
    pub(crate) fn new(header: Vec<&'static str>) -> Self {
        Table {
            header,
            rows: Vec::new(),
        }
    }

    pub(crate) fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    pub(crate) fn print(&self) {
        let mut widths: Vec<usize> = self.header.iter().map(|h| h.len()).collect();
        for row in &self.rows {
            for (i, cell) in row.iter().enumerate() {
                widths[i] = widths[i].max(cell.chars().count());
            }
        }
        let line = |cells: Vec<&str>| {
            let mut out = String::new();
            for (i, cell) in cells.iter().enumerate() {
                if i + 1 == cells.len() {
                    out.push_str(cell);
                } else {
                    out.push_str(&format!("{cell:<w$}  ", w = widths[i]));
                }
            }
            println!("{}", out.trim_end());
        };
        line(self.header.clone());
        for row in &self.rows {
            line(row.iter().map(String::as_str).collect());
        }
    }
}

/// Shortens text to `max` characters with an ellipsis.
pub(crate) fn clip(text: &str, max: usize) -> String {
    let first_line = text.lines().next().unwrap_or_default();
    if first_line.chars().count() <= max {
        first_line.to_owned()
    } else {
        let kept: String = first_line.chars().take(max.saturating_sub(1)).collect();
        format!("{kept}…")
    }
}

/// LOW, MEDIUM or HIGH ([`toolmesh::spec::effective_risk`]).
pub(crate) fn risk_name(risk: i32) -> &'static str {
    match toolmesh::spec::effective_risk(risk) {
        RiskLevel::High => "HIGH",
        RiskLevel::Medium => "MEDIUM",
        RiskLevel::Low | RiskLevel::Unspecified => "LOW",
    }
}

/// Parses a JSON string field, falling back to the raw string.
fn embedded(text: &str) -> Value {
    if text.is_empty() {
        Value::Null
    } else {
        serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.to_owned()))
    }
}

pub(crate) fn spec_json(spec: &ToolSpec) -> Value {
    json!({
        "name": spec.name,
        "version": spec.version,
        "description": spec.description,
        "input_schema": embedded(&spec.input_schema),
        "output_schema": embedded(&spec.output_schema),
        "risk": risk_name(spec.risk),
        "idempotent": spec.idempotent,
        "timeout_ms": spec.timeout_ms,
        "owner": spec.owner,
        "tags": spec.tags,
    })
}

pub(crate) fn error_json(error: &ToolError) -> Value {
    json!({
        "code": error.error_code().short_name(),
        "message": error.message,
        "retryable": error.retryable,
        "retry_after_ms": error.retry_after_ms,
    })
}

/// A result as JSON; its content parts, when it has any, as the MCP
/// content blocks they are (images and audio as base64).
pub(crate) fn result_json(result: &ToolResult) -> Value {
    let mut value = json!({
        "output": result.output,
        "data": embedded(&result.data),
        "metadata": result.metadata,
        "error": result.error.as_ref().filter(|e| e.code != 0).map(error_json),
    });
    if !result.parts.is_empty() {
        value["parts"] = result
            .parts
            .iter()
            .map(|part| toolmesh::content::to_mcp(part).unwrap_or(Value::Null))
            .collect();
    }
    value
}

/// `toolmesh call --json`: the response and its result.
pub(crate) fn response_json(response: &InvokeResponse) -> Value {
    json!({
        "call_id": response.call_id,
        "executor_id": response.executor_id,
        "attempts": response.attempts,
        "snapshot_version": response.snapshot_version,
        "tool_version": response.tool_version,
        "result": result_json(&response.result.clone().unwrap_or_default()),
    })
}

/// One event of `toolmesh call --stream --json`: `{"event": kind, …fields}`.
pub(crate) fn event_json(kind: &str, fields: Value) -> Value {
    let mut event = json!({ "event": kind });
    if let (Some(event), Value::Object(fields)) = (event.as_object_mut(), fields) {
        event.extend(fields);
    }
    event
}

/// A progress report's fields (`total` null when unknown).
pub(crate) fn progress_json(progress: &Progress) -> Value {
    json!({
        "progress": progress.progress,
        "total": (progress.total > 0.0).then_some(progress.total),
        "message": progress.message,
    })
}

/// A progress report for people: `[3/8] message`, or `[3] message`
/// without a total.
pub(crate) fn progress_line(progress: &Progress) -> String {
    let done = if progress.total > 0.0 {
        format!("{}/{}", progress.progress, progress.total)
    } else {
        progress.progress.to_string()
    };
    format!("[{done}] {}", progress.message)
        .trim_end()
        .to_owned()
}

/// Prints JSON on one line (one event per line for a stream).
pub(crate) fn print_json_line(value: &Value) {
    println!("{value}");
}

pub(crate) fn snapshot_json(snapshot: &Snapshot) -> Value {
    json!({
        "version": snapshot.version,
        "epoch": snapshot.epoch,
        "tools": snapshot.tools.iter().map(|entry| json!({
            "spec": entry.spec.as_ref().map(spec_json),
            "exposed": entry.exposed,
            "disabled": entry.disabled,
            "disabled_reason": entry.disabled_reason,
            "instances": entry.instances.iter().map(|i| json!({
                "executor_id": i.executor_id,
                "endpoint": i.endpoint,
                "service": i.service,
                "healthy": i.healthy,
            })).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
        "rollouts": snapshot.rollouts.iter().map(rollout_json).collect::<Vec<_>>(),
    })
}

pub(crate) fn share_text(basis_points: u32) -> String {
    Share::from_basis_points(basis_points).map_or_else(|_| "?".to_owned(), |s| s.to_string())
}

/// `active`, `promoted`, `aborted` or `aborted (automatic)`.
pub(crate) fn state_text(rollout: &toolmesh::pb::Rollout) -> String {
    let state = Rollout::from_pb(rollout).map_or("?", |r| r.state.name());
    if rollout.automatic {
        format!("{state} (automatic)")
    } else {
        state.to_owned()
    }
}

pub(crate) fn filters(rollout: &toolmesh::pb::Rollout) -> String {
    let mut parts = Vec::new();
    if !rollout.tenants.is_empty() {
        parts.push(format!("tenants {}", rollout.tenants.join(",")));
    }
    if !rollout.principals.is_empty() {
        parts.push(format!("principals {}", rollout.principals.join(",")));
    }
    if parts.is_empty() {
        "-".to_owned()
    } else {
        parts.join("; ")
    }
}

/// One line about a rollout: `search_kb@2.0.0: active at 5% of callers`.
pub(crate) fn sentence(rollout: &toolmesh::pb::Rollout) -> String {
    let label = toolmesh::spec::label(&rollout.tool, &rollout.canary_version);
    let mut line = format!(
        "{label}: {} at {} of callers",
        state_text(rollout),
        share_text(rollout.basis_points)
    );
    let filters = filters(rollout);
    if filters != "-" {
        line.push_str(&format!(" ({filters})"));
    }
    if !rollout.reason.is_empty() {
        line.push_str(&format!(": {}", rollout.reason));
    }
    line
}

pub(crate) fn rollout_json(r: &toolmesh::pb::Rollout) -> Value {
    let guard = r.guard.unwrap_or_default();
    json!({
        "tool": r.tool,
        "canary_version": r.canary_version,
        "state": Rollout::from_pb(r).map_or("?", |r| r.state.name()),
        "percent": f64::from(r.basis_points) / 100.0,
        "tenants": r.tenants,
        "principals": r.principals,
        "reason": r.reason,
        "changed_by": r.changed_by,
        "automatic": r.automatic,
        "max_error_margin": guard.max_error_margin,
        "min_calls": guard.min_calls,
        "window_ms": guard.window_ms,
        "started_at_ms": r.started_at_ms,
        "changed_at_ms": r.changed_at_ms,
    })
}

/// The table `toolmesh snapshot` prints, then the rollouts it carries.
pub(crate) fn print_snapshot(snapshot: &Snapshot) {
    println!("snapshot {} (epoch {})", snapshot.version, snapshot.epoch);
    let mut table = Table::new(vec!["TOOL", "VERSION", "EXPOSED", "INSTANCES"]);
    for entry in &snapshot.tools {
        let spec = entry.spec.clone().unwrap_or_default();
        let instances: Vec<String> = entry
            .instances
            .iter()
            .map(|i| {
                let mark = if i.healthy { "" } else { " (unhealthy)" };
                format!("{}@{}{mark}", i.executor_id, i.endpoint)
            })
            .collect();
        let exposed = if entry.disabled {
            format!("no (disabled: {})", entry.disabled_reason)
        } else if entry.exposed {
            "yes".to_owned()
        } else {
            "no".to_owned()
        };
        table.row(vec![
            spec.name,
            spec.version,
            exposed,
            if instances.is_empty() {
                "-".to_owned()
            } else {
                instances.join(", ")
            },
        ]);
    }
    table.print();
    for rollout in &snapshot.rollouts {
        println!("rollout {}", sentence(rollout));
    }
}

/// Every tool name in `snapshot` that some executor serves, sorted, SERVING
/// when some version of it is exposed (enabled, an instance healthy: what a
/// dispatcher publishes as `toolmesh.tool.NAME`, less its own outlier
/// ejections), else NOT_SERVING.
pub(crate) fn tool_health(snapshot: &Snapshot) -> Vec<ToolHealth> {
    let mut exposed: BTreeMap<&str, bool> = BTreeMap::new();
    // ToolEntry::is_served on the wire form: a version no executor holds a
    // lease for (all stopped, or gone past their lease) is no row.
    for entry in snapshot.tools.iter().filter(|e| !e.instances.is_empty()) {
        if let Some(spec) = &entry.spec {
            *exposed.entry(&spec.name).or_default() |= entry.exposed;
        }
    }
    exposed
        .into_iter()
        .map(|(name, up)| {
            let status = if up {
                ServingStatus::Serving
            } else {
                ServingStatus::NotServing
            };
            (name.to_owned(), status)
        })
        .collect()
}

/// `toolmesh health --json`: `tools` is null when the server has no tool
/// list to give (a dispatcher alone, or a caller who may not read it).
pub(crate) fn health_json(
    server: ServingStatus,
    issuers: Option<ServingStatus>,
    tools: Option<&[ToolHealth]>,
) -> Value {
    json!({
        "server": server.as_str_name(),
        "issuers": issuers.map(|s| s.as_str_name()),
        "tools": tools.map(|tools| tools
            .iter()
            .map(|(name, status)| json!({"tool": name, "status": status.as_str_name()}))
            .collect::<Vec<_>>()),
    })
}

/// `toolmesh explain --json`.
pub(crate) fn explain_json(tool: &str, answer: &ExplainResponse) -> Value {
    json!({
        "tool": tool,
        "tool_version": answer.tool_version,
        "verdict": answer.verdict,
        "principal": answer.principal,
        "tenant": answer.tenant,
        "roles": answer.roles,
        "rule": answer.rule,
        "reason": answer.reason,
        "approval_required": answer.approval_required,
        "trace": answer.trace,
        "argument_limits": answer.argument_limits,
        "input_schema": answer.input_schema,
        "fallback": answer.fallback,
        "rollout": answer.rollout,
    })
}

/// What `toolmesh explain` prints for people.
pub(crate) fn print_explain(tool: &str, answer: &ExplainResponse) {
    println!(
        "{tool}@{} is {} for {} (tenant {}, roles {})",
        answer.tool_version,
        answer.verdict,
        answer.principal,
        answer.tenant,
        answer.roles.join(", ")
    );
    println!("  why: {}", answer.reason);
    if answer.approval_required {
        println!("  calls need an approval first");
    }
    for line in &answer.trace {
        println!("  grant {line}");
    }
    for line in &answer.argument_limits {
        println!("  argument limit {line}");
    }
    if !answer.input_schema.is_empty() {
        println!("  input schema for this caller: {}", answer.input_schema);
    }
    if !answer.fallback.is_empty() {
        println!("  fallback {}", answer.fallback);
    }
    if !answer.rollout.is_empty() {
        println!("  rollout: {}", answer.rollout);
    }
}

pub(crate) fn approval_json(a: &toolmesh::pb::Approval) -> Value {
    json!({
        "id": a.id,
        "tool": a.tool,
        "version": a.version,
        "caller": a.caller,
        "tenant": a.tenant,
        "summary": a.summary,
        "state": a.state,
        "expires_in_ms": a.expires_in_ms,
        "decided_by": a.decided_by,
        "arguments_sha256": a.arguments_sha256,
    })
}

/// Prints JSON, pretty.
pub(crate) fn print_json(value: &Value) {
    println!(
        "{}",
        serde_json::to_string_pretty(value).unwrap_or_else(|_| value.to_string())
    );
}

/// Writes one line of a command's output to stdout (the crate's
/// `println!`). A reader that hung up ends the process quietly with
/// success, as SIGPIPE's default ends `cat`; another write error ends it
/// with EX_IOERR, saying why.
pub(crate) fn print_line(line: std::fmt::Arguments<'_>) {
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    let written = writeln!(stdout, "{line}").and_then(|()| stdout.flush());
    match written {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => std::process::exit(0),
        Err(e) => {
            eprintln!("error: cannot write the output: {e}");
            std::process::exit(74);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use toolmesh::pb::ToolEntry;

    fn entry(name: &str, version: &str, exposed: bool) -> ToolEntry {
        ToolEntry {
            spec: Some(ToolSpec {
                name: name.to_owned(),
                version: version.to_owned(),
                ..ToolSpec::default()
            }),
            exposed,
            instances: vec![toolmesh::pb::Instance {
                healthy: exposed,
                ..Default::default()
            }],
            ..ToolEntry::default()
        }
    }

    /// A tool serves when any of its versions is exposed; one row per name;
    /// a version no executor serves any more is no row.
    #[test]
    fn tool_health_is_per_name_from_the_snapshot() {
        let snapshot = Snapshot {
            tools: vec![
                entry("b_tool", "1.0.0", false),
                entry("a_tool", "1.0.0", false),
                entry("a_tool", "2.0.0", true),
                entry("c_tool", "1.0.0", true),
                ToolEntry {
                    instances: vec![],
                    ..entry("d_gone", "1.0.0", false)
                },
            ],
            ..Snapshot::default()
        };
        assert_eq!(
            tool_health(&snapshot),
            vec![
                ("a_tool".to_owned(), ServingStatus::Serving),
                ("b_tool".to_owned(), ServingStatus::NotServing),
                ("c_tool".to_owned(), ServingStatus::Serving),
            ]
        );
        let value = health_json(
            ServingStatus::Serving,
            Some(ServingStatus::NotServing),
            Some(&tool_health(&snapshot)),
        );
        assert_eq!(value["server"], "SERVING");
        assert_eq!(value["issuers"], "NOT_SERVING");
        assert_eq!(
            value["tools"][1],
            json!({"tool": "b_tool", "status": "NOT_SERVING"})
        );
        let unknown = health_json(ServingStatus::NotServing, None, None);
        assert!(unknown["tools"].is_null() && unknown["issuers"].is_null());
    }
}
