//! One bridged HTTP call: the arguments written into the operation's path (percent-encoded), query, headers and JSON body, sent with the call's deadline as the request's timeout and the bridge's own credentials, and the answer's status mapped to the mesh's error classes.

use super::document::{Location, Operation};
use arc_swap::ArcSwap;
use reqwest::header::{ACCEPT, CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue, RETRY_AFTER};
use reqwest::{Method, StatusCode, Url};
use serde_json::Value;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Notify;
use toolmesh_executor::{CallCx, JsonTool, ToolFailure, ToolOutput};

/// How much of an answer's text a message quotes when it says nothing
/// more precise.
const QUOTED_CHARS: usize = 200;

/// The API as every tool of one connection calls it.
pub(crate) struct Api {
    pub(crate) client: reqwest::Client,
    /// Where the document's paths are appended.
    pub(crate) base: Url,
    /// The bridge's own credentials, read again as the supervisor probes.
    pub(crate) credentials: Arc<ArcSwap<HeaderMap>>,
    /// Raised when a call finds the API unreachable, so the supervisor
    /// checks it at once.
    pub(crate) suspect: Arc<Notify>,
}

/// One operation as the executor serves it.
pub(crate) struct OperationTool {
    operation: Operation,
    api: Arc<Api>,
    /// The operation's method, parsed once.
    method: Result<Method, String>,
    /// `METHOD /path`, as messages name the operation.
    label: String,
}

impl OperationTool {
    /// `operation` of `api`, its method parsed and its label made once
    /// rather than at every call.
    pub(crate) fn new(operation: Operation, api: Arc<Api>) -> Self {
        let method = Method::from_bytes(operation.method.as_bytes())
            .map_err(|e| format!("{} is not an HTTP method: {e}", operation.method));
        let label = format!("{} {}", operation.method, operation.path);
        OperationTool {
            operation,
            api,
            method,
            label,
        }
    }
}

impl JsonTool for OperationTool {
    async fn call(&self, arguments: Value, cx: CallCx) -> Result<ToolOutput, ToolFailure> {
        let mut request = self.request(&arguments)?;
        if let Some(deadline) = cx.deadline() {
            request =
                request.timeout(deadline.saturating_duration_since(tokio::time::Instant::now()));
        }
        let label = &self.label;
        let answered = tokio::select! {
            answered = async {
                let mut response = request.send().await?;
                let status = response.status();
                let headers = std::mem::take(response.headers_mut());
                let body = response.bytes().await?;
                Ok::<_, reqwest::Error>((status, headers, body))
            } => answered,
            () = cx.cancelled() => return Err(ToolFailure::new("the call was cancelled")),
        };
        match answered {
            Ok((status, headers, body)) => outcome(label, status, &headers, &body),
            Err(e) if e.is_timeout() => {
                // The deadline passed: the executor answers DEADLINE_EXCEEDED
                // once it cancels the call.
                cx.cancelled().await;
                Err(ToolFailure::executor_failed(format!(
                    "{label} did not answer before the call's deadline"
                )))
            }
            Err(e) if e.is_connect() => {
                self.api.suspect.notify_one();
                Err(ToolFailure::unavailable(format!(
                    "the HTTP API at {} cannot be reached ({}); try again shortly",
                    self.api.base,
                    toolmesh::error_chain(&e)
                )))
            }
            Err(e) => Err(ToolFailure::executor_failed(format!(
                "{label} failed at the HTTP API at {} ({}); the call may or may not have taken effect",
                self.api.base,
                toolmesh::error_chain(&e)
            ))),
        }
    }
}

