//! The SDK end to end on real servers bound to 127.0.0.1:0: schemas, argument
//! checks, deadlines, cancellation, panics, failures, health and drain.

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};
use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};
use tokio::sync::oneshot;
use tonic::Request;
use tonic_health::pb::{
    HealthCheckRequest, health_check_response::ServingStatus, health_client::HealthClient,
};
use toolmesh::ToolResultExt;
use toolmesh::{
    ToolErrorExt,
    pb::{
        ErrorCode, ExecuteRequest, ToolResult, execute_event::Event,
        executor_client::ExecutorClient,
    },
};
use toolmesh_executor::{
    CallCx, Executor, ExecutorError, RiskLevel, ServeOptions, Tool, ToolFailure, ToolInfo,
    ToolOutput, schema_value,
};
use toolmesh_testkit::until;

// ---- tools used by the tests ----

/// How hard to count.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
enum Mode {
    Fast,
    Slow,
}

/// Arguments of `count`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct CountArgs {
    /// How many.
    #[schemars(range(min = 1, max = 5))]
    n: u32,
    /// How.
    mode: Mode,
    /// Optional label.
    #[serde(default)]
    label: Option<String>,
    /// Declared a string to the schema but read as a number, so the schema
    /// accepts what serde refuses.
    #[serde(default)]
    #[schemars(with = "Option<String>")]
    sneaky: Option<u32>,
}

#[derive(Default)]
struct Count {
    calls: Arc<AtomicUsize>,
}

impl Tool for Count {
    type Args = CountArgs;
    fn info(&self) -> ToolInfo {
        ToolInfo::new("count", "1.2.0", "Counts.")
            .risk(RiskLevel::Low)
            .idempotent(true)
            .owner("tests")
            .tags(["a", "b"])
    }
    async fn call(&self, args: CountArgs, cx: CallCx) -> Result<ToolOutput, ToolFailure> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let _unused = (args.label, args.sneaky);
        Ok(
            ToolOutput::json(&json!({"n": args.n, "mode": format!("{:?}", args.mode)}))
                .with_metadata("call_id", cx.call_id()),
        )
    }
}

/// Arguments of `sleep`.
#[derive(Deserialize, JsonSchema)]
struct SleepArgs {
    ms: u64,
}

#[derive(Default, Clone)]
struct Sleep {
    saw_cancel: Arc<AtomicBool>,
    /// Calls that have started.
    started: Arc<AtomicUsize>,
    finished: Arc<AtomicUsize>,
    timeout: Option<Duration>,
}

impl Tool for Sleep {
    type Args = SleepArgs;
    fn info(&self) -> ToolInfo {
        let info = ToolInfo::new("sleep", "1.0.0", "Sleeps.").idempotent(true);
        match self.timeout {
            Some(t) => info.timeout(t),
            None => info,
        }
    }
    async fn call(&self, args: SleepArgs, cx: CallCx) -> Result<ToolOutput, ToolFailure> {
        self.started.fetch_add(1, Ordering::SeqCst);
        tokio::select! {
            () = tokio::time::sleep(Duration::from_millis(args.ms)) => {
                self.finished.fetch_add(1, Ordering::SeqCst);
                Ok(ToolOutput::text(format!("slept {} ms", args.ms)))
            }
            () = cx.cancelled() => {
                self.saw_cancel.store(true, Ordering::SeqCst);
                Err(ToolFailure::new("cancelled"))
            }
        }
    }
}

/// Arguments of `panic`.
#[derive(Deserialize, JsonSchema)]
struct Empty {}

struct Panic;

impl Tool for Panic {
    type Args = Empty;
    fn info(&self) -> ToolInfo {
        ToolInfo::new("panic", "1.0.0", "Panics.")
    }
    async fn call(&self, _: Empty, _: CallCx) -> Result<ToolOutput, ToolFailure> {
        panic!("boom on purpose")
    }
}

/// Panics after waiting once, so in the task its call moved to (a tool
/// that answers at once runs in the request's task).
struct PanicLater;

