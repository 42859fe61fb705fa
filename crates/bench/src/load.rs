//! Load drivers: one client kind per target (executor Execute directly or
//! through nginx, dispatcher Invoke, MCP `tools/call` over HTTP/1.1 or
//! HTTP/2, and the bridges' upstreams called directly: a gRPC method, an
//! HTTP API's POST), a latency run at concurrency 1 and a throughput run at a fixed
//! number of calls in flight, each sending the same [`Workload`] every call
//! or one made per call ([`Calls`]).

use crate::cpu::Meter;
use crate::error::{BenchError, CallFailed};
use crate::stats::Latency;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client as HyperClient;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde::Serialize;
use std::borrow::Cow;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;
use tonic::transport::Channel;
use toolmesh::pb::{
    CallContext, ExecuteRequest, InvokeRequest, ToolResult, dispatcher_client::DispatcherClient,
    executor_client::ExecutorClient,
};
use toolmesh_dispatcher::{CallRequest, Dispatcher};
use toolmesh_fixtures::grpc_echo::pb::{EchoRequest, echo_client::EchoClient};
use toolmesh_transport::Tls;

/// Deadline sent with every measured call.
const CALL_DEADLINE: Duration = Duration::from_secs(10);

/// One call's arguments for one tool.
#[derive(Debug, Clone)]
pub(crate) struct Workload {
    /// Tool name.
    pub(crate) tool: Arc<str>,
    /// Tool version (sent to executors, as the dispatcher does).
    pub(crate) version: Arc<str>,
    /// JSON arguments.
    pub(crate) arguments: Arc<str>,
}

/// What each call of a series sends: the same [`Workload`] every call, or
/// one made per call (a mix of keys). Clones feed the workers of one
/// throughput run.
pub(crate) trait Calls: Clone + Send + Sync + 'static {
    /// The next call's workload.
    fn next_call(&self) -> Cow<'_, Workload>;
}

impl Workload {
    /// A call of the acceptance example's `acc_echo` with `arguments`.
    pub(crate) fn acc_echo(arguments: impl Into<Arc<str>>) -> Workload {
        Workload {
            tool: TOOL.into(),
            version: VERSION.into(),
            arguments: arguments.into(),
        }
    }
}

impl Calls for Workload {
    fn next_call(&self) -> Cow<'_, Workload> {
        Cow::Borrowed(self)
    }
}

/// A client for one target; clones share its single HTTP/2 channel.
#[derive(Debug, Clone)]
pub(crate) enum Client {
    /// `toolmesh.v1.Executor/Execute` (the executor itself, or nginx in
    /// front of it), with the executor's execute token, as a dispatcher
    /// sends it.
    Executor(ExecutorClient<Channel>, Arc<str>),
    /// `toolmesh.v1.Dispatcher/Invoke`, with the caller's bearer token
    /// (none when empty: the anonymous caller).
    Dispatcher(DispatcherClient<Channel>, Arc<str>),
    /// MCP `tools/call` (JSON-RPC over HTTP) at `/mcp`.
    Mcp(Box<McpClient>),
    /// A plain HTTP API's `POST` (the OpenAPI bridge's upstream).
    Http(Box<HttpClient>),
    /// The fixture's gRPC `Echo` method (the gRPC bridge's upstream): the
    /// workload's `message` sent as an `EchoRequest`.
    GrpcEcho(EchoClient<Channel>),
    /// A dispatcher in this process, called without a front door.
    InProcess(Dispatcher),
}

/// JSON POSTs to one URL over HTTP/2 (h2c with prior knowledge, one
/// connection) or HTTP/1.1 (a pool): what the MCP client and the plain
/// HTTP client share.
#[derive(Debug, Clone)]
pub(crate) struct JsonPost {
    http: HyperClient<HttpConnector, Full<Bytes>>,
    url: hyper::Uri,
}

impl JsonPost {
    /// A poster to `url`; `what` names the URL in an error.
    fn new(url: &str, http2: bool, what: &str) -> Result<JsonPost, BenchError> {
        let url = url
            .parse::<hyper::Uri>()
            .map_err(|e| BenchError::failed(format!("the {what} URL {url:?}"), e.to_string()))?;
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        let http = HyperClient::builder(TokioExecutor::new())
            .http2_only(http2)
            .build(connector);
        Ok(JsonPost { http, url })
    }

