//! The client commands (tools, search, call, health, snapshot, explain, approvals, approve, deny, disable, enable, mcp) over one [`Client`].

use crate::Failure;
use crate::args::{
    CallArgs, ClientArgs, DecideArgs, DisableArgs, ExplainArgs, Format, HealthArgs, McpArgs,
    SearchArgs, SnapshotArgs, ToolArg, ToolsArgs,
};
use crate::call_input;
use crate::output::{self, Table, ToolHealth};
use serde_json::json;
use std::io::IsTerminal;
use std::time::Duration;
use tonic::Code;
use tonic::transport::Channel;
use tonic_health::pb::{
    HealthCheckRequest, health_check_response::ServingStatus, health_client::HealthClient,
};
use toolmesh::pb::{
    ApproveRequest, CallContext, DenyRequest, DisableToolRequest, EnableToolRequest,
    ExplainRequest, GetSnapshotRequest, InvokeRequest, InvokeResponse, ListApprovalsRequest,
    ListToolsRequest, ListToolsResponse, SearchToolsRequest, SearchToolsResponse, ToolsChange,
    WatchToolsRequest, dispatcher_client::DispatcherClient, governance_client::GovernanceClient,
    invoke_event, registry_client::RegistryClient,
};
use toolmesh::{ErrorCodeExt, ToolErrorExt};
use toolmesh_transport::{
    ISSUERS_HEALTH_SERVICE, MAX_SNAPSHOT_MESSAGE_BYTES, Tls, tool_health_service,
};

/// The server the client flags name, and how every request to it is made.
pub(crate) struct Client {
    args: ClientArgs,
    channel: Channel,
}

impl Client {
    /// A connection to `--server`, made at the first request.
    pub(crate) fn connect(args: &ClientArgs, tls: &Tls) -> Result<Client, Failure> {
        let channel = toolmesh_transport::channel(&args.server, tls)
            .map_err(|e| Failure::Usage(e.to_string()))?;
        Ok(Client {
            args: args.clone(),
            channel,
        })
    }

    pub(crate) fn channel(&self) -> Channel {
        self.channel.clone()
    }

    pub(crate) fn json(&self) -> bool {
        self.args.json
    }

    /// `message` with the caller's bearer token, if any, and the deadline
    /// of `--timeout-ms`.
    pub(crate) fn request<T>(&self, message: T) -> tonic::Request<T> {
        let mut request = tonic::Request::new(message);
        if let Some(token) = self.args.token.as_deref().filter(|t| !t.is_empty())
            && !toolmesh_transport::set_bearer(request.metadata_mut(), token)
        {
            eprintln!("warning: the token has characters a header cannot carry; sending none");
        }
        if let Some(ms) = self.args.timeout_ms {
            request.set_timeout(Duration::from_millis(ms));
        }
        request
    }

    /// What a failed request means for the user.
    pub(crate) fn failure(&self, status: tonic::Status) -> Failure {
        let server = &self.args.server;
        if let Some(answered) = not_grpc(server, &status) {
            return Failure::Unavailable(format!(
                "{server} is not a toolmesh gRPC server ({answered}); give --server the gRPC address `toolmesh up` prints first (if this is toolmesh's MCP door, MCP clients reach it at http://{server}/mcp)"
            ));
        }
        match status.code() {
            Code::Unavailable => Failure::Unavailable(format!(
                "cannot reach toolmesh at {}: {}; is `toolmesh up` running? (set --server or TOOLMESH_SERVER)",
                self.args.server,
                status.message()
            )),
            // The channel cancels a request whose --timeout-ms ran out.
            Code::DeadlineExceeded | Code::Cancelled if self.args.timeout_ms.is_some() => {
                Failure::Failed(format!(
                    "no answer within --timeout-ms {}: {}; allow more time, or leave --timeout-ms out",
                    self.args.timeout_ms.unwrap_or_default(),
                    status.message()
                ))
            }
            code => Failure::Failed(format!("{}: {}", code.description(), status.message())),
        }
    }
}