impl Tool for PanicLater {
    type Args = Empty;
    fn info(&self) -> ToolInfo {
        ToolInfo::new("panic_later", "1.0.0", "Waits, then panics.")
    }
    async fn call(&self, _: Empty, _: CallCx) -> Result<ToolOutput, ToolFailure> {
        tokio::time::sleep(Duration::from_millis(1)).await;
        panic!("boom on purpose")
    }
}

/// Arguments of `fail`.
#[derive(Deserialize, JsonSchema)]
struct FailArgs {
    retryable: bool,
}

struct Fail;

impl Tool for Fail {
    type Args = FailArgs;
    fn info(&self) -> ToolInfo {
        ToolInfo::new("fail", "1.0.0", "Fails.")
    }
    async fn call(&self, args: FailArgs, _: CallCx) -> Result<ToolOutput, ToolFailure> {
        if args.retryable {
            Err(ToolFailure::new("busy, try later").retry_after(Duration::from_millis(1500)))
        } else {
            Err(ToolFailure::new("user u_9 not found"))
        }
    }
}

/// Arguments of `steps`.
#[derive(Deserialize, JsonSchema)]
struct StepsArgs {
    n: u32,
    step_ms: u64,
}

/// Reports each of `n` steps (progress, then a chunk), `step_ms` apart.
#[derive(Default, Clone)]
struct Steps {
    saw_cancel: Arc<AtomicBool>,
    streamed: Arc<AtomicBool>,
}

impl Tool for Steps {
    type Args = StepsArgs;
    fn info(&self) -> ToolInfo {
        ToolInfo::new("steps", "1.0.0", "Takes steps, reporting each.").streams_progress(true)
    }
    async fn call(&self, args: StepsArgs, cx: CallCx) -> Result<ToolOutput, ToolFailure> {
        let progress = cx.progress().clone();
        self.streamed
            .store(progress.is_streamed(), Ordering::SeqCst);
        for i in 1..=args.n {
            tokio::select! {
                () = tokio::time::sleep(Duration::from_millis(args.step_ms)) => {}
                () = cx.cancelled() => {
                    self.saw_cancel.store(true, Ordering::SeqCst);
                    return Err(ToolFailure::new("cancelled"));
                }
            }
            progress
                .report(f64::from(i), Some(f64::from(args.n)), format!("step {i}"))
                .await;
            progress.partial(format!("<{i}>")).await;
        }
        Ok(ToolOutput::text(format!("{} steps", args.n)))
    }
}

// ---- helpers ----

struct Running {
    addr: String,
    stop: Option<oneshot::Sender<()>>,
    done: tokio::task::JoinHandle<Result<(), ExecutorError>>,
}