    /// POSTs `body` with `headers` and reads the whole answer within the
    /// bench's deadline: its status and body.
    async fn post(
        &self,
        body: String,
        headers: &[(&str, &str)],
    ) -> Result<(hyper::StatusCode, Bytes), CallFailed> {
        let mut request =
            hyper::Request::post(self.url.clone()).header("content-type", "application/json");
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let request = request.body(Full::new(Bytes::from(body)))?;
        let response = tokio::time::timeout(CALL_DEADLINE, self.http.request(request))
            .await
            .map_err(|_| CallFailed::TimedOut)??;
        let status = response.status();
        let body = response.into_body().collect().await?.to_bytes();
        Ok((status, body))
    }
}

/// An MCP client of one `/mcp` URL: stateless 2026-07-28 requests, JSON
/// answers.
#[derive(Debug, Clone)]
pub(crate) struct McpClient(JsonPost);

/// The MCP revision the bench speaks.
const MCP_VERSION: &str = "2026-07-28";

impl McpClient {
    /// One `tools/call` of `work`; `Err` with a description when the HTTP
    /// exchange, JSON-RPC or the tool failed.
    async fn call(&self, work: &Workload) -> Result<(), CallFailed> {
        // The arguments are a JSON object already: spliced, not re-encoded.
        let body = format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":{name},"arguments":{args},"_meta":{{"io.modelcontextprotocol/protocolVersion":"{MCP_VERSION}","io.modelcontextprotocol/clientInfo":{{"name":"toolmesh-bench","version":"1"}},"io.modelcontextprotocol/clientCapabilities":{{}}}}}}}}"#,
            name = serde_json::Value::from(&*work.tool),
            args = work.arguments,
        );
        let headers = [
            ("accept", "application/json, text/event-stream"),
            ("mcp-protocol-version", MCP_VERSION),
            ("mcp-method", "tools/call"),
            ("mcp-name", &*work.tool),
        ];
        let (status, body) = self.0.post(body, &headers).await?;
        let answer: serde_json::Value = serde_json::from_slice(&body)
            .map_err(|source| CallFailed::NotJson { status, source })?;
        if let Some(error) = answer.get("error") {
            return Err(CallFailed::JsonRpc(error.clone()));
        }
        match answer["result"]["isError"].as_bool() {
            Some(false) | None if status.is_success() => Ok(()),
            _ => Err(CallFailed::Answer { status, answer }),
        }
    }
}

/// A plain HTTP API's operation: the workload's arguments POSTed as the
/// JSON body; a 2xx JSON answer counts.
#[derive(Debug, Clone)]
pub(crate) struct HttpClient(JsonPost);

impl HttpClient {
    /// One POST of `work`'s arguments.
    async fn call(&self, work: &Workload) -> Result<(), CallFailed> {
        let headers = [("accept", "application/json")];
        let (status, body) = self.0.post(work.arguments.to_string(), &headers).await?;
        let answer: serde_json::Value = serde_json::from_slice(&body)
            .map_err(|source| CallFailed::NotJson { status, source })?;
        if status.is_success() {
            Ok(())
        } else {
            Err(CallFailed::Answer { status, answer })
        }
    }
}

impl Client {
    /// An Execute client over one lazily connecting channel to `addr`
    /// speaking `tls`, sending `token` (see [`crate::mesh::execute_token`]).
    pub(crate) fn executor(addr: &str, token: &str, tls: &Tls) -> Result<Client, BenchError> {
        Ok(Client::Executor(
            ExecutorClient::new(toolmesh_transport::channel(addr, tls)?),
            token.into(),
        ))
    }

    /// An Invoke client over one lazily connecting channel to `addr`
    /// speaking `tls`, calling as the anonymous caller.
    pub(crate) fn dispatcher(addr: &str, tls: &Tls) -> Result<Client, BenchError> {
        Client::dispatcher_as(addr, tls, "")
    }

    /// An Invoke client like [`dispatcher`](Self::dispatcher) sending
    /// `token` (a static token or a JWT) as its bearer.
    pub(crate) fn dispatcher_as(addr: &str, tls: &Tls, token: &str) -> Result<Client, BenchError> {
        Ok(Client::Dispatcher(
            DispatcherClient::new(toolmesh_transport::channel(addr, tls)?),
            token.into(),
        ))
    }

    /// An MCP client of `url` (`http://HOST:PORT/mcp`), over HTTP/2 (h2c
    /// with prior knowledge, one connection) or HTTP/1.1 (a pool).
    pub(crate) fn mcp(url: &str, http2: bool) -> Result<Client, BenchError> {
        let post = JsonPost::new(url, http2, "MCP")?;
        Ok(Client::Mcp(Box::new(McpClient(post))))
    }

