//! `POST /mcp` brought to JSON-RPC over HTTP around rmcp's service: any
//! `Accept` that allows JSON or SSE is served in a type it allows, a body
//! that is not a JSON-RPC message gets 400 with a JSON-RPC error, and a
//! `tools/call` repeating an argument key is refused before rmcp parses it.

use crate::repeated_keys;
use axum::body::{Body, Bytes, to_bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use rmcp::ErrorData;
use serde::Serialize;
use serde_json::{Value, json};

const JSON: &str = "application/json";
const SSE: &str = "text/event-stream";
/// The `Accept` rmcp is shown once this door has checked the client's own.
const JSON_AND_SSE: &str = "application/json, text/event-stream";

/// The largest request body `/mcp` reads (rmcp's own limit).
#[derive(Clone, Copy)]
pub(crate) struct BodyLimit(pub(crate) usize);

/// The middleware: checks `Accept` and the body of a `POST`, lets rmcp
/// answer, and puts its answer in a shape the client can read.
pub(crate) async fn normalise(
    State(BodyLimit(limit)): State<BodyLimit>,
    request: Request,
    next: Next,
) -> Response {
    if request.method() != Method::POST {
        return next.run(request).await;
    }
    let accepts = Accepts::of(request.headers());
    if !accepts.json && !accepts.sse {
        return error_response(
            StatusCode::NOT_ACCEPTABLE,
            ErrorData::invalid_request(
                "Not Acceptable: the Accept header allows neither application/json nor \
                 text/event-stream; send Accept: application/json, text/event-stream",
                None,
            ),
        );
    }
    let (mut parts, body) = request.into_parts();
    parts
        .headers
        .insert(header::ACCEPT, HeaderValue::from_static(JSON_AND_SSE));
    if !is_json(&parts.headers) {
        // rmcp answers 415, saying which Content-Type to send.
        return next.run(Request::from_parts(parts, body)).await;
    }
    let text = match to_bytes(body, limit).await {
        Ok(text) => text,
        Err(e) => return unreadable(e, limit),
    };
    let answer = match repeated_keys::refusal(&text) {
        Some(refusal) => message_response(StatusCode::OK, &refusal),
        None => {
            let answer = next
                .run(Request::from_parts(parts, Body::from(text.clone())))
                .await;
            if answer.status() == StatusCode::UNSUPPORTED_MEDIA_TYPE {
                // With a JSON Content-Type, rmcp's 415 means it could not read the body.
                return not_a_message(&text, answer).await;
            }
            answer
        }
    };
    in_an_accepted_type(answer, &accepts).await
}

/// `answer` in a media type the client accepts: an SSE answer collapsed to
/// its last response for a client that accepts only JSON, a JSON answer
/// framed as one event for a client that accepts only SSE.
async fn in_an_accepted_type(answer: Response, accepts: &Accepts) -> Response {
    let sse = content_type_is(answer.headers(), SSE);
    if sse && !accepts.sse {
        last_message_of(answer).await
    } else if !sse && !accepts.json && content_type_is(answer.headers(), JSON) {
        as_event_stream(answer).await
    } else {
        answer
    }
}

/// Which answers an `Accept` allows (no header at all allows any).
#[derive(Debug, PartialEq)]
struct Accepts {
    json: bool,
    sse: bool,
}

impl Accepts {
    fn of(headers: &HeaderMap) -> Accepts {
        let mut values = headers.get_all(header::ACCEPT).iter().peekable();
        if values.peek().is_none() {
            return Accepts {
                json: true,
                sse: true,
            };
        }
        let mut accepts = Accepts {
            json: false,
            sse: false,
        };
        let ranges = values
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','));
        for range in ranges {
            let mut fields = range.split(';');
            let essence = fields
                .next()
                .unwrap_or_default()
                .trim()
                .to_ascii_lowercase();
            if fields.any(refuses) {
                continue;
            }
            match essence.as_str() {
                "*/*" => (accepts.json, accepts.sse) = (true, true),
                "application/*" | JSON => accepts.json = true,
                "text/*" | SSE => accepts.sse = true,
                _ => {}
            }
        }
        accepts
    }
}

/// Whether a media-range parameter is `q=0` (the range is refused).
fn refuses(parameter: &str) -> bool {
    parameter.split_once('=').is_some_and(|(name, value)| {
        name.trim().eq_ignore_ascii_case("q") && value.trim().parse::<f32>() == Ok(0.0)
    })
}

fn is_json(headers: &HeaderMap) -> bool {
    content_type_is(headers, JSON)
}

fn content_type_is(headers: &HeaderMap, media_type: &str) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|essence| essence.trim().eq_ignore_ascii_case(media_type))
}

/// A body too large or cut short.
pub(crate) fn unreadable(error: axum::Error, limit: usize) -> Response {
    let too_large = std::error::Error::source(&error)
        .is_some_and(|e| e.is::<http_body_util::LengthLimitError>());
    if too_large {
        return error_response(
            StatusCode::PAYLOAD_TOO_LARGE,
            ErrorData::invalid_request(
                format!("the request body exceeds {limit} bytes; send a smaller request"),
                None,
            ),
        );
    }
    error_response(
        StatusCode::BAD_REQUEST,
        ErrorData::parse_error(
            format!("Parse error: the request body could not be read ({error}); send it again"),
            None,
        ),
    )
}

