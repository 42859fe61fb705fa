//! ListTools pages at 100,000 tools through a real dispatcher served over
//! gRPC on 127.0.0.1: a walk lists every tool once, in order, each page
//! within the message limit; a walk stays in the snapshot it started in; a
//! token not ours or outlived says to start over; and a caller who sees
//! 100 tools of the 100,000 sees exactly those.

use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::watch;
use tonic::Code;
use tonic::transport::Channel;
use toolmesh::pb::{
    ListToolsRequest, ListToolsResponse, ToolFormat, ToolSpec, dispatcher_client::DispatcherClient,
};
use toolmesh::{Instance, Snapshot, ToolDef, ToolEntry};
use toolmesh_dispatcher::{Dispatcher, DispatcherConfig, MAX_LIST_PAGE};
use toolmesh_governance::{Governance, PolicyHandle};
use toolmesh_policy::Policy;
use toolmesh_testkit::policy::{Caller, PolicyBuilder};
use toolmesh_testkit::{serve_router, with_token};
use toolmesh_transport::{MAX_CALL_MESSAGE_BYTES, MAX_SNAPSHOT_MESSAGE_BYTES};

/// Tools in the catalog.
const TOOLS: usize = 100_000;
/// The caller who sees everything, and one granted a single team's tools.
const EVERYONE: &str = "tok-all";
const ONE_TEAM: &str = "tok-team";
/// A caller granted the same team's tools by tag (not by name).
const TAGGED: &str = "tok-tagged";

fn policy() -> Policy {
    let toml = PolicyBuilder::new()
        .no_anonymous()
        .caller(Caller::token(EVERYONE, "platform").roles(&["platform"]))
        .caller(Caller::token(ONE_TEAM, "team-42-bot").roles(&["team42"]))
        .caller(Caller::token(TAGGED, "tagged-bot").roles(&["tagged"]))
        .grant("everything", &["platform"], &["*"])
        .grant("team 42", &["team42"], &["t0042_*"])
        .then(
            "[[grants]]\nname = \"team 42 by tag\"\nroles = [\"tagged\"]\ntags = [\"team0042\"]\n",
        )
        .build_toml();
    Policy::from_toml(&toml).expect("the test policy parses")
}

/// The name of tool `i`.
fn name(i: usize) -> String {
    format!("t{:04}_op{:03}", i / 100, i % 100)
}

/// Tool `i`, with a small schema (100,000 compiled schemas of realistic
/// size would take this test minutes and gigabytes; realistic sizes are
/// `pages_of_large_schemas_fit_the_message_limit`'s).
fn tool(i: usize) -> ToolEntry {
    let description = format!("Operation {} of team {}.", i % 100, i / 100);
    entry(&name(i), "1.0.0", &description, SMALL_SCHEMA)
}

const SMALL_SCHEMA: &str = r#"{"type":"object","properties":{"q":{"type":"string"}}}"#;

/// An input schema of about `kib` KiB: string fields with descriptions.
fn schema_of(kib: usize) -> String {
    let properties: serde_json::Map<String, serde_json::Value> = (0..kib * 16)
        .map(|p| {
            let about = format!("Field {p} of the request, read as given.");
            (
                format!("field_{p}"),
                serde_json::json!({"type": "string", "description": about}),
            )
        })
        .collect();
    serde_json::json!({"type": "object", "properties": properties}).to_string()
}

/// A served tool `name@version` on one instance.
fn entry(name: &str, version: &str, description: &str, schema: &str) -> ToolEntry {
    ToolEntry {
        def: Arc::new(
            ToolDef::new(ToolSpec {
                name: name.into(),
                version: version.into(),
                description: description.into(),
                input_schema: schema.into(),
                // The team, from the name's `t0042_` (the tag grant's).
                tags: vec![format!("team{}", name.get(1..5).unwrap_or_default())],
                ..ToolSpec::default()
            })
            .expect("a valid spec"),
        ),
        instances: vec![Instance {
            executor_id: "x".into(),
            endpoint: "127.0.0.1:1".into(),
            service: "s".into(),
            healthy: true,
            execute_token: "".into(),
        }]
        .into(),
        disabled: None,
    }
}

