//! The retry rules, one by one, through a real dispatcher calling real gRPC
//! executors on 127.0.0.1 whose behaviour each test scripts.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_stream::StreamExt;
use tonic::{Request, Response, Status};
use toolmesh::pb::{
    self, ErrorCode, ExecuteEvent, ExecuteRequest, ExecuteResponse, InvokeRequest, RetryPolicy,
    ToolError, ToolResult, ToolSpec, execute_event, executor_server::ExecutorServer, invoke_event,
};
use toolmesh::{Instance, Snapshot, ToolDef, ToolEntry, ToolErrorExt};
use toolmesh_dispatcher::{CallRequest, Dispatcher, DispatcherConfig, Refusal};
use toolmesh_testkit::{serve_router, until};

/// What a scripted executor does with each call (on `ExecuteStream`, every
/// script but `Status` reports one progress event first).
#[derive(Clone)]
enum Script {
    Ok,
    Status(tonic::Code),
    Reply(ToolError),
    Hang,
    /// A progress event, then the stream fails with this status (on
    /// `Execute`: the status alone).
    ProgressThen(tonic::Code),
    /// The first attempt of a call follows this script; later ones `Ok`.
    Flaky(Box<Script>),
}

/// One execution as the executor saw it.
#[derive(Clone, Debug)]
struct Seen {
    call_id: String,
    attempt: u32,
    at: Instant,
}

#[derive(Clone)]
struct Scripted {
    script: Script,
    /// Scripts for particular tools; `script` for the others.
    by_tool: Arc<HashMap<String, Script>>,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl Scripted {
    /// Records `request` and answers the script for its tool.
    fn script(&self, request: &ExecuteRequest) -> Script {
        self.seen.lock().unwrap().push(Seen {
            call_id: request.call_id.clone(),
            attempt: request.attempt,
            at: Instant::now(),
        });
        match self.by_tool.get(&request.tool).unwrap_or(&self.script) {
            Script::Flaky(first) if request.attempt == 1 => (**first).clone(),
            Script::Flaky(_) => Script::Ok,
            script => script.clone(),
        }
    }
}

fn ok_result() -> ToolResult {
    ToolResult {
        output: "ok".into(),
        ..ToolResult::default()
    }
}

fn event(event: execute_event::Event) -> Result<ExecuteEvent, Status> {
    Ok(ExecuteEvent { event: Some(event) })
}

#[tonic::async_trait]
impl pb::executor_server::Executor for Scripted {
    async fn execute(
        &self,
        request: Request<ExecuteRequest>,
    ) -> Result<Response<ExecuteResponse>, Status> {
        let result = match self.script(request.get_ref()) {
            Script::Ok => ok_result(),
            Script::Status(code) | Script::ProgressThen(code) => {
                return Err(Status::new(code, "scripted"));
            }
            Script::Reply(error) => error.into_result(),
            Script::Hang => std::future::pending().await,
            Script::Flaky(_) => unreachable!("resolved by Scripted::script"),
        };
        Ok(Response::new(ExecuteResponse {
            result: Some(result),
        }))
    }

    type ExecuteStreamStream = tonic::codegen::BoxStream<ExecuteEvent>;

    async fn execute_stream(
        &self,
        request: Request<ExecuteRequest>,
    ) -> Result<Response<Self::ExecuteStreamStream>, Status> {
        let progress = event(execute_event::Event::Progress(pb::Progress {
            progress: 1.0,
            total: 2.0,
            message: "halfway".into(),
        }));
        let rest: Vec<Result<ExecuteEvent, Status>> = match self.script(request.get_ref()) {
            Script::Status(code) => return Err(Status::new(code, "scripted")),
            Script::Ok => vec![event(execute_event::Event::Result(ok_result()))],
            Script::Reply(error) => vec![event(execute_event::Event::Result(error.into_result()))],
            Script::ProgressThen(code) => vec![Err(Status::new(code, "scripted"))],
            Script::Hang => {
                let hung = tokio_stream::iter([progress]).chain(tokio_stream::pending());
                return Ok(Response::new(Box::pin(hung)));
            }
            Script::Flaky(_) => unreachable!("resolved by Scripted::script"),
        };
        let events = tokio_stream::iter(std::iter::once(progress).chain(rest));
        Ok(Response::new(Box::pin(events)))
    }
}

/// A real executor server on 127.0.0.1:0 following `script`.
async fn executor(script: Script) -> (String, Arc<Mutex<Vec<Seen>>>) {
    executor_by_tool(script, &[]).await
}

/// A real executor server following a script per tool (`script` for others).
async fn executor_by_tool(
    script: Script,
    by_tool: &[(&str, Script)],
) -> (String, Arc<Mutex<Vec<Seen>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let service = Scripted {
        script,
        by_tool: Arc::new(
            by_tool
                .iter()
                .map(|(tool, script)| (tool.to_string(), script.clone()))
                .collect(),
        ),
        seen: seen.clone(),
    };
    let addr =
        serve_router(tonic::transport::Server::builder().add_service(ExecutorServer::new(service)))
            .await;
    (addr.to_string(), seen)
}

/// An address where nothing listens: connections are refused.
async fn refusing() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr: SocketAddr = listener.local_addr().unwrap();
    drop(listener);
    addr.to_string()
}