/// 400 for a body rmcp could not read: a parse error when it is not JSON,
/// else an invalid request (JSON, but no JSON-RPC message MCP defines).
async fn not_a_message(text: &Bytes, rmcp_answer: Response) -> Response {
    let error = match serde_json::from_slice::<serde::de::IgnoredAny>(text) {
        Err(e) => ErrorData::parse_error(
            format!("Parse error: the request body is not JSON ({e}); send one JSON-RPC message"),
            None,
        ),
        Ok(_) => {
            let detail = to_bytes(rmcp_answer.into_body(), 64 * 1024)
                .await
                .map(|b| String::from_utf8_lossy(&b).into_owned())
                .unwrap_or_default();
            ErrorData::invalid_request(
                format!(
                    "Invalid Request: the body is JSON but not an MCP JSON-RPC message ({detail}); \
                     send {{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/list\"}} or the like"
                ),
                None,
            )
        }
    };
    error_response(StatusCode::BAD_REQUEST, error)
}

/// An SSE answer for a client that accepts only JSON: its last response
/// (what came before it, progress notifications, the client did not ask
/// to hear).
async fn last_message_of(answer: Response) -> Response {
    let status = answer.status();
    let Ok(stream) = to_bytes(answer.into_body(), usize::MAX).await else {
        return error_response(
            StatusCode::INTERNAL_SERVER_ERROR,
            ErrorData::internal_error("the answer was cut short; send the request again", None),
        );
    };
    match last_response(&String::from_utf8_lossy(&stream)) {
        Some(message) => message_response(status, &message),
        None => error_response(
            StatusCode::INTERNAL_SERVER_ERROR,
            ErrorData::internal_error(
                "the server ended the answer without a response; send the request again",
                None,
            ),
        ),
    }
}

/// The last JSON-RPC response (or error) among the `data` of SSE events.
fn last_response(stream: &str) -> Option<Value> {
    let mut last = None;
    let mut data = String::new();
    for line in stream.lines().chain([""]) {
        if let Some(field) = line.strip_prefix("data:") {
            data.push_str(field.strip_prefix(' ').unwrap_or(field));
            data.push('\n');
        } else if line.is_empty() && !data.is_empty() {
            if let Ok(message) = serde_json::from_str::<Value>(&data)
                && message.get("id").is_some()
                && (message.get("result").is_some() || message.get("error").is_some())
            {
                last = Some(message);
            }
            data.clear();
        }
    }
    last
}

/// A JSON answer as one SSE event, for a client that accepts only SSE.
async fn as_event_stream(answer: Response) -> Response {
    let (mut parts, body) = answer.into_parts();
    let Ok(message) = to_bytes(body, usize::MAX).await else {
        return error_response(
            StatusCode::INTERNAL_SERVER_ERROR,
            ErrorData::internal_error("the answer was cut short; send the request again", None),
        );
    };
    parts
        .headers
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(SSE));
    parts.headers.remove(header::CONTENT_LENGTH);
    let mut event = b"event: message\ndata: ".to_vec();
    event.extend_from_slice(&message);
    event.extend_from_slice(b"\n\n");
    Response::from_parts(parts, Body::from(event))
}

/// An answer whose body is `message`, as JSON.
fn message_response(status: StatusCode, message: &impl Serialize) -> Response {
    (status, axum::Json(message)).into_response()
}

/// A JSON-RPC error for a request whose id could not be read (`id: null`).
fn error_response(status: StatusCode, error: ErrorData) -> Response {
    message_response(
        status,
        &json!({"jsonrpc": "2.0", "id": null, "error": error}),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn accepts(values: &[&str]) -> (bool, bool) {
        let mut headers = HeaderMap::new();
        for value in values {
            headers.append(header::ACCEPT, HeaderValue::from_str(value).unwrap());
        }
        let a = Accepts::of(&headers);
        (a.json, a.sse)
    }

    /// JSON alone, SSE alone, wildcards, q=0 and no header at all.
    #[test]
    fn accept_ranges() {
        assert_eq!(accepts(&[]), (true, true));
        assert_eq!(accepts(&["application/json"]), (true, false));
        assert_eq!(accepts(&["*/*"]), (true, true));
        assert_eq!(accepts(&["application/*;q=0.5"]), (true, false));
        assert_eq!(accepts(&["TEXT/Event-Stream"]), (false, true));
        assert_eq!(accepts(&["application/json;q=0, text/*"]), (false, true));
        assert_eq!(accepts(&["text/html", "image/png"]), (false, false));
        assert_eq!(accepts(&["text/html", "application/json"]), (true, false));
    }

    /// The last response of an SSE stream, past notifications, comments
    /// and multi-line data.
    #[test]
    fn last_response_of_a_stream() {
        let stream = ": ping\n\nevent: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{}}\n\nid: 3\ndata: {\"jsonrpc\":\"2.0\",\ndata: \"id\":4,\"result\":{}}\n\n";
        assert_eq!(
            last_response(stream),
            Some(json!({"jsonrpc": "2.0", "id": 4, "result": {}}))
        );
        assert_eq!(last_response("data: {\"method\":\"x\"}\n\n"), None);
    }
}
