//! The client commands: tools, call, health, snapshot, explain, approvals,
//! approve and deny, disable and enable.

use crate::Failure;
use crate::args::{
    CallArgs, ClientArgs, ClientOnly, DecideArgs, DisableArgs, ExplainArgs, Format, HealthArgs,
    SnapshotArgs, ToolArg, ToolsArgs,
};
use crate::output::{self, Table};
use serde_json::json;
use std::time::Duration;
use tonic::Code;
use tonic::transport::Channel;
use tonic_health::pb::{
    HealthCheckRequest, health_check_response::ServingStatus, health_client::HealthClient,
};
use toolmesh::grpc::{MAX_SNAPSHOT_MESSAGE_BYTES, Tls, tool_health_service};
use toolmesh::pb::{
    ApproveRequest, CallContext, DenyRequest, DisableToolRequest, EnableToolRequest,
    ExplainRequest, GetSnapshotRequest, InvokeRequest, ListApprovalsRequest, ListToolsRequest,
    dispatcher_client::DispatcherClient, governance_client::GovernanceClient,
    registry_client::RegistryClient,
};
use toolmesh::{ErrorCodeExt, ToolErrorExt};

pub(crate) fn connect(args: &ClientArgs, tls: &Tls) -> Result<Channel, Failure> {
    toolmesh::grpc::channel(&args.server, tls).map_err(|e| Failure::Usage(e.to_string()))
}

/// A request carrying the caller's bearer token, if any.
pub(crate) fn authed<T>(args: &ClientArgs, message: T) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    if let Some(token) = args.token.as_deref().filter(|t| !t.is_empty())
        && !toolmesh::grpc::set_bearer(request.metadata_mut(), token)
    {
        eprintln!("warning: the token has characters a header cannot carry; sending none");
    }
    request
}

pub(crate) fn unreachable(server: &str, status: tonic::Status) -> Failure {
    if status.code() == Code::Unavailable {
        Failure::Unavailable(format!(
            "cannot reach toolmesh at {server}: {}; is `toolmesh up` running? (set --server or TOOLMESH_SERVER)",
            status.message()
        ))
    } else {
        Failure::Failed(format!(
            "{}: {}",
            status.code().description(),
            status.message()
        ))
    }
}

/// `toolmesh tools`.
pub(crate) async fn tools(args: ToolsArgs, tls: &Tls) -> Result<(), Failure> {
    let mut client = DispatcherClient::new(connect(&args.client, tls)?)
        .max_decoding_message_size(MAX_SNAPSHOT_MESSAGE_BYTES);
    let format = args.format.to_pb();
    let response = client
        .list_tools(authed(
            &args.client,
            ListToolsRequest {
                context: Some(context("cli")),
                format: format as i32,
                snapshot_version: args.snapshot,
            },
        ))
        .await
        .map_err(|s| unreachable(&args.client.server, s))?
        .into_inner();
    if args.format != Format::Native {
        let value: serde_json::Value = serde_json::from_str(&response.formatted)
            .map_err(|e| Failure::Failed(e.to_string()))?;
        output::print_json(&value);
    } else if args.client.json {
        output::print_json(&json!({
            "snapshot_version": response.snapshot_version,
            "tools": response.tools.iter().map(output::spec_json).collect::<Vec<_>>(),
        }));
    } else {
        let mut table = Table::new(vec![
            "NAME",
            "VERSION",
            "RISK",
            "IDEMPOTENT",
            "TIMEOUT",
            "DESCRIPTION",
        ]);
        for spec in &response.tools {
            table.row(vec![
                spec.name.clone(),
                spec.version.clone(),
                output::risk_name(spec.risk).to_owned(),
                if spec.idempotent { "yes" } else { "no" }.to_owned(),
                format!("{}ms", spec.timeout_ms),
                output::clip(&spec.description, 60),
            ]);
        }
        table.print();
        println!(
            "({} tools, snapshot {})",
            response.tools.len(),
            response.snapshot_version
        );
    }
    Ok(())
}