impl Running {
    async fn client(&self) -> ExecutorClient<tonic::transport::Channel> {
        ExecutorClient::connect(format!("http://{}", self.addr))
            .await
            .unwrap()
    }
    async fn health(&self) -> HealthClient<tonic::transport::Channel> {
        let channel = tonic::transport::Endpoint::from_shared(format!("http://{}", self.addr))
            .unwrap()
            .connect()
            .await
            .unwrap();
        HealthClient::new(channel)
    }
    fn shutdown(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

async fn start(executor: Executor, grace: Duration) -> Running {
    let opts = ServeOptions {
        grace,
        ..ServeOptions::default()
    };
    let bound = executor.bind(opts).await.unwrap();
    let addr = bound.local_addr().to_string();
    let (tx, rx) = oneshot::channel::<()>();
    let done = tokio::spawn(bound.run(async {
        let _ = rx.await;
    }));
    Running {
        addr,
        stop: Some(tx),
        done,
    }
}

fn request(tool: &str, args: Value) -> ExecuteRequest {
    ExecuteRequest {
        call_id: "c-1".into(),
        tool: tool.into(),
        version: String::new(),
        arguments: args.to_string(),
        attempt: 1,
        context: None,
    }
}

async fn execute(
    client: &mut ExecutorClient<tonic::transport::Channel>,
    req: ExecuteRequest,
) -> ToolResult {
    client
        .execute(req)
        .await
        .unwrap()
        .into_inner()
        .result
        .unwrap()
}

fn code(result: &ToolResult) -> ErrorCode {
    result.error_code()
}

fn message(result: &ToolResult) -> &str {
    result.error_message()
}

// ---- tests ----

/// The generated input schema lists required fields, the enum's values and
/// `additionalProperties: false`, and is what the spec carries.
#[tokio::test]
async fn schema_has_required_enum_and_no_extra_properties() {
    let schema = schema_value::<CountArgs>();
    assert_eq!(schema["additionalProperties"], json!(false), "{schema}");
    let mut required: Vec<&str> = schema["required"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    required.sort_unstable();
    assert_eq!(required, ["mode", "n"], "{schema}");
    let mode = &schema["properties"]["mode"];
    let mode = match mode.get("$ref").and_then(Value::as_str) {
        Some(pointer) => schema.pointer(pointer.trim_start_matches('#')).unwrap(),
        None => mode,
    };
    assert_eq!(mode["enum"], json!(["fast", "slow"]), "{schema}");
    assert_eq!(schema["properties"]["n"]["minimum"], json!(1), "{schema}");
    assert_eq!(schema["properties"]["n"]["maximum"], json!(5), "{schema}");
    assert_eq!(schema["properties"]["n"]["description"], json!("How many."));

    let specs = Executor::new("t").tool(Count::default()).specs();
    assert_eq!(specs.len(), 1);
    let spec = &specs[0];
    let in_spec: Value = serde_json::from_str(&spec.input_schema).unwrap();
    assert_eq!(in_spec, schema);
    assert_eq!(
        (spec.name.as_str(), spec.version.as_str(), spec.idempotent),
        ("count", "1.2.0", true)
    );
    assert_eq!(spec.risk, RiskLevel::Low as i32);
    assert_eq!(spec.tags, ["a", "b"]);
    assert_eq!(spec.owner, "tests");
}

/// Arguments that are not JSON, miss a field, break the schema or that serde
/// refuses come back as INVALID_ARGUMENTS naming the problem; the tool never
/// runs for them.
#[tokio::test]
async fn invalid_arguments_never_reach_the_tool() {
    let tool = Count::default();
    let calls = Arc::clone(&tool.calls);
    let executor = Executor::new("t").tool(tool);
    let cases: &[(&str, &str)] = &[
        ("{", "not valid JSON"),
        (
            r#"{"n": 1, "mode": "fast", "n": 9}"#,
            r#"repeat the key "n""#,
        ),
        (r#"{"n": 1}"#, "mode"),
        (r#"{"n": 9, "mode": "fast"}"#, "at /n"),
        (r#"{"n": 1, "mode": "sideways"}"#, "at /mode"),
        (r#"{"n": 1, "mode": "fast", "extra": true}"#, "extra"),
        (r#"{"n": "1", "mode": "fast"}"#, "at /n"),
        (r#"[1]"#, "at /"),
        (
            r#"{"n": 1, "mode": "fast", "sneaky": "x"}"#,
            "could not be read",
        ),
    ];
    for (args, expect) in cases {
        let mut req = request("count", json!(null));
        req.arguments = (*args).to_owned();
        let result = executor.execute(req).await;
        assert_eq!(
            code(&result),
            ErrorCode::InvalidArguments,
            "{args}: {result:?}"
        );
        assert!(
            message(&result).contains(expect),
            "{args}: {}",
            message(&result)
        );
        assert!(!result.error.as_ref().unwrap().retryable);
    }
    assert_eq!(calls.load(Ordering::SeqCst), 0);
    let ok = executor
        .call("count", json!({"n": 2, "mode": "slow"}))
        .await;
    assert_eq!(code(&ok), ErrorCode::Unspecified, "{ok:?}");
    let data: Value = serde_json::from_str(&ok.data).unwrap();
    assert_eq!(data, json!({"n": 2, "mode": "Slow"}));
    assert_eq!(ok.output, ok.data);
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}

/// A `grpc-timeout` shorter than the tool's timeout bounds the call: the
/// caller gets DEADLINE_EXCEEDED in time, and the tool sees cancellation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_timeout_gives_deadline_exceeded_and_cancels() {
    let tool = Sleep::default();
    let saw_cancel = Arc::clone(&tool.saw_cancel);
    let mut running = start(Executor::new("t").tool(tool), Duration::from_secs(1)).await;
    let mut client = running.client().await;
    // The answer leaves 20 ms before the caller's own timer fires; a machine
    // loaded enough to miss that window shows tonic's bare status instead,
    // so the call is tried a few times and one on-time answer must come.
    let mut misses = Vec::new();
    for _ in 0..3 {
        let mut req = Request::new(request("sleep", json!({"ms": 5000})));
        req.set_timeout(Duration::from_millis(300));
        let started = Instant::now();
        let answer = client.execute(req).await;
        let took = started.elapsed();
        let result = match answer {
            Ok(response) => response.into_inner().result.unwrap(),
            Err(status) => {
                // Only the caller's own timer may win the race.
                assert_eq!(status.code(), tonic::Code::Cancelled, "{status:?}");
                misses.push(format!("{status:?} after {took:?}"));
                continue;
            }
        };
        assert_eq!(code(&result), ErrorCode::DeadlineExceeded, "{result:?}");
        assert!(
            message(&result).contains("caller's deadline"),
            "{}",
            message(&result)
        );
        // Answered as a ToolResult, not tonic's bare "Timeout expired"
        // status, and not before the caller's deadline was near.
        assert!(
            took >= Duration::from_millis(250),
            "answered after {took:?}"
        );
        misses.clear();
        break;
    }
    assert!(
        misses.is_empty(),
        "no answer came before the caller's timer: {misses:?}"
    );
    until("tool saw cancellation", Duration::from_secs(3), || {
        saw_cancel.load(Ordering::SeqCst)
    })
    .await;
    running.shutdown();
    running.done.await.unwrap().unwrap();
}

/// The tool's own timeout bounds a call that has no caller deadline.
#[tokio::test]
async fn tool_timeout_bounds_the_call() {
    let tool = Sleep {
        timeout: Some(Duration::from_millis(100)),
        ..Sleep::default()
    };
    let saw_cancel = Arc::clone(&tool.saw_cancel);
    let executor = Executor::new("t").tool(tool);
    let started = Instant::now();
    let result = executor.call("sleep", json!({"ms": 5000})).await;
    assert_eq!(code(&result), ErrorCode::DeadlineExceeded, "{result:?}");
    assert!(
        message(&result).contains("timeout of 100 ms"),
        "{}",
        message(&result)
    );
    // Cut short: well before the 5 s the tool would sleep.
    assert!(started.elapsed() < Duration::from_secs(4));
    until("tool saw cancellation", Duration::from_secs(3), || {
        saw_cancel.load(Ordering::SeqCst)
    })
    .await;
    let quick = executor.call("sleep", json!({"ms": 1})).await;
    assert_eq!(quick.output, "slept 1 ms");
}

/// A caller that goes away (client future dropped, HTTP/2 stream reset)
/// cancels the call on the executor.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn caller_going_away_cancels_the_call() {
    let tool = Sleep::default();
    let (saw_cancel, finished) = (Arc::clone(&tool.saw_cancel), Arc::clone(&tool.finished));
    let mut running = start(Executor::new("t").tool(tool), Duration::from_secs(1)).await;
    let mut client = running.client().await;
    let call = client.execute(request("sleep", json!({"ms": 2000})));
    assert!(
        tokio::time::timeout(Duration::from_millis(150), call)
            .await
            .is_err()
    );
    until("tool saw cancellation", Duration::from_secs(3), || {
        saw_cancel.load(Ordering::SeqCst)
    })
    .await;
    assert_eq!(finished.load(Ordering::SeqCst), 0);
    running.shutdown();
    running.done.await.unwrap().unwrap();
}

/// A panicking tool answers EXECUTOR_FAILED naming the tool and the panic,
/// and the executor keeps serving the next call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn panic_becomes_executor_failed_and_serving_continues() {
    let mut running = start(
        Executor::new("t")
            .tool(Panic)
            .tool(PanicLater)
            .tool(Count::default()),
        Duration::from_secs(1),
    )
    .await;
    let mut client = running.client().await;
    for tool in ["panic", "panic_later", "panic", "panic_later"] {
        let result = execute(&mut client, request(tool, json!({}))).await;
        assert_eq!(code(&result), ErrorCode::ExecutorFailed, "{result:?}");
        let text = message(&result);
        assert!(text.contains(&format!("tool {tool} panicked")), "{text}");
        assert!(text.contains("boom on purpose"), "{text}");
        assert!(text.contains("keeps serving"), "{text}");
    }
    let ok = execute(
        &mut client,
        request("count", json!({"n": 1, "mode": "fast"})),
    )
    .await;
    assert_eq!(code(&ok), ErrorCode::Unspecified, "{ok:?}");
    assert_eq!(ok.metadata.get("call_id").map(String::as_str), Some("c-1"));
    running.shutdown();
    running.done.await.unwrap().unwrap();
}

/// A ToolFailure is a TOOL_ERROR carrying the tool's message and its
/// retryable flag and retry-after hint.
#[tokio::test]
async fn tool_failure_is_tool_error_with_retryable_flag() {
    let executor = Executor::new("t").tool(Fail);
    let permanent = executor.call("fail", json!({"retryable": false})).await;
    let error = permanent.error.unwrap();
    assert_eq!(error.error_code(), ErrorCode::ToolError);
    assert_eq!(error.message, "user u_9 not found");
    assert!(!error.retryable);
    assert_eq!(error.retry_after_ms, 0);
    let transient = executor.call("fail", json!({"retryable": true})).await;
    let error = transient.error.unwrap();
    assert_eq!(error.error_code(), ErrorCode::ToolError);
    assert!(error.retryable);
    assert_eq!(error.retry_after_ms, 1500);
}

/// An unknown tool, or a version other than the served one, is NOT_FOUND;
/// the message suggests close names or names the served version.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_tool_and_wrong_version_are_not_found() {
    let mut running = start(
        Executor::new("t").tool(Count::default()),
        Duration::from_secs(1),
    )
    .await;
    let mut client = running.client().await;
    let result = execute(&mut client, request("cout", json!({}))).await;
    assert_eq!(code(&result), ErrorCode::NotFound, "{result:?}");
    assert!(
        message(&result).contains("did you mean \"count\""),
        "{}",
        message(&result)
    );
    let mut req = request("count", json!({"n": 1, "mode": "fast"}));
    req.version = "2.0.0".into();
    let result = execute(&mut client, req).await;
    assert_eq!(code(&result), ErrorCode::NotFound, "{result:?}");
    assert!(
        message(&result).contains("serves version 1.2.0"),
        "{}",
        message(&result)
    );
    let mut req = request("count", json!({"n": 1, "mode": "fast"}));
    req.version = "1.2.0".into();
    assert_eq!(
        code(&execute(&mut client, req).await),
        ErrorCode::Unspecified
    );
    running.shutdown();
    running.done.await.unwrap().unwrap();
}

/// Health answers SERVING for "" and toolmesh.v1.Executor while up, and a
/// watcher sees NOT_SERVING as soon as shutdown begins.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_serving_then_not_serving_on_shutdown() {
    let mut running = start(
        Executor::new("t").tool(Count::default()),
        Duration::from_secs(2),
    )
    .await;
    let mut health = running.health().await;
    for service in ["", "toolmesh.v1.Executor"] {
        let status = health
            .check(HealthCheckRequest {
                service: service.into(),
            })
            .await
            .unwrap()
            .into_inner()
            .status;
        assert_eq!(status, ServingStatus::Serving as i32, "{service:?}");
    }
    let mut watch = health
        .watch(HealthCheckRequest {
            service: "toolmesh.v1.Executor".into(),
        })
        .await
        .unwrap()
        .into_inner();
    let first = watch.message().await.unwrap().unwrap();
    assert_eq!(first.status, ServingStatus::Serving as i32);
    running.shutdown();
    let next = tokio::time::timeout(
        toolmesh_testkit::patient(Duration::from_secs(2)),
        watch.message(),
    )
    .await
    .expect("a status change")
    .unwrap()
    .unwrap();
    assert_eq!(next.status, ServingStatus::NotServing as i32);
    drop(watch);
    tokio::time::timeout(
        toolmesh_testkit::patient(Duration::from_secs(3)),
        running.done,
    )
    .await
    .unwrap()
    .unwrap()
    .unwrap();
}

/// Waits until a `Sleep` call is running.
async fn until_started(started: &AtomicUsize) {
    until("the call started", Duration::from_secs(5), || {
        started.load(Ordering::SeqCst) > 0
    })
    .await;
}

/// Shutdown lets an in-flight call finish and return its result; only then
/// does `run` return, and new connections are refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drain_lets_in_flight_call_finish() {
    let tool = Sleep::default();
    let finished = Arc::clone(&tool.finished);
    let began = Arc::clone(&tool.started);
    let mut running = start(Executor::new("t").tool(tool), Duration::from_secs(5)).await;
    let mut client = running.client().await;
    let call =
        tokio::spawn(
            async move { execute(&mut client, request("sleep", json!({"ms": 400}))).await },
        );
    until_started(&began).await;
    let started = Instant::now();
    running.shutdown();
    let result = call.await.unwrap();
    assert_eq!(result.output, "slept 400 ms", "{result:?}");
    tokio::time::timeout(
        toolmesh_testkit::patient(Duration::from_secs(3)),
        running.done,
    )
    .await
    .unwrap()
    .unwrap()
    .unwrap();
    assert!(started.elapsed() >= Duration::from_millis(250));
    assert_eq!(finished.load(Ordering::SeqCst), 1);
    assert!(
        ExecutorClient::connect(format!("http://{}", running.addr))
            .await
            .is_err()
    );
}

/// When the grace period runs out, in-flight calls are cancelled and `run`
/// returns anyway.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grace_bounds_the_drain() {
    let tool = Sleep::default();
    let saw_cancel = Arc::clone(&tool.saw_cancel);
    let began = Arc::clone(&tool.started);
    let mut running = start(Executor::new("t").tool(tool), Duration::from_millis(200)).await;
    let mut client = running.client().await;
    let _call =
        tokio::spawn(async move { client.execute(request("sleep", json!({"ms": 5000}))).await });
    until_started(&began).await;
    let started = Instant::now();
    running.shutdown();
    tokio::time::timeout(
        toolmesh_testkit::patient(Duration::from_secs(3)),
        running.done,
    )
    .await
    .unwrap()
    .unwrap()
    .unwrap();
    // Bounded by the grace, well before the 5 s the tool would sleep.
    assert!(started.elapsed() < Duration::from_secs(4));
    until("tool saw cancellation", Duration::from_secs(3), || {
        saw_cancel.load(Ordering::SeqCst)
    })
    .await;
}

/// `bind` fails fast on an invalid spec or a duplicate tool, naming the tool
/// and the reason.
#[tokio::test]
async fn bind_rejects_bad_specs() {
    struct BadVersion;
    impl Tool for BadVersion {
        type Args = Empty;
        fn info(&self) -> ToolInfo {
            ToolInfo::new("bad_version", "1.0", "Has a bad version.")
        }
        async fn call(&self, _: Empty, _: CallCx) -> Result<ToolOutput, ToolFailure> {
            Ok(ToolOutput::text("never"))
        }
    }
    let err = Executor::new("t")
        .tool(Count::default())
        .tool(BadVersion)
        .bind(ServeOptions::default())
        .await
        .unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, ExecutorError::InvalidTool { .. }), "{text}");
    assert!(
        text.contains("bad_version") && text.contains("not a semantic version"),
        "{text}"
    );

