//! The admin page: a server-rendered, read-only view of the mesh (tools,
//! instances, snapshot, recent changes, open approvals) and its JSON, with
//! approve/deny forms checked exactly as the CLI's `approve`/`deny` are.

use axum::Form;
use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, VecDeque};
use std::fmt::Write as _;
use std::sync::{Arc, Mutex, PoisonError};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use toolmesh::Snapshot;
use toolmesh_dispatcher::Dispatcher;
use toolmesh_governance::approvals::{ApprovalFields, ApprovalOp};
use toolmesh_governance::{ApprovalError, AuthError, Principal};

/// Who reads open approvals for the page (the operator-wide `Pending` view
/// does not filter by caller).
const ADMIN_PAGE: Principal = Principal {
    name: String::new(),
    tenant: String::new(),
    roles: Vec::new(),
    anonymous: false,
};

/// Changes kept for the page.
const RECENT_CHANGES: usize = 20;

/// What the page shows, also served as JSON at `/api/state`.
#[derive(Debug, Serialize)]
pub struct AdminState {
    /// The newest snapshot's version.
    pub snapshot_version: u64,
    /// Every tool version the snapshot holds.
    pub tools: Vec<ToolView>,
    /// Approvals waiting for an approver.
    pub approvals: Vec<ApprovalView>,
    /// What changed lately, newest first.
    pub changes: Vec<String>,
}

/// One tool version.
#[derive(Debug, Serialize)]
pub struct ToolView {
    /// Name.
    pub name: String,
    /// Version.
    pub version: String,
    /// Who answers for it.
    pub owner: String,
    /// `SERVING` when callable here, else `NOT_SERVING`.
    pub health: &'static str,
    /// Why an operator switched it off, if they did.
    pub disabled: Option<String>,
    /// Its instances.
    pub instances: Vec<InstanceView>,
}

/// One instance of a tool version.
#[derive(Debug, Serialize)]
pub struct InstanceView {
    /// Executor id.
    pub executor_id: String,
    /// host:port.
    pub endpoint: String,
    /// The registry's verdict.
    pub healthy: bool,
    /// Calls in flight from this dispatcher.
    pub in_flight: u32,
    /// Milliseconds left of an outlier ejection, if ejected.
    pub ejected_ms: Option<u64>,
}

/// One open approval.
#[derive(Debug, Serialize)]
pub struct ApprovalView {
    /// Its id, e.g. `a-3`.
    pub id: String,
    /// tool@version.
    pub tool: String,
    /// Who asked.
    pub caller: String,
    /// What the call would do.
    pub summary: String,
}

