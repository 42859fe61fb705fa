//! `toolmesh rollout`: start, change, promote, abort and show the gradual
//! releases (canaries) of tool versions, through the registry's
//! `UpdateRollout` and `ListRollouts`.

use crate::Failure;
use crate::args::{RolloutArgs, RolloutCommand};
use crate::client::Client;
use crate::output::{self, Table};
use serde_json::{Value, json};
use toolmesh::pb::{
    self, ListRolloutsRequest, RolloutAction, RolloutGuard, UpdateRolloutRequest,
    registry_client::RegistryClient,
};
use toolmesh::rollout::Share;

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
            "rollout": output::rollout_json(&rollout),
        }));
        return Ok(());
    }
    println!(
        "{} (snapshot {})",
        output::sentence(&rollout),
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
            output::state_text(&r),
            output::share_text(r.basis_points),
            output::filters(&r),
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

fn status_json(status: &pb::RolloutStatus) -> Value {
    let mut value = output::rollout_json(&status.rollout.clone().unwrap_or_default());
    value["stable_version"] = json!(status.stable_version);
    value["canary_exposed"] = json!(status.canary_exposed);
    value
}