    let err = Executor::new("t")
        .tool(Count::default())
        .tool(Count::default())
        .bind(ServeOptions::default())
        .await
        .unwrap_err();
    assert!(
        matches!(err, ExecutorError::DuplicateTool(ref n) if n == "count"),
        "{err}"
    );
    let err = Executor::new("t")
        .bind(ServeOptions::default())
        .await
        .unwrap_err();
    assert!(matches!(err, ExecutorError::NoTools(_)), "{err}");
    let err = Executor::new("t")
        .tool(Count::default())
        .bind(ServeOptions::new("not an address"))
        .await
        .unwrap_err();
    assert!(matches!(err, ExecutorError::BadRegistry(_)), "{err}");
}

/// A `ToolOutput` whose data cannot be encoded is EXECUTOR_FAILED, not a
/// half result.
#[tokio::test]
async fn unencodable_output_is_executor_failed() {
    struct BadJson;
    impl Tool for BadJson {
        type Args = Empty;
        fn info(&self) -> ToolInfo {
            ToolInfo::new("bad_json", "1.0.0", "Returns a map with non-string keys.")
        }
        async fn call(&self, _: Empty, _: CallCx) -> Result<ToolOutput, ToolFailure> {
            let map: std::collections::HashMap<(u8, u8), u8> = [((1, 2), 3)].into();
            Ok(ToolOutput::json(&map))
        }
    }
    let result = Executor::new("t")
        .tool(BadJson)
        .call("bad_json", json!({}))
        .await;
    assert_eq!(code(&result), ErrorCode::ExecutorFailed, "{result:?}");
    assert!(message(&result).contains("could not be encoded"));
}