fn spec(idempotent: bool, attempt_timeout_ms: u32) -> ToolSpec {
    ToolSpec {
        name: "t".into(),
        version: "1.0.0".into(),
        description: "scripted".into(),
        input_schema: r#"{"type":"object"}"#.into(),
        idempotent,
        timeout_ms: 5_000,
        retry: Some(RetryPolicy {
            max_attempts: 3,
            initial_backoff_ms: 1,
            max_backoff_ms: 5,
            backoff_multiplier: 2.0,
            attempt_timeout_ms,
        }),
        ..ToolSpec::default()
    }
}

/// A dispatcher over one tool served at `endpoints`.
fn dispatcher(spec: ToolSpec, endpoints: &[&str], config: DispatcherConfig) -> Dispatcher {
    dispatcher_of(vec![spec], endpoints, config)
}

/// A dispatcher over `specs`, each served at every one of `endpoints`.
fn dispatcher_of(specs: Vec<ToolSpec>, endpoints: &[&str], config: DispatcherConfig) -> Dispatcher {
    let mut builder = Snapshot::empty("test").next();
    for spec in specs {
        builder.put(ToolEntry {
            def: Arc::new(ToolDef::new(spec).unwrap()),
            instances: endpoints
                .iter()
                .enumerate()
                .map(|(i, e)| Instance {
                    executor_id: format!("x{i}").into(),
                    endpoint: (*e).into(),
                    service: "s".into(),
                    healthy: true,
                    execute_token: "".into(),
                })
                .collect(),
            disabled: None,
        });
    }
    let (_tx, rx) = watch::channel(Arc::new(builder.finish()));
    std::mem::forget(_tx);
    let (health, _) = tonic_health::server::health_reporter();
    Dispatcher::new(config, rx, health)
}

fn call(call_id: &str) -> InvokeRequest {
    InvokeRequest {
        tool: "t".into(),
        arguments: "{}".into(),
        call_id: call_id.into(),
        ..InvokeRequest::default()
    }
}

fn code_of(response: &pb::InvokeResponse) -> ErrorCode {
    response
        .result
        .as_ref()
        .and_then(|r| r.error.as_ref())
        .map_or(ErrorCode::Unspecified, |e| e.error_code())
}

