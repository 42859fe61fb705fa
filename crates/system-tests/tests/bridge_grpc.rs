//! `toolmesh bridge grpc` against a gRPC service written with grpcio and
//! grpcio-reflection (tests/python/grpc_target, its packages pinned by
//! scripts/prepare/python-grpc-target.sh), every part a real process: its
//! unary methods are listed and called through the dispatcher's Invoke,
//! and through the MCP door with the official Python client,
//! their schemas follow the proto3 JSON mapping, failing statuses reach
//! callers as the mesh's error classes, and the service going away takes
//! the bridge NOT_SERVING and its tools out of the listing until it is back.

use serde_json::{Value, json};
use std::path::Path;
use std::process::Command;
use std::time::Duration;
use toolmesh::pb::{ErrorCode, ToolSpec};
use toolmesh_system_tests::*;

/// Generous: grpcio compiles its .proto at start on a loaded box.
const READY: Duration = Duration::from_secs(30);

/// The grpcio service on `port` (0: a free one), and its address.
fn grpc_target(port: u16) -> (Proc, String) {
    grpc_target_with(port, &[], &[])
}

/// [`grpc_target`] started with `flags` (`annex`, `tls`) and `env` added.
fn grpc_target_with(port: u16, flags: &[&str], env: &[(&str, &Path)]) -> (Proc, String) {
    let python = prepared("TOOLMESH_TEST_PYTHON_GRPC_TARGET", "python-grpc-target.sh");
    let mut command = Command::new(python);
    command
        .arg(python_script("grpc_target/server.py"))
        .arg(port.to_string())
        .args(flags)
        .envs(env.iter().copied());
    let proc = Proc::spawn("grpc-target", command);
    let addr = proc.listen_addr();
    (proc, addr)
}

fn schema(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {text}"))
}