    /// A plain HTTP client POSTing to `url` over HTTP/1.1 (a pool), as
    /// the OpenAPI bridge calls its API.
    pub(crate) fn http(url: &str) -> Result<Client, BenchError> {
        let post = JsonPost::new(url, false, "HTTP API")?;
        Ok(Client::Http(Box::new(HttpClient(post))))
    }

    /// A generated tonic client of the fixture's `fixtures.echo.v1.Echo`
    /// at `addr` (plaintext, one lazily connecting channel).
    pub(crate) fn grpc_echo(addr: &str) -> Result<Client, BenchError> {
        let channel = toolmesh_transport::channel(addr, &Tls::none())?;
        Ok(Client::GrpcEcho(EchoClient::new(channel)))
    }

    /// One call; `Err` with a description when the RPC or the tool failed.
    pub(crate) async fn call(&mut self, work: &Workload) -> Result<(), CallFailed> {
        let context = Some(CallContext {
            caller: "toolmesh-bench".into(),
            ..CallContext::default()
        });
        let result = match self {
            Client::Executor(client, token) => {
                let mut request = tonic::Request::new(ExecuteRequest {
                    call_id: String::new(),
                    tool: work.tool.to_string(),
                    version: work.version.to_string(),
                    arguments: work.arguments.to_string(),
                    attempt: 1,
                    context,
                });
                request.set_timeout(CALL_DEADLINE);
                if !token.is_empty() {
                    toolmesh_transport::set_bearer(request.metadata_mut(), token);
                }
                client.execute(request).await.map(|r| r.into_inner().result)
            }
            Client::Dispatcher(client, token) => {
                let mut request = tonic::Request::new(InvokeRequest {
                    tool: work.tool.to_string(),
                    arguments: work.arguments.to_string(),
                    context,
                    ..InvokeRequest::default()
                });
                request.set_timeout(CALL_DEADLINE);
                if !token.is_empty() {
                    toolmesh_transport::set_bearer(request.metadata_mut(), token);
                }
                client.invoke(request).await.map(|r| r.into_inner().result)
            }
            Client::Mcp(client) => return client.call(work).await,
            Client::Http(client) => return client.call(work).await,
            Client::GrpcEcho(client) => {
                let message = serde_json::from_str::<serde_json::Value>(&work.arguments)
                    .ok()
                    .and_then(|args| args.get("message")?.as_str().map(str::to_owned))
                    .unwrap_or_default();
                let mut request = tonic::Request::new(EchoRequest { message });
                request.set_timeout(CALL_DEADLINE);
                // An answer is the echo: no tool result to check.
                client.echo(request).await.map(|_| None)
            }
            Client::InProcess(dispatcher) => {
                let request = InvokeRequest {
                    tool: work.tool.to_string(),
                    arguments: work.arguments.to_string(),
                    context,
                    ..InvokeRequest::default()
                };
                let who = match dispatcher.anonymous() {
                    Ok(who) => who,
                    Err(refusal) => return Err(refusal.into()),
                };
                let call = CallRequest::new(&who, request).timeout(CALL_DEADLINE);
                match dispatcher.call(call).await {
                    Ok(response) => Ok(response.result),
                    Err(refusal) => return Err(refusal.into()),
                }
            }
        };
        match result {
            Ok(result) => check(result),
            Err(status) => Err(CallFailed::Status {
                code: status.code(),
                message: status.message().to_owned(),
            }),
        }
    }
}

/// A result counts when it has no error.
fn check(result: Option<ToolResult>) -> Result<(), CallFailed> {
    match result.and_then(|r| r.error).filter(|e| e.code != 0) {
        None => Ok(()),
        Some(e) => Err(CallFailed::Tool {
            code: e.code,
            message: e.message,
        }),
    }
}

/// Calls once and fails the bench if the call fails: a target that cannot
/// echo is misconfigured, and its figures would mean nothing.
pub(crate) async fn check_works(
    client: &Client,
    work: &Workload,
    target: &str,
) -> Result<(), BenchError> {
    client
        .clone()
        .call(work)
        .await
        .map_err(|e| BenchError::call(format!("a first {} call through {target}", work.tool), e))
}

/// `calls` calls one after the other, untimed (warm-up).
pub(crate) async fn warm_up(client: &Client, work: &impl Calls, calls: usize) {
    let mut client = client.clone();
    for _ in 0..calls {
        let _ = client.call(&work.next_call()).await;
    }
}