/// Failure kind × idempotent → how many attempts reach (or try to reach) an
/// executor. Retried failures use all 3 attempts; others stop at 1.
#[tokio::test]
async fn retry_rule_table() {
    let retryable = |code| ToolError::new(code, "scripted").with_retryable(true);
    let final_ = |code| ToolError::new(code, "scripted").with_retryable(false);
    let rows: Vec<(&str, Option<Script>, bool, u32)> = vec![
        (
            "UNAVAILABLE status",
            Some(Script::Status(tonic::Code::Unavailable)),
            true,
            3,
        ),
        (
            "UNAVAILABLE status",
            Some(Script::Status(tonic::Code::Unavailable)),
            false,
            1,
        ),
        (
            "INTERNAL status",
            Some(Script::Status(tonic::Code::Internal)),
            true,
            1,
        ),
        (
            "declared retryable",
            Some(Script::Reply(retryable(ErrorCode::ToolError))),
            true,
            3,
        ),
        (
            "declared retryable",
            Some(Script::Reply(retryable(ErrorCode::ToolError))),
            false,
            1,
        ),
        (
            "declared final",
            Some(Script::Reply(final_(ErrorCode::Unavailable))),
            true,
            1,
        ),
        (
            "business error",
            Some(Script::Reply(final_(ErrorCode::ToolError))),
            true,
            1,
        ),
        (
            "executor failed",
            Some(Script::Reply(final_(ErrorCode::ExecutorFailed))),
            true,
            1,
        ),
        (
            "stale: not served",
            Some(Script::Reply(final_(ErrorCode::NotFound))),
            false,
            3,
        ),
        ("attempt timeout", Some(Script::Hang), true, 3),
        ("attempt timeout", Some(Script::Hang), false, 1),
        ("connection refused", None, true, 3),
        ("connection refused", None, false, 3),
    ];
    for (label, script, idempotent, expected) in rows {
        let (endpoint, seen) = match script {
            Some(script) => executor(script).await,
            None => (refusing().await, Arc::new(Mutex::new(Vec::new()))),
        };
        let d = dispatcher(
            spec(idempotent, 100),
            &[&endpoint],
            DispatcherConfig::default(),
        );
        let id = format!("{label}-{idempotent}");
        let response = invoke(&d, call(&id), None).await.unwrap();
        assert_eq!(
            response.attempts, expected,
            "{label}, idempotent={idempotent}"
        );
        assert_ne!(code_of(&response), ErrorCode::Unspecified, "{label}");
        let seen = seen.lock().unwrap().clone();
        if !seen.is_empty() {
            assert_eq!(seen.len() as u32, expected, "{label}: executions seen");
            // One idempotency key for every attempt (scoped to the caller).
            assert!(
                seen.iter().all(|s| s.call_id == seen[0].call_id),
                "call_id unchanged across attempts"
            );
            assert_eq!(response.call_id, id, "the caller's own id comes back");
            let attempts: Vec<u32> = seen.iter().map(|s| s.attempt).collect();
            assert_eq!(
                attempts,
                (1..=expected).collect::<Vec<_>>(),
                "{label}: attempt counts up"
            );
        }
    }
}

/// A refused connection goes to another instance, even for a
/// non-idempotent tool, and the call succeeds there.
#[tokio::test]
async fn never_sent_goes_to_another_instance() {
    let dead = refusing().await;
    let (alive, seen) = executor(Script::Ok).await;
    let d = dispatcher(
        spec(false, 0),
        &[&dead, &alive],
        DispatcherConfig::default(),
    );
    for i in 0..20 {
        let response = invoke(&d, call(&format!("c{i}")), None).await.unwrap();
        assert_eq!(code_of(&response), ErrorCode::Unspecified, "{response:?}");
        assert_eq!(response.executor_id, "x1");
    }
    assert_eq!(seen.lock().unwrap().len(), 20, "each call ran exactly once");
}

/// Retries go to a different instance when one exists.
#[tokio::test]
async fn retry_prefers_a_different_instance() {
    let (bad, bad_seen) = executor(Script::Status(tonic::Code::Unavailable)).await;
    let (good, _) = executor(Script::Ok).await;
    let d = dispatcher(spec(true, 0), &[&bad, &good], DispatcherConfig::default());
    for i in 0..20 {
        let response = invoke(&d, call(&format!("r{i}")), None).await.unwrap();
        assert_eq!(code_of(&response), ErrorCode::Unspecified);
        assert!(response.attempts <= 2, "at most one failed attempt first");
        assert_eq!(response.executor_id, "x1");
    }
    assert!(
        bad_seen.lock().unwrap().iter().all(|s| s.attempt == 1),
        "never retried on the same instance"
    );
}

/// An empty retry budget stops retries; the executor's retry-after hint
/// delays the next attempt.
#[tokio::test]
async fn budget_and_pushback() {
    let (endpoint, _) = executor(Script::Status(tonic::Code::Unavailable)).await;
    let config = DispatcherConfig {
        retry_budget_min_per_sec: 0,
        retry_budget_ratio: 0.0,
        ..DispatcherConfig::default()
    };
    let d = dispatcher(spec(true, 0), &[&endpoint], config);
    let response = invoke(&d, call("budget"), None).await.unwrap();
    assert_eq!(response.attempts, 1, "no budget, no retry");

    let pushback = ToolError::new(ErrorCode::Unavailable, "busy")
        .with_retryable(true)
        .with_retry_after_ms(150);
    let (endpoint, seen) = executor(Script::Reply(pushback)).await;
    let d = dispatcher(spec(true, 0), &[&endpoint], DispatcherConfig::default());
    let response = invoke(&d, call("pushback"), None).await.unwrap();
    assert_eq!(response.attempts, 3);
    let seen = seen.lock().unwrap().clone();
    for pair in seen.windows(2) {
        let gap = pair[1].at - pair[0].at;
        assert!(
            gap >= Duration::from_millis(150),
            "pushback honoured: {gap:?}"
        );
    }
}

