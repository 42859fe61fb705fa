//! WatchTools through a real dispatcher served over gRPC on 127.0.0.1:
//! each caller's stream carries its own view (whole, then its changes and
//! nothing else), a policy reload sends the difference it makes, a large
//! view comes in bounded parts, and a caller that reads late gets the net
//! change.

use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tonic::Streaming;
use tonic::transport::Channel;
use toolmesh::pb::{
    ListToolsRequest, ToolFormat, ToolSpec, ToolsChange, WatchToolsRequest,
    dispatcher_client::DispatcherClient,
};
use toolmesh::{Instance, Snapshot, ToolDef, ToolEntry};
use toolmesh_dispatcher::{Dispatcher, DispatcherConfig, WATCH_CHUNK};
use toolmesh_governance::{Governance, PolicyHandle};
use toolmesh_policy::Policy;
use toolmesh_testkit::policy::{Caller, PolicyBuilder};
use toolmesh_testkit::{patient, serve_router, with_token};

/// Two tenants, each granted only its own tools; acme's refund narrowed
/// to amounts of at most 100. With `shared`, acme is granted `shared_*`
/// too.
fn policy(shared: bool) -> Policy {
    let acme_tools = if shared {
        r#"["acme_*", "shared_*"]"#
    } else {
        r#"["acme_*"]"#
    };
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
        .then(&format!(
            "[[grants]]\nname = \"acme\"\ntenants = [\"acme\"]\ntools = {acme_tools}\n\n\
             [grants.arguments.acme_refund]\namount = {{ maximum = 100 }}\n"
        ))
        .then("[[grants]]\nname = \"globex\"\ntenants = [\"globex\"]\ntools = [\"globex_*\"]\n")
        .build_toml();
    Policy::from_toml(&toml).expect("the test policy parses")
}