/// The catalog of 100,000 tools (1,000 teams of 100, `t0042_op017`), put
/// in batches as a registry would; built once for every test.
fn catalog() -> Snapshot {
    static CATALOG: std::sync::OnceLock<Snapshot> = std::sync::OnceLock::new();
    CATALOG.get_or_init(build_catalog).clone()
}

fn build_catalog() -> Snapshot {
    let mut snapshot = Snapshot::empty("e");
    for batch in (0..TOOLS).collect::<Vec<_>>().chunks(10_000) {
        let mut next = snapshot.next();
        for &i in batch {
            next.put(tool(i));
        }
        snapshot = next.finish();
    }
    snapshot
}

/// A dispatcher over `snapshot` keeping `history` snapshots, served on
/// 127.0.0.1, and a client of it.
async fn serve(
    snapshot: Snapshot,
    history: usize,
) -> (
    watch::Sender<Arc<Snapshot>>,
    Dispatcher,
    DispatcherClient<Channel>,
) {
    let (publish, snapshots) = watch::channel(Arc::new(snapshot));
    let (health, _) = tonic_health::server::health_reporter();
    let governance = Governance::new(Arc::new(PolicyHandle::new(policy())), None);
    let config = DispatcherConfig {
        snapshot_history: history,
        ..DispatcherConfig::default()
    };
    let dispatcher = Dispatcher::with_governance(config, snapshots, health, governance);
    let addr =
        serve_router(tonic::transport::Server::builder().add_service(dispatcher.grpc_service()))
            .await;
    let client = DispatcherClient::connect(format!("http://{addr}"))
        .await
        .expect("connect to the dispatcher")
        .max_decoding_message_size(MAX_SNAPSHOT_MESSAGE_BYTES);
    (publish, dispatcher, client)
}

async fn page(
    client: &mut DispatcherClient<Channel>,
    token: &str,
    request: ListToolsRequest,
) -> Result<ListToolsResponse, tonic::Status> {
    Ok(client
        .list_tools(with_token(request, Some(token)))
        .await?
        .into_inner())
}

fn after(page_token: &str, format: ToolFormat) -> ListToolsRequest {
    ListToolsRequest {
        format: format as i32,
        page_token: page_token.into(),
        ..ListToolsRequest::default()
    }
}

/// Publishes the next snapshot after `publish`'s, changed by `change`, and
/// waits until `dispatcher` serves it.
async fn publish_next(
    publish: &watch::Sender<Arc<Snapshot>>,
    dispatcher: &Dispatcher,
    change: impl FnOnce(&mut toolmesh::snapshot::SnapshotBuilder),
) -> u64 {
    let mut next = publish.borrow().next();
    change(&mut next);
    let next = next.finish();
    let version = next.version();
    publish.send_replace(Arc::new(next));
    assert!(dispatcher.caught_up(version, Duration::from_secs(10)).await);
    version
}

/// Walking every page of 100,000 tools in the widest shape lists each tool
/// exactly once, in name order, 1,000 a page, every page within the
/// message limit and from the snapshot of the first; a page size asked
/// above the maximum is the maximum.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_walk_lists_every_tool_once_in_order() {
    let (_publish, _dispatcher, mut client) = serve(catalog(), 64).await;
    let mut listed = Vec::with_capacity(TOOLS);
    let (mut token, mut pages, mut slowest) = (String::new(), 0, Duration::ZERO);
    let first_version = loop {
        let request = ListToolsRequest {
            page_size: 1_000_000,
            ..after(&token, ToolFormat::Mcp)
        };
        let asked = Instant::now();
        let answer = page(&mut client, EVERYONE, request).await.expect("a page");
        slowest = slowest.max(asked.elapsed());
        pages += 1;
        assert!(answer.tools.len() <= MAX_LIST_PAGE as usize);
        let bytes = prost::Message::encoded_len(&answer);
        assert!(
            bytes < MAX_CALL_MESSAGE_BYTES,
            "page {pages}: {bytes} bytes"
        );
        let shaped: Vec<serde_json::Value> =
            serde_json::from_str(&answer.formatted).expect("MCP tools");
        assert_eq!(shaped.len(), answer.tools.len(), "formatted holds the page");
        listed.extend(answer.tools.into_iter().map(|t| t.name));
        if answer.next_page_token.is_empty() {
            break answer.snapshot_version;
        }
        token = answer.next_page_token;
    };
    assert_eq!(pages, TOOLS / MAX_LIST_PAGE as usize);
    assert_eq!(first_version, 10, "every page from the catalog's snapshot");
    assert_eq!(listed.len(), TOOLS);
    assert!(
        listed.iter().enumerate().all(|(i, n)| *n == name(i)),
        "in order, once each"
    );
    eprintln!("slowest of {pages} pages: {slowest:?}");
}