/// The caller's deadline bounds every attempt together: a hung executor
/// yields DEADLINE_EXCEEDED right at the deadline, not after the tool's.
#[tokio::test]
async fn one_deadline_for_all_attempts() {
    let (endpoint, _) = executor(Script::Hang).await;
    let d = dispatcher(spec(true, 0), &[&endpoint], DispatcherConfig::default());
    let started = Instant::now();
    let response = invoke(&d, call("deadline"), Some(Duration::from_millis(300)))
        .await
        .unwrap();
    let took = started.elapsed();
    assert_eq!(code_of(&response), ErrorCode::DeadlineExceeded);
    // At the deadline (less the answer margin), plus scheduling slack.
    assert!(
        took >= Duration::from_millis(280) && took <= Duration::from_millis(450),
        "{took:?}"
    );
}

/// Over `max_in_flight`, calls are shed with RESOURCE_EXHAUSTED instead of
/// queueing.
#[tokio::test]
async fn sheds_load_over_the_in_flight_limit() {
    let (endpoint, seen) = executor(Script::Hang).await;
    let config = DispatcherConfig {
        max_in_flight: 1,
        ..DispatcherConfig::default()
    };
    let d = dispatcher(spec(false, 0), &[&endpoint], config);
    let hung = {
        let d = d.clone();
        tokio::spawn(async move { invoke(&d, call("hung"), Some(Duration::from_secs(2))).await })
    };
    // The first call holds the only slot once the executor has it.
    until(
        "the hung call reached the executor",
        Duration::from_secs(5),
        || !seen.lock().unwrap().is_empty(),
    )
    .await;
    let shed = tonic::Status::from(invoke(&d, call("shed"), None).await.unwrap_err());
    assert_eq!(shed.code(), tonic::Code::ResourceExhausted);
    assert!(shed.message().contains("limit of 1"), "{}", shed.message());
    hung.abort();
}

/// Five consecutive failures eject an instance: later calls avoid it.
#[tokio::test]
async fn outlier_is_ejected() {
    let (bad, bad_seen) = executor(Script::Status(tonic::Code::Unavailable)).await;
    let (good, good_seen) = executor(Script::Ok).await;
    // Non-idempotent: a failed call is not retried, so failures reach the
    // bad instance one by one.
    let d = dispatcher(spec(false, 0), &[&bad, &good], DispatcherConfig::default());
    for i in 0..60 {
        invoke(&d, call(&format!("o{i}")), None).await.unwrap();
    }
    let bad_calls = bad_seen.lock().unwrap().len();
    assert_eq!(bad_calls, 5, "ejected after exactly 5 consecutive failures");
    assert_eq!(good_seen.lock().unwrap().len(), 60 - 5);
}