/// What a peer that does not speak gRPC answered: an HTTP status without
/// `grpc-status` (an HTTP/2 server such as toolmesh's MCP door), or, when
/// the HTTP/2 exchange broke off, what it answers to a plain HTTP/1
/// request (an HTTP/1 server cannot take gRPC at all).
fn not_grpc(server: &str, status: &tonic::Status) -> Option<String> {
    let message = status.message();
    if let Some((_, http)) = message.split_once("mapped from HTTP status code ") {
        return Some(format!("it answered HTTP {}", http.trim()));
    }
    if !matches!(
        status.code(),
        Code::Internal | Code::Cancelled | Code::Unknown
    ) {
        return None;
    }
    http1_status_line(server).map(|line| format!("it answered {line}, not HTTP/2"))
}

/// The status line `server` answers a plain HTTP/1.0 request with, if it
/// answers one within a second. Only asked after a request failed.
fn http1_status_line(server: &str) -> Option<String> {
    use std::io::{Read, Write};
    let limit = Duration::from_secs(1);
    let addr = std::net::ToSocketAddrs::to_socket_addrs(server)
        .ok()?
        .next()?;
    let mut stream = std::net::TcpStream::connect_timeout(&addr, limit).ok()?;
    stream.set_read_timeout(Some(limit)).ok()?;
    stream.write_all(b"HEAD / HTTP/1.0\r\n\r\n").ok()?;
    let mut head = [0u8; 64];
    let read = stream.read(&mut head).ok()?;
    let head = String::from_utf8_lossy(&head[..read]);
    let line = head.lines().next()?.trim();
    line.starts_with("HTTP/1.").then(|| line.to_owned())
}

/// `toolmesh tools`: every page of the listing, joined.
pub(crate) async fn tools(args: ToolsArgs, client: &Client) -> Result<(), Failure> {
    if args.watch {
        return watch_tools(args, client).await;
    }
    let dispatcher = DispatcherClient::new(client.channel())
        .max_decoding_message_size(MAX_SNAPSHOT_MESSAGE_BYTES);
    let request = ListToolsRequest {
        context: Some(context("cli")),
        format: args.format.to_pb() as i32,
        snapshot_version: args.snapshot,
        defer_loading: args.defer_loading,
        ..ListToolsRequest::default()
    };
    let response = toolmesh::listing::list_all(request, |page| {
        let mut dispatcher = dispatcher.clone();
        async move {
            let answer = dispatcher.list_tools(client.request(page)).await;
            answer.map(tonic::Response::into_inner)
        }
    })
    .await
    .map_err(|s| client.failure(s))?;
    if args.format != Format::Native {
        let value: serde_json::Value = serde_json::from_str(&response.formatted).map_err(|e| {
            Failure::Failed(format!("the server sent a tool list that is not JSON: {e}"))
        })?;
        output::print_json(&value);
    } else if client.json() {
        output::print_json(&json!({
            "snapshot_version": response.snapshot_version,
            "tools": response.tools.iter().map(output::spec_json).collect::<Vec<_>>(),
        }));
    } else {
        print_tools(&response);
    }
    Ok(())
}

