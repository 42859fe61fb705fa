//! `toolmesh rollout`: start, change, promote, abort and show the gradual
//! releases (canaries) of tool versions, through the registry's
//! `UpdateRollout` and `ListRollouts`.

use crate::Failure;
use crate::client::Client;
use crate::output::{self, Table};
use clap::{Args, Subcommand};
use serde_json::{Value, json};
use toolmesh::pb::{
    self, ListRolloutsRequest, RolloutAction, RolloutGuard, UpdateRolloutRequest,
    registry_client::RegistryClient,
};
use toolmesh::rollout::{Rollout, Share};

/// `toolmesh rollout`.
#[derive(Debug, Args, Clone)]
pub(crate) struct RolloutArgs {
    /// What to do.
    #[command(subcommand)]
    pub(crate) action: RolloutCommand,
}

/// The rollout subcommands.
#[derive(Debug, Subcommand, Clone)]
pub(crate) enum RolloutCommand {
    /// Release TOOL@VERSION to a share of callers (admin).
    Start(StartArgs),
    /// Change an active rollout's share (admin).
    Set(SetArgs),
    /// Give every caller the canary and end the rollout (admin).
    Promote(NameArgs),
    /// Give every caller the stable version again (admin).
    Abort(AbortArgs),
    /// Show every rollout, or one tool's.
    Status(StatusArgs),
}

/// `toolmesh rollout start`.
#[derive(Debug, Args, Clone)]
pub(crate) struct StartArgs {
    /// The canary: name@version, e.g. search_kb@2.0.0.
    tool: String,
    /// Share of callers that get it, in percent (0 to 100, e.g. 5 or 0.5).
    #[arg(long)]
    percent: String,
    /// Only callers of these tenants (comma-separated; default any).
    #[arg(long, value_delimiter = ',')]
    tenants: Vec<String>,
    /// Only these principals (comma-separated; default any).
    #[arg(long, value_delimiter = ',')]
    principals: Vec<String>,
    /// Abort by itself when the canary's error rate exceeds the stable
    /// version's by more than this (0.05 = five points).
    #[arg(long, default_value_t = 0.05)]
    max_error_margin: f64,
    /// Canary calls in the window before its error rate is judged.
    #[arg(long, default_value_t = 20)]
    min_calls: u32,
    /// The sliding window errors are counted over, in seconds.
    #[arg(long, default_value_t = 60)]
    window_s: u32,
}

/// `toolmesh rollout set`.
#[derive(Debug, Args, Clone)]
pub(crate) struct SetArgs {
    /// The tool name.
    tool: String,
    /// The new share of callers, in percent.
    #[arg(long)]
    percent: String,
}

/// `toolmesh rollout promote`.
#[derive(Debug, Args, Clone)]
pub(crate) struct NameArgs {
    /// The tool name.
    tool: String,
}

/// `toolmesh rollout abort`.
#[derive(Debug, Args, Clone)]
pub(crate) struct AbortArgs {
    /// The tool name.
    tool: String,
    /// Why (operators and the audit log read it).
    #[arg(long, default_value = "")]
    reason: String,
}

/// `toolmesh rollout status`.
#[derive(Debug, Args, Clone)]
pub(crate) struct StatusArgs {
    /// One tool's rollout (default: every rollout).
    tool: Option<String>,
}

/// Runs `toolmesh rollout …`.
pub(crate) async fn run(args: RolloutArgs, client: &Client) -> Result<(), Failure> {
    match args.action {
        RolloutCommand::Start(a) => {
            let request = UpdateRolloutRequest {
                action: RolloutAction::Start as i32,
                tool: a.tool.clone(),
                basis_points: share(&a.percent)?,
                tenants: a.tenants.clone(),
                principals: a.principals.clone(),
                guard: Some(RolloutGuard {
                    max_error_margin: a.max_error_margin,
                    min_calls: a.min_calls,
                    window_ms: a.window_s.saturating_mul(1000),
                }),
                ..Default::default()
            };
            update(client, request).await
        }
        RolloutCommand::Set(a) => {
            let request = UpdateRolloutRequest {
                action: RolloutAction::Set as i32,
                tool: a.tool.clone(),
                basis_points: share(&a.percent)?,
                ..Default::default()
            };
            update(client, request).await
        }
        RolloutCommand::Promote(a) => {
            let request = UpdateRolloutRequest {
                action: RolloutAction::Promote as i32,
                tool: a.tool.clone(),
                ..Default::default()
            };
            update(client, request).await
        }
        RolloutCommand::Abort(a) => {
            let request = UpdateRolloutRequest {
                action: RolloutAction::Abort as i32,
                tool: a.tool.clone(),
                reason: a.reason.clone(),
                ..Default::default()
            };
            update(client, request).await
        }
        RolloutCommand::Status(a) => status(client, a.tool.as_deref()).await,
    }
}

