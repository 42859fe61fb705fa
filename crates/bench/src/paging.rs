//! ListTools pages at 100,000 tools, in this process: a page against the
//! whole listing, and what a caller granted 100 of the tools pays when its
//! grants can be looked up by name against when every tool is decided.

use crate::Plan;
use crate::error::BenchError;
use crate::loopback::bind;
use crate::stats::Latency;
use serde::Serialize;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::watch;
use tonic::transport::Server;
use toolmesh::pb::{ListToolsRequest, ToolFormat, ToolSpec, dispatcher_client::DispatcherClient};
use toolmesh::{Instance, Snapshot, ToolDef, ToolEntry};
use toolmesh_dispatcher::{Dispatcher, DispatcherConfig, MAX_LIST_PAGE};
use toolmesh_governance::{Governance, PolicyHandle};
use toolmesh_policy::Policy;
use toolmesh_transport::{MAX_SNAPSHOT_MESSAGE_BYTES, incoming};

/// Tools per team: the caller granted one team sees this many.
const TEAM: usize = 100;

/// ListTools at the paging size.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Paging {
    /// Tools in the catalog.
    pub tools: usize,
    /// Tools per page (the server's default and maximum).
    pub page_size: usize,
    /// Every page of the whole listing, in process, native (the full view).
    pub full_view: Latency,
    /// One page over gRPC on 127.0.0.1 in the OpenAI shape, each rendered
    /// anew (a walk over every page after the first).
    pub page_grpc: Latency,
    /// The first page of a new snapshot, over gRPC: the caller's
    /// projection worked out, then the page.
    pub first_page_grpc: Latency,
    /// The first page of a caller granted `team_tools` tools by a name
    /// prefix (looked up), in process, on a new snapshot each time.
    pub team_indexed: Latency,
    /// The same 100 tools granted by a tag: every tool decided.
    pub team_scanned: Latency,
    /// Tools the team caller sees.
    pub team_tools: usize,
}

/// The policy: `platform` sees everything, `team` one team's tools by name
/// prefix, `tagged` the same tools by tag.
const POLICY: &str = r#"
[[callers]]
token = "platform"
principal = "platform"
roles = ["platform"]

[[callers]]
token = "team"
principal = "team-bot"
roles = ["team"]

[[callers]]
token = "tagged"
principal = "tagged-bot"
roles = ["tagged"]

[[grants]]
name = "everything"
roles = ["platform"]
tools = ["*"]

[[grants]]
name = "team 42 by name"
roles = ["team"]
tools = ["t0042_*"]

[[grants]]
name = "team 42 by tag"
roles = ["tagged"]
tags = ["team0042"]
"#;

/// Tool `i` of team `i / 100`, tagged with its team.
fn tool(i: usize) -> Result<ToolEntry, BenchError> {
    let team = i / TEAM;
    let def = ToolDef::new(ToolSpec {
        name: format!("t{team:04}_op{:03}", i % TEAM),
        version: "1.0.0".into(),
        description: format!("Operation {} of team {team}: does what its name says.", i % TEAM),
        input_schema: r#"{"type":"object","properties":{"id":{"type":"string","description":"What to act on."},"note":{"type":"string"}},"required":["id"]}"#.into(),
        tags: vec![format!("team{team:04}")],
        ..ToolSpec::default()
    })
    .map_err(|e| BenchError::failed("define a paging tool", e.to_string()))?;
    Ok(ToolEntry {
        def: Arc::new(def),
        instances: vec![Instance {
            executor_id: format!("x{}", i / 10).into(),
            endpoint: "127.0.0.1:1".into(),
            service: "s".into(),
            healthy: true,
            execute_token: "".into(),
        }]
        .into(),
        disabled: None,
    })
}

