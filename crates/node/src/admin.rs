//! The admin page: a server-rendered view of the mesh (tools with their
//! instances, last minute of calls, switches and rollouts; snapshot;
//! recent changes; open approvals) and its JSON, for readers with the
//! `admin` or `operator` role only (a bearer token, or a session opened by
//! logging in with one); approve/deny forms checked exactly as the CLI's
//! `approve`/`deny` are, and — for admins, on a node that runs the
//! registry — disable/enable and promote/abort forms that make the same
//! registry operation as the CLI's `disable`/`enable`/`rollout`, each form
//! guarded by the session's CSRF token.

mod feed;
mod html;
mod sessions;
mod state;

use axum::Form;
use axum::Router;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use serde::Deserialize;
use serde_json::json;
use sessions::{COOKIE, Session, Sessions, same_secret};
use state::Sources;
use std::sync::Arc;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use toolmesh::Snapshot;
use toolmesh::pb;
use toolmesh_dispatcher::Dispatcher;
use toolmesh_governance::{ApprovalError, Identity};
use toolmesh_identity::{AccessError, AuthError, Principal, registry_access};
use toolmesh_registry::{RegistryError, RegistryService};
use toolmesh_telemetry::MetricsRegistry;

pub use feed::ChangeView;
pub(crate) use feed::Feed;
pub use state::{AdminState, ApprovalView, CallsView, InstanceView, RolloutView, ToolView};

/// What the admin routes are built from.
pub(crate) struct AdminPage {
    /// The snapshots shown.
    pub(crate) snapshots: watch::Receiver<Arc<Snapshot>>,
    /// The dispatcher, when this node runs one (it holds the approvals
    /// and counts the calls).
    pub(crate) dispatcher: Option<Dispatcher>,
    /// The registry's service, when this node runs one: the operators'
    /// decisions the page makes go through it, as the CLI's do.
    pub(crate) registry: Option<RegistryService>,
    /// The change feed (told by the node's decision journal who switched
    /// tools).
    pub(crate) feed: Arc<Feed>,
    /// Who readers are (the policy's tokens and its issuers' JWTs).
    pub(crate) identity: Identity,
    /// The metrics `/metrics` serves.
    pub(crate) metrics: MetricsRegistry,
    /// Serve `/metrics` to anyone (`--public-metrics`); else only to readers.
    pub(crate) public_metrics: bool,
    /// Served over HTTPS: the session cookie is `Secure`.
    pub(crate) https: bool,
}

/// What the handlers share.
#[derive(Clone)]
struct Page {
    sources: Sources,
    registry: Option<RegistryService>,
    identity: Identity,
    sessions: Arc<Sessions>,
    https: bool,
}

/// How a request proved who reads.
enum Reader {
    /// `Authorization: Bearer` on this request (no cookie: not forgeable
    /// by another site's form, so no CSRF token needed).
    Bearer(Principal),
    /// The session cookie.
    Session { id: String, session: Session },
}

impl Reader {
    fn principal(&self) -> &Principal {
        match self {
            Reader::Bearer(who) => who,
            Reader::Session { session, .. } => &session.principal,
        }
    }
}

