//! Operations end to end over real processes: Prometheus metrics counted
//! exactly after known traffic, and OpenTelemetry traces continued from the
//! caller through the dispatcher's attempt into the executor, received by a
//! real OTLP collector endpoint served by the test.

use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::trace::v1::Span;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use toolmesh::pb::{CallContext, InvokeRequest};
use toolmesh_system_tests::*;

/// A node's admin listener is read with the token of an admin or operator:
/// the development policy's `dev-approver` (an executor's asks for none).
const READER: [(&str, &str); 1] = [("authorization", "Bearer dev-approver")];

/// `/metrics` as Prometheus scrapes it, with a bearer token.
fn scrape(addr: &str) -> String {
    let (status, body) = toolmesh_testkit::http(addr, "GET", "/metrics", &READER, "");
    assert_eq!(status, 200, "{body}");
    body
}

/// After 3 successful calls, one with invalid arguments and one to an
/// unknown name, the dispatcher, registry and executor metrics hold exactly
/// those counts, with only tool and version as labels; a call whose tool
/// panics counts as EXECUTOR_FAILED at the dispatcher and as a panic at
/// the executor.
#[tokio::test]
async fn metrics_count_known_traffic() {
    let (serve, addr) = serve(&["--admin-listen", "127.0.0.1:0"]);
    let node_admin = admin_addr(&serve);
    let exec = example("acceptance", &addr, &["--admin-listen", "127.0.0.1:0"]);
    let exec_admin = admin_addr(&exec);
    let mut client = dispatcher(&addr);
    until_listed(&mut client, &ACCEPTANCE_TOOLS, Duration::from_secs(30)).await;
    for i in 0..3 {
        let ok = invoke(
            &mut client,
            "acc_echo",
            &format!(r#"{{"message":"{i}"}}"#),
            None,
        )
        .await;
        assert_eq!(code(&ok), 0, "{}", message(&ok));
    }
    let invalid = invoke(&mut client, "acc_echo", r#"{"message": 5}"#, None).await;
    assert_eq!(
        code(&invalid),
        toolmesh::pb::ErrorCode::InvalidArguments as i32
    );
    let unknown = invoke(&mut client, "acc_nope", "{}", None).await;
    assert_eq!(code(&unknown), toolmesh::pb::ErrorCode::NotFound as i32);

    let node = scrape(&node_admin);
    let echo = r#"tool="acc_echo",version="1.0.0""#;
    let expected = [
        (
            format!("toolmesh_dispatcher_calls_total{{{echo},code=\"OK\"}}"),
            3.0,
        ),
        (
            format!("toolmesh_dispatcher_calls_total{{{echo},code=\"INVALID_ARGUMENTS\"}}"),
            1.0,
        ),
        (
            r#"toolmesh_dispatcher_calls_total{tool="",version="",code="NOT_FOUND"}"#.to_owned(),
            1.0,
        ),
        (
            format!("toolmesh_dispatcher_call_duration_seconds_count{{{echo}}}"),
            4.0,
        ),
        (format!("toolmesh_dispatcher_attempts_total{{{echo}}}"), 3.0),
        ("toolmesh_dispatcher_in_flight".to_owned(), 0.0),
        ("toolmesh_dispatcher_shed_total".to_owned(), 0.0),
        (
            "toolmesh_dispatcher_retry_budget_exhausted_total".to_owned(),
            0.0,
        ),
        ("toolmesh_dispatcher_instances_ejected".to_owned(), 0.0),
        ("toolmesh_registry_registrations_total".to_owned(), 1.0),
        ("toolmesh_registry_lease_expiries_total".to_owned(), 0.0),
        (
            "toolmesh_registry_tools_exposed".to_owned(),
            ACCEPTANCE_TOOLS.len() as f64,
        ),
        (
            "toolmesh_registry_instances_exposed".to_owned(),
            ACCEPTANCE_TOOLS.len() as f64,
        ),
    ];
    for (series, value) in &expected {
        assert_eq!(sample(&node, series), Some(*value), "{series} in\n{node}");
    }
    let version = sample(&node, "toolmesh_registry_snapshot_version").expect("snapshot version");
    assert!(version >= 1.0);
    assert_eq!(
        sample(&node, "toolmesh_dispatcher_snapshot_version"),
        Some(version)
    );
    assert!(!node.contains("call_id"), "no per-call labels");

    let (status, state) = toolmesh_testkit::http(&node_admin, "GET", "/api/state", &READER, "");
    assert_eq!(status, 200, "{state}");
    let state: serde_json::Value = serde_json::from_str(&state).unwrap();
    assert_eq!(
        state["tools"].as_array().map(Vec::len),
        Some(ACCEPTANCE_TOOLS.len()),
        "{state}"
    );
    assert_eq!(state["tools"][1]["name"], "acc_echo");
    assert_eq!(state["tools"][1]["health"], "SERVING");

    let exec_metrics = scrape(&exec_admin);
    let expected = [
        (
            format!("toolmesh_executor_executions_total{{{echo},code=\"OK\"}}"),
            3.0,
        ),
        (
            format!("toolmesh_executor_execution_duration_seconds_count{{{echo}}}"),
            3.0,
        ),
        ("toolmesh_executor_in_flight".to_owned(), 0.0),
        ("toolmesh_executor_panics_total".to_owned(), 0.0),
    ];
    for (series, value) in &expected {
        assert_eq!(
            sample(&exec_metrics, series),
            Some(*value),
            "{series} in\n{exec_metrics}"
        );
    }
    let panicked = invoke(&mut client, "acc_panic", "{}", None).await;
    assert_eq!(
        code(&panicked),
        toolmesh::pb::ErrorCode::ExecutorFailed as i32
    );
    let exec_metrics = scrape(&exec_admin);
    assert_eq!(
        sample(&exec_metrics, "toolmesh_executor_panics_total"),
        Some(1.0)
    );
    let node = scrape(&node_admin);
    let series = r#"toolmesh_dispatcher_calls_total{tool="acc_panic",version="1.0.0",code="EXECUTOR_FAILED"}"#;
    assert_eq!(sample(&node, series), Some(1.0), "{series} in\n{node}");
}

/// An OTLP collector's trace service that keeps every span it is sent.
#[derive(Clone, Default)]
struct Collector {
    spans: Arc<Mutex<Vec<(String, Span)>>>,
}

#[tonic::async_trait]
impl TraceService for Collector {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let mut spans = self.spans.lock().unwrap();
        for resource in request.into_inner().resource_spans {
            let service = resource
                .resource
                .iter()
                .flat_map(|r| &r.attributes)
                .find(|a| a.key == "service.name")
                .and_then(|a| match a.value.as_ref()?.value.as_ref()? {
                    Value::StringValue(s) => Some(s.clone()),
                    _ => None,
                })
                .unwrap_or_default();
            for scope in resource.scope_spans {
                spans.extend(scope.spans.into_iter().map(|s| (service.clone(), s)));
            }
        }
        Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
    }
}

fn attribute(span: &Span, key: &str) -> Option<String> {
    span.attributes.iter().find(|a| a.key == key).and_then(|a| {
        match a.value.as_ref()?.value.as_ref()? {
            Value::StringValue(s) => Some(s.clone()),
            Value::IntValue(i) => Some(i.to_string()),
            _ => None,
        }
    })
}

/// Lowercase hex of a trace or span id.
fn hex(id: &[u8]) -> String {
    id.iter().map(|b| format!("{b:02x}")).collect()
}

/// The spans of `trace_id` as the README draws them, once the collector
/// holds them: the dispatcher's (`front`) `execute_tool TOOL` under the
/// caller's span, its attempt under it, and the executor's (`executor`)
/// `execute_tool TOOL` under the attempt.
async fn three_spans(
    collector: &Collector,
    trace_id: &str,
    caller_span: &str,
    front: &str,
    executor: &str,
    tool: &str,
) -> [Span; 3] {
    let spans = eventually("three spans of the trace", Duration::from_secs(20), || {
        let spans: Vec<(String, Span)> = collector
            .spans
            .lock()
            .unwrap()
            .iter()
            .filter(|(_, s)| hex(&s.trace_id) == trace_id)
            .cloned()
            .collect();
        std::future::ready((spans.len() >= 3).then_some(spans))
    })
    .await;
    let find = |service: &str, name: &str| {
        spans
            .iter()
            .find(|(svc, s)| svc.as_str() == service && s.name == name)
            .map(|(_, s)| s.clone())
            .unwrap_or_else(|| panic!("no span {name:?} from {service}: {spans:#?}"))
    };
    let call = find(front, &format!("execute_tool {tool}"));
    let attempt = find(front, "execute_tool attempt");
    let executed = find(executor, &format!("execute_tool {tool}"));
    assert_eq!(
        hex(&call.parent_span_id),
        caller_span,
        "continues the caller's trace"
    );
    assert_eq!(
        attempt.parent_span_id, call.span_id,
        "attempt under the call"
    );
    assert_eq!(
        executed.parent_span_id, attempt.span_id,
        "executor under the attempt"
    );
    [call, attempt, executed]
}

/// A request to call `tool` with `arguments`, continuing the caller span
/// `caller_span` of `trace_id`.
fn traced(
    tool: &str,
    arguments: &str,
    trace_id: &str,
    caller_span: &str,
) -> tonic::Request<InvokeRequest> {
    let mut request = tonic::Request::new(InvokeRequest {
        tool: tool.into(),
        arguments: arguments.into(),
        context: Some(CallContext::default()),
        ..Default::default()
    });
    request.metadata_mut().insert(
        "traceparent",
        format!("00-{trace_id}-{caller_span}-01").parse().unwrap(),
    );
    request
}

/// A call carrying a W3C traceparent becomes, in the collector: the
/// dispatcher's `execute_tool acc_echo` span (child of the caller's span,
/// GenAI attributes, call id), one attempt span under it, and the
/// executor's `execute_tool acc_echo` span under the attempt — across two
/// processes; the audit record names the same trace.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn traces_cross_dispatcher_and_executor() {
    let collector = Collector::default();
    let otlp = toolmesh_testkit::serve_router(
        tonic::transport::Server::builder().add_service(TraceServiceServer::new(collector.clone())),
    )
    .await;
    let endpoint = format!("http://{otlp}");
    let dir = temp_dir("traces");
    let audit = dir.join("audit.jsonl");
    let mut command = std::process::Command::new(toolmesh_bin());
    command
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--otlp-endpoint",
            &endpoint,
        ])
        .args(["--audit", audit.to_str().unwrap()])
        .env("OTEL_BSP_SCHEDULE_DELAY", "100");
    let serve = Proc::spawn("serve", command);
    let addr = serve.listen_addr();
    let mut command = std::process::Command::new(example_bin("acceptance"));
    command
        .args([
            "example",
            "acceptance",
            "--registry",
            &addr,
            "--otlp-endpoint",
            &endpoint,
        ])
        .env("OTEL_BSP_SCHEDULE_DELAY", "100");
    let _exec = Proc::spawn("acceptance", command);
    let mut client = dispatcher(&addr);
    until_listed(&mut client, &ACCEPTANCE_TOOLS, Duration::from_secs(30)).await;

    let trace_id = "4bf92f3577b34da6a3ce929d0e0e4736";
    let caller_span = "00f067aa0ba902b7";
    let request = traced("acc_echo", r#"{"message":"traced"}"#, trace_id, caller_span);
    let response = client.invoke(request).await.unwrap().into_inner();
    assert_eq!(code(&response), 0, "{}", message(&response));
    let failing_trace = "0af7651916cd43dd8448eb211c80319c";
    client
        .invoke(traced("acc_nope", "", failing_trace, caller_span))
        .await
        .unwrap();

    let [call, _attempt, executed] = three_spans(
        &collector,
        trace_id,
        caller_span,
        "toolmesh-serve",
        "acceptance",
        "acc_echo",
    )
    .await;
    assert_eq!(
        attribute(&call, "gen_ai.operation.name").as_deref(),
        Some("execute_tool")
    );
    assert_eq!(
        attribute(&call, "gen_ai.tool.name").as_deref(),
        Some("acc_echo")
    );
    assert_eq!(
        attribute(&call, "gen_ai.tool.call.id"),
        Some(response.call_id.clone())
    );
    assert_eq!(
        attribute(&call, "toolmesh.tool.version").as_deref(),
        Some("1.0.0")
    );
    assert_eq!(attribute(&call, "toolmesh.attempts").as_deref(), Some("1"));
    assert_eq!(attribute(&call, "error.type"), None);
    assert_eq!(
        attribute(&executed, "gen_ai.tool.name").as_deref(),
        Some("acc_echo")
    );

    let failed = eventually("the failed call's span", Duration::from_secs(20), || {
        let found = collector
            .spans
            .lock()
            .unwrap()
            .iter()
            .find(|(_, s)| hex(&s.trace_id) == failing_trace)
            .map(|(_, s)| s.clone());
        std::future::ready(found)
    })
    .await;
    assert_eq!(failed.name, "execute_tool acc_nope");
    assert_eq!(
        attribute(&failed, "error.type").as_deref(),
        Some("NOT_FOUND")
    );

    let record = eventually("the audit record", Duration::from_secs(10), || {
        let text = std::fs::read_to_string(&audit).unwrap_or_default();
        std::future::ready(
            text.lines()
                .find(|l| l.contains("\"invoke\""))
                .map(str::to_owned),
        )
    })
    .await;
    let record: serde_json::Value = serde_json::from_str(&record).unwrap();
    assert_eq!(
        record["trace_id"], trace_id,
        "CallContext.trace_id is the span's trace"
    );
    drop(serve);
}