/// The methods become tools with proto3 JSON schemas and idempotency from
/// their options; calls transcode both ways; INVALID_ARGUMENT is a tool
/// error the model can act on, UNAVAILABLE a retryable system error; the
/// service going away de-exposes the tools and NOT_SERVING follows, and
/// its return brings them back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpcio_service_with_reflection() {
    let (mut target, target_addr) = grpc_target(0);
    let port: u16 = target_addr.rsplit(':').next().unwrap().parse().unwrap();
    let (_serve, addr, mcp_url) = serve_with_mcp_door(&[]);
    let mut command = Command::new(toolmesh_bin());
    command.args([
        "bridge",
        "grpc",
        "--registry",
        &addr,
        "--target",
        &target_addr,
        "--rename",
        "demo.v1.Library.CountTopics=count_topics",
    ]);
    let bridge = Proc::spawn("bridge-grpc", command);
    let bridge_addr = bridge.listen_addr();
    let served = bridge.wait_for_line("serves ", READY);
    assert!(
        served.contains("grpc-library")
            && served.contains("Library_GetBook")
            && served.contains("Library_ListBooks")
            && !served.contains("Annex"),
        "{served}"
    );
    let mut client = dispatcher(&addr);
    let names = [
        "Library_GetBook",
        "Library_AddBook",
        "count_topics",
        "Library_Unavailable",
    ];
    until_listed(&mut client, &names, READY).await;

    let specs: Vec<ToolSpec> = client
        .list_tools(toolmesh::pb::ListToolsRequest {
            format: toolmesh::pb::ToolFormat::Native as i32,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .tools;
    let spec = |name: &str| specs.iter().find(|s| s.name == name).unwrap().clone();

    // NO_SIDE_EFFECTS: read-only and idempotent; IDEMPOTENT: idempotent;
    // neither: neither.
    let get = spec("Library_GetBook");
    assert!(get.read_only && get.idempotent, "{get:?}");
    assert!(
        get.description.contains("demo.v1.Library/GetBook"),
        "{}",
        get.description
    );
    let count = spec("count_topics");
    assert!(count.idempotent && !count.read_only, "{count:?}");
    let add = spec("Library_AddBook");
    assert!(!add.idempotent && !add.read_only, "{add:?}");

    // Schemas: int64 as a string, enums by name, Timestamp as date-time,
    // nested and repeated messages, oneof as alternatives, recursion cut.
    let book = &schema(&get.output_schema)["properties"];
    assert_eq!(book["pages"]["type"], "string");
    assert_eq!(
        book["genre"]["enum"],
        json!(["GENRE_UNSPECIFIED", "GENRE_FICTION", "GENRE_HISTORY"])
    );
    assert_eq!(book["published"]["format"], "date-time");
    assert_eq!(book["author"]["properties"]["aliases"]["type"], "array");
    assert_eq!(book["tags"]["items"]["type"], "string");
    let add_input = schema(&add.input_schema);
    assert!(
        add_input["properties"]["shelfNumber"].is_object(),
        "{add_input}"
    );
    let alternatives = &add_input["allOf"][0]["oneOf"];
    assert_eq!(
        alternatives[0],
        json!({"required": ["shelfNumber"]}),
        "{add_input}"
    );
    assert_eq!(alternatives.as_array().unwrap().len(), 3, "{add_input}");
    let count_input = schema(&count.input_schema).to_string();
    assert!(
        count_input.contains("nested deeper than this schema describes it"),
        "{count_input}"
    );

    // Calls, both ways through the JSON mapping.
    let got = invoke(&mut client, "Library_GetBook", r#"{"id": "b1"}"#, None).await;
    let got = result_json(&got);
    assert_eq!(got["title"], "Dune");
    assert_eq!(got["pages"], "9007199254740993");
    assert_eq!(got["genre"], "GENRE_FICTION");
    assert_eq!(got["published"], "1965-08-01T00:00:00Z");
    assert_eq!(got["author"]["aliases"], json!(["FH"]));
    let added = invoke(
        &mut client,
        "Library_AddBook",
        r#"{"book": {"title": "SPQR", "genre": "GENRE_HISTORY", "pages": "608", "published": "2015-10-20T00:00:00Z"}, "shelfName": "west"}"#,
        None,
    )
    .await;
    let added = result_json(&added);
    assert_eq!(added["placed"], "shelf west");
    assert_eq!(added["totalPages"], "9007199254741601");
    let both = invoke(
        &mut client,
        "Library_AddBook",
        r#"{"book": {}, "shelfName": "west", "shelfNumber": 3}"#,
        None,
    )
    .await;
    assert_eq!(
        error_code(&both),
        ErrorCode::InvalidArguments,
        "{}",
        message(&both)
    );
    let tree = r#"{"root": {"name": "a", "children": [{"name": "b", "children": [{"name": "c"}]}, {"name": "d"}]}}"#;
    let counted = invoke(&mut client, "count_topics", tree, None).await;
    assert_eq!(result_json(&counted)["topics"], 4);

    // INVALID_ARGUMENT: a tool error quoting the service.
    let missing = invoke(&mut client, "Library_GetBook", r#"{"id": "nope"}"#, None).await;
    assert_eq!(
        error_code(&missing),
        ErrorCode::ToolError,
        "{}",
        message(&missing)
    );
    assert!(
        message(&missing).contains("no book with id 'nope'"),
        "{}",
        message(&missing)
    );
    // UNAVAILABLE: a system error, retryable.
    let down = invoke(&mut client, "Library_Unavailable", "{}", None).await;
    assert_eq!(
        error_code(&down),
        ErrorCode::Unavailable,
        "{}",
        message(&down)
    );
    assert!(
        message(&down).contains("shelves are being moved"),
        "{}",
        message(&down)
    );

    // The same through the MCP door, with the official Python client.
    python_door(
        "grpc",
        &mcp_url,
        &[],
        &["listed", "call", "tool error", "system error"],
    );

    // The service goes away: NOT_SERVING, the tools leave the listing.
    assert_eq!(health_status(&bridge_addr, "").await, 1, "SERVING");
    target.kill9();
    eventually("the bridge's tools de-exposed", READY, || {
        let mut client = client.clone();
        async move {
            let listed = listed(&mut client).await?;
            (!listed.iter().any(|l| l == "Library_GetBook")).then_some(())
        }
    })
    .await;
    assert_eq!(health_status(&bridge_addr, "").await, 2, "NOT_SERVING");

    // Back on its port: the tools return.
    let (_target, _) = grpc_target(port);
    until_listed(&mut client, &["Library_GetBook"], READY).await;
    let again = invoke(&mut client, "Library_GetBook", r#"{"id": "b1"}"#, None).await;
    assert_eq!(result_json(&again)["title"], "Dune");
    assert_eq!(health_status(&bridge_addr, "").await, 1, "SERVING");
}

/// `toolmesh bridge grpc --registry ADDR --target TARGET ARGS…`, serving.
fn bridge(registry: &str, target: &str, args: &[&str]) -> Proc {
    let mut command = Command::new(toolmesh_bin());
    command
        .args(["bridge", "grpc", "--registry", registry, "--target", target])
        .args(args);
    let proc = Proc::spawn("bridge-grpc", command);
    proc.wait_for_line("serves ", READY);
    proc
}

/// Governance applies to bridged methods unchanged: an IDEMPOTENT method
/// failing with UNAVAILABLE is retried as the dispatcher's rules allow (at
/// most three attempts) and runs no more often, a method that is not
/// idempotent runs once, and the audit names each method's tool with its
/// attempts. A server-streaming method is a streamed tool: each message a
/// progress report and an output chunk as it comes, all of them in the
/// answer, and a status mid-stream the call's error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retries_follow_idempotency_and_streams_stream() {
    let (_target, target_addr) = grpc_target(0);
    let dir = temp_dir("bridge-grpc-governance");
    let audit = dir.join("audit.jsonl");
    let (_serve, addr) = serve(&["--audit", audit.to_str().unwrap()]);
    let _bridge = bridge(&addr, &target_addr, &[]);
    let mut client = dispatcher(&addr);
    let names = [
        "Library_Reserve",
        "Library_Charge",
        "Library_Runs",
        "Library_Countdown",
    ];
    until_listed(&mut client, &names, READY).await;
    let counter = client.clone();
    let runs = |key: &'static str| {
        let mut client = counter.clone();
        async move {
            let args = format!(r#"{{"key": "{key}"}}"#);
            let counted = invoke(&mut client, "Library_Runs", &args, None).await;
            result_json(&counted)["runs"].as_i64().unwrap_or(0)
        }
    };

    // IDEMPOTENT: the lost first run is tried again, once.
    let reserved = invoke(
        &mut client,
        "Library_Reserve",
        r#"{"key": "r1", "failures": 1}"#,
        None,
    )
    .await;
    assert_eq!(result_json(&reserved)["runs"], 2);
    assert_eq!(reserved.attempts, 2);
    assert_eq!(runs("r1").await, 2);
    // Failing every time: no more runs than the rules' three attempts.
    let lost = invoke(
        &mut client,
        "Library_Reserve",
        r#"{"key": "r2", "failures": 100}"#,
        None,
    )
    .await;
    assert_eq!(
        error_code(&lost),
        ErrorCode::Unavailable,
        "{}",
        message(&lost)
    );
    let tried = runs("r2").await;
    assert!((2..=3).contains(&tried), "{tried} runs");
    assert_eq!(i64::from(lost.attempts), tried);
    // Not idempotent: never run twice.
    let charged = invoke(
        &mut client,
        "Library_Charge",
        r#"{"key": "c1", "failures": 1}"#,
        None,
    )
    .await;
    assert_eq!(
        error_code(&charged),
        ErrorCode::Unavailable,
        "{}",
        message(&charged)
    );
    assert_eq!(charged.attempts, 1);
    assert_eq!(runs("c1").await, 1);
    // The audit names the method's tool and its attempts.
    let audited = eventually("the calls audited", READY, || {
        let audit = audit.clone();
        async move {
            let text = std::fs::read_to_string(&audit).ok()?;
            (text.contains("\"tool\":\"Library_Reserve\"")
                && text.contains("\"tool\":\"Library_Charge\""))
            .then_some(text)
        }
    })
    .await;
    let line = |tool: &str, attempts: u32| {
        audited.lines().any(|l| {
            l.contains(&format!("\"tool\":\"{tool}\""))
                && l.contains(&format!("\"attempts\":{attempts}"))
        })
    };
    assert!(line("Library_Reserve", 2), "{audited}");
    assert!(line("Library_Charge", 1), "{audited}");

    // Server streaming: each message as it comes, then all of them.
    let streamed = stream(&mut client, "Library_Countdown", r#"{"from": 3}"#, None).await;
    assert_eq!(
        streamed.chunks,
        [r#"{"left":3}"#, r#"{"left":2}"#, r#"{"left":1}"#]
    );
    assert_eq!(
        streamed.progress,
        ["1/0 message 1", "2/0 message 2", "3/0 message 3"]
    );
    let done = streamed.done.expect("a response");
    assert_eq!(
        result_json(&done),
        json!({"messages": [{"left": 3}, {"left": 2}, {"left": 1}]})
    );
    let stopped = stream(
        &mut client,
        "Library_Countdown",
        r#"{"from": 3, "failAt": 2}"#,
        None,
    )
    .await;
    assert_eq!(stopped.chunks, [r#"{"left":3}"#]);
    let done = stopped.done.expect("a response");
    assert_eq!(
        error_code(&done),
        ErrorCode::ToolError,
        "{}",
        message(&done)
    );
    assert!(
        message(&done).contains("the countdown stopped at 2"),
        "{}",
        message(&done)
    );
    let books = invoke(&mut client, "Library_ListBooks", "{}", None).await;
    assert_eq!(result_json(&books)["messages"][0]["title"], "Dune");
}

/// A target serving TLS that asks for a client certificate: reached with
/// `--target-ca`, `--target-cert` and `--target-key`, the bridge's own
/// credentials (`--bearer-file`, `--header-env`) sent as metadata with
/// every call; without the client certificate the bridge cannot start;
/// without `--target-ca` the system's roots decide.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_and_credentials_to_the_target() {
    let dir = temp_dir("bridge-grpc-tls");
    let (ca, cert, key) = toolmesh_testkit::pki(&dir, "target");
    let (client_ca, client_cert, client_key) = toolmesh_testkit::pki(&dir, "bridge");
    let (_target, target_addr) = grpc_target_with(
        0,
        &["tls"],
        &[
            ("TLS_CERT", &cert),
            ("TLS_KEY", &key),
            ("TLS_CLIENT_CA", &client_ca),
        ],
    );
    let bearer = dir.join("bearer");
    std::fs::write(&bearer, "tok-outbound\n").unwrap();
    let (_serve, addr) = serve(&[]);
    let target = format!("https://{target_addr}");
    let ca_arg = ca.to_str().unwrap();
    let refused = Command::new(toolmesh_bin())
        .args(["bridge", "grpc", "--registry", &addr, "--target", &target])
        .args(["--target-ca", ca_arg])
        .output()
        .unwrap();
    assert_eq!(refused.status.code(), Some(69), "{refused:?}");
    let mut command = Command::new(toolmesh_bin());
    command
        .args(["bridge", "grpc", "--registry", &addr, "--target", &target])
        .args(["--target-ca", ca_arg])
        .args(["--target-cert", client_cert.to_str().unwrap()])
        .args(["--target-key", client_key.to_str().unwrap()])
        .args(["--bearer-file", bearer.to_str().unwrap()])
        .args(["--header-env", "x-api-key=LIBRARY_KEY"])
        .env("LIBRARY_KEY", "key-42");
    let bridge = Proc::spawn("bridge-grpc-tls", command);
    bridge.wait_for_line("serves ", READY);
    let mut client = dispatcher(&addr);
    until_listed(&mut client, &["Library_GetBook", "Library_Whoami"], READY).await;
    let got = invoke(&mut client, "Library_GetBook", r#"{"id": "b1"}"#, None).await;
    assert_eq!(result_json(&got)["title"], "Dune");
    let seen = invoke(&mut client, "Library_Whoami", "{}", None).await;
    assert_eq!(
        result_json(&seen),
        json!({"authorization": "Bearer tok-outbound", "apiKey": "key-42"})
    );

    // Without --target-ca the system's roots are trusted: the platform's
    // store, which does not hold this test's CA (refused, exit 69), or the
    // file SSL_CERT_FILE names (trusted).
    let system_roots = |cert_file: Option<&Path>| {
        let mut command = Command::new(toolmesh_bin());
        command
            .args(["bridge", "grpc", "--registry", &addr, "--target", &target])
            .args(["--target-cert", client_cert.to_str().unwrap()])
            .args(["--target-key", client_key.to_str().unwrap()])
            .env_remove("SSL_CERT_FILE")
            .env_remove("SSL_CERT_DIR");
        if let Some(file) = cert_file {
            command.env("SSL_CERT_FILE", file);
        }
        command
    };
    let untrusted = system_roots(None).output().unwrap();
    assert_eq!(untrusted.status.code(), Some(69), "{untrusted:?}");
    let trusted = Proc::spawn("bridge-grpc-system-roots", system_roots(Some(&ca)));
    let served = trusted.wait_for_line("serves ", READY);
    assert!(served.contains("Library_GetBook"), "{served}");
}

/// The descriptors are read again on SIGHUP: the target is swapped for
/// one that also serves demo.v1.Annex on the same port (the new process
/// binds beside the old one, grpcio setting SO_REUSEPORT, and the old one
/// is killed after: the bridge never finds the target gone, so only the
/// signal can bring the Annex in), and SIGHUP brings its method in,
/// callable; a second SIGHUP with nothing changed leaves the tools as
/// they are.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_reads_the_descriptors_again() {
    let (mut first, target_addr) = grpc_target(0);
    let port: u16 = target_addr.rsplit(':').next().unwrap().parse().unwrap();
    let (_serve, addr) = serve(&[]);
    let bridge = bridge(&addr, &target_addr, &["--refresh-secs", "0"]);
    let bridge_addr = bridge.listen_addr();
    let mut client = dispatcher(&addr);
    until_listed(&mut client, &["Library_GetBook"], READY).await;

    let (_annexed, _) = grpc_target_with(port, &["annex"], &[]);
    first.kill9();
    // Past a probe or two: the channel reaches the new process.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let got = invoke(&mut client, "Library_GetBook", r#"{"id": "b1"}"#, None).await;
    assert_eq!(result_json(&got)["title"], "Dune");
    assert!(
        bridge
            .wait_line("went away", Duration::from_millis(100))
            .is_err(),
        "the bridge found the target gone: this test needs it never to"
    );
    let before = listed(&mut client).await.unwrap();
    assert!(!before.iter().any(|n| n == "Annex_Hello"), "{before:?}");

    bridge.signal(libc::SIGHUP);
    until_listed(&mut client, &["Annex_Hello", "Library_GetBook"], READY).await;
    bridge.wait_for_line("registered them again", READY);
    let hello = invoke(&mut client, "Annex_Hello", "{}", None).await;
    assert_eq!(result_json(&hello), json!({}));

    bridge.signal(libc::SIGHUP);
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(health_status(&bridge_addr, "").await, 1, "SERVING");
    let after = listed(&mut client).await.unwrap();
    assert!(after.iter().any(|n| n == "Annex_Hello"), "{after:?}");
    // Every line printed so far, read (none says this).
    let _ = bridge.wait_line("no line says this", Duration::from_millis(200));
    let registered = bridge
        .lines_read()
        .into_iter()
        .filter(|l| l.contains("registered them again"))
        .collect::<Vec<_>>();
    assert_eq!(
        registered.len(),
        1,
        "an unchanged set is not registered again: {registered:?}"
    );
}

/// A `--services` name the target does not serve, and `--methods` that
/// select nothing, are refused at start naming what it serves; a bad glob
/// or two methods given one name are refused speaking of methods and
/// `--methods`, never of `--tools`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn selections_that_match_nothing_are_refused() {
    let (_target, target_addr) = grpc_target(0);
    let (_serve, addr) = serve(&[]);
    let refused = |extra: &[&str]| {
        let mut args = vec![
            "bridge",
            "grpc",
            "--registry",
            &addr,
            "--target",
            &target_addr,
        ];
        args.extend_from_slice(extra);
        refused_usage(&args)
    };
    let error = refused(&["--methods", "Get[Book]"]);
    assert!(error.contains("--methods: \"Get[Book]\""), "{error}");
    let error = refused(&["--rename", "demo.v1.Library.AddBook=Library_GetBook"]);
    assert!(
        error.contains(
            "upstream methods \"demo.v1.Library.GetBook\" and \"demo.v1.Library.AddBook\""
        ) && !error.contains("--tools"),
        "{error}"
    );
    let error = refused(&["--services", "Shelves"]);
    assert!(error.contains("demo.v1.Library"), "{error}");
    let error = refused(&["--methods", "*.Delete*"]);
    assert!(
        error.contains("matching --methods *.Delete*") && error.contains("demo.v1.Library.GetBook"),
        "{error}"
    );
}

/// README's "Bring an existing gRPC service" runs as printed: the bridge
/// line beside a running mesh (the README's addresses and `$TOKEN` filled
/// in with this run's: a mesh whose policy knows an executor token) and
/// the call after it, each by `sh`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readme_bring_an_existing_grpc_service_runs_as_printed() {
    use toolmesh_system_tests::readme::{bridge_block_policy, bridge_block_runs};
    let dir = temp_dir("readme-bridge-grpc");
    let policy = dir.join("policy.toml");
    std::fs::write(&policy, bridge_block_policy()).unwrap();
    let (_target, target_addr) = grpc_target(0);
    let (_serve, addr) = serve(&["--policy", policy.to_str().unwrap()]);
    let called = bridge_block_runs(
        "Bring an existing gRPC service",
        dir.path(),
        &addr,
        &[("127.0.0.1:50051", &target_addr)],
        READY,
    )
    .await;
    assert!(called.contains("Dune"), "{called}");
}