/// Latency samples of one series at concurrency 1.
#[derive(Debug, Default)]
pub(crate) struct Samples {
    /// Durations of the calls that succeeded.
    pub(crate) ok: Vec<Duration>,
    /// Calls that failed.
    pub(crate) errors: usize,
}

impl Samples {
    /// Adds `calls` timed calls, one after the other.
    pub(crate) async fn record(&mut self, client: &Client, work: &impl Calls, calls: usize) {
        let mut client = client.clone();
        for _ in 0..calls {
            let work = work.next_call();
            let started = Instant::now();
            match client.call(&work).await {
                Ok(()) => self.ok.push(started.elapsed()),
                Err(_) => self.errors += 1,
            }
        }
    }

    /// The percentiles of everything recorded.
    pub(crate) fn summary(self) -> Latency {
        Latency::from_samples(self.ok, self.errors)
    }
}

/// Calls per second at saturation.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Throughput {
    /// Calls kept in flight.
    pub in_flight: usize,
    /// Successful calls per second: the median of the rounds.
    pub calls_per_sec: f64,
    /// Each round's calls per second, in order.
    pub rounds_calls_per_sec: Vec<f64>,
    /// Successful calls in all measuring windows.
    pub calls: u64,
    /// Calls that failed in all measuring windows.
    pub errors: u64,
    /// CPU time per successful call of each measured group of processes
    /// (see [`Meter`]), in µs, over all windows; empty when not measured.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub cpu_us_per_call: Vec<f64>,
}

impl Throughput {
    /// Combines rounds measured at the same number of calls in flight.
    pub(crate) fn from_rounds(in_flight: usize, rounds: &[Window]) -> Throughput {
        let mut rates: Vec<f64> = rounds.iter().map(|r| r.calls_per_sec).collect();
        let in_order = rates.clone();
        rates.sort_by(f64::total_cmp);
        let median = match rates.len() {
            0 => 0.0,
            n if n % 2 == 1 => rates[n / 2],
            n => (rates[n / 2 - 1] + rates[n / 2]) / 2.0,
        };
        let calls: u64 = rounds.iter().map(|r| r.calls).sum();
        let groups = rounds.first().map_or(0, |r| r.cpu_ns.len());
        let cpu_us_per_call = (0..groups)
            .map(|g| {
                let ns: u64 = rounds.iter().filter_map(|r| r.cpu_ns.get(g)).sum();
                ns as f64 / 1_000.0 / calls.max(1) as f64
            })
            .collect();
        Throughput {
            in_flight,
            calls_per_sec: median,
            rounds_calls_per_sec: in_order,
            calls,
            errors: rounds.iter().map(|r| r.errors).sum(),
            cpu_us_per_call,
        }
    }
}

/// One throughput window.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Window {
    /// Successful calls per second of the window.
    pub(crate) calls_per_sec: f64,
    /// Successful calls.
    pub(crate) calls: u64,
    /// Failed calls.
    pub(crate) errors: u64,
    /// CPU time each group of the meter spent in the window, in ns.
    pub(crate) cpu_ns: Vec<u64>,
}

/// Keeps `in_flight` calls going for `warmup + window`; counts the calls
/// that complete inside the window (those still in flight at its end are
/// left out), and what `meter`'s processes spent on CPU inside it.
pub(crate) async fn throughput(
    client: &Client,
    work: &impl Calls,
    in_flight: usize,
    warmup: Duration,
    window: Duration,
    meter: &Meter,
) -> Window {
    let start = Instant::now() + warmup;
    let end = start + window;
    let cpu = async {
        tokio::time::sleep_until(start).await;
        let before = meter.read();
        tokio::time::sleep_until(end).await;
        let after = meter.read();
        after
            .iter()
            .zip(&before)
            .map(|(a, b)| a.saturating_sub(*b))
            .collect()
    };
    let workers: Vec<_> = (0..in_flight)
        .map(|_| {
            let mut client = client.clone();
            let work = work.clone();
            tokio::spawn(async move {
                let (mut ok, mut failed) = (0u64, 0u64);
                loop {
                    let result = client.call(&work.next_call()).await;
                    let now = Instant::now();
                    if now >= end {
                        break;
                    }
                    if now >= start {
                        match result {
                            Ok(()) => ok += 1,
                            Err(_) => failed += 1,
                        }
                    }
                }
                (ok, failed)
            })
        })
        .collect();
    let counted = async {
        let (mut calls, mut errors) = (0, 0);
        for worker in workers {
            match worker.await {
                Ok((ok, failed)) => {
                    calls += ok;
                    errors += failed;
                }
                Err(_) => errors += 1,
            }
        }
        (calls, errors)
    };
    let ((calls, errors), cpu_ns) = tokio::join!(counted, cpu);
    Window {
        calls_per_sec: calls as f64 / window.as_secs_f64(),
        calls,
        errors,
        cpu_ns,
    }
}