/// Measures ListTools over `plan.paging_tools` tools.
pub(crate) async fn run(plan: &Plan) -> Result<Paging, BenchError> {
    let mut snapshot = Snapshot::empty("paging").next();
    for i in 0..plan.paging_tools {
        snapshot.put(tool(i)?);
    }
    let (publish, snapshots) = watch::channel(Arc::new(snapshot.finish()));
    let policy = Policy::from_toml(POLICY)
        .map_err(|e| BenchError::failed("parse the paging policy", e.to_string()))?;
    let (health, _) = tonic_health::server::health_reporter();
    let governance = Governance::new(Arc::new(PolicyHandle::new(policy)), None);
    let dispatcher =
        Dispatcher::with_governance(DispatcherConfig::default(), snapshots, health, governance);
    let as_caller = |token: &str| {
        dispatcher
            .governance()
            .authenticate(Some(token), None)
            .map_err(|e| BenchError::failed("identify a paging caller", e.to_string()))
    };
    let (platform, team, tagged) = (
        as_caller("platform")?,
        as_caller("team")?,
        as_caller("tagged")?,
    );

    // The whole listing, every page, in process (the projection is kept).
    let mut samples = Vec::new();
    for _ in 0..plan.list_calls.max(1) {
        let t0 = Instant::now();
        let all = list_in_process_as(&dispatcher, &platform)?;
        samples.push(t0.elapsed());
        if all != plan.paging_tools {
            return Err(BenchError::failed(
                "list every page",
                format!("{all} tools listed"),
            ));
        }
    }
    let full_view = Latency::from_samples(samples, 0);

    // Pages over gRPC: each walk on a new snapshot renders every page anew.
    let (listener, addr) = bind().await?;
    let service = dispatcher.grpc_service();
    let server = tokio::spawn(async move {
        Server::builder()
            .add_service(service)
            .serve_with_incoming(incoming(listener))
            .await
    });
    let mut client = DispatcherClient::new(toolmesh_transport::channel(
        &addr,
        &toolmesh_transport::Tls::none(),
    )?)
    .max_decoding_message_size(MAX_SNAPSHOT_MESSAGE_BYTES);
    let (mut pages, mut firsts) = (Vec::new(), Vec::new());
    for walk in 0..plan.list_calls.clamp(1, 5) + 1 {
        next_snapshot(&publish, &dispatcher).await?;
        let mut token = String::new();
        let mut first = true;
        loop {
            let mut request = tonic::Request::new(ListToolsRequest {
                format: ToolFormat::Openai as i32,
                page_token: token.clone(),
                ..ListToolsRequest::default()
            });
            toolmesh_transport::set_bearer(request.metadata_mut(), "platform");
            let t0 = Instant::now();
            let page = client
                .list_tools(request)
                .await
                .map_err(|s| BenchError::rpc("ListTools page", s))?
                .into_inner();
            let took = t0.elapsed();
            // The first walk connects and warms up; it is not timed.
            if walk > 0 {
                if first {
                    firsts.push(took)
                } else {
                    pages.push(took)
                }
            }
            first = false;
            if page.next_page_token.is_empty() {
                break;
            }
            token = page.next_page_token;
        }
    }
    server.abort();

    // The 100-of-100,000 caller: its first page on a new snapshot each time.
    let first_page_of = async |who: &toolmesh::Principal| -> Result<(Latency, usize), BenchError> {
        let (mut samples, mut seen) = (Vec::new(), 0);
        for _ in 0..plan.list_calls.max(1) {
            next_snapshot(&publish, &dispatcher).await?;
            let t0 = Instant::now();
            let page = dispatcher
                .list_tools_for(who, &ListToolsRequest::default())
                .map_err(|r| BenchError::rpc("Dispatcher::list_tools_for", r.into()))?;
            samples.push(t0.elapsed());
            seen = page.tools.len();
        }
        Ok((Latency::from_samples(samples, 0), seen))
    };
    let (team_indexed, team_tools) = first_page_of(&team).await?;
    let (team_scanned, scanned_tools) = first_page_of(&tagged).await?;
    if team_tools != scanned_tools {
        return Err(BenchError::failed(
            "list one team's tools by name and by tag",
            format!("{team_tools} by name, {scanned_tools} by tag"),
        ));
    }
    Ok(Paging {
        tools: plan.paging_tools,
        page_size: MAX_LIST_PAGE as usize,
        full_view,
        page_grpc: Latency::from_samples(pages, 0),
        first_page_grpc: Latency::from_samples(firsts, 0),
        team_indexed,
        team_scanned,
        team_tools,
    })
}

/// Tools in every page of `who`'s listing, in process.
fn list_in_process_as(
    dispatcher: &Dispatcher,
    who: &toolmesh::Principal,
) -> Result<usize, BenchError> {
    let mut request = ListToolsRequest::default();
    let mut listed = 0;
    loop {
        let page = dispatcher
            .list_tools_for(who, &request)
            .map_err(|r| BenchError::rpc("Dispatcher::list_tools_for", r.into()))?;
        listed += page.tools.len();
        if page.next_page_token.is_empty() {
            return Ok(listed);
        }
        request.page_token.clone_from(&page.next_page_token);
    }
}

/// Publishes a snapshot like the current one under the next version (no
/// projection or page kept for it yet) and waits until it is served.
async fn next_snapshot(
    publish: &watch::Sender<Arc<Snapshot>>,
    dispatcher: &Dispatcher,
) -> Result<(), BenchError> {
    let next = publish.borrow().next().finish();
    let version = next.version();
    publish.send_replace(Arc::new(next));
    if dispatcher.caught_up(version, Duration::from_secs(10)).await {
        Ok(())
    } else {
        Err(BenchError::timeout(
            "the dispatcher to install a snapshot",
            Duration::from_secs(10),
        ))
    }
}