/// A tool-level fault ejects that tool on that instance, not the instance:
/// with t_write failing on B (and ejected there), and t_read failing on A,
/// every t_read still succeeds on B.
#[tokio::test]
async fn tool_fault_failover_keeps_the_healthy_replicas_tools() {
    let unavailable = Script::Status(tonic::Code::Unavailable);
    let (a, a_seen) = executor_by_tool(Script::Ok, &[("t_read", unavailable.clone())]).await;
    let (b, _) = executor_by_tool(Script::Ok, &[("t_write", unavailable)]).await;
    let named = |name: &str, idempotent: bool| ToolSpec {
        name: name.into(),
        ..spec(idempotent, 0)
    };
    let d = dispatcher_of(
        vec![named("t_write", false), named("t_read", true)],
        &[&a, &b],
        DispatcherConfig::default(),
    );
    let run = |tool: &str, id: String| InvokeRequest {
        tool: tool.into(),
        ..call(&id)
    };
    // Until B is ejected for t_write (5 consecutive failures there).
    let mut write_failures = 0;
    for i in 0..200 {
        let response = invoke(&d, run("t_write", format!("w{i}")), None)
            .await
            .unwrap();
        if code_of(&response) != ErrorCode::Unspecified {
            write_failures += 1;
        }
        if write_failures == 5 {
            break;
        }
    }
    assert_eq!(write_failures, 5, "t_write failed on B five times");
    let mut first_try_on_b = 0;
    for i in 0..30 {
        let response = invoke(&d, run("t_read", format!("r{i}")), None)
            .await
            .unwrap();
        assert_eq!(
            code_of(&response),
            ErrorCode::Unspecified,
            "t_read r{i}: {response:?}"
        );
        if response.attempts == 1 {
            first_try_on_b += 1;
        }
    }
    assert!(
        !a_seen.lock().unwrap().is_empty(),
        "A's failing t_read was tried too"
    );
    // B is in rotation for t_read: balancing gives it first attempts too
    // (all 30 going to A first has odds of 2^-30).
    assert!(first_try_on_b > 0, "B was ejected as a whole");
    for i in 0..20 {
        let response = invoke(&d, run("t_write", format!("w2-{i}")), None)
            .await
            .unwrap();
        assert_eq!(
            code_of(&response),
            ErrorCode::Unspecified,
            "t_write avoids B, where it is ejected"
        );
    }
}

/// One unary call by the anonymous caller, within `timeout` if given.
async fn invoke(
    d: &Dispatcher,
    request: InvokeRequest,
    timeout: Option<Duration>,
) -> Result<pb::InvokeResponse, Refusal> {
    let who = d.anonymous()?;
    d.call(CallRequest::new(&who, request).timeout(timeout))
        .await
}

/// The events of one `InvokeStream`: the progress messages, then the response.
async fn streamed(d: &Dispatcher, request: InvokeRequest) -> (Vec<String>, pb::InvokeResponse) {
    let who = d.anonymous().unwrap();
    let call = CallRequest::streamed(who, request);
    let mut events = d.call(call).await.unwrap();
    let mut progress = Vec::new();
    while let Some(event) = events.recv().await {
        match event.event {
            Some(invoke_event::Event::Progress(p)) => progress.push(p.message),
            Some(invoke_event::Event::Done(response)) => return (progress, response),
            other => panic!("unexpected event {other:?}"),
        }
    }
    panic!("the stream ended without a response");
}

/// A streaming tool's attempt that failed before it streamed anything is
/// retried by the usual rules; one that streamed progress to the caller and
/// then broke is not, and the caller reads the failure. Through a unary
/// Invoke nothing reaches the caller before the end, so the same break is
/// retried (the tool is idempotent).
#[tokio::test]
async fn streams_retry_only_until_something_reached_the_caller() {
    let streaming = ToolSpec {
        streams_progress: true,
        ..spec(true, 0)
    };
    let flaky = |first: Script| Script::Flaky(Box::new(first));
    let (refused_first, seen) = executor(flaky(Script::Status(tonic::Code::Unavailable))).await;
    let d = dispatcher(
        streaming.clone(),
        &[&refused_first],
        DispatcherConfig::default(),
    );
    let (progress, response) = streamed(&d, call("before")).await;
    assert_eq!(code_of(&response), ErrorCode::Unspecified, "{response:?}");
    assert_eq!(
        response.attempts, 2,
        "retried: nothing had reached the caller"
    );
    assert_eq!(progress, ["halfway"], "only the attempt that ran streamed");
    assert_eq!(seen.lock().unwrap().len(), 2);

    let (broke_first, seen) = executor(flaky(Script::ProgressThen(tonic::Code::Unavailable))).await;
    let d = dispatcher(streaming, &[&broke_first], DispatcherConfig::default());
    let (progress, response) = streamed(&d, call("after")).await;
    assert_eq!(code_of(&response), ErrorCode::Unavailable, "{response:?}");
    assert_eq!(
        response.attempts, 1,
        "never retried once something was delivered"
    );
    assert_eq!(progress, ["halfway"]);
    assert_eq!(seen.lock().unwrap().len(), 1);

    let unary = invoke(&d, call("unary"), None).await.unwrap();
    assert_eq!(code_of(&unary), ErrorCode::Unspecified, "{unary:?}");
    assert_eq!(unary.attempts, 2, "a unary caller saw nothing: retried");
}
