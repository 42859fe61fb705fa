//! TLS end to end: every process of the mesh with certificates from one CA
//! and client certificates required (mTLS); a call that works, and clients
//! that are refused — plaintext, no certificate, a certificate from another CA.

use std::process::Command;
use std::time::Duration;
use toolmesh_system_tests::*;
use toolmesh_testkit::pki;

/// With mTLS everywhere, registration, listing and calls work; a plaintext
/// client, a client without a certificate and one with a certificate from
/// another CA are all refused.
#[tokio::test]
async fn mutual_tls_call_and_refusals() {
    let dir = temp_dir("tls");
    let (ca, cert, key) = pki(&dir, "mesh");
    let (_, rogue_cert, rogue_key) = pki(&dir, "rogue");

    let mut serve_cmd = Command::new(toolmesh_bin());
    serve_cmd.args(["serve", "--listen", "127.0.0.1:0"]);
    tls_env(&mut serve_cmd, &ca, Some((&cert, &key)), Some(&ca));
    let serve = Proc::spawn("serve", serve_cmd);
    let addr = serve.listen_addr();

    let mut exec_cmd = Command::new(fixture_bin());
    exec_cmd.args(["example", "acceptance", "--registry", &addr]);
    tls_env(&mut exec_cmd, &ca, Some((&cert, &key)), Some(&ca));
    let exec = Proc::spawn("example", exec_cmd);
    exec.listen_addr();

    let client = |configure: &dyn Fn(&mut Command), args: &[&str]| {
        let mut command = Command::new(toolmesh_bin());
        command.args(args).args(["--server", &addr]);
        configure(&mut command);
        command.output().unwrap()
    };
    let trusted = |c: &mut Command| tls_env(c, &ca, Some((&cert, &key)), None);
    let mut listed = false;
    for _ in 0..100 {
        let out = client(&trusted, &["tools"]);
        if out.status.success() && String::from_utf8_lossy(&out.stdout).contains("acc_echo") {
            listed = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        listed,
        "the executor registered over mTLS and its tools are listed"
    );
    let out = client(&trusted, &["call", "acc_echo", r#"{"message":"over tls"}"#]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("over tls"));

    let plaintext = client(&|_| {}, &["tools"]);
    assert!(!plaintext.status.success(), "a plaintext client is refused");
    let no_cert = client(&|c| tls_env(c, &ca, None, None), &["tools"]);
    assert!(
        !no_cert.status.success(),
        "a client without a certificate is refused"
    );
    let rogue = client(
        &|c| tls_env(c, &ca, Some((&rogue_cert, &rogue_key)), None),
        &["tools"],
    );
    assert!(
        !rogue.status.success(),
        "a certificate from another CA is refused"
    );
}

/// With mTLS, callers and executors can be identified by their certificate
/// alone: the policy's `tls_name` maps the name the certificate is issued
/// for to a principal (the executor registers with no token), whose
/// projection then applies; a bearer token, when sent, takes precedence.
#[tokio::test]
async fn client_certificate_is_an_identity() {
    certificate_identity("tls-identity", "localhost", None).await;
}

/// The same with a workload's SPIFFE ID: the certificate carries it as a
/// URI name, and the policy names only it (not the DNS name).
#[tokio::test]
async fn spiffe_id_is_an_identity() {
    let id = "spiffe://mesh.test/ns/agents/sa/cert-agent";
    certificate_identity("tls-spiffe", id, Some(id)).await;
}

/// A caller known by `tls_name` (its certificate also naming `uri`) sees
/// its projection with no token; a bad token is still refused.
async fn certificate_identity(dir: &str, tls_name: &str, uri: Option<&str>) {
    let dir = temp_dir(dir);
    let (ca, cert, key) = toolmesh_testkit::pki_with_uri(&dir, "mesh", uri);
    let policy = dir.join("policy.toml");
    std::fs::write(
        &policy,
        PolicyBuilder::new()
            .no_anonymous()
            .caller(
                Caller::tls_name(tls_name, "cert-agent")
                    .tenant("acme")
                    .roles(&["agent", "executor"]),
            )
            .grant("certificate agents: echo only", &["agent"], &["acc_echo"])
            .build_toml(),
    )
    .unwrap();
    let mut serve_cmd = Command::new(toolmesh_bin());
    serve_cmd.args([
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--policy",
        policy.to_str().unwrap(),
    ]);
    tls_env(&mut serve_cmd, &ca, Some((&cert, &key)), Some(&ca));
    let serve = Proc::spawn("serve", serve_cmd);
    let addr = serve.listen_addr();
    let mut exec_cmd = Command::new(fixture_bin());
    exec_cmd.args(["example", "acceptance", "--registry", &addr]);
    tls_env(&mut exec_cmd, &ca, Some((&cert, &key)), Some(&ca));
    let exec = Proc::spawn("example", exec_cmd);
    exec.listen_addr();

    let tools = |token: Option<&str>| {
        let mut command = Command::new(toolmesh_bin());
        command.args(["tools", "--json", "--server", &addr]);
        if let Some(token) = token {
            command.args(["--token", token]);
        }
        tls_env(&mut command, &ca, Some((&cert, &key)), None);
        command.output().unwrap()
    };
    let mut names = Vec::new();
    for _ in 0..100 {
        let out = tools(None);
        if out.status.success() {
            let value: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
            names = value["tools"]
                .as_array()
                .unwrap()
                .iter()
                .map(|t| t["name"].as_str().unwrap().to_owned())
                .collect();
            if !names.is_empty() {
                break;
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(
        names,
        ["acc_echo"],
        "the certificate's principal sees its projection"
    );
    let forged = tools(Some("tok-unknown"));
    assert!(
        !forged.status.success(),
        "a bad token is refused, not overridden by the certificate"
    );
}

/// `grpc.health.v1` statuses of `services` asked in plaintext at `addr`.
async fn plaintext_health(addr: &str, services: &[&str]) -> Vec<i32> {
    let channel = toolmesh_transport::channel(addr, &toolmesh_transport::Tls::none()).unwrap();
    let mut health = tonic_health::pb::health_client::HealthClient::new(channel);
    let mut statuses = Vec::new();
    for service in services {
        let request = tonic_health::pb::HealthCheckRequest {
            service: (*service).to_owned(),
        };
        let response = health.check(request).await;
        statuses.push(
            response
                .unwrap_or_else(|e| panic!("{service:?}: {e}"))
                .into_inner()
                .status,
        );
    }
    statuses
}

/// With mTLS on the main ports, `--health-listen` serves grpc.health.v1 in
/// plaintext (what a Kubernetes gRPC probe can ask) with the statuses the
/// main listener has, and nothing else: Invoke, Register and Execute are
/// UNIMPLEMENTED there; plaintext on the main port is still refused; on
/// SIGTERM the health port answers NOT_SERVING while the executor drains.
#[tokio::test]
async fn health_port_is_plaintext_and_health_only() {
    use toolmesh::pb::{
        ExecuteRequest, InvokeRequest, RegisterRequest, executor_client::ExecutorClient,
        registry_client::RegistryClient,
    };
    let serving = tonic_health::ServingStatus::Serving as i32;
    let dir = temp_dir("tls-health");
    let (ca, cert, key) = pki(&dir, "mesh");
    let mut serve_cmd = Command::new(toolmesh_bin());
    serve_cmd.args([
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--health-listen",
        "127.0.0.1:0",
    ]);
    tls_env(&mut serve_cmd, &ca, Some((&cert, &key)), Some(&ca));
    let serve = Proc::spawn("serve", serve_cmd);
    let addr = serve.listen_addr();
    let serve_health = health_addr(&serve);

    let mut exec_cmd = Command::new(fixture_bin());
    exec_cmd.args([
        "example",
        "acceptance",
        "--registry",
        &addr,
        "--grace-ms",
        "3000",
    ]);
    exec_cmd.env("TOOLMESH_HEALTH_LISTEN", "127.0.0.1:0");
    tls_env(&mut exec_cmd, &ca, Some((&cert, &key)), Some(&ca));
    let exec = Proc::spawn("example", exec_cmd);
    let exec_addr = exec.listen_addr();
    let exec_health = health_addr(&exec);

    let names = [
        "",
        toolmesh_transport::REGISTRY_HEALTH_SERVICE,
        toolmesh_transport::DISPATCHER_HEALTH_SERVICE,
    ];
    assert_eq!(plaintext_health(&serve_health, &names).await, [serving; 3]);
    let names = ["", toolmesh_transport::EXECUTOR_HEALTH_SERVICE];
    assert_eq!(plaintext_health(&exec_health, &names).await, [serving; 2]);

    let plain =
        |addr: &str| toolmesh_transport::channel(addr, &toolmesh_transport::Tls::none()).unwrap();
    let invoke = toolmesh::pb::dispatcher_client::DispatcherClient::new(plain(&serve_health))
        .invoke(InvokeRequest::default())
        .await
        .unwrap_err();
    assert_eq!(invoke.code(), tonic::Code::Unimplemented, "{invoke}");
    let register = RegistryClient::new(plain(&serve_health))
        .register(RegisterRequest::default())
        .await
        .unwrap_err();
    assert_eq!(register.code(), tonic::Code::Unimplemented, "{register}");
    let execute = ExecutorClient::new(plain(&exec_health))
        .execute(ExecuteRequest::default())
        .await
        .unwrap_err();
    assert_eq!(execute.code(), tonic::Code::Unimplemented, "{execute}");
    // The main ports serve health too, so a plaintext health check there
    // would succeed if plaintext got through: it must fail at the
    // connection (the TLS handshake), not with an answer from the server.
    for main in [&addr, &exec_addr] {
        let refused = tonic_health::pb::health_client::HealthClient::new(plain(main))
            .check(tonic_health::pb::HealthCheckRequest {
                service: String::new(),
            })
            .await
            .unwrap_err();
        // A status built from a transport error carries it as its source;
        // an answer from the server (even a refusal) has none.
        assert!(
            std::error::Error::source(&refused).is_some(),
            "plaintext on the mTLS port {main} must fail at the connection, not get an answer: {refused}"
        );
    }

    let mut health = tonic_health::pb::health_client::HealthClient::new(plain(&exec_health));
    let request = tonic_health::pb::HealthCheckRequest {
        service: String::new(),
    };
    let mut watch = health.watch(request).await.unwrap().into_inner();
    let first = watch.message().await.unwrap().map(|m| m.status);
    assert_eq!(first, Some(serving));
    exec.signal(libc::SIGTERM);
    let next = tokio::time::timeout(
        toolmesh_testkit::patient(Duration::from_secs(5)),
        watch.message(),
    )
    .await
    .expect("a status change on the health port")
    .unwrap()
    .map(|m| m.status);
    assert_eq!(next, Some(tonic_health::ServingStatus::NotServing as i32));
}