/// Why the admin listener refused a request.
#[derive(Debug, thiserror::Error)]
enum Refused {
    #[error(transparent)]
    Access(#[from] AccessError),
    #[error(
        "this form is not from your session (its CSRF token is missing or wrong); reload the page and try again"
    )]
    Csrf,
    #[error("this node runs no dispatcher, so it holds no approvals")]
    NoDispatcher,
    #[error("{}", state::NO_REGISTRY)]
    NoRegistry,
    #[error(transparent)]
    Decision(#[from] RegistryError),
    #[error("a rollout is decided with action=promote or action=abort, not {0:?}")]
    BadAction(String),
    #[error(transparent)]
    Auth(#[from] AuthError),
    #[error(transparent)]
    Approval(#[from] ApprovalError),
}

impl Refused {
    fn status(&self) -> StatusCode {
        match self {
            Refused::Access(AccessError::Unavailable(_)) => StatusCode::SERVICE_UNAVAILABLE,
            Refused::Auth(e) if e.is_transient() => StatusCode::SERVICE_UNAVAILABLE,
            Refused::Access(AccessError::Unauthenticated(_)) | Refused::Auth(_) => {
                StatusCode::UNAUTHORIZED
            }
            Refused::Access(AccessError::Forbidden(_))
            | Refused::Csrf
            | Refused::Approval(
                ApprovalError::NotApprover { .. }
                | ApprovalError::SelfApproval { .. }
                | ApprovalError::OtherTenant { .. },
            ) => StatusCode::FORBIDDEN,
            Refused::NoDispatcher | Refused::NoRegistry => StatusCode::NOT_FOUND,
            Refused::Approval(_) => StatusCode::CONFLICT,
            Refused::Decision(refused) => decision_status(refused),
            Refused::BadAction(_) => StatusCode::BAD_REQUEST,
        }
    }

    /// As JSON (for `/api/state` and `/metrics`).
    fn json(self) -> Response {
        let status = self.status();
        let kind = if status == StatusCode::UNAUTHORIZED {
            "unauthorized"
        } else {
            "forbidden"
        };
        let body = json!({ "error": kind, "error_description": self.to_string() });
        challenge(status, (status, axum::Json(body)).into_response())
    }
}

impl IntoResponse for Refused {
    /// As a page: the login form when no credential was good.
    fn into_response(self) -> Response {
        let status = self.status();
        let body = if status == StatusCode::UNAUTHORIZED {
            html::login(Some(&self.to_string()))
        } else {
            html::error_page(&self.to_string())
        };
        challenge(status, (status, Html(body)).into_response())
    }
}

/// A 401 says how to authenticate.
fn challenge(status: StatusCode, mut response: Response) -> Response {
    if status == StatusCode::UNAUTHORIZED {
        response.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            HeaderValue::from_static("Bearer realm=\"toolmesh admin\""),
        );
    }
    response
}

/// The HTTP status of a refused decision, as its gRPC code would be.
fn decision_status(refused: &RegistryError) -> StatusCode {
    match tonic::Status::from(refused.clone()).code() {
        tonic::Code::InvalidArgument => StatusCode::BAD_REQUEST,
        tonic::Code::NotFound => StatusCode::NOT_FOUND,
        tonic::Code::FailedPrecondition | tonic::Code::Aborted => StatusCode::CONFLICT,
        tonic::Code::PermissionDenied | tonic::Code::Unauthenticated => StatusCode::FORBIDDEN,
        tonic::Code::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

/// The admin routes over `page`: `/`, `/api/state`, `/login`, `/logout`,
/// `/approvals/decide`, `/tools/disable`, `/tools/enable`,
/// `/rollouts/decide` and `/metrics`; a task records recent changes until `stop`.
pub(crate) fn routes(page: AdminPage, stop: CancellationToken) -> Router {
    tokio::spawn(
        stop.run_until_cancelled_owned(feed::follow(page.snapshots.clone(), page.feed.clone())),
    );
    let shared = Page {
        sources: Sources {
            snapshots: page.snapshots,
            dispatcher: page.dispatcher,
            feed: page.feed,
            registry: page.registry.is_some(),
            identity: page.identity.clone(),
        },
        registry: page.registry,
        identity: page.identity,
        sessions: Arc::default(),
        https: page.https,
    };
    let mut metrics = toolmesh_telemetry::metrics_routes(page.metrics);
    if !page.public_metrics {
        metrics = metrics.route_layer(middleware::from_fn_with_state(shared.clone(), readers_only));
    }
    Router::new()
        .route("/", get(index))
        .route("/api/state", get(state_json))
        .route("/login", get(login_form).post(login))
        .route("/logout", post(logout))
        .route("/approvals/decide", post(decide))
        .route("/tools/disable", post(disable))
        .route("/tools/enable", post(enable))
        .route("/rollouts/decide", post(decide_rollout))
        .with_state(shared)
        .merge(metrics)
}

impl Page {
    /// Who reads: the bearer token's principal when one is sent, else the
    /// session's; either must be an admin or operator.
    fn reader(&self, headers: &HeaderMap) -> Result<Reader, AccessError> {
        if let Some(bearer) = headers.get(header::AUTHORIZATION) {
            let bearer = bearer.to_str().ok();
            let who = self.admin_reader(bearer)?;
            return Ok(Reader::Bearer(who));
        }
        let id = sessions::cookie(headers, COOKIE).ok_or_else(|| {
            AccessError::Unauthenticated(
                "log in with the token of a policy caller that has the role \"admin\" or \"operator\", or send it as `Authorization: Bearer TOKEN`".to_owned(),
            )
        })?;
        let session = self
            .sessions
            .get(id, self.identity.policy().generation())
            .ok_or_else(|| {
                AccessError::Unauthenticated(
                    "your session has ended (it expired, or the policy was reloaded); log in again"
                        .to_owned(),
                )
            })?;
        Ok(Reader::Session {
            id: id.to_owned(),
            session,
        })
    }

    /// The admin or operator `bearer` names (a static token or a JWT of
    /// the policy's `[[issuers]]`).
    fn admin_reader(&self, bearer: Option<&str>) -> Result<Principal, AccessError> {
        registry_access::admin_reader(&self.identity, bearer)
    }

    /// The reader of a form post: a bearer token, or a session whose CSRF
    /// token the form carries.
    fn poster(&self, headers: &HeaderMap, csrf: &str) -> Result<Reader, Refused> {
        let reader = self.reader(headers)?;
        if let Reader::Session { session, .. } = &reader
            && !same_secret(&session.csrf, csrf)
        {
            return Err(Refused::Csrf);
        }
        Ok(reader)
    }
}

/// `/metrics` for readers only (unless `--public-metrics`).
async fn readers_only(State(page): State<Page>, request: Request, next: Next) -> Response {
    match page.reader(request.headers()) {
        Ok(_) => next.run(request).await,
        Err(e) => Refused::from(e).json(),
    }
}

async fn index(State(page): State<Page>, headers: HeaderMap) -> Result<Html<String>, Refused> {
    let reader = page.reader(&headers)?;
    let csrf = match &reader {
        Reader::Session { session, .. } => session.csrf.as_str(),
        Reader::Bearer(_) => "",
    };
    let state = page.sources.state(reader.principal()).await;
    Ok(Html(html::render(&state, &reader.principal().name, csrf)))
}

async fn state_json(State(page): State<Page>, headers: HeaderMap) -> Response {
    match page.reader(&headers) {
        Ok(reader) => axum::Json(page.sources.state(reader.principal()).await).into_response(),
        Err(e) => Refused::from(e).json(),
    }
}

async fn login_form() -> Html<String> {
    Html(html::login(None))
}

/// The login form.
#[derive(Debug, Deserialize)]
struct Login {
    #[serde(default)]
    token: String,
}

/// Checks the token and opens a session: the cookie holds only its random id.
async fn login(State(page): State<Page>, Form(form): Form<Login>) -> Result<Response, Refused> {
    let generation = page.identity.policy().generation();
    let who = page.admin_reader(Some(form.token.trim()))?;
    tracing::info!(principal = %who.name, "admin page login");
    let id = page.sessions.open(who, generation);
    let secure = if page.https { "; Secure" } else { "" };
    let cookie = format!(
        "{COOKIE}={id}; HttpOnly; SameSite=Strict; Path=/; Max-Age={}{secure}",
        sessions::LIFETIME.as_secs()
    );
    let mut response = Redirect::to("/").into_response();
    if let Ok(value) = HeaderValue::from_str(&cookie) {
        response.headers_mut().insert(header::SET_COOKIE, value);
    }
    Ok(response)
}

/// A form that carries only the CSRF token.
#[derive(Debug, Deserialize)]
struct Plain {
    #[serde(default)]
    csrf: String,
}

async fn logout(
    State(page): State<Page>,
    headers: HeaderMap,
    Form(form): Form<Plain>,
) -> Result<Response, Refused> {
    if let Reader::Session { id, .. } = page.poster(&headers, &form.csrf)? {
        page.sessions.close(&id);
    }
    let mut response = Redirect::to("/login").into_response();
    response.headers_mut().insert(
        header::SET_COOKIE,
        HeaderValue::from_static("toolmesh_admin=; HttpOnly; SameSite=Strict; Path=/; Max-Age=0"),
    );
    Ok(response)
}

/// The approve/deny form.
#[derive(Debug, Deserialize)]
struct Decision {
    id: String,
    /// `approve` or `deny`.
    decision: String,
    #[serde(default)]
    reason: String,
    /// The session's CSRF token.
    #[serde(default)]
    csrf: String,
}

/// Decides as the reader (the session's principal, or the bearer token's,
/// which need not be an admin or operator: the approver rules decide).
async fn decide(
    State(page): State<Page>,
    headers: HeaderMap,
    Form(form): Form<Decision>,
) -> Result<Redirect, Refused> {
    let dispatcher = page
        .sources
        .dispatcher
        .as_ref()
        .ok_or(Refused::NoDispatcher)?;
    let who = match headers.get(header::AUTHORIZATION) {
        Some(bearer) => {
            let token = bearer
                .to_str()
                .ok()
                .and_then(toolmesh_transport::bearer_token)
                .ok_or(AuthError::MissingToken)?;
            dispatcher.governance().authenticate(Some(token), None)?
        }
        None => page.poster(&headers, &form.csrf)?.principal().clone(),
    };
    let deny = (form.decision != "approve").then(|| {
        let reason = form.reason.trim();
        if reason.is_empty() {
            "denied by an approver"
        } else {
            reason
        }
    });
    let ticket = dispatcher.decide_approval(&who, &form.id, deny).await?;
    Ok(Redirect::to(&format!("/?decided={}", ticket.id)))
}

/// The disable and enable forms.
#[derive(Debug, Deserialize)]
struct SwitchForm {
    tool: String,
    /// Why (disable only).
    #[serde(default)]
    reason: String,
    /// The session's CSRF token.
    #[serde(default)]
    csrf: String,
}

/// The promote/abort form.
#[derive(Debug, Deserialize)]
struct RolloutForm {
    /// `name@canary`: acts only while that version is the canary.
    tool: String,
    /// `promote` or `abort`.
    action: String,
    /// Why (abort only).
    #[serde(default)]
    reason: String,
    /// The session's CSRF token.
    #[serde(default)]
    csrf: String,
}

impl Page {
    /// Who makes an operator's decision from a form post: a reader (bearer
    /// token, or session with its CSRF token) with the role the registry's
    /// RPCs need, on a node whose registry can make it.
    fn decider(
        &self,
        headers: &HeaderMap,
        csrf: &str,
    ) -> Result<(&RegistryService, Principal), Refused> {
        let who = self.poster(headers, csrf)?.principal().clone();
        registry_access::may_switch(&who)?;
        let registry = self.registry.as_ref().ok_or(Refused::NoRegistry)?;
        Ok((registry, who))
    }
}

/// Disables a tool as the reader: the registry operation `toolmesh disable` makes.
async fn disable(
    State(page): State<Page>,
    headers: HeaderMap,
    Form(form): Form<SwitchForm>,
) -> Result<Redirect, Refused> {
    let (registry, who) = page.decider(&headers, &form.csrf)?;
    let tool = form.tool.trim();
    registry
        .disable(tool, form.reason.trim(), &who.name)
        .await?;
    tracing::info!(principal = %who.name, tool, "tool disabled from the admin page");
    Ok(Redirect::to("/?done=disabled"))
}

/// Enables a tool as the reader: the registry operation `toolmesh enable` makes.
async fn enable(
    State(page): State<Page>,
    headers: HeaderMap,
    Form(form): Form<SwitchForm>,
) -> Result<Redirect, Refused> {
    let (registry, who) = page.decider(&headers, &form.csrf)?;
    let tool = form.tool.trim();
    registry.enable(tool, &who.name).await?;
    tracing::info!(principal = %who.name, tool, "tool enabled from the admin page");
    Ok(Redirect::to("/?done=enabled"))
}

/// Promotes or aborts a rollout as the reader: the registry operation
/// `toolmesh rollout promote|abort` makes.
async fn decide_rollout(
    State(page): State<Page>,
    headers: HeaderMap,
    Form(form): Form<RolloutForm>,
) -> Result<Redirect, Refused> {
    let (registry, who) = page.decider(&headers, &form.csrf)?;
    let action = match form.action.as_str() {
        "promote" => pb::RolloutAction::Promote,
        "abort" => pb::RolloutAction::Abort,
        other => return Err(Refused::BadAction(other.to_owned())),
    };
    let request = pb::UpdateRolloutRequest {
        action: action as i32,
        tool: form.tool.trim().to_owned(),
        reason: form.reason.trim().to_owned(),
        ..Default::default()
    };
    registry.change_rollout(request, who.name.clone()).await?;
    tracing::info!(principal = %who.name, tool = %form.tool, action = %form.action, "rollout decided from the admin page");
    Ok(Redirect::to(&format!("/?done={}", form.action)))
}
