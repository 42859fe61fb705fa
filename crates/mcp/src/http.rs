//! MCP over Streamable HTTP at `/mcp`: stateless (any replica answers any
//! request), JSON answers (SSE where a request streams), 401 with the
//! RFC 9728 resource-metadata hint for a caller the policy does not admit,
//! behind the Host/Origin allow-lists every HTTP door shares.

use crate::Drain;
use crate::handler::Authenticated;
use crate::{Backend, BackendError, McpHandler};
use axum::Router;
use axum::extract::connect_info::ConnectInfo;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use serde_json::json;
use toolmesh_telemetry::{ClientCertificate, HostGuard};

/// Where the protected-resource metadata document is served (RFC 9728).
const RESOURCE_METADATA: &str = "/.well-known/oauth-protected-resource";

/// Settings of the HTTP front door.
#[derive(Debug, Clone, Default)]
pub struct McpHttpConfig {
    /// `Host` values accepted (`host` or `host:port`); empty is loopback
    /// only (against DNS rebinding), `*` accepts any (behind a Kubernetes
    /// Service or a load balancer).
    pub allowed_hosts: Vec<String>,
    /// `Origin` values accepted from browser pages (`scheme://host[:port]`,
    /// `null`, `*`); empty accepts origins whose host is an allowed host.
    /// A request without `Origin` (not from a page) is not checked.
    pub allowed_origins: Vec<String>,
    /// Whether `/mcp` is served over TLS (the URLs it gives out say https).
    pub https: bool,
}

/// What the middleware and the metadata document need.
#[derive(Clone)]
struct Door<B> {
    backend: B,
    https: bool,
    /// The largest request body read (to see a scope-limited caller's method).
    body_limit: usize,
}

/// The `/mcp` endpoint and the metadata document, for `handler`; its
/// requests in flight are counted in `drain`, whose cue ends open streams.
pub fn router<B: Backend>(
    handler: McpHandler<B>,
    backend: B,
    config: &McpHttpConfig,
    drain: &Drain,
) -> Router {
    // Host and Origin are checked by the guard around the whole door (the
    // metadata document included), so rmcp's own check is off.
    let http = StreamableHttpServerConfig::default()
        .with_legacy_session_mode(false)
        .with_json_response(true)
        .with_cancellation_token(drain.streams())
        .disable_allowed_hosts()
        .disable_allowed_origins();
    let body_limit = crate::http_wire::BodyLimit(http.max_request_body_bytes);
    let service = StreamableHttpService::new(
        move || Ok(handler.clone()),
        LocalSessionManager::default().into(),
        http,
    );
    let https = config.https;
    let servers = backend.clone();
    let metadata = move |headers: HeaderMap| {
        let (servers, scopes) = (servers.authorization_servers(), servers.scopes_supported());
        async move { resource_metadata(&headers, https, &servers, &scopes) }
    };
    let door = Router::new()
        .nest_service("/mcp", service)
        .route_layer(middleware::from_fn_with_state(
            body_limit,
            crate::http_wire::normalise,
        ))
        .route_layer(middleware::from_fn_with_state(
            Door {
                backend,
                https,
                body_limit: body_limit.0,
            },
            admit::<B>,
        ))
        .route_layer(middleware::from_fn_with_state(
            drain.clone(),
            crate::drain::counted,
        ))
        .route(RESOURCE_METADATA, get(metadata.clone()))
        .route(&format!("{RESOURCE_METADATA}/mcp"), get(metadata));
    HostGuard::new(
        &config.allowed_hosts,
        "--mcp-allowed-hosts",
        &config.allowed_origins,
        "--mcp-allowed-origins",
    )
    .wrap(door)
}

/// Seconds a client waits before retrying a token that could not be
/// checked yet (the issuer's keys are fetched in well under that).
const RETRY_CHECK_AFTER: &str = "2";

/// Authenticates a request once, from its bearer token or else its client
/// certificate, and hands the caller to the handler in the request's
/// extensions; a caller the policy does not admit gets 401 pointing at the
/// metadata document.
async fn admit<B: Backend>(State(door): State<Door<B>>, request: Request, next: Next) -> Response {
    let bearer = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(toolmesh_transport::bearer_token);
    let certificate = request
        .extensions()
        .get::<ConnectInfo<ClientCertificate>>()
        .and_then(|ConnectInfo(c)| c.0.as_ref());
    match door.backend.authenticate(bearer, certificate) {
        Ok(who) => {
            let mut request = match scope_check(&door, &who, request).await {
                Ok(request) => request,
                Err(refused) => return refused,
            };
            request.extensions_mut().insert(Authenticated(who));
            next.run(request).await
        }
        Err(BackendError::Unauthenticated(why)) => unauthorized(
            &base_url(request.headers(), door.https),
            bearer.is_some(),
            &why,
        ),
        Err(BackendError::CannotCheckYet(why)) => {
            let mut response = (
                StatusCode::SERVICE_UNAVAILABLE,
                axum::Json(json!({ "error": "temporarily_unavailable", "error_description": why })),
            )
                .into_response();
            response.headers_mut().insert(
                header::RETRY_AFTER,
                HeaderValue::from_static(RETRY_CHECK_AFTER),
            );
            response
        }
        Err(e) => (
            StatusCode::BAD_GATEWAY,
            axum::Json(json!({ "error": "unavailable", "error_description": e.to_string() })),
        )
            .into_response(),
    }
}