/// A served tool `name@version`.
fn tool(name: &str, version: &str) -> ToolEntry {
    ToolEntry {
        def: Arc::new(
            ToolDef::new(ToolSpec {
                name: name.into(),
                version: version.into(),
                description: format!("Does {name}."),
                input_schema: r#"{"type":"object","properties":{"amount":{"type":"number"}}}"#
                    .into(),
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

/// A dispatcher over `snapshot` (more can be published on the sender),
/// under a policy its handle can reload, served on 127.0.0.1.
struct Served {
    publish: watch::Sender<Arc<Snapshot>>,
    policy: Arc<PolicyHandle>,
    dispatcher: Dispatcher,
    client: DispatcherClient<Channel>,
}

impl Served {
    async fn start(snapshot: Snapshot) -> Served {
        let (publish, snapshots) = watch::channel(Arc::new(snapshot));
        let (health, _) = tonic_health::server::health_reporter();
        let policy = Arc::new(PolicyHandle::new(policy(false)));
        let governance = Governance::new(policy.clone(), None);
        let dispatcher =
            Dispatcher::with_governance(DispatcherConfig::default(), snapshots, health, governance);
        let addr = serve_router(
            tonic::transport::Server::builder().add_service(dispatcher.grpc_service()),
        )
        .await;
        let client = DispatcherClient::connect(format!("http://{addr}"))
            .await
            .expect("connect to the dispatcher");
        Served {
            publish,
            policy,
            dispatcher,
            client,
        }
    }

    /// Publishes the snapshot `change` makes of the newest one, and waits
    /// until the dispatcher uses it.
    async fn publish(&self, change: impl FnOnce(&mut toolmesh::snapshot::SnapshotBuilder)) {
        let mut next = self.publish.borrow().next();
        change(&mut next);
        let next = next.finish();
        let version = next.version();
        self.publish.send_replace(Arc::new(next));
        assert!(
            self.dispatcher
                .caught_up(version, Duration::from_secs(5))
                .await
        );
    }

    /// `token`'s WatchTools stream (native format).
    async fn watch(&self, token: &str) -> Streaming<ToolsChange> {
        self.client
            .clone()
            .watch_tools(with_token(WatchToolsRequest::default(), Some(token)))
            .await
            .expect("WatchTools")
            .into_inner()
    }
}

/// The next message of `stream`, within a patient limit.
async fn next(stream: &mut Streaming<ToolsChange>) -> ToolsChange {
    tokio::time::timeout(patient(Duration::from_secs(5)), stream.message())
        .await
        .expect("a message in time")
        .expect("the stream is fine")
        .expect("the stream goes on")
}

fn names(tools: &[ToolSpec]) -> Vec<&str> {
    tools.iter().map(|t| t.name.as_str()).collect()
}

/// Each caller's stream starts with its own whole view (acme's narrowed
/// schema included, as ListTools shows it), then carries the registration
/// of a tool it may see, a new version, a deregistration; a change outside
/// its view sends it nothing (the next thing it hears is its own change).
#[tokio::test]
async fn each_caller_hears_only_its_own_view() {
    let mut first = Snapshot::empty("e").next();
    first
        .put(tool("acme_refund", "1.0.0"))
        .put(tool("acme_status", "1.0.0"))
        .put(tool("globex_status", "1.0.0"));
    let served = Served::start(first.finish()).await;
    let (mut acme, mut globex) = (
        served.watch("tok-acme").await,
        served.watch("tok-globex").await,
    );

    let view = next(&mut acme).await;
    assert!(view.synced && view.removed.is_empty());
    assert_eq!(names(&view.tools), ["acme_refund", "acme_status"]);
    let listed = served
        .dispatcher
        .list_tools_for(
            &served
                .dispatcher
                .governance()
                .authenticate(Some("tok-acme"), None)
                .unwrap(),
            &ListToolsRequest::default(),
        )
        .unwrap();
    assert_eq!(view.tools, listed.tools, "exactly as ListTools shows them");
    assert!(view.tools[0].input_schema.contains("\"maximum\":100"));
    let view = next(&mut globex).await;
    assert!(view.synced);
    assert_eq!(names(&view.tools), ["globex_status"]);

    // Outside globex's view: acme hears it, globex does not.
    served
        .publish(|s| {
            s.put(tool("acme_new", "1.0.0"));
        })
        .await;
    let added = next(&mut acme).await;
    assert_eq!(names(&added.tools), ["acme_new"]);
    assert!(added.synced && added.removed.is_empty());
    // A new version of what acme sees, and a tool gone.
    served
        .publish(|s| {
            s.put(tool("acme_status", "1.1.0"))
                .remove("acme_refund", &semver::Version::new(1, 0, 0));
        })
        .await;
    let changed = next(&mut acme).await;
    assert_eq!(names(&changed.tools), ["acme_status"]);
    assert_eq!(changed.tools[0].version, "1.1.0");
    assert_eq!(changed.removed, ["acme_refund"]);
    // A snapshot that leaves acme's view as it was sends it nothing: the
    // next message acme gets is its own next change.
    served
        .publish(|s| {
            s.put(tool("globex_new", "1.0.0"));
        })
        .await;
    let heard = next(&mut globex).await;
    assert_eq!(
        names(&heard.tools),
        ["globex_new"],
        "acme's changes were not globex's"
    );
    served
        .publish(|s| {
            s.remove("acme_new", &semver::Version::new(1, 0, 0));
        })
        .await;
    let gone = next(&mut acme).await;
    assert!(
        gone.tools.is_empty(),
        "globex's tool never reached acme: {gone:?}"
    );
    assert_eq!(gone.removed, ["acme_new"]);
    assert!(gone.snapshot_version > heard.snapshot_version);
}

/// A policy reload that changes a caller's view sends it the difference
/// (the tools it now may see), and one that changes nothing for another
/// caller sends that caller nothing.
#[tokio::test]
async fn a_policy_reload_sends_the_difference() {
    let mut first = Snapshot::empty("e").next();
    first
        .put(tool("acme_status", "1.0.0"))
        .put(tool("shared_search", "1.0.0"))
        .put(tool("globex_status", "1.0.0"));
    let served = Served::start(first.finish()).await;
    let (mut acme, mut globex) = (
        served.watch("tok-acme").await,
        served.watch("tok-globex").await,
    );
    assert_eq!(names(&next(&mut acme).await.tools), ["acme_status"]);
    assert_eq!(names(&next(&mut globex).await.tools), ["globex_status"]);

    served.policy.replace(policy(true));
    let difference = next(&mut acme).await;
    assert_eq!(names(&difference.tools), ["shared_search"]);
    assert!(difference.removed.is_empty());

    served.policy.replace(policy(false));
    assert_eq!(next(&mut acme).await.removed, ["shared_search"]);
    // globex heard neither reload: its next message is its own change.
    served
        .publish(|s| {
            s.put(tool("globex_new", "1.0.0"));
        })
        .await;
    let heard = next(&mut globex).await;
    assert_eq!(names(&heard.tools), ["globex_new"]);
    assert!(heard.removed.is_empty());
}

/// A view of more than one message's worth comes in parts of at most
/// WATCH_CHUNK tools, only the last marked synced, together the whole view.
#[tokio::test]
async fn a_large_view_comes_in_bounded_parts() {
    let mut first = Snapshot::empty("e").next();
    let total = WATCH_CHUNK * 2 + 7;
    for i in 0..total {
        first.put(tool(&format!("acme_{i:05}"), "1.0.0"));
    }
    let served = Served::start(first.finish()).await;
    let mut acme = served.watch("tok-acme").await;
    let mut seen = Vec::new();
    loop {
        let part = next(&mut acme).await;
        assert!(part.tools.len() <= WATCH_CHUNK);
        seen.extend(part.tools.into_iter().map(|t| t.name));
        if part.synced {
            break;
        }
    }
    assert_eq!(seen.len(), total);
    assert!(seen.windows(2).all(|w| w[0] < w[1]), "sorted, none twice");
}

/// A caller that does not read while changes happen gets, when it reads,
/// the net change against what it last received: a tool added and removed
/// meanwhile never shows, and nothing queued up for it.
#[tokio::test]
async fn a_late_reader_gets_the_net_change() {
    let mut first = Snapshot::empty("e").next();
    first.put(tool("acme_status", "1.0.0"));
    let served = Served::start(first.finish()).await;
    let acme = served
        .dispatcher
        .governance()
        .authenticate(Some("tok-acme"), None)
        .unwrap();
    let mut watch = served
        .dispatcher
        .watch_tools(&acme, "", ToolFormat::Native)
        .unwrap();
    assert!(watch.next().await.unwrap().synced);
    served
        .publish(|s| {
            s.put(tool("acme_brief", "1.0.0"));
        })
        .await;
    served
        .publish(|s| {
            s.remove("acme_brief", &semver::Version::new(1, 0, 0));
        })
        .await;
    for i in 0..5 {
        served
            .publish(|s| {
                s.put(tool("acme_status", &format!("1.{i}.1")));
            })
            .await;
    }
    served
        .publish(|s| {
            s.put(tool("acme_late", "1.0.0"));
        })
        .await;
    let net = watch.next().await.unwrap();
    assert_eq!(names(&net.tools), ["acme_late", "acme_status"]);
    assert_eq!(net.tools[1].version, "1.4.1");
    assert!(net.removed.is_empty(), "{net:?}");
    let nothing_more = tokio::time::timeout(Duration::from_millis(300), watch.next()).await;
    assert!(nothing_more.is_err(), "nothing queued: {nothing_more:?}");
}

/// A stopping server ends its watches (they never end by themselves, and
/// its drain would wait for them): an open stream ends cleanly, and one
/// opened after ends at once.
#[tokio::test]
async fn ending_watches_ends_open_streams() {
    let mut first = Snapshot::empty("e").next();
    first.put(tool("acme_status", "1.0.0"));
    let served = Served::start(first.finish()).await;
    let mut acme = served.watch("tok-acme").await;
    assert!(next(&mut acme).await.synced);
    served.dispatcher.end_watches();
    let ended = tokio::time::timeout(patient(Duration::from_secs(5)), acme.message())
        .await
        .expect("the stream ends in time");
    assert!(matches!(ended, Ok(None)), "{ended:?}");
    let mut late = served.watch("tok-acme").await;
    assert!(matches!(late.message().await, Ok(None)));
}
