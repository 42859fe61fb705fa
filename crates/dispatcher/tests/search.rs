//! SearchTools through a real dispatcher served over gRPC on 127.0.0.1:
//! what each caller may find (its own listing and nothing else), the
//! bounds of a request, and search following snapshots at the version
//! ListTools shows; semantic ranking with a local embeddings endpoint;
//! the dispatcher's own `search_tools` through Invoke.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tonic::transport::Channel;
use toolmesh::pb::{
    InvokeRequest, InvokeResponse, ListToolsRequest, RiskLevel, SearchToolsRequest,
    SearchToolsResponse, ToolSpec, dispatcher_client::DispatcherClient,
};
use toolmesh::{Instance, Snapshot, ToolDef, ToolEntry};
use toolmesh_audit::AuditSink;
use toolmesh_dispatcher::{Dispatcher, DispatcherConfig, EmbeddingsConfig};
use toolmesh_governance::Governance;
use toolmesh_governance::PolicyHandle;
use toolmesh_policy::Policy;
use toolmesh_testkit::policy::{Caller, PolicyBuilder};
use toolmesh_testkit::{eventually, serve_router, with_token};

/// Two tenants, each granted only its own tools, and acme's refund
/// narrowed to amounts of at most 100.
fn policy() -> Policy {
    let toml = PolicyBuilder::new()
        .no_anonymous()
        .caller(
            Caller::token("tok-acme", "acme-bot")
                .tenant("acme")
                .roles(&["agent"]),
        )
        .caller(
            Caller::token("tok-globex", "globex-bot")
                .tenant("globex")
                .roles(&["agent"]),
        )
        .then(
            "[[grants]]\nname = \"acme\"\ntenants = [\"acme\"]\ntools = [\"acme_*\"]\n\n\
             [grants.arguments.acme_refund_order]\namount = { maximum = 100 }\n",
        )
        .then("[[grants]]\nname = \"globex\"\ntenants = [\"globex\"]\ntools = [\"globex_*\"]\n")
        .build_toml();
    Policy::from_toml(&toml).expect("the test policy parses")
}

