//! SearchTools through a real dispatcher served over gRPC on 127.0.0.1:
//! what each caller may find (its own listing and nothing else), the
//! bounds of a request, and search following snapshots at the version
//! ListTools shows.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tonic::transport::Channel;
use toolmesh::pb::{
    ListToolsRequest, RiskLevel, SearchToolsRequest, SearchToolsResponse, ToolSpec,
    dispatcher_client::DispatcherClient,
};
use toolmesh::{Instance, Snapshot, ToolDef, ToolEntry};
use toolmesh_dispatcher::{Dispatcher, DispatcherConfig};
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
    let (publish, snapshots) = watch::channel(Arc::new(snapshot));
    let (health, _) = tonic_health::server::health_reporter();
    let governance = Governance::new(Arc::new(PolicyHandle::new(policy())), None);
    let dispatcher =
        Dispatcher::with_governance(DispatcherConfig::default(), snapshots, health, governance);
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