/// `toolmesh call`.
pub(crate) async fn call(args: CallArgs, tls: &Tls) -> Result<(), Failure> {
    let mut client = DispatcherClient::new(connect(&args.client, tls)?);
    let mut request = authed(
        &args.client,
        InvokeRequest {
            tool: args.tool.clone(),
            arguments: args.arguments.clone(),
            call_id: args.call_id.clone().unwrap_or_default(),
            context: Some(CallContext {
                session_id: args.session.clone().unwrap_or_default(),
                ..context(&args.caller)
            }),
            snapshot_version: 0,
            approval_id: args.approval.clone().unwrap_or_default(),
        },
    );
    if let Some(ms) = args.timeout_ms {
        request.set_timeout(Duration::from_millis(ms));
    }
    let response = client
        .invoke(request)
        .await
        .map_err(|s| unreachable(&args.client.server, s))?
        .into_inner();
    let result = response.result.unwrap_or_default();
    let error = result.error.clone().filter(|e| e.code != 0);
    if args.client.json {
        output::print_json(&json!({
            "call_id": response.call_id,
            "executor_id": response.executor_id,
            "attempts": response.attempts,
            "snapshot_version": response.snapshot_version,
            "tool_version": response.tool_version,
            "result": output::result_json(&result),
        }));
    } else if error.is_none() {
        println!("{}", result.output);
    }
    match error {
        None => Ok(()),
        Some(e) => {
            let mut text = format!("{}: {}", e.error_code().short_name(), e.message);
            if e.retry_after_ms > 0 {
                text.push_str(&format!(" (retry after {} ms)", e.retry_after_ms));
            }
            Err(Failure::Failed(text))
        }
    }
}

fn status_name(status: i32) -> &'static str {
    match ServingStatus::try_from(status).unwrap_or(ServingStatus::Unknown) {
        ServingStatus::Serving => "SERVING",
        ServingStatus::NotServing => "NOT_SERVING",
        ServingStatus::ServiceUnknown => "SERVICE_UNKNOWN",
        ServingStatus::Unknown => "UNKNOWN",
    }
}

/// `toolmesh health [TOOL]`.
pub(crate) async fn health(args: HealthArgs, tls: &Tls) -> Result<(), Failure> {
    let channel = connect(&args.client, tls)?;
    let health = HealthClient::new(channel.clone());
    let check = |service: String| {
        let mut health = health.clone();
        async move {
            health
                .check(HealthCheckRequest { service })
                .await
                .map(|r| r.into_inner().status)
        }
    };
    if let Some(tool) = &args.tool {
        let status = match check(tool_health_service(tool)).await {
            Ok(status) => status,
            Err(s) if s.code() == Code::NotFound => {
                return Err(Failure::Failed(format!(
                    "no tool named {tool:?} is known to this server"
                )));
            }
            Err(s) => return Err(unreachable(&args.client.server, s)),
        };
        if args.client.json {
            output::print_json(&json!({"tool": tool, "status": status_name(status)}));
        } else {
            println!("{tool}: {}", status_name(status));
        }
        return if status == ServingStatus::Serving as i32 {
            Ok(())
        } else {
            Err(Failure::Failed(format!("{tool} is not serving")))
        };
    }
    let overall = check(String::new())
        .await
        .map_err(|s| unreachable(&args.client.server, s))?;
    // Per-tool rows when the server also runs the registry.
    let mut rows = Vec::new();
    let snapshot = RegistryClient::new(channel)
        .max_decoding_message_size(MAX_SNAPSHOT_MESSAGE_BYTES)
        .get_snapshot(GetSnapshotRequest { version: 0 })
        .await;
    if let Ok(snapshot) = snapshot {
        let mut names: Vec<String> = snapshot
            .into_inner()
            .tools
            .into_iter()
            .filter_map(|t| t.spec.map(|s| s.name))
            .collect();
        names.dedup();
        for name in names {
            let status = check(tool_health_service(&name)).await.unwrap_or(0);
            rows.push((name, status));
        }
    }
    if args.client.json {
        output::print_json(&json!({
            "server": status_name(overall),
            "tools": rows.iter().map(|(n, s)| json!({"tool": n, "status": status_name(*s)})).collect::<Vec<_>>(),
        }));
    } else {
        println!("server {}: {}", args.client.server, status_name(overall));
        if !rows.is_empty() {
            let mut table = Table::new(vec!["TOOL", "STATUS"]);
            for (name, status) in &rows {
                table.row(vec![name.clone(), status_name(*status).to_owned()]);
            }
            table.print();
        }
    }
    if overall == ServingStatus::Serving as i32 {
        Ok(())
    } else {
        Err(Failure::Failed("server is not serving".into()))
    }
}

/// `toolmesh snapshot`.
pub(crate) async fn snapshot(args: SnapshotArgs, tls: &Tls) -> Result<(), Failure> {
    let snapshot = RegistryClient::new(connect(&args.client, tls)?)
        .max_decoding_message_size(MAX_SNAPSHOT_MESSAGE_BYTES)
        .get_snapshot(authed(
            &args.client,
            GetSnapshotRequest {
                version: args.snapshot_version,
            },
        ))
        .await
        .map_err(|s| unreachable(&args.client.server, s))?
        .into_inner();
    if args.client.json {
        output::print_json(&output::snapshot_json(&snapshot));
        return Ok(());
    }
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
    Ok(())
}

fn context(caller: &str) -> CallContext {
    CallContext {
        caller: caller.to_owned(),
        ..CallContext::default()
    }
}