/// A walk started before a new snapshot stays in its first snapshot: a
/// tool added meanwhile is not listed and one given a newer version is
/// listed in the version the walk started with, and every page names the
/// first snapshot; a new walk sees the new one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_walk_survives_a_new_snapshot() {
    let (publish, dispatcher, mut client) = serve(catalog(), 64).await;
    let first = page(&mut client, EVERYONE, after("", ToolFormat::Native))
        .await
        .expect("the first page");
    let (upgraded, added) = (name(TOOLS - 1), "t0500_op050b");
    let newer = publish_next(&publish, &dispatcher, |next| {
        next.put(entry(
            &upgraded,
            "2.0.0",
            "Upgraded meanwhile.",
            SMALL_SCHEMA,
        ));
        next.put(entry(added, "1.0.0", "Added meanwhile.", SMALL_SCHEMA));
    })
    .await;
    let mut tools = first.tools.clone();
    let mut token = first.next_page_token.clone();
    while !token.is_empty() {
        let next = page(&mut client, EVERYONE, after(&token, ToolFormat::Native))
            .await
            .expect("a page of the first snapshot");
        assert_eq!(next.snapshot_version, first.snapshot_version);
        tools.extend(next.tools);
        token = next.next_page_token;
    }
    assert_eq!(tools.len(), TOOLS, "nothing added");
    assert!(tools.iter().all(|t| t.name != added));
    let last = tools.last().expect("a last tool");
    assert_eq!((&last.name, last.version.as_str()), (&upgraded, "1.0.0"));
    let fresh = page(&mut client, EVERYONE, after("", ToolFormat::Native))
        .await
        .expect("a new walk");
    assert_eq!(fresh.snapshot_version, newer);
}

/// A token this server never gave is INVALID_ARGUMENT, and one whose
/// snapshot it no longer holds is FAILED_PRECONDITION; both say to list
/// again from the first page. A token that continues another snapshot than
/// the one the request pins is refused too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_not_ours_or_outlived_says_to_start_over() {
    let (publish, dispatcher, mut client) = serve(catalog(), 2).await;
    for stranger in ["garbage!", "after:t0001_op001", "cDEvNDI"] {
        let refused = page(&mut client, EVERYONE, after(stranger, ToolFormat::Native))
            .await
            .expect_err("not our token");
        assert_eq!(refused.code(), Code::InvalidArgument, "{stranger}");
        assert!(
            refused.message().contains("list again from the first page"),
            "{}",
            refused.message()
        );
    }
    let first = page(&mut client, EVERYONE, after("", ToolFormat::Native))
        .await
        .expect("the first page");
    let pinned_elsewhere = ListToolsRequest {
        snapshot_version: first.snapshot_version + 1,
        ..after(&first.next_page_token, ToolFormat::Native)
    };
    let refused = page(&mut client, EVERYONE, pinned_elsewhere)
        .await
        .expect_err("a token of another snapshot");
    assert_eq!(refused.code(), Code::InvalidArgument);
    for _ in 0..2 {
        publish_next(&publish, &dispatcher, |_| {}).await;
    }
    let outlived = page(
        &mut client,
        EVERYONE,
        after(&first.next_page_token, ToolFormat::Native),
    )
    .await
    .expect_err("its snapshot is gone");
    assert_eq!(outlived.code(), Code::FailedPrecondition);
    assert!(
        outlived
            .message()
            .contains("list again from the first page"),
        "{}",
        outlived.message()
    );
}

