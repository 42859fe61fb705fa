//! `toolmesh up --bridge-grpc` and `--bridge-openapi` over real processes: the fixtures' gRPC echo (server reflection) and HTTP echo (its `/openapi.json`) as separate servers, each brought in by the bridge `up` starts, named in its banner and callable through the dispatcher.

use std::process::Command;
use std::time::Duration;
use toolmesh_system_tests::*;

/// Generous: on a loaded machine the bridges take a moment to read their
/// upstreams and register.
const READY: Duration = Duration::from_secs(30);

/// `toolmesh-fixture COMMAND --listen 127.0.0.1:0`, with its address.
fn upstream(command: &str) -> (Proc, String) {
    let mut spawn = Command::new(fixture_bin());
    spawn.args([command, "--listen", "127.0.0.1:0"]);
    let proc = Proc::spawn(command, spawn);
    let addr = proc.listen_addr();
    (proc, addr)
}

/// One `up` with a gRPC bridge and an OpenAPI bridge and no example: the
/// banner names each with its upstream, and both methods answer through
/// the dispatcher's Invoke.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn up_bridges_a_grpc_service_and_an_http_api() {
    let dir = temp_dir("up-bridge");
    let (_grpc, grpc_addr) = upstream("grpc-echo");
    let (_http, http_addr) = upstream("http-echo");
    let grpc = format!("echo-grpc={grpc_addr}");
    let spec = format!("http://{http_addr}/openapi.json");
    let openapi = format!("echo-http={spec},http://{http_addr}");
    let (_up, printed) = up(
        &dir,
        &[
            "--listen",
            "127.0.0.1:0",
            "--no-default-examples",
            "--bridge-grpc",
            &grpc,
            "--bridge-openapi",
            &openapi,
        ],
    );
    let line = banner_after(&printed, "bridge echo-grpc");
    assert!(
        line.starts_with("pid ") && line.contains(&format!("gRPC service: {grpc_addr}")),
        "{line}"
    );
    let line = banner_after(&printed, "bridge echo-http");
    assert!(
        line.starts_with("pid ")
            && line.contains(&format!("OpenAPI: {spec} at http://{http_addr}")),
        "{line}"
    );
    let addr = banner_after(&printed, "registry + dispatcher")
        .split_whitespace()
        .next()
        .unwrap()
        .to_owned();
    let mut client = dispatcher(&addr);
    until_listed(&mut client, &["Echo_Echo", "echo"], READY).await;
    let echoed = invoke(
        &mut client,
        "Echo_Echo",
        r#"{"message": "over gRPC"}"#,
        None,
    )
    .await;
    assert_eq!(result_json(&echoed)["message"], "over gRPC");
    let echoed = invoke(
        &mut client,
        "echo",
        r#"{"body": {"message": "over HTTP"}}"#,
        None,
    )
    .await;
    assert_eq!(result_json(&echoed)["message"], "over HTTP");
}

/// A value not in the flag's shape stops `up` before it starts anything,
/// with the shape to use (exit 64).
#[test]
fn up_refuses_a_bridge_flag_out_of_shape() {
    for (flag, value, shape) in [
        ("--bridge-grpc", "orders", "NAME=HOST:PORT"),
        ("--bridge-openapi", "pets=", "NAME=SPEC[,BASE_URL]"),
    ] {
        let refused = Command::new(toolmesh_bin())
            .args(["up", "--listen", "127.0.0.1:0", flag, value])
            .output()
            .expect("run up");
        let stderr = String::from_utf8_lossy(&refused.stderr);
        assert_eq!(refused.status.code(), Some(64), "{flag}: {stderr}");
        assert!(stderr.contains(shape), "{flag}: {stderr}");
    }
}