/// Every event of an ExecuteStream, in order, as "progress N/T message",
/// "chunk TEXT" or "result OUTPUT".
async fn execute_stream(
    client: &mut ExecutorClient<tonic::transport::Channel>,
    req: impl tonic::IntoRequest<ExecuteRequest>,
) -> Vec<String> {
    let mut events = client.execute_stream(req).await.unwrap().into_inner();
    let mut seen = Vec::new();
    while let Some(event) = events.message().await.unwrap() {
        seen.push(match event.event.unwrap() {
            Event::Progress(p) => format!("progress {}/{} {}", p.progress, p.total, p.message),
            Event::Chunk(c) => format!("chunk {}", c.text),
            Event::Result(r) if code(&r) != ErrorCode::Unspecified => {
                format!("error {:?}", code(&r))
            }
            Event::Result(r) => format!("result {}", r.output),
        });
    }
    seen
}

/// A tool declared `streams_progress` says so in its spec; ExecuteStream
/// delivers its reports and chunks in order, then the result, last; Execute
/// (and the in-process call) answers the same result with the reports
/// dropped; a tool that does not stream answers its result alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn execute_stream_reports_progress_then_the_result() {
    let tool = Steps::default();
    let streamed = Arc::clone(&tool.streamed);
    let executor = Executor::new("t").tool(tool).tool(Count::default());
    let specs = executor.specs();
    assert!(
        specs
            .iter()
            .any(|s| s.name == "steps" && s.streams_progress)
    );
    assert!(
        specs
            .iter()
            .any(|s| s.name == "count" && !s.streams_progress)
    );
    let local = executor.call("steps", json!({"n": 2, "step_ms": 0})).await;
    assert_eq!(local.output, "2 steps");
    assert!(!streamed.load(Ordering::SeqCst), "in process: not streamed");

    let mut running = start(executor, Duration::from_secs(1)).await;
    let mut client = running.client().await;
    let events = execute_stream(&mut client, request("steps", json!({"n": 3, "step_ms": 5}))).await;
    assert_eq!(
        events,
        [
            "progress 1/3 step 1",
            "chunk <1>",
            "progress 2/3 step 2",
            "chunk <2>",
            "progress 3/3 step 3",
            "chunk <3>",
            "result 3 steps",
        ]
    );
    assert!(streamed.load(Ordering::SeqCst));
    let unary = execute(&mut client, request("steps", json!({"n": 3, "step_ms": 5}))).await;
    assert_eq!(unary.output, "3 steps");
    assert!(!streamed.load(Ordering::SeqCst), "Execute: not streamed");
    let plain = execute_stream(
        &mut client,
        request("count", json!({"n": 1, "mode": "fast"})),
    )
    .await;
    assert_eq!(plain.len(), 1, "{plain:?}");
    assert!(plain[0].starts_with("result "), "{plain:?}");
    running.shutdown();
    running.done.await.unwrap().unwrap();
}