/// Why a decision from the page was refused.
#[derive(Debug, thiserror::Error)]
enum DecideError {
    #[error("this node runs no dispatcher, so it holds no approvals")]
    NoDispatcher,
    #[error(transparent)]
    Auth(#[from] AuthError),
    #[error(transparent)]
    Approval(#[from] ApprovalError),
}

impl IntoResponse for DecideError {
    fn into_response(self) -> Response {
        let status = match &self {
            DecideError::NoDispatcher => StatusCode::NOT_FOUND,
            DecideError::Auth(_) => StatusCode::UNAUTHORIZED,
            DecideError::Approval(
                ApprovalError::NotApprover { .. }
                | ApprovalError::SelfApproval { .. }
                | ApprovalError::OtherTenant { .. },
            ) => StatusCode::FORBIDDEN,
            DecideError::Approval(_) => StatusCode::CONFLICT,
        };
        let body = format!(
            "<!doctype html><title>toolmesh admin</title><p id=error>{}</p><p><a href=/>back</a>",
            escape(&self.to_string())
        );
        (status, Html(body)).into_response()
    }
}

/// What the page's handlers share.
#[derive(Clone)]
struct Page {
    snapshots: watch::Receiver<Arc<Snapshot>>,
    dispatcher: Option<Dispatcher>,
    changes: Arc<Mutex<VecDeque<String>>>,
}

/// The page's routes over `snapshots` (and the dispatcher, when this node
/// runs one); a task records recent changes until `stop`.
pub(crate) fn routes(
    snapshots: watch::Receiver<Arc<Snapshot>>,
    dispatcher: Option<Dispatcher>,
    stop: CancellationToken,
) -> Router {
    let changes = Arc::new(Mutex::new(VecDeque::new()));
    tokio::spawn(
        stop.run_until_cancelled_owned(record_changes(snapshots.clone(), changes.clone())),
    );
    let page = Page {
        snapshots,
        dispatcher,
        changes,
    };
    Router::new()
        .route("/", get(index))
        .route("/api/state", get(state_json))
        .route("/approvals/decide", post(decide))
        .with_state(page)
}

async fn index(State(page): State<Page>) -> Html<String> {
    Html(render(&page.state().await))
}

async fn state_json(State(page): State<Page>) -> axum::Json<AdminState> {
    axum::Json(page.state().await)
}

/// The approve/deny form.
#[derive(Debug, Deserialize)]
struct Decision {
    id: String,
    /// `approve` or `deny`.
    decision: String,
    /// The approver's bearer token (or send `authorization: Bearer …`).
    #[serde(default)]
    token: String,
    #[serde(default)]
    reason: String,
}

async fn decide(
    State(page): State<Page>,
    headers: HeaderMap,
    Form(form): Form<Decision>,
) -> Result<Redirect, DecideError> {
    let dispatcher = page.dispatcher.as_ref().ok_or(DecideError::NoDispatcher)?;
    let header_token = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(toolmesh::grpc::bearer_token);
    let token = Some(form.token.trim())
        .filter(|t| !t.is_empty())
        .or(header_token);
    let who = dispatcher.governance().authenticate(token, None)?;
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

impl Page {
    async fn state(&self) -> AdminState {
        let snapshot = self.snapshots.borrow().clone();
        let tools = snapshot
            .entries()
            .map(|entry| {
                let spec = entry.def.spec();
                let callable = match &self.dispatcher {
                    Some(d) => d.is_callable(entry),
                    None => entry.exposed(),
                };
                let instances = entry
                    .instances
                    .iter()
                    .map(|i| {
                        let (in_flight, ejected) = self
                            .dispatcher
                            .as_ref()
                            .map_or((0, None), |d| d.instance_state(&i.endpoint, &spec.name));
                        InstanceView {
                            executor_id: i.executor_id.to_string(),
                            endpoint: i.endpoint.to_string(),
                            healthy: i.healthy,
                            in_flight,
                            ejected_ms: ejected.map(|d| d.as_millis() as u64),
                        }
                    })
                    .collect();
                ToolView {
                    name: spec.name.clone(),
                    version: spec.version.clone(),
                    owner: spec.owner.clone(),
                    health: if callable { "SERVING" } else { "NOT_SERVING" },
                    disabled: entry.disabled.as_deref().map(str::to_owned),
                    instances,
                }
            })
            .collect();
        // Every tenant's pending approvals (the operator's view), from the
        // book the dispatcher keeps them in: its own, or the registry's.
        let pending = match &self.dispatcher {
            Some(d) => d
                .governance()
                .approval(ApprovalOp::Pending, &ADMIN_PAGE, ApprovalFields::default())
                .await
                .unwrap_or_else(|e| {
                    tracing::warn!(error = %e, "open approvals not read for the admin page");
                    Vec::new()
                }),
            None => Vec::new(),
        };
        let approvals = pending
            .into_iter()
            .map(|t| ApprovalView {
                tool: format!("{}@{}", t.tool, t.version),
                caller: t.caller.name.clone(),
                summary: t.summary,
                id: t.id,
            })
            .collect();
        let changes = self
            .changes
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .cloned()
            .collect();
        AdminState {
            snapshot_version: snapshot.version(),
            tools,
            approvals,
            changes,
        }
    }
}

/// Each executor's (service, healthy) per tool version, to diff snapshots.
fn instances_of(snapshot: &Snapshot) -> BTreeMap<(String, String), bool> {
    snapshot
        .entries()
        .flat_map(|e| {
            let label = e.def.label();
            e.instances
                .iter()
                .map(move |i| ((label.clone(), i.executor_id.to_string()), i.healthy))
        })
        .collect()
}

/// Records, for every new snapshot, which instances came, went or changed health.
async fn record_changes(
    mut snapshots: watch::Receiver<Arc<Snapshot>>,
    changes: Arc<Mutex<VecDeque<String>>>,
) {
    let mut before = instances_of(&snapshots.borrow_and_update());
    while snapshots.changed().await.is_ok() {
        let snapshot = snapshots.borrow_and_update().clone();
        let after = instances_of(&snapshot);
        let version = snapshot.version();
        let mut lines = Vec::new();
        for ((tool, executor), healthy) in &after {
            match before.get(&(tool.clone(), executor.clone())) {
                None => lines.push(format!("v{version}: {tool} on {executor} registered")),
                Some(was) if was != healthy => {
                    let now = if *healthy { "healthy" } else { "unhealthy" };
                    lines.push(format!("v{version}: {tool} on {executor} {now}"));
                }
                Some(_) => {}
            }
        }
        for (tool, executor) in before.keys() {
            if !after.contains_key(&(tool.clone(), executor.clone())) {
                lines.push(format!("v{version}: {tool} on {executor} gone"));
            }
        }
        let mut kept = changes.lock().unwrap_or_else(PoisonError::into_inner);
        for line in lines {
            kept.push_front(line);
        }
        kept.truncate(RECENT_CHANGES);
        drop(kept);
        before = after;
    }
}

/// The page's HTML.
fn render(state: &AdminState) -> String {
    let mut out = String::with_capacity(8192);
    let _ = write!(
        out,
        "<!doctype html><html><head><meta charset=utf-8><title>toolmesh admin</title><style>{STYLE}</style></head><body>\
         <h1>toolmesh</h1><p>snapshot <b id=snapshot>v{}</b> · <a href=/>refresh</a> · <a href=/api/state>JSON</a> · <a href=/metrics>metrics</a></p>\
         <h2>Tools</h2><table id=tools><tr><th>tool</th><th>version</th><th>owner</th><th>health</th><th>instances</th></tr>",
        state.snapshot_version
    );
    for tool in &state.tools {
        let mut instances = String::new();
        for i in &tool.instances {
            let status = match (i.healthy, i.ejected_ms) {
                (_, Some(ms)) => format!("ejected {ms} ms"),
                (true, None) => "healthy".to_owned(),
                (false, None) => "unhealthy".to_owned(),
            };
            let _ = write!(
                instances,
                "<div class=\"instance {}\">{} <small>{}</small> · {status} · {} in flight</div>",
                if i.healthy && i.ejected_ms.is_none() {
                    "ok"
                } else {
                    "bad"
                },
                escape(&i.executor_id),
                escape(&i.endpoint),
                i.in_flight
            );
        }
        let health = match &tool.disabled {
            Some(reason) => format!("DISABLED ({})", escape(reason)),
            None => tool.health.to_owned(),
        };
        let _ = write!(
            out,
            "<tr class=tool data-tool=\"{name}\" data-health=\"{h}\"><td>{name}</td><td>{}</td><td>{}</td><td class=\"health {h}\">{health}</td><td>{instances}</td></tr>",
            escape(&tool.version),
            escape(&tool.owner),
            name = escape(&tool.name),
            h = tool.health,
        );
    }
    out.push_str("</table><h2>Open approvals</h2>");
    if state.approvals.is_empty() {
        out.push_str("<p id=no-approvals>none</p>");
    }
    for a in &state.approvals {
        let _ = write!(
            out,
            "<form class=approval id=\"approval-{id}\" method=post action=/approvals/decide>\
             <b>{id}</b> {summary}<br><input type=hidden name=id value=\"{id}\">\
             <input type=password name=token placeholder=\"approver token\"> <input name=reason placeholder=\"reason (deny)\">\
             <button name=decision value=approve>Approve</button> <button name=decision value=deny>Deny</button></form>",
            id = escape(&a.id),
            summary = escape(&a.summary),
        );
    }
    out.push_str("<h2>Recent changes</h2><ul id=changes>");
    for change in &state.changes {
        let _ = write!(out, "<li>{}</li>", escape(change));
    }
    out.push_str("</ul></body></html>");
    out
}

const STYLE: &str = "body{font:14px system-ui,sans-serif;margin:2em;color:#222}table{border-collapse:collapse}\
td,th{border-bottom:1px solid #ddd;padding:4px 10px;text-align:left;vertical-align:top}\
.SERVING{color:#1a7f37;font-weight:600}.NOT_SERVING{color:#cf222e;font-weight:600}\
.instance.bad{color:#cf222e}small{color:#777}form.approval{margin:6px 0;padding:6px;background:#f6f8fa}";

/// `text` safe inside HTML text and attribute values.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Markup in tool names, summaries or reasons cannot reach the page as markup.
    #[test]
    fn escapes_markup() {
        assert_eq!(
            escape("<a href=\"x\">'&'</a>"),
            "&lt;a href=&quot;x&quot;&gt;&#39;&amp;&#39;&lt;/a&gt;"
        );
    }
}