/// A served tool.
fn tool(name: &str, description: &str, tags: &[&str], risk: RiskLevel) -> ToolEntry {
    ToolEntry {
        def: Arc::new(
            ToolDef::new(ToolSpec {
                name: name.into(),
                version: "1.0.0".into(),
                description: description.into(),
                input_schema: r#"{"type":"object","properties":{"order_id":{"type":"string"},"amount":{"type":"number"}}}"#.into(),
                tags: tags.iter().map(|t| (*t).into()).collect(),
                risk: risk as i32,
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

/// The tools of both tenants, with the same words on both sides.
fn catalog() -> Snapshot {
    let mut b = Snapshot::empty("e").next();
    for tenant in ["acme", "globex"] {
        b.put(tool(
            &format!("{tenant}_refund_order"),
            "Refunds a customer's order.",
            &["billing"],
            RiskLevel::High,
        ))
        .put(tool(
            &format!("{tenant}_order_status"),
            "Where a customer's order is.",
            &["orders"],
            RiskLevel::Low,
        ))
        .put(tool(
            &format!("{tenant}_send_email"),
            "Sends an email to a customer about an order.",
            &["messaging"],
            RiskLevel::Medium,
        ));
    }
    b.put(tool(
        "globex_refund_everything",
        "Refunds every order of every customer: refund, refund, refund.",
        &["billing"],
        RiskLevel::High,
    ));
    b.finish()
}

/// A dispatcher over `snapshot` (more can be published on the sender),
/// served on 127.0.0.1, and a client of it.
async fn serve(
    snapshot: Snapshot,
) -> (
    watch::Sender<Arc<Snapshot>>,
    Dispatcher,
    DispatcherClient<Channel>,
) {
    serve_with(snapshot, DispatcherConfig::default(), None).await
}

/// [`serve`] with `config`, writing audit records to `audit`.
async fn serve_with(
    snapshot: Snapshot,
    config: DispatcherConfig,
    audit: Option<AuditSink>,
) -> (
    watch::Sender<Arc<Snapshot>>,
    Dispatcher,
    DispatcherClient<Channel>,
) {
    let (publish, snapshots) = watch::channel(Arc::new(snapshot));
    let (health, _) = tonic_health::server::health_reporter();
    let governance = Governance::new(Arc::new(PolicyHandle::new(policy())), audit);
    let dispatcher = Dispatcher::with_governance(config, snapshots, health, governance);
    let addr =
        serve_router(tonic::transport::Server::builder().add_service(dispatcher.grpc_service()))
            .await;
    let client = DispatcherClient::connect(format!("http://{addr}"))
        .await
        .expect("connect to the dispatcher");
    (publish, dispatcher, client)
}

fn asking(query: &str) -> SearchToolsRequest {
    SearchToolsRequest {
        query: query.into(),
        ..SearchToolsRequest::default()
    }
}

async fn search(
    client: &mut DispatcherClient<Channel>,
    token: &str,
    request: SearchToolsRequest,
) -> Result<SearchToolsResponse, tonic::Status> {
    Ok(client
        .search_tools(with_token(request, Some(token)))
        .await?
        .into_inner())
}

fn names(found: &SearchToolsResponse) -> Vec<String> {
    found
        .matches
        .iter()
        .map(|m| m.tool.as_ref().expect("a tool").name.clone())
        .collect()
}

/// What ListTools at `version` shows the caller of `token`.
async fn listed(
    client: &mut DispatcherClient<Channel>,
    token: &str,
    version: u64,
) -> Vec<ToolSpec> {
    let request = ListToolsRequest {
        snapshot_version: version,
        ..ListToolsRequest::default()
    };
    client
        .list_tools(with_token(request, Some(token)))
        .await
        .expect("list tools")
        .into_inner()
        .tools
}

/// Two tenants with the same words: each finds only its own tools, each
/// exactly as its ListTools shows it (acme's narrowed schema included),
/// and the other tenant's tools take no slot and move no score.
#[tokio::test]
async fn each_caller_finds_only_what_it_may_list() {
    let (publish, _dispatcher, mut client) = serve(catalog()).await;
    for (token, own) in [("tok-acme", "acme_"), ("tok-globex", "globex_")] {
        let found = search(&mut client, token, asking("refund a customer's order"))
            .await
            .expect("search");
        assert!(!found.matches.is_empty());
        assert!(
            names(&found).iter().all(|name| name.starts_with(own)),
            "{token}: {:?}",
            names(&found)
        );
        let listing = listed(&mut client, token, found.snapshot_version).await;
        for found in &found.matches {
            let tool = found.tool.as_ref().expect("a tool");
            assert!(listing.contains(tool), "{} as listed", tool.name);
        }
    }
    let acme = search(&mut client, "tok-acme", asking("refund order"))
        .await
        .expect("search");
    assert_eq!(names(&acme)[0], "acme_refund_order");
    let schema: serde_json::Value =
        serde_json::from_str(&acme.matches[0].tool.as_ref().expect("a tool").input_schema)
            .expect("a JSON schema");
    assert_eq!(schema["properties"]["amount"]["maximum"], 100, "narrowed");

    // Globex gains more refund tools: acme's answer is the same, to the bit.
    let mut more = catalog().next();
    for i in 0..20 {
        more.put(tool(
            &format!("globex_refund_{i}"),
            "Refund order refund order.",
            &["billing"],
            RiskLevel::Low,
        ));
    }
    let more = more.finish();
    let version = more.version();
    publish.send_replace(Arc::new(more));
    let again = eventually(
        "acme searches the new snapshot",
        Duration::from_secs(5),
        || {
            let mut client = client.clone();
            async move {
                let found = search(&mut client, "tok-acme", asking("refund order"))
                    .await
                    .ok()?;
                (found.snapshot_version == version).then_some(found)
            }
        },
    )
    .await;
    let scored = |found: &SearchToolsResponse| -> Vec<(String, u64)> {
        found
            .matches
            .iter()
            .map(|m| {
                (
                    m.tool.as_ref().expect("a tool").name.clone(),
                    m.score.to_bits(),
                )
            })
            .collect()
    };
    assert_eq!(scored(&again), scored(&acme));
}

/// A registration changes what search finds at the same snapshot version
/// as ListTools lists it, and a removal likewise.
#[tokio::test]
async fn search_follows_snapshots_at_the_listed_version() {
    let first = catalog();
    let (publish, dispatcher, mut client) = serve(first.clone()).await;
    let before = search(&mut client, "tok-acme", asking("cancel a subscription"))
        .await
        .expect("search");
    assert!(before.matches.is_empty(), "{:?}", names(&before));

    let mut next = first.next();
    next.put(tool(
        "acme_cancel_subscription",
        "Cancels a customer's subscription.",
        &[],
        RiskLevel::Medium,
    ));
    let added = next.finish();
    let added_version = added.version();
    publish.send_replace(Arc::new(added.clone()));
    assert!(
        dispatcher
            .caught_up(added_version, Duration::from_secs(5))
            .await
    );
    let found = eventually(
        "the registration is searchable",
        Duration::from_secs(5),
        || {
            let mut client = client.clone();
            async move {
                let found = search(&mut client, "tok-acme", asking("cancel a subscription"))
                    .await
                    .ok()?;
                (found.snapshot_version == added_version).then_some(found)
            }
        },
    )
    .await;
    assert_eq!(names(&found), ["acme_cancel_subscription"]);
    let listing = listed(&mut client, "tok-acme", added_version).await;
    assert!(listing.iter().any(|t| t.name == "acme_cancel_subscription"));
    let earlier = listed(&mut client, "tok-acme", first.version()).await;
    assert!(!earlier.iter().any(|t| t.name == "acme_cancel_subscription"));

    let mut next = added.next();
    next.remove(
        "acme_cancel_subscription",
        &"1.0.0".parse().expect("a version"),
    );
    let removed = next.finish();
    let removed_version = removed.version();
    publish.send_replace(Arc::new(removed));
    let found = eventually("the removal is searched", Duration::from_secs(5), || {
        let mut client = client.clone();
        async move {
            let found = search(&mut client, "tok-acme", asking("cancel a subscription"))
                .await
                .ok()?;
            (found.snapshot_version == removed_version).then_some(found)
        }
    })
    .await;
    assert!(found.matches.is_empty(), "{:?}", names(&found));
}

/// An empty query and one over 1 KiB are INVALID_ARGUMENT saying the
/// limit; limit 0 answers 10, more than 50 answers 50; tags and max_risk
/// filter.
#[tokio::test]
async fn request_bounds_and_filters() {
    let mut many = catalog().next();
    for i in 0..60 {
        many.put(tool(
            &format!("acme_widget_{i}"),
            "Makes a widget.",
            &["widgets"],
            RiskLevel::Low,
        ));
    }
    let (_publish, _dispatcher, mut client) = serve(many.finish()).await;
    for query in [String::new(), "   ".into(), "x".repeat(1025)] {
        let refused = search(&mut client, "tok-acme", asking(&query))
            .await
            .expect_err("refused");
        assert_eq!(refused.code(), tonic::Code::InvalidArgument);
        assert!(
            refused.message().contains("1024 bytes"),
            "{}",
            refused.message()
        );
    }
    let at = |limit| SearchToolsRequest {
        limit,
        ..asking("widget")
    };
    for (limit, answered) in [(0, 10), (3, 3), (50, 50), (1000, 50)] {
        let found = search(&mut client, "tok-acme", at(limit))
            .await
            .expect("search");
        assert_eq!(found.matches.len(), answered, "limit {limit}");
    }

    let by_tag = SearchToolsRequest {
        tags: vec!["messaging".into()],
        ..asking("customer order")
    };
    let found = search(&mut client, "tok-acme", by_tag)
        .await
        .expect("search");
    assert_eq!(names(&found), ["acme_send_email"]);
    let low_risk = SearchToolsRequest {
        max_risk: RiskLevel::Medium as i32,
        ..asking("refund customer order")
    };
    let found = search(&mut client, "tok-acme", low_risk)
        .await
        .expect("search");
    let found: BTreeSet<String> = names(&found).into_iter().collect();
    assert!(!found.contains("acme_refund_order"), "{found:?}");
    assert!(
        found.contains("acme_order_status") && found.contains("acme_send_email"),
        "{found:?}"
    );
    let unknown = SearchToolsRequest {
        max_risk: 9,
        ..asking("refund")
    };
    let refused = search(&mut client, "tok-acme", unknown)
        .await
        .expect_err("refused");
    assert_eq!(refused.code(), tonic::Code::InvalidArgument);
}

/// A local OpenAI-compatible embeddings endpoint that embeds text as a bag
/// of hashed words, where the words of [`SYNONYMS`] count as the word they
/// stand for: a query in those words shares no word with a tool's text,
/// so only the embeddings can find it.
mod embeddings_stub {
    use axum::{Json, Router, extract::State, routing::post};
    use serde_json::{Value, json};
    use std::net::SocketAddr;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    /// (synonym, the word it embeds as).
    const SYNONYMS: [(&str, &str); 2] = [("reimburse", "refund"), ("purchase", "order")];
    const DIMENSION: usize = 256;

    /// The endpoint's state: whether it answers slowly, and every input
    /// it embedded.
    #[derive(Default)]
    pub(crate) struct Stub {
        pub(crate) slow: AtomicBool,
        pub(crate) inputs: Mutex<Vec<String>>,
    }

    /// What the stub embeds `text` as.
    fn embed(text: &str) -> Vec<f32> {
        let mut vector = vec![0.0; DIMENSION];
        vector[0] = 0.01;
        for word in text.to_lowercase().split(|c: char| !c.is_alphanumeric()) {
            if word.is_empty() {
                continue;
            }
            let word = SYNONYMS
                .iter()
                .find(|(synonym, _)| *synonym == word)
                .map_or(word, |(_, meant)| meant);
            let hash = word.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
                (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
            });
            vector[1 + (hash % (DIMENSION as u64 - 1)) as usize] += 1.0;
        }
        vector
    }

    async fn embeddings(State(stub): State<Arc<Stub>>, Json(body): Json<Value>) -> Json<Value> {
        if stub.slow.load(Ordering::SeqCst) {
            tokio::time::sleep(Duration::from_secs(5)).await;
        }
        let inputs: Vec<String> = body["input"]
            .as_array()
            .expect("an input array")
            .iter()
            .map(|input| input.as_str().expect("text inputs").to_owned())
            .collect();
        assert_eq!(body["model"], "stub-model");
        let data: Vec<Value> = inputs
            .iter()
            .enumerate()
            .map(|(index, text)| json!({"object": "embedding", "index": index, "embedding": embed(text)}))
            .collect();
        stub.inputs.lock().unwrap().extend(inputs);
        Json(json!({"object": "list", "data": data, "model": "stub-model"}))
    }

    /// Serves the stub on 127.0.0.1 until the handle is aborted.
    pub(crate) async fn serve() -> (Arc<Stub>, SocketAddr, tokio::task::JoinHandle<()>) {
        let stub = Arc::new(Stub::default());
        let app = Router::new()
            .route("/v1/embeddings", post(embeddings))
            .with_state(stub.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind loopback");
        let addr = listener.local_addr().expect("an address");
        let server = tokio::spawn(async move {
            axum::serve(listener, app).await.expect("the stub serves");
        });
        (stub, addr, server)
    }
}

/// A dispatcher over the two tenants' catalog ranking with the stub's
/// embeddings, its metrics, and the stub.
async fn serve_with_embeddings() -> (
    watch::Sender<Arc<Snapshot>>,
    DispatcherClient<Channel>,
    toolmesh_telemetry::MetricsRegistry,
    Arc<embeddings_stub::Stub>,
    tokio::task::JoinHandle<()>,
) {
    let (stub, addr, server) = embeddings_stub::serve().await;
    let metrics = toolmesh_telemetry::MetricsRegistry::default();
    let config = DispatcherConfig {
        search_embeddings: Some(EmbeddingsConfig::new(
            format!("http://{addr}"),
            "stub-model",
        )),
        metrics: metrics.clone(),
        ..DispatcherConfig::default()
    };
    let (publish, _dispatcher, client) = serve_with(catalog(), config, None).await;
    (publish, client, metrics, stub, server)
}

/// The definitions the stub was asked to embed (queries have no colon).
fn definitions_embedded(stub: &embeddings_stub::Stub) -> Vec<String> {
    let inputs = stub.inputs.lock().unwrap();
    inputs.iter().filter(|i| i.contains(':')).cloned().collect()
}

/// A query sharing no word with any tool finds nothing lexically; with
/// embeddings it finds the tool it means, first, and still only the
/// caller's own tools, though a hidden one's embedding matches best.
/// Each definition is embedded once, and a new snapshot embeds only what
/// it added.
#[tokio::test]
async fn embeddings_find_what_words_do_not() {
    let (_lexical_publish, _lexical, mut lexical) = serve(catalog()).await;
    let found = search(&mut lexical, "tok-acme", asking("reimburse"))
        .await
        .expect("search");
    assert!(found.matches.is_empty(), "{:?}", names(&found));

    let (publish, client, _metrics, stub, _server) = serve_with_embeddings().await;
    let found = eventually(
        "the definitions are embedded",
        Duration::from_secs(10),
        || {
            let mut client = client.clone();
            async move {
                let found = search(&mut client, "tok-acme", asking("reimburse"))
                    .await
                    .ok()?;
                (!found.matches.is_empty()).then_some(found)
            }
        },
    )
    .await;
    assert_eq!(names(&found)[0], "acme_refund_order", "{:?}", names(&found));
    assert!(
        names(&found).iter().all(|name| name.starts_with("acme_")),
        "a hidden tool never shows: {:?}",
        names(&found)
    );
    let schema: serde_json::Value =
        serde_json::from_str(&found.matches[0].tool.as_ref().expect("a tool").input_schema)
            .expect("a JSON schema");
    assert_eq!(schema["properties"]["amount"]["maximum"], 100, "as listed");
    let embedded = definitions_embedded(&stub);
    assert_eq!(embedded.len(), catalog().entries().count(), "{embedded:?}");

    let mut next = catalog().next();
    next.put(tool(
        "acme_cancel_subscription",
        "Cancels a customer's subscription.",
        &[],
        RiskLevel::Medium,
    ));
    publish.send_replace(Arc::new(next.finish()));
    eventually(
        "the new definition is embedded",
        Duration::from_secs(10),
        || {
            let embedded = definitions_embedded(&stub);
            async move {
                embedded
                    .iter()
                    .any(|i| i.contains("cancel subscription"))
                    .then_some(())
            }
        },
    )
    .await;
    assert_eq!(
        definitions_embedded(&stub).len(),
        catalog().entries().count() + 1,
        "only the new definition is embedded"
    );
}

/// With the endpoint slow, then stopped, a search still answers within
/// its deadline, lexically, and the fallback is counted by reason.
#[tokio::test]
async fn a_slow_or_stopped_endpoint_falls_back_to_lexical() {
    let (_publish, client, metrics, stub, server) = serve_with_embeddings().await;
    eventually(
        "the definitions are embedded",
        Duration::from_secs(10),
        || {
            let mut client = client.clone();
            async move {
                let found = search(&mut client, "tok-acme", asking("reimburse"))
                    .await
                    .ok()?;
                (!found.matches.is_empty()).then_some(())
            }
        },
    )
    .await;
    let within = |query: &str| {
        let mut request = with_token(asking(query), Some("tok-acme"));
        request.set_timeout(Duration::from_secs(2));
        request
    };
    let counted = |reason: &str| {
        let line = format!("toolmesh_search_embeddings_fallbacks_total{{reason=\"{reason}\"}} 1");
        metrics.encode().contains(&line)
    };

    stub.slow.store(true, std::sync::atomic::Ordering::SeqCst);
    let mut slow = client.clone();
    let started = std::time::Instant::now();
    let found = slow
        .search_tools(within("refund order"))
        .await
        .expect("answered within the deadline")
        .into_inner();
    assert!(started.elapsed() < Duration::from_secs(2));
    assert_eq!(names(&found)[0], "acme_refund_order", "ranked lexically");
    assert!(counted("timeout"), "{}", metrics.encode());

    server.abort();
    let _ = server.await;
    let found = slow
        .search_tools(within("customer order status"))
        .await
        .expect("answered with the endpoint stopped")
        .into_inner();
    assert_eq!(names(&found)[0], "acme_order_status", "ranked lexically");
    assert!(counted("error"), "{}", metrics.encode());
}

/// `search_tools` through Invoke searches the snapshot the call pins (an
/// older one without a tool registered since), and is audited like any
/// call, under its own name.
#[tokio::test]
async fn search_tool_invoked_is_audited_and_honours_a_pin() {
    let path = std::env::temp_dir().join(format!(
        "toolmesh-search-tool-audit-{}.jsonl",
        std::process::id()
    ));
    let _ = std::fs::remove_file(&path);
    let audit = AuditSink::append_to_file(&path, 64)
        .await
        .expect("an audit log");
    let first = catalog();
    let (publish, dispatcher, client) =
        serve_with(first.clone(), DispatcherConfig::default(), Some(audit)).await;
    let mut next = first.next();
    next.put(tool(
        "acme_cancel_subscription",
        "Cancels a customer's subscription.",
        &[],
        RiskLevel::Medium,
    ));
    let added = next.finish();
    publish.send_replace(Arc::new(added.clone()));
    assert!(
        dispatcher
            .caught_up(added.version(), Duration::from_secs(5))
            .await
    );

    let invoke = |version: u64| {
        let request = InvokeRequest {
            tool: "search_tools".into(),
            arguments: r#"{"query":"cancel a subscription"}"#.into(),
            snapshot_version: version,
            call_id: format!("search-at-{version}"),
            ..InvokeRequest::default()
        };
        let mut client = client.clone();
        async move { client.invoke(with_token(request, Some("tok-acme"))).await }
    };
    let found_names = |response: &InvokeResponse| -> Vec<String> {
        let data: serde_json::Value =
            serde_json::from_str(&response.result.as_ref().expect("a result").data)
                .expect("JSON data");
        data["tools"]
            .as_array()
            .expect("tools")
            .iter()
            .map(|tool| tool["name"].as_str().expect("a name").to_owned())
            .collect()
    };
    let newest = invoke(0).await.expect("invoke").into_inner();
    assert_eq!(found_names(&newest), ["acme_cancel_subscription"]);
    assert_eq!(newest.snapshot_version, added.version());
    let pinned = invoke(first.version()).await.expect("invoke").into_inner();
    assert!(
        found_names(&pinned).is_empty(),
        "{:?}",
        found_names(&pinned)
    );
    assert_eq!(pinned.snapshot_version, first.version());
    let gone = invoke(first.version() + 100)
        .await
        .expect_err("no such snapshot");
    assert_ne!(gone.code(), tonic::Code::Ok);

    let records = eventually("both searches are audited", Duration::from_secs(5), || {
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        async move {
            let records: Vec<serde_json::Value> = text
                .lines()
                .map(|line| serde_json::from_str(line).expect("a JSON line"))
                .collect();
            (records.len() >= 2).then_some(records)
        }
    })
    .await;
    let _ = std::fs::remove_file(&path);
    let expected = [
        (added.version(), "search-at-0".to_owned()),
        (first.version(), format!("search-at-{}", first.version())),
    ];
    for (record, (version, call_id)) in records.iter().zip(expected) {
        assert_eq!(record["kind"], "invoke");
        assert_eq!(record["tool"], "search_tools");
        assert_eq!(record["caller"], "acme-bot");
        assert_eq!(record["tenant"], "acme");
        assert_eq!(record["outcome"], "OK");
        assert_eq!(record["snapshot_version"], version);
        assert_eq!(record["call_id"], call_id);
        assert!(!record["arguments_sha256"].as_str().unwrap_or("").is_empty());
    }
}