/// `--percent` in basis points, or a usage error saying how to write it.
fn share(percent: &str) -> Result<u32, Failure> {
    Share::parse_percent(percent)
        .map(Share::basis_points)
        .map_err(|e| Failure::Usage(format!("--percent: {e}")))
}

/// Sends one change and prints the rollout it made.
async fn update(client: &Client, request: UpdateRolloutRequest) -> Result<(), Failure> {
    let answer = RegistryClient::new(client.channel())
        .update_rollout(client.request(request))
        .await
        .map_err(|s| client.failure(s))?
        .into_inner();
    let rollout = answer.rollout.unwrap_or_default();
    if client.json() {
        output::print_json(&json!({
            "snapshot_version": answer.snapshot_version,
            "rollout": rollout_json(&rollout),
        }));
        return Ok(());
    }
    println!(
        "{} (snapshot {})",
        sentence(&rollout),
        answer.snapshot_version
    );
    Ok(())
}

/// `toolmesh rollout status [TOOL]`.
async fn status(client: &Client, tool: Option<&str>) -> Result<(), Failure> {
    let answer = RegistryClient::new(client.channel())
        .list_rollouts(client.request(ListRolloutsRequest {
            tool: tool.unwrap_or_default().to_owned(),
        }))
        .await
        .map_err(|s| client.failure(s))?
        .into_inner();
    if client.json() {
        output::print_json(&json!({
            "snapshot_version": answer.snapshot_version,
            "rollouts": answer.rollouts.iter().map(status_json).collect::<Vec<_>>(),
        }));
        return Ok(());
    }
    let mut table = Table::new(vec![
        "TOOL", "CANARY", "STABLE", "STATE", "SHARE", "FILTERS", "BY", "WHY",
    ]);
    for status in &answer.rollouts {
        let r = status.rollout.clone().unwrap_or_default();
        let canary = if status.canary_exposed {
            r.canary_version.clone()
        } else {
            format!("{} (not callable)", r.canary_version)
        };
        table.row(vec![
            r.tool.clone(),
            canary,
            or_dash(&status.stable_version),
            state_text(&r),
            share_text(r.basis_points),
            filters(&r),
            r.changed_by.clone(),
            output::clip(&r.reason, 90),
        ]);
    }
    table.print();
    println!(
        "({} rollouts, snapshot {})",
        answer.rollouts.len(),
        answer.snapshot_version
    );
    Ok(())
}

fn or_dash(text: &str) -> String {
    if text.is_empty() {
        "-".to_owned()
    } else {
        text.to_owned()
    }
}

fn share_text(basis_points: u32) -> String {
    Share::from_basis_points(basis_points).map_or_else(|_| "?".to_owned(), |s| s.to_string())
}

/// `active`, `promoted`, `aborted` or `aborted (automatic)`.
fn state_text(rollout: &pb::Rollout) -> String {
    let state = Rollout::from_pb(rollout).map_or("?", |r| r.state.name());
    if rollout.automatic {
        format!("{state} (automatic)")
    } else {
        state.to_owned()
    }
}

fn filters(rollout: &pb::Rollout) -> String {
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
fn sentence(rollout: &pb::Rollout) -> String {
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

fn rollout_json(r: &pb::Rollout) -> Value {
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

fn status_json(status: &pb::RolloutStatus) -> Value {
    let mut value = rollout_json(&status.rollout.clone().unwrap_or_default());
    value["stable_version"] = json!(status.stable_version);
    value["canary_exposed"] = json!(status.canary_exposed);
    value
}