/// The deadline ends a stream with a DEADLINE_EXCEEDED result after the
/// reports made in time; a caller that drops the stream cancels the tool.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn execute_stream_keeps_deadlines_and_cancellation() {
    let tool = Steps::default();
    let saw_cancel = Arc::clone(&tool.saw_cancel);
    let mut running = start(Executor::new("t").tool(tool), Duration::from_secs(1)).await;
    let mut client = running.client().await;
    let mut late = Request::new(request("steps", json!({"n": 100, "step_ms": 20})));
    late.set_timeout(Duration::from_millis(200));
    let events = execute_stream(&mut client, late).await;
    assert_eq!(
        events.last().unwrap(),
        "error DeadlineExceeded",
        "{events:?}"
    );
    assert!(events.len() > 3 && events.len() < 100, "{events:?}");
    until(
        "the late call saw its cancellation",
        Duration::from_secs(3),
        || saw_cancel.swap(false, Ordering::SeqCst),
    )
    .await;

    let mut events = client
        .execute_stream(request("steps", json!({"n": 100, "step_ms": 20})))
        .await
        .unwrap()
        .into_inner();
    assert!(events.message().await.unwrap().is_some(), "a first report");
    drop(events);
    until("the tool saw the caller go", Duration::from_secs(3), || {
        saw_cancel.load(Ordering::SeqCst)
    })
    .await;
    running.shutdown();
    running.done.await.unwrap().unwrap();
}