/// A caller granted one team's tools sees exactly those 100 of the 100,000,
/// in one page; in an OpenAI shape as well.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_caller_sees_exactly_its_own_hundred() {
    let (_publish, _dispatcher, mut client) = serve(catalog(), 64).await;
    let answer = page(&mut client, ONE_TEAM, after("", ToolFormat::Openai))
        .await
        .expect("the team's page");
    let names: Vec<String> = answer.tools.iter().map(|t| t.name.clone()).collect();
    let expected: Vec<String> = (4_200..4_300).map(name).collect();
    assert_eq!(names, expected);
    assert!(answer.next_page_token.is_empty(), "one page");
    let shaped: Vec<serde_json::Value> =
        serde_json::from_str(&answer.formatted).expect("OpenAI tools");
    assert_eq!(shaped.len(), 100);
}

/// Pages of tools with large schemas stay within the message limit: 2,000
/// tools of 3 KiB schemas (the top of the realistic range) and 300 of
/// 24 KiB, walked in the MCP shape (each schema twice in a page: the
/// spec's and the shaped one), every page under the limit and every tool
/// listed once; a page holds fewer tools when a full one would not fit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pages_of_large_schemas_fit_the_message_limit() {
    for (count, kib) in [(2_000, 3), (300, 24)] {
        let schema = schema_of(kib);
        let mut next = Snapshot::empty("e").next();
        for i in 0..count {
            next.put(entry(
                &name(i),
                "1.0.0",
                "A tool with a large schema.",
                &schema,
            ));
        }
        let (_publish, _dispatcher, mut client) = serve(next.finish(), 64).await;
        let (mut token, mut listed, mut pages) = (String::new(), 0, 0);
        loop {
            let answer = page(&mut client, EVERYONE, after(&token, ToolFormat::Mcp))
                .await
                .expect("a page within the limit");
            let bytes = prost::Message::encoded_len(&answer);
            assert!(bytes < MAX_CALL_MESSAGE_BYTES, "{kib} KiB: {bytes} bytes");
            listed += answer.tools.len();
            pages += 1;
            if answer.next_page_token.is_empty() {
                break;
            }
            token = answer.next_page_token;
        }
        assert_eq!(listed, count, "{kib} KiB");
        eprintln!("{count} tools of {kib} KiB schemas: {pages} pages");
    }
}

/// A caller granted 100 of the 100,000 tools by a name pattern pays for
/// those 100: its first page on a new snapshot (its projection worked out
/// anew) is far cheaper than the same 100 tools granted by tag, which
/// decides every tool; both list exactly the same tools.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_caller_of_a_hundred_pays_for_a_hundred() {
    let (publish, dispatcher, _client) = serve(catalog(), 64).await;
    let as_caller = |token| {
        dispatcher
            .governance()
            .authenticate(Some(token), None)
            .expect("a known caller")
    };
    let (by_name, by_tag) = (as_caller(ONE_TEAM), as_caller(TAGGED));
    let mut first_pages = [Vec::new(), Vec::new()];
    let mut listed = [Vec::new(), Vec::new()];
    for _ in 0..5 {
        for (at, who) in [&by_name, &by_tag].into_iter().enumerate() {
            publish_next(&publish, &dispatcher, |_| {}).await;
            let asked = Instant::now();
            let answer = dispatcher
                .list_tools_for(who, &ListToolsRequest::default())
                .expect("a page");
            first_pages[at].push(asked.elapsed());
            listed[at] = answer.tools.iter().map(|t| t.name.clone()).collect();
        }
    }
    assert_eq!(listed[0], (4_200..4_300).map(name).collect::<Vec<_>>());
    assert_eq!(listed[0], listed[1], "the same tools by name and by tag");
    let median = |samples: &mut Vec<Duration>| {
        samples.sort();
        samples[samples.len() / 2]
    };
    let [indexed, scanned] = first_pages.each_mut().map(median);
    eprintln!(
        "first page of 100 of {TOOLS}: names looked up {indexed:?}, every tool decided {scanned:?}"
    );
    assert!(
        indexed < scanned,
        "{indexed:?} looked up vs {scanned:?} decided"
    );
}