impl OperationTool {
    /// The HTTP request `arguments` make: the path's parameters
    /// substituted, the others in the query and headers, the body as JSON,
    /// then the bridge's credentials (which no argument can replace).
    fn request(&self, arguments: &Value) -> Result<reqwest::RequestBuilder, ToolFailure> {
        let operation = &self.operation;
        let argument = |key: &str| arguments.get(key).filter(|v| !v.is_null());
        let mut path = operation.path.clone();
        let mut query: Vec<(String, String)> = Vec::new();
        let mut headers = HeaderMap::new();
        for parameter in &operation.parameters {
            let Some(value) = argument(&parameter.key) else {
                if parameter.location == Location::Path {
                    return Err(ToolFailure::new(format!(
                        "the argument {:?} is required: it is part of the path {}",
                        parameter.key, operation.path
                    )));
                }
                continue;
            };
            match parameter.location {
                Location::Path => {
                    let text = if parameter.as_json {
                        value.to_string()
                    } else {
                        joined(value)
                    };
                    path = path.replace(&format!("{{{}}}", parameter.name), &encode_segment(&text));
                }
                Location::Query => {
                    for (name, text) in query_pairs(&parameter.name, value, parameter.as_json) {
                        query.push((name, text));
                    }
                }
                Location::Header => {
                    let text = if parameter.as_json {
                        value.to_string()
                    } else {
                        joined(value)
                    };
                    let name = HeaderName::from_bytes(parameter.name.as_bytes());
                    let value = HeaderValue::from_str(&text);
                    match (name, value) {
                        (Ok(name), Ok(value)) => {
                            headers.insert(name, value);
                        }
                        _ => {
                            return Err(ToolFailure::new(format!(
                                "the argument {:?} cannot be sent as the header {}: use visible ASCII",
                                parameter.key, parameter.name
                            )));
                        }
                    }
                }
            }
        }
        let mut url = self.api.base.clone();
        {
            let joined_path = format!("{}{}", url.path().trim_end_matches('/'), path);
            url.set_path(&joined_path);
        }
        if !query.is_empty() {
            url.query_pairs_mut().extend_pairs(query);
        }
        let method = self.method.clone().map_err(ToolFailure::executor_failed)?;
        headers.insert(
            ACCEPT,
            HeaderValue::from_static("application/json, */*;q=0.5"),
        );
        let mut request = self.api.client.request(method, url);
        if let Some(body) = &operation.body
            && let Some(value) = arguments.get(&body.key)
        {
            let media = HeaderValue::from_str(&body.media_type)
                .unwrap_or(HeaderValue::from_static("application/json"));
            headers.insert(CONTENT_TYPE, media);
            request = request.body(value.to_string());
        }
        for (name, value) in self.api.credentials.load().iter() {
            headers.insert(name.clone(), value.clone());
        }
        Ok(request.headers(headers))
    }
}