/// The echo tool every target serves, which the arguments below are for.
pub(crate) const TOOL: &str = "acc_echo";
/// Its version.
pub(crate) const VERSION: &str = "1.0.0";

/// `acc_echo` as the acceptance fixture declares it: the tool these
/// arguments are for, its schema compiled as a dispatcher compiles it.
pub fn acc_echo_def() -> Result<toolmesh::ToolDef, crate::BenchError> {
    let spec = toolmesh_fixtures::fixture("acceptance", &Default::default())
        .into_iter()
        .flat_map(|acceptance| acceptance.specs())
        .find(|spec| spec.name == TOOL)
        .ok_or_else(|| crate::BenchError::failed("find acc_echo", "the fixture lacks it"))?;
    toolmesh::ToolDef::new(spec)
        .map_err(|e| crate::BenchError::failed("compile acc_echo's schema", e.to_string()))
}

/// About `bytes` of `acc_echo` arguments: only a `message`.
pub fn small_arguments(bytes: usize) -> String {
    let overhead = r#"{"message":""}"#.len();
    let message = "x".repeat(bytes.saturating_sub(overhead));
    serde_json::json!({ "message": message }).to_string()
}

/// At least `bytes` of `acc_echo` arguments: a message and a nested
/// `payload.items` array that the tool's schema validates item by item.
pub fn medium_arguments(bytes: usize) -> String {
    let mut items = Vec::new();
    loop {
        let text = serde_json::json!({
            "message": "medium payload",
            "payload": { "items": items },
        })
        .to_string();
        if text.len() >= bytes {
            return text;
        }
        let id = items.len();
        items.push(serde_json::json!({
            "id": id,
            "name": format!("item-{id:05}"),
            "tags": ["alpha", "beta", "gamma"],
        }));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Arguments have the sizes asked for and the shape acc_echo accepts.
    #[test]
    fn argument_sizes() {
        let small = small_arguments(100);
        assert_eq!(small.len(), 100);
        let v: serde_json::Value = serde_json::from_str(&small).unwrap();
        assert!(v["message"].is_string());
        let medium = medium_arguments(10_000);
        assert!((10_000..10_200).contains(&medium.len()), "{}", medium.len());
        let v: serde_json::Value = serde_json::from_str(&medium).unwrap();
        let items = v["payload"]["items"].as_array().unwrap();
        assert!(items.len() > 100);
        assert!(items.iter().all(|i| i["id"].as_u64().is_some()
            && i["name"].is_string()
            && i["tags"].as_array().is_some_and(|t| t.len() == 3)));
    }

    /// The combined rate is the median round; counts add up.
    #[test]
    fn throughput_rounds() {
        let w = |calls_per_sec, calls| Window {
            calls_per_sec,
            calls,
            errors: 1,
            cpu_ns: vec![calls * 1_000, 500],
        };
        let t = Throughput::from_rounds(32, &[w(300.0, 3), w(100.0, 1), w(200.0, 2)]);
        assert_eq!(t.calls_per_sec, 200.0);
        assert_eq!(
            t.cpu_us_per_call,
            [1.0, 0.25],
            "CPU over all windows per call"
        );
        assert_eq!(t.rounds_calls_per_sec, [300.0, 100.0, 200.0]);
        assert_eq!((t.calls, t.errors), (6, 3));
        let even = Throughput::from_rounds(1, &[w(100.0, 1), w(200.0, 2)]);
        assert_eq!(even.calls_per_sec, 150.0);
        assert_eq!(Throughput::from_rounds(1, &[]).calls_per_sec, 0.0);
    }

    /// A result with an error code is a failure; none or code 0 is success.
    #[test]
    fn result_checks() {
        use toolmesh::pb::ToolError;
        assert!(check(Some(ToolResult::default())).is_ok());
        assert!(check(None).is_ok());
        let zero = ToolResult {
            error: Some(ToolError::default()),
            ..ToolResult::default()
        };
        assert!(check(Some(zero)).is_ok());
        let failed = ToolResult {
            error: Some(ToolError {
                code: 2,
                message: "bad".into(),
                ..ToolError::default()
            }),
            ..ToolResult::default()
        };
        assert!(check(Some(failed)).unwrap_err().to_string().contains("bad"));
    }
}
