//! A node started in process, the way the CLI starts one: it listens,
//! reports its halves SERVING, takes registrations and calls, and drains.

use std::time::Duration;
use tonic_health::pb::{
    HealthCheckRequest, health_check_response::ServingStatus, health_client::HealthClient,
};
use toolmesh::pb::{RegisterRequest, ToolSpec, registry_client::RegistryClient};
use toolmesh_node::{NodeConfig, Role};
use toolmesh_transport::{Tls, channel};

fn config() -> NodeConfig {
    NodeConfig {
        listen: ([127, 0, 0, 1], 0).into(),
        ..NodeConfig::default()
    }
}

/// `serve` runs registry and dispatcher on one port, both SERVING; a
/// registration under the development policy is published to the
/// dispatcher; stopping reports NOT_SERVING and returns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_starts_serves_and_stops() {
    let running = toolmesh_node::start(
        Role::Serve {
            default_ttl: Duration::from_secs(10),
        },
        &config(),
    )
    .await
    .unwrap();
    let addr = running.addr.to_string();
    let mut health = HealthClient::new(channel(&addr, &Tls::none()).unwrap());
    for service in ["toolmesh.v1.Registry", "toolmesh.v1.Dispatcher"] {
        let status = health
            .check(HealthCheckRequest {
                service: service.into(),
            })
            .await
            .unwrap()
            .into_inner()
            .status;
        assert_eq!(status, ServingStatus::Serving as i32, "{service}");
    }
    let mut registry = RegistryClient::new(channel(&addr, &Tls::none()).unwrap());
    registry
        .register(RegisterRequest {
            executor_id: "e-1".into(),
            service: "svc".into(),
            endpoint: "127.0.0.1:9".into(),
            tools: vec![ToolSpec {
                name: "noop".into(),
                version: "1.0.0".into(),
                description: "Does nothing.".into(),
                input_schema: r#"{"type":"object"}"#.into(),
                ..ToolSpec::default()
            }],
            lease_ttl_ms: 0,
            execute_token: String::new(),
        })
        .await
        .unwrap();
    let dispatcher = running.dispatcher.clone().expect("serve runs a dispatcher");
    toolmesh_testkit::eventually(
        "the tool reaches the dispatcher",
        Duration::from_secs(5),
        || {
            let found = dispatcher.current_snapshot().name_count() == 1;
            async move { found.then_some(()) }
        },
    )
    .await;
    // Watch the server's overall health before stopping: the stop reports
    // NOT_SERVING before the listener closes.
    let mut watch = health
        .watch(HealthCheckRequest {
            service: String::new(),
        })
        .await
        .unwrap()
        .into_inner();
    let first = watch.message().await.unwrap().unwrap().status;
    assert_eq!(first, ServingStatus::Serving as i32);
    let stopping = tokio::spawn(running.stop(Duration::from_secs(1)));
    let next = watch.message().await.unwrap().unwrap().status;
    assert_eq!(
        next,
        ServingStatus::NotServing as i32,
        "stopping reports NOT_SERVING"
    );
    stopping.await.unwrap().unwrap();
}

/// A registry-only node refuses executors without a token whose principal
/// has the executor role (UNAUTHENTICATED, saying which role), through the
/// policy's own rules.
#[tokio::test]
async fn registry_refuses_executors_without_the_role() {
    let dir = toolmesh_testkit::TempDir::new("node-policy").unwrap();
    let policy = dir.join("policy.toml");
    std::fs::write(
        &policy,
        toolmesh_testkit::policy::PolicyBuilder::new()
            .caller(toolmesh_testkit::policy::Caller::token("tok-agent", "bot").roles(&["agent"]))
            .build_toml(),
    )
    .unwrap();
    let running = toolmesh_node::start(
        Role::Registry {
            default_ttl: Duration::from_secs(10),
        },
        &NodeConfig {
            policy: Some(policy),
            ..config()
        },
    )
    .await
    .unwrap();
    assert!(running.dispatcher.is_none());
    let mut registry =
        RegistryClient::new(channel(&running.addr.to_string(), &Tls::none()).unwrap());
    let refused = registry
        .register(toolmesh_testkit::with_token(
            RegisterRequest {
                executor_id: "e-1".into(),
                service: "svc".into(),
                endpoint: "127.0.0.1:9".into(),
                ..RegisterRequest::default()
            },
            Some("tok-agent"),
        ))
        .await
        .unwrap_err();
    assert_eq!(refused.code(), tonic::Code::Unauthenticated);
    assert!(
        refused.message().contains("role \"executor\""),
        "{}",
        refused.message()
    );
    running.stop(Duration::from_secs(1)).await.unwrap();
}

/// Names of this process' threads.
fn thread_names() -> Vec<String> {
    std::fs::read_dir("/proc/self/task")
        .map(|tasks| {
            tasks
                .flatten()
                .filter_map(|t| std::fs::read_to_string(t.path().join("comm")).ok())
                .map(|name| name.trim().to_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// With serve threads, a node answers on every connection (handed to the
/// threads in turn) and, once stopped, leaves no serve thread behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_threads_answer_and_stop() {
    let lanes = |names: &[String]| {
        names
            .iter()
            .filter(|n| n.starts_with("serve-lane-"))
            .count()
    };
    assert_eq!(
        lanes(&thread_names()),
        0,
        "no serve thread before the node starts"
    );
    let running = toolmesh_node::start(
        Role::Serve {
            default_ttl: Duration::from_secs(10),
        },
        &NodeConfig {
            serve_threads: 2,
            ..config()
        },
    )
    .await
    .unwrap();
    assert_eq!(lanes(&thread_names()), 2);
    let addr = running.addr.to_string();
    for _ in 0..8 {
        // A channel per check: a connection of its own.
        let mut health = HealthClient::new(channel(&addr, &Tls::none()).unwrap());
        let status = health
            .check(HealthCheckRequest {
                service: "toolmesh.v1.Dispatcher".into(),
            })
            .await
            .unwrap()
            .into_inner()
            .status;
        assert_eq!(status, ServingStatus::Serving as i32);
    }
    running.stop(Duration::from_secs(2)).await.unwrap();
    toolmesh_testkit::eventually("the serve threads end", Duration::from_secs(5), || {
        std::future::ready((lanes(&thread_names()) == 0).then_some(()))
    })
    .await;
}