/// `toolmesh tools --watch`: the list, then each change of it as the
/// server streams it (WatchTools), until interrupted.
async fn watch_tools(args: ToolsArgs, client: &Client) -> Result<(), Failure> {
    let mut changes = DispatcherClient::new(client.channel())
        .max_decoding_message_size(MAX_SNAPSHOT_MESSAGE_BYTES)
        .watch_tools(client.request(WatchToolsRequest {
            context: Some(context("cli")),
            format: args.format.to_pb() as i32,
        }))
        .await
        .map_err(|s| client.failure(s))?
        .into_inner();
    let as_json = client.json() || args.format != Format::Native;
    // Plain: the initial view is one table; each change after it a line
    // per tool, `+` for a tool new to the list, `~` for a changed one.
    let mut initial = ListToolsResponse::default();
    let mut listed = std::collections::HashSet::new();
    let mut synced = false;
    while let Some(change) = changes.message().await.map_err(|s| client.failure(s))? {
        if as_json {
            output::print_json_line(&change_json(&change, args.format)?);
        } else if !synced {
            listed.extend(change.tools.iter().map(|t| t.name.clone()));
            initial.snapshot_version = change.snapshot_version;
            initial.tools.extend(change.tools);
            if change.synced {
                print_tools(&initial);
            }
        } else {
            for spec in &change.tools {
                let mark = if listed.insert(spec.name.clone()) {
                    '+'
                } else {
                    '~'
                };
                println!(
                    "{mark} {}@{} (snapshot {})",
                    spec.name, spec.version, change.snapshot_version
                );
            }
            for name in &change.removed {
                listed.remove(name);
                println!("- {name} (snapshot {})", change.snapshot_version);
            }
        }
        synced |= change.synced;
    }
    Err(Failure::Failed(
        "the server ended the watch (it is shutting down?); run the command again".into(),
    ))
}

/// One WatchTools message as a JSON line: the tools as the specs (native)
/// or in the vendor shape asked for.
fn change_json(change: &ToolsChange, format: Format) -> Result<serde_json::Value, Failure> {
    let tools = if format == Format::Native {
        json!(
            change
                .tools
                .iter()
                .map(output::spec_json)
                .collect::<Vec<_>>()
        )
    } else {
        serde_json::from_str(&change.formatted).map_err(|e| {
            Failure::Failed(format!(
                "the server sent a tool change that is not JSON: {e}"
            ))
        })?
    };
    Ok(json!({
        "snapshot_version": change.snapshot_version,
        "synced": change.synced,
        "tools": tools,
        "removed": change.removed,
    }))
}