/// `toolmesh up` is the same product: `--otlp-endpoint` reaches its example
/// executors (the README's three spans, across `up` and the knowledge
/// example), it serves its admin page and `/metrics` unasked, and each
/// example's `/metrics` is where its banner says.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn up_traces_and_measures_its_examples() {
    let collector = Collector::default();
    let otlp = toolmesh_testkit::serve_router(
        tonic::transport::Server::builder().add_service(TraceServiceServer::new(collector.clone())),
    )
    .await;
    let endpoint = format!("http://{otlp}");
    let dir = temp_dir("up-ops");
    let (_up, printed) = up(
        &dir,
        &["--listen", "127.0.0.1:0", "--otlp-endpoint", &endpoint],
    );
    let word = |label: &str| {
        banner_after(&printed, label)
            .split_whitespace()
            .next()
            .expect("a word after the label")
            .to_owned()
    };
    let addr = word("registry + dispatcher");
    let mut client = dispatcher(&addr);
    let trace_id = "5bf92f3577b34da6a3ce929d0e0e4737";
    let caller_span = "10f067aa0ba902b8";
    let request = traced(
        "search_kb",
        r#"{"query": "reset password"}"#,
        trace_id,
        caller_span,
    );
    let response = client.invoke(request).await.unwrap().into_inner();
    assert_eq!(code(&response), 0, "{}", message(&response));
    three_spans(
        &collector,
        trace_id,
        caller_span,
        "toolmesh-up",
        "toolmesh-example-knowledge",
        "search_kb",
    )
    .await;

    let host_port = |url: &str| {
        url.strip_prefix("http://")
            .and_then(|rest| rest.split('/').next())
            .unwrap_or_else(|| panic!("not an http URL: {url}"))
            .to_owned()
    };
    let admin = word("admin page, /metrics");
    assert!(
        banner_after(&printed, "admin page, /metrics").contains("dev-approver"),
        "says which token logs in: {printed:#?}"
    );
    let node = scrape(&host_port(&admin));
    let calls = r#"toolmesh_dispatcher_calls_total{tool="search_kb","#;
    assert!(
        node.lines()
            .any(|l| l.starts_with(calls) && l.contains(r#"code="OK""#)),
        "{calls} in\n{node}"
    );
    let knowledge = banner_after(&printed, "executor knowledge");
    let metrics_url = knowledge
        .split_whitespace()
        .skip_while(|word| *word != "metrics")
        .nth(1)
        .unwrap_or_else(|| panic!("no metrics URL on {knowledge:?}"));
    let (status, executor) =
        toolmesh_testkit::http(&host_port(metrics_url), "GET", "/metrics", &[], "");
    assert_eq!(status, 200, "{executor}");
    let executions = r#"toolmesh_executor_executions_total{tool="search_kb","#;
    assert!(
        executor.lines().any(|l| l.starts_with(executions)),
        "{executions} in\n{executor}"
    );
}