/// Characters a path segment keeps as they are (RFC 3986 unreserved).
fn encode_segment(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// A value as a path segment or header: text as it is, numbers and
/// booleans as written, arrays comma-separated (the `simple` style).
fn joined(value: &Value) -> String {
    match value {
        Value::String(text) => text.clone(),
        Value::Array(items) => items.iter().map(joined).collect::<Vec<_>>().join(","),
        other => other.to_string(),
    }
}

/// A query parameter's pairs in the `form` style with `explode`: an array
/// repeats the name, an object gives a pair per property.
fn query_pairs(name: &str, value: &Value, as_json: bool) -> Vec<(String, String)> {
    if as_json {
        return vec![(name.to_owned(), value.to_string())];
    }
    match value {
        Value::Array(items) => items
            .iter()
            .map(|item| (name.to_owned(), joined(item)))
            .collect(),
        Value::Object(members) => members
            .iter()
            .filter(|(_, v)| !v.is_null())
            .map(|(key, v)| (key.clone(), joined(v)))
            .collect(),
        other => vec![(name.to_owned(), joined(other))],
    }
}

/// The answer as the mesh's result or error: 2xx is the JSON (or text);
/// 4xx a tool error quoting the API's message; a refused credential, a
/// 5xx and any other status are system errors (UNAVAILABLE where trying
/// again later may help).
pub(crate) fn outcome(
    label: &str,
    status: StatusCode,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<ToolOutput, ToolFailure> {
    if status.is_success() {
        if body.is_empty() {
            return Ok(ToolOutput::text(""));
        }
        return Ok(match serde_json::from_slice::<Value>(body) {
            Ok(json) if is_json(headers) => ToolOutput::json(&json),
            _ => ToolOutput::text(String::from_utf8_lossy(body)),
        });
    }
    let said = match brief_message(body) {
        Some(message) => format!(": {message}"),
        None => String::new(),
    };
    let code = status.as_u16();
    let retry_after = headers
        .get(RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map(Duration::from_secs);
    let unavailable = |text: String| {
        let failure = ToolFailure::unavailable(text);
        match retry_after {
            Some(after) => failure.retry_after(after),
            None => failure,
        }
    };
    match code {
        401 | 407 => Err(ToolFailure::executor_failed(format!(
            "the HTTP API refused the bridge's credentials for {label} ({status}{said}); its operator must fix --bearer-file, --bearer-env or --header-env"
        ))),
        408 | 429 => Err(unavailable(format!(
            "{label} answered {status}{said}; try again shortly"
        ))),
        400..=499 => Err(ToolFailure::new(format!("{label} answered {status}{said}"))),
        502..=504 => Err(unavailable(format!(
            "{label} answered {status}{said}; the HTTP API is unavailable, try again shortly"
        ))),
        _ => Err(ToolFailure::executor_failed(format!(
            "{label} failed at the HTTP API ({status}{said})"
        ))),
    }
}

/// Whether the answer says it is JSON (or says nothing).
fn is_json(headers: &HeaderMap) -> bool {
    headers
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_none_or(|media| {
            let essence = media.split(';').next().unwrap_or("").trim();
            essence == "application/json" || essence.ends_with("+json")
        })
}

/// What an error answer says, briefly: FastAPI's `detail` (text, or each
/// validation error's place and message), RFC 7807's `title` and
/// `detail`, a `message` or `error`, else the start of its text.
pub(crate) fn brief_message(body: &[u8]) -> Option<String> {
    let text = String::from_utf8_lossy(body);
    let text = text.trim();
    if text.is_empty() {
        return None;
    }
    let said = serde_json::from_str::<Value>(text)
        .ok()
        .and_then(|json| said_in(&json));
    Some(cut(said.as_deref().unwrap_or(text)))
}

fn said_in(json: &Value) -> Option<String> {
    let string = |key: &str| json.get(key).and_then(Value::as_str).map(str::to_owned);
    if let Some(Value::Array(errors)) = json.get("detail") {
        let parts: Vec<String> = errors
            .iter()
            .map(|error| {
                let place: Vec<String> = error
                    .get("loc")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .map(joined)
                    .collect();
                let message = error
                    .get("msg")
                    .and_then(Value::as_str)
                    .unwrap_or("invalid");
                if place.is_empty() {
                    message.to_owned()
                } else {
                    format!("{}: {message}", place.join("."))
                }
            })
            .collect();
        return Some(parts.join("; "));
    }
    match (string("title"), string("detail")) {
        (Some(title), Some(detail)) => return Some(format!("{title}: {detail}")),
        (_, Some(detail)) => return Some(detail),
        _ => {}
    }
    string("message")
        .or_else(|| string("error"))
        .or_else(|| {
            json.get("error")
                .and_then(|e| e.get("message"))
                .and_then(Value::as_str)
                .map(str::to_owned)
        })
        .or_else(|| string("title"))
}

/// `text` cut to [`QUOTED_CHARS`] characters.
fn cut(text: &str) -> String {
    if text.chars().count() <= QUOTED_CHARS {
        return text.to_owned();
    }
    let mut cut: String = text.chars().take(QUOTED_CHARS).collect();
    cut.push('…');
    cut
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use toolmesh::pb::ErrorCode;

    fn answer(code: u16, body: &str) -> Result<ToolOutput, ToolFailure> {
        let mut headers = HeaderMap::new();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        outcome(
            "GET /x",
            StatusCode::from_u16(code).unwrap(),
            &headers,
            body.as_bytes(),
        )
    }

    /// 2xx is the JSON; 4xx a tool error quoting FastAPI's or RFC 7807's
    /// message; a refused credential, 500 and 503 system errors, 503
    /// retryable.
    #[test]
    fn statuses_map_to_error_classes() {
        let ok = answer(200, r#"{"a": 1}"#).unwrap();
        assert_eq!(ok.data(), r#"{"a":1}"#);
        let missing = answer(404, r#"{"detail": "no book with id 'x'"}"#).unwrap_err();
        assert_eq!(missing.code(), ErrorCode::ToolError);
        assert!(
            missing
                .message()
                .contains("404 Not Found: no book with id 'x'"),
            "{missing}"
        );
        let invalid = answer(
            422,
            r#"{"detail": [{"loc": ["body", "title"], "msg": "too short", "type": "x"}]}"#,
        )
        .unwrap_err();
        assert!(
            invalid.message().ends_with("body.title: too short"),
            "{invalid}"
        );
        let problem = answer(409, r#"{"title": "Conflict", "detail": "taken"}"#).unwrap_err();
        assert!(problem.message().ends_with("Conflict: taken"), "{problem}");
        let long = answer(400, &"x".repeat(500)).unwrap_err();
        assert!(long.message().chars().count() < 260, "{long}");
        assert_eq!(
            answer(401, "").unwrap_err().code(),
            ErrorCode::ExecutorFailed
        );
        let broken = answer(500, r#"{"detail": "on fire"}"#).unwrap_err();
        assert_eq!(broken.code(), ErrorCode::ExecutorFailed);
        assert!(!broken.is_retryable() && broken.message().contains("on fire"));
        let down = answer(503, "").unwrap_err();
        assert_eq!(down.code(), ErrorCode::Unavailable);
        assert!(down.is_retryable());
    }

    /// Path values are percent-encoded whole (a `/` or `?` stays inside the
    /// segment); query arrays repeat their name.
    #[test]
    fn values_are_encoded_for_their_place() {
        assert_eq!(encode_segment("a b/c?d"), "a%20b%2Fc%3Fd");
        assert_eq!(encode_segment("é"), "%C3%A9");
        assert_eq!(
            query_pairs("tag", &json!(["a", "b"]), false),
            [
                ("tag".to_owned(), "a".to_owned()),
                ("tag".to_owned(), "b".to_owned())
            ]
        );
        assert_eq!(joined(&json!([1, true])), "1,true");
    }
}