fn print_tools(response: &ListToolsResponse) {
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

/// `toolmesh search QUERY [--limit N] [--tag TAG]... [--max-risk RISK]`.
pub(crate) async fn search(args: SearchArgs, client: &Client) -> Result<(), Failure> {
    let response = DispatcherClient::new(client.channel())
        .max_decoding_message_size(MAX_SNAPSHOT_MESSAGE_BYTES)
        .search_tools(client.request(SearchToolsRequest {
            context: Some(context("cli")),
            query: args.query,
            limit: args.limit,
            tags: args.tags,
            max_risk: args.max_risk.map_or(0, |risk| risk.to_pb() as i32),
            ..SearchToolsRequest::default()
        }))
        .await
        .map_err(|s| client.failure(s))?
        .into_inner();
    if client.json() {
        output::print_json(&search_json(&response));
    } else {
        print_matches(&response);
    }
    Ok(())
}

/// `toolmesh search --json`: `{"snapshot_version", "matches": [{"name",
/// "version", "score", "description"}]}`.
fn search_json(response: &SearchToolsResponse) -> serde_json::Value {
    let matches: Vec<serde_json::Value> = response
        .matches
        .iter()
        .filter_map(|found| {
            let tool = found.tool.as_ref()?;
            Some(json!({
                "name": tool.name,
                "version": tool.version,
                "score": found.score,
                "description": tool.description,
            }))
        })
        .collect();
    json!({ "snapshot_version": response.snapshot_version, "matches": matches })
}

fn print_matches(response: &SearchToolsResponse) {
    let mut table = Table::new(vec!["SCORE", "NAME", "VERSION", "RISK", "DESCRIPTION"]);
    for found in &response.matches {
        let Some(tool) = &found.tool else { continue };
        table.row(vec![
            format!("{:.2}", found.score),
            tool.name.clone(),
            tool.version.clone(),
            output::risk_name(tool.risk).to_owned(),
            output::clip(&tool.description, 60),
        ]);
    }
    table.print();
    let count = response.matches.len();
    let noun = if count == 1 { "match" } else { "matches" };
    println!("({count} {noun}, snapshot {})", response.snapshot_version);
}

/// `toolmesh call [--stream] NAME [JSON|@FILE|-]`.
pub(crate) async fn call(args: CallArgs, client: &Client) -> Result<(), Failure> {
    let stdin = std::io::stdin();
    if call_input::reads_stdin(&args.arguments) && stdin.is_terminal() {
        eprintln!("reading the arguments from stdin; end them with ctrl-d");
    }
    let arguments = call_input::read(&args.arguments, stdin.lock())?;
    let request = client.request(InvokeRequest {
        tool: args.tool.clone(),
        arguments,
        call_id: args.call_id.clone().unwrap_or_default(),
        context: Some(CallContext {
            session_id: args.session.clone().unwrap_or_default(),
            ..context(&args.caller)
        }),
        snapshot_version: 0,
        approval_id: args.approval.clone().unwrap_or_default(),
    });
    let mut dispatcher = DispatcherClient::new(client.channel());
    let response = if args.stream {
        streamed(&mut dispatcher, request, client).await?
    } else {
        dispatcher
            .invoke(request)
            .await
            .map_err(|s| client.failure(s))?
            .into_inner()
    };
    let result = response.result.clone().unwrap_or_default();
    let error = result.error.clone().filter(|e| e.code != 0);
    if client.json() && args.stream {
        output::print_json_line(&output::event_json(
            "result",
            output::response_json(&response),
        ));
    } else if client.json() {
        output::print_json(&output::response_json(&response));
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

/// Sends `request` by InvokeStream, printing each progress report (and,
/// with --json, each output chunk) as it comes; the response that ends it.
async fn streamed(
    dispatcher: &mut DispatcherClient<Channel>,
    request: tonic::Request<InvokeRequest>,
    client: &Client,
) -> Result<InvokeResponse, Failure> {
    let mut events = dispatcher
        .invoke_stream(request)
        .await
        .map_err(|s| client.failure(s))?
        .into_inner();
    let json = client.json();
    while let Some(event) = events.message().await.map_err(|s| client.failure(s))? {
        match event.event {
            Some(invoke_event::Event::Progress(progress)) if json => {
                output::print_json_line(&output::event_json(
                    "progress",
                    output::progress_json(&progress),
                ));
            }
            Some(invoke_event::Event::Progress(progress)) => {
                println!("{}", output::progress_line(&progress));
            }
            Some(invoke_event::Event::Chunk(chunk)) if json => {
                output::print_json_line(&output::event_json("chunk", json!({"text": chunk.text})));
            }
            Some(invoke_event::Event::Done(response)) => return Ok(response),
            // A person reads the whole output in the result.
            Some(invoke_event::Event::Chunk(_)) | None => {}
        }
    }
    Err(Failure::Failed(
        "the dispatcher ended the stream without a result".into(),
    ))
}

/// `toolmesh health [TOOL]`.
pub(crate) async fn health(args: HealthArgs, client: &Client) -> Result<(), Failure> {
    match &args.tool {
        Some(tool) => tool_health(tool, client).await,
        None => server_health(client).await,
    }
}

/// One grpc.health.v1 Check.
async fn check(client: &Client, service: String) -> Result<ServingStatus, tonic::Status> {
    let status = HealthClient::new(client.channel())
        .check(client.request(HealthCheckRequest { service }))
        .await?
        .into_inner()
        .status;
    Ok(ServingStatus::try_from(status).unwrap_or(ServingStatus::Unknown))
}

/// Ok when `status` is SERVING, else the failure `what` names.
fn serving(status: ServingStatus, what: impl FnOnce() -> String) -> Result<(), Failure> {
    if status == ServingStatus::Serving {
        Ok(())
    } else {
        Err(Failure::Failed(what()))
    }
}

/// `toolmesh health TOOL`: the tool's own grpc.health.v1 service, as a
/// probe would ask.
async fn tool_health(tool: &str, client: &Client) -> Result<(), Failure> {
    let status = check(client, tool_health_service(tool))
        .await
        .map_err(|s| match s.code() {
            Code::NotFound => Failure::Failed(format!(
                "no tool named {tool:?} is known to this server; `toolmesh tools` lists those you can call"
            )),
            _ => client.failure(s),
        })?;
    if client.json() {
        output::print_json(&json!({"tool": tool, "status": status.as_str_name()}));
    } else {
        println!("{tool}: {}", status.as_str_name());
    }
    serving(status, || format!("{tool} is not serving"))
}

/// `toolmesh health`: the server's status and every tool's from the
/// registry's snapshot, two requests at once however many tools there are.
async fn server_health(client: &Client) -> Result<(), Failure> {
    let mut registry =
        RegistryClient::new(client.channel()).max_decoding_message_size(MAX_SNAPSHOT_MESSAGE_BYTES);
    let (overall, issuers, snapshot) = tokio::join!(
        check(client, String::new()),
        check(client, ISSUERS_HEALTH_SERVICE.to_owned()),
        registry.get_snapshot(client.request(GetSnapshotRequest { version: 0 })),
    );
    let overall = overall.map_err(|s| client.failure(s))?;
    // A server of an older build does not know the name.
    let issuers = issuers.ok();
    let tools = match snapshot {
        Ok(snapshot) => Some(output::tool_health(&snapshot.into_inner())),
        Err(status) => {
            eprintln!("note: {}", no_tool_health(&status));
            None
        }
    };
    if client.json() {
        output::print_json(&output::health_json(overall, issuers, tools.as_deref()));
    } else {
        print_health(&client.args.server, overall, issuers, tools.as_deref());
    }
    serving(overall, || "the server is not serving".to_owned())
}

/// Why `toolmesh health` shows no tools, and what to do instead.
fn no_tool_health(status: &tonic::Status) -> String {
    match status.code() {
        Code::Unimplemented => {
            "this server runs no registry (a dispatcher alone?), so no tool list: \
             ask the registry with --server, or one tool with `toolmesh health TOOL`"
                .to_owned()
        }
        _ => format!(
            "no tool list: {}; `toolmesh health TOOL` asks one tool",
            status.message()
        ),
    }
}

fn print_health(
    server: &str,
    overall: ServingStatus,
    issuers: Option<ServingStatus>,
    tools: Option<&[ToolHealth]>,
) {
    println!("server {server}: {}", overall.as_str_name());
    if issuers == Some(ServingStatus::NotServing) {
        println!(
            "identity providers: NOT_SERVING (an [[issuers]] entry holds no keys, so its tokens are refused; the admin page and the toolmesh_issuer_keys metrics say which and why)"
        );
    }
    let Some(tools) = tools.filter(|t| !t.is_empty()) else {
        return;
    };
    let mut table = Table::new(vec!["TOOL", "STATUS"]);
    for (name, status) in tools {
        table.row(vec![name.clone(), status.as_str_name().to_owned()]);
    }
    table.print();
}

/// `toolmesh snapshot [VERSION]`.
pub(crate) async fn snapshot(args: SnapshotArgs, client: &Client) -> Result<(), Failure> {
    let snapshot = RegistryClient::new(client.channel())
        .max_decoding_message_size(MAX_SNAPSHOT_MESSAGE_BYTES)
        .get_snapshot(client.request(GetSnapshotRequest {
            version: args.snapshot_version,
        }))
        .await
        .map_err(|s| client.failure(s))?
        .into_inner();
    if client.json() {
        output::print_json(&output::snapshot_json(&snapshot));
    } else {
        output::print_snapshot(&snapshot);
    }
    Ok(())
}

fn context(caller: &str) -> CallContext {
    CallContext {
        caller: caller.to_owned(),
        ..CallContext::default()
    }
}

/// `toolmesh explain [--caller TOKEN] TOOL`.
pub(crate) async fn explain(args: ExplainArgs, client: &Client) -> Result<(), Failure> {
    let answer = GovernanceClient::new(client.channel())
        .explain(client.request(ExplainRequest {
            tool: args.tool.clone(),
            caller_token: args.caller.clone().unwrap_or_default(),
            session_id: args.session.clone().unwrap_or_default(),
        }))
        .await
        .map_err(|s| client.failure(s))?
        .into_inner();
    if client.json() {
        output::print_json(&output::explain_json(&args.tool, &answer));
    } else {
        output::print_explain(&args.tool, &answer);
    }
    Ok(())
}

/// `toolmesh approvals`.
pub(crate) async fn approvals(client: &Client) -> Result<(), Failure> {
    let list = GovernanceClient::new(client.channel())
        .list_approvals(client.request(ListApprovalsRequest {}))
        .await
        .map_err(|s| client.failure(s))?
        .into_inner()
        .approvals;
    if client.json() {
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
pub(crate) async fn decide(args: DecideArgs, deny: bool, client: &Client) -> Result<(), Failure> {
    let mut governance = GovernanceClient::new(client.channel());
    let answer = if deny {
        governance
            .deny(client.request(DenyRequest {
                id: args.id.clone(),
                reason: args.reason.clone(),
            }))
            .await
    } else {
        governance
            .approve(client.request(ApproveRequest {
                id: args.id.clone(),
            }))
            .await
    }
    .map_err(|s| client.failure(s))?
    .into_inner();
    let approval = answer.approval.unwrap_or_default();
    if client.json() {
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
pub(crate) async fn disable(args: DisableArgs, client: &Client) -> Result<(), Failure> {
    let answer = RegistryClient::new(client.channel())
        .disable_tool(client.request(DisableToolRequest {
            tool: args.tool.clone(),
            reason: args.reason.clone(),
        }))
        .await
        .map_err(|s| client.failure(s))?
        .into_inner();
    print_switch(
        client,
        &args.tool,
        Some(&args.reason),
        answer.snapshot_version,
    );
    Ok(())
}

/// `toolmesh enable TOOL`.
pub(crate) async fn enable(args: ToolArg, client: &Client) -> Result<(), Failure> {
    let answer = RegistryClient::new(client.channel())
        .enable_tool(client.request(EnableToolRequest {
            tool: args.tool.clone(),
        }))
        .await
        .map_err(|s| client.failure(s))?
        .into_inner();
    print_switch(client, &args.tool, None, answer.snapshot_version);
    Ok(())
}

/// What `disable` (with its reason) or `enable` (without) did.
fn print_switch(client: &Client, tool: &str, disabled_for: Option<&str>, snapshot_version: u64) {
    if client.json() {
        output::print_json(&json!({
            "tool": tool,
            "disabled": disabled_for.is_some(),
            "reason": disabled_for,
            "snapshot_version": snapshot_version,
        }));
    } else {
        let state = if disabled_for.is_some() {
            "disabled"
        } else {
            "enabled"
        };
        println!("{tool} {state} (snapshot {snapshot_version})");
    }
}

/// `toolmesh mcp`: the MCP handler on stdin/stdout, calling the dispatcher
/// at `--server` as the holder of `--token`.
pub(crate) async fn mcp_bridge(args: &McpArgs, client: &Client) -> Result<(), Failure> {
    let backend = toolmesh_mcp::GrpcBackend::new(client.channel(), client.args.token.clone());
    // --timeout-ms bounds each call whose `_meta` names no deadline.
    let timeout = client.args.timeout_ms.map(Duration::from_millis);
    let handler = toolmesh_mcp::McpHandler::new(backend)
        .with_timeout(timeout)
        .with_tool_search(args.tool_search.setting());
    toolmesh_mcp::serve_stdio(handler)
        .await
        .map_err(|e| Failure::Failed(e.to_string()))
}