/// `toolmesh explain [--caller TOKEN] TOOL`.
pub(crate) async fn explain(args: ExplainArgs, tls: &Tls) -> Result<(), Failure> {
    let mut client = GovernanceClient::new(connect(&args.client, tls)?);
    let answer = client
        .explain(authed(
            &args.client,
            ExplainRequest {
                tool: args.tool.clone(),
                caller_token: args.caller.clone().unwrap_or_default(),
                session_id: args.session.clone().unwrap_or_default(),
            },
        ))
        .await
        .map_err(|s| unreachable(&args.client.server, s))?
        .into_inner();
    if args.client.json {
        output::print_json(&json!({
            "tool": args.tool,
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
            "rollout": answer.rollout,
        }));
        return Ok(());
    }
    println!(
        "{}@{} is {} for {} (tenant {}, roles {})",
        args.tool,
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
    if !answer.rollout.is_empty() {
        println!("  rollout: {}", answer.rollout);
    }
    Ok(())
}

/// `toolmesh approvals`.
pub(crate) async fn approvals(args: ClientOnly, tls: &Tls) -> Result<(), Failure> {
    let mut client = GovernanceClient::new(connect(&args.client, tls)?);
    let list = client
        .list_approvals(authed(&args.client, ListApprovalsRequest {}))
        .await
        .map_err(|s| unreachable(&args.client.server, s))?
        .into_inner()
        .approvals;
    if args.client.json {
        output::print_json(&json!(
            list.iter().map(output::approval_json).collect::<Vec<_>>()
        ));
        return Ok(());
    }
    let mut table = Table::new(vec!["ID", "TOOL", "CALLER", "EXPIRES IN", "SUMMARY"]);
    for a in &list {
        table.row(vec![
            a.id.clone(),
            toolmesh::spec::label(&a.tool, &a.version),
            format!("{} ({})", a.caller, a.tenant),
            format!("{}s", a.expires_in_ms / 1000),
            output::clip(&a.summary, 70),
        ]);
    }
    table.print();
    println!("({} pending)", list.len());
    Ok(())
}

/// `toolmesh approve ID` / `toolmesh deny ID`.
pub(crate) async fn decide(args: DecideArgs, deny: bool, tls: &Tls) -> Result<(), Failure> {
    let mut client = GovernanceClient::new(connect(&args.client, tls)?);
    let answer = if deny {
        client
            .deny(authed(
                &args.client,
                DenyRequest {
                    id: args.id.clone(),
                    reason: args.reason.clone(),
                },
            ))
            .await
    } else {
        client
            .approve(authed(
                &args.client,
                ApproveRequest {
                    id: args.id.clone(),
                },
            ))
            .await
    }
    .map_err(|s| unreachable(&args.client.server, s))?
    .into_inner();
    let approval = answer.approval.unwrap_or_default();
    if args.client.json {
        output::print_json(&output::approval_json(&approval));
    } else {
        println!(
            "{} {}: {} for {}",
            approval.id,
            approval.state.to_lowercase(),
            toolmesh::spec::label(&approval.tool, &approval.version),
            approval.caller
        );
    }
    Ok(())
}

/// `toolmesh disable TOOL --reason …`.
pub(crate) async fn disable(args: DisableArgs, tls: &Tls) -> Result<(), Failure> {
    let mut client = RegistryClient::new(connect(&args.client, tls)?);
    let answer = client
        .disable_tool(authed(
            &args.client,
            DisableToolRequest {
                tool: args.tool.clone(),
                reason: args.reason.clone(),
            },
        ))
        .await
        .map_err(|s| unreachable(&args.client.server, s))?
        .into_inner();
    println!(
        "{} disabled (snapshot {})",
        args.tool, answer.snapshot_version
    );
    Ok(())
}

/// `toolmesh enable TOOL`.
pub(crate) async fn enable(args: ToolArg, tls: &Tls) -> Result<(), Failure> {
    let mut client = RegistryClient::new(connect(&args.client, tls)?);
    let answer = client
        .enable_tool(authed(
            &args.client,
            EnableToolRequest {
                tool: args.tool.clone(),
            },
        ))
        .await
        .map_err(|s| unreachable(&args.client.server, s))?
        .into_inner();
    println!(
        "{} enabled (snapshot {})",
        args.tool, answer.snapshot_version
    );
    Ok(())
}

/// `toolmesh mcp`: the MCP handler on stdin/stdout, calling the dispatcher
/// at `--server` as the holder of `--token`.
pub(crate) async fn mcp_bridge(args: ClientOnly, tls: &Tls) -> Result<(), Failure> {
    let backend =
        toolmesh_mcp::GrpcBackend::new(connect(&args.client, tls)?, args.client.token.clone());
    toolmesh_mcp::serve_stdio(toolmesh_mcp::McpHandler::new(backend))
        .await
        .map_err(|e| Failure::Failed(e.to_string()))
}