/// A tool that answers with a picture between two lines of text.
struct Picture;

impl Tool for Picture {
    type Args = Empty;
    fn info(&self) -> ToolInfo {
        ToolInfo::new("picture", "1.0.0", "Draws a picture.")
    }
    async fn call(&self, _: Self::Args, _: CallCx) -> Result<ToolOutput, ToolFailure> {
        Ok(ToolOutput::text("here it is:")
            .with_image(b"\x89PNG-ish".to_vec(), "image/png")
            .with_part(toolmesh::content::resource_link(
                "file:///big.png",
                "big.png",
            )))
    }
}

/// An SDK tool returns content parts beside its text: served over gRPC the
/// result carries them in order (the text first, the image's bytes as
/// they were), and `output` describes each for text-only readers.
#[tokio::test]
async fn parts_beside_the_text_reach_the_caller() {
    use toolmesh::pb::content_part::Part;
    let mut running = start(Executor::new("pics").tool(Picture), Duration::ZERO).await;
    let mut client = ExecutorClient::connect(format!("http://{}", running.addr))
        .await
        .unwrap();
    let result = execute(&mut client, request("picture", json!({}))).await;
    assert_eq!(
        code(&result),
        ErrorCode::Unspecified,
        "{}",
        message(&result)
    );
    assert_eq!(
        result.output,
        "here it is:\n[image image/png, 8 bytes]\n[resource link file:///big.png (big.png)]"
    );
    assert!(matches!(&result.parts[0].part, Some(Part::Text(t)) if t == "here it is:"));
    assert!(
        matches!(&result.parts[1].part, Some(Part::Image(m)) if m.data == b"\x89PNG-ish" && m.mime_type == "image/png")
    );
    assert!(
        matches!(&result.parts[2].part, Some(Part::ResourceLink(l)) if l.uri == "file:///big.png")
    );
    running.shutdown();
}