/// The request again, or a 403 `insufficient_scope` answer when the
/// caller's token lacks the scope its JSON-RPC method needs. Only a caller
/// whose token lacks some scope has its body read here.
async fn scope_check<B: Backend>(
    door: &Door<B>,
    who: &B::Caller,
    request: Request,
) -> Result<Request, Response> {
    let lacks_any = door.backend.missing_scope(who, "tools/list").is_some()
        || door.backend.missing_scope(who, "tools/call").is_some();
    if !lacks_any || request.method() != axum::http::Method::POST {
        return Ok(request);
    }
    let (parts, body) = request.into_parts();
    let bytes = axum::body::to_bytes(body, door.body_limit)
        .await
        .map_err(|e| crate::http_wire::unreadable(e, door.body_limit))?;
    let messages = match serde_json::from_slice::<serde_json::Value>(&bytes) {
        Ok(serde_json::Value::Array(batch)) => batch,
        Ok(message) => vec![message],
        Err(_) => Vec::new(),
    };
    let refused = messages.iter().find_map(|message| {
        let method = message["method"].as_str()?;
        let scope = door.backend.missing_scope(who, method)?;
        let action = if method == "tools/call" {
            "calling tools"
        } else {
            "listing tools"
        };
        Some((message["id"].clone(), scope, action))
    });
    if let Some((id, scope, action)) = refused {
        let why = toolmesh::MissingScopes::refusal(action, &scope);
        let base = base_url(&parts.headers, door.https);
        // The body is a JSON-RPC error answering the request: what clients show.
        let error = rmcp::ErrorData::invalid_request(
            why,
            Some(json!({ "error": "insufficient_scope", "scope": scope })),
        );
        return Err(challenge(
            StatusCode::FORBIDDEN,
            format!(
                "Bearer error=\"insufficient_scope\", scope=\"{scope}\", resource_metadata=\"{base}{RESOURCE_METADATA}/mcp\""
            ),
            json!({ "jsonrpc": "2.0", "id": id, "error": error }),
        ));
    }
    Ok(Request::from_parts(parts, axum::body::Body::from(bytes)))
}

/// 401 with `WWW-Authenticate: Bearer resource_metadata="…"` and the
/// reason in the body.
fn unauthorized(base: &str, sent_token: bool, why: &str) -> Response {
    let mut header = format!("Bearer resource_metadata=\"{base}{RESOURCE_METADATA}/mcp\"");
    if sent_token {
        header.push_str(", error=\"invalid_token\"");
    }
    challenge(
        StatusCode::UNAUTHORIZED,
        header,
        json!({ "error": "unauthorized", "error_description": why }),
    )
}

/// An error answer: `status`, a `WWW-Authenticate` challenge and `body`.
fn challenge(status: StatusCode, header: String, body: serde_json::Value) -> Response {
    let mut response = (status, axum::Json(body)).into_response();
    if let Ok(value) = HeaderValue::from_str(&header) {
        response
            .headers_mut()
            .insert(header::WWW_AUTHENTICATE, value);
    }
    response
}

/// The RFC 9728 protected-resource metadata of `/mcp`: a bearer token in
/// the `Authorization` header (a `[[callers]]` token, or a JWT of one of
/// the policy's `[[issuers]]`, named as `authorization_servers`).
fn resource_metadata(
    headers: &HeaderMap,
    https: bool,
    servers: &[String],
    scopes: &[String],
) -> Response {
    let base = base_url(headers, https);
    let mut document = json!({
        "resource": format!("{base}/mcp"),
        "bearer_methods_supported": ["header"],
        "resource_name": "toolmesh",
    });
    if !servers.is_empty() {
        document["authorization_servers"] = json!(servers);
    }
    if !scopes.is_empty() {
        document["scopes_supported"] = json!(scopes);
    }
    axum::Json(document).into_response()
}

/// `scheme://host` as the client addressed this server.
fn base_url(headers: &HeaderMap, tls: bool) -> String {
    let host = headers
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("localhost");
    let scheme = headers
        .get("x-forwarded-proto")
        .and_then(|v| v.to_str().ok())
        .unwrap_or(if tls { "https" } else { "http" });
    format!("{scheme}://{host}")
}
