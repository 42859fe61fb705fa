//! The admin page's HTML: the mesh view with its approve/deny forms (each carrying the session's CSRF token), and the login form.

use super::state::AdminState;
use std::fmt::Write as _;

/// The page's HTML; its forms carry `csrf`.
pub(super) fn render(state: &AdminState, who: &str, csrf: &str) -> String {
    let mut out = String::with_capacity(8192);
    let _ = write!(
        out,
        "<!doctype html><html><head><meta charset=utf-8><title>toolmesh admin</title><style>{STYLE}</style></head><body>\
         <h1>toolmesh</h1><p>snapshot <b id=snapshot>v{}</b> · <a href=/>refresh</a> · <a href=/api/state>JSON</a> · <a href=/metrics>metrics</a></p>\
         <form id=logout method=post action=/logout>signed in as <b id=who>{}</b> <input type=hidden name=csrf value=\"{csrf}\"><button>Log out</button></form>\
         <h2>Tools</h2><table id=tools><tr><th>tool</th><th>version</th><th>owner</th><th>health</th><th>instances</th></tr>",
        state.snapshot_version,
        escape(who),
        csrf = escape(csrf),
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
             <b>{id}</b> {summary}<br><input type=hidden name=id value=\"{id}\"><input type=hidden name=csrf value=\"{csrf}\">\
             <input name=reason placeholder=\"reason (deny)\">\
             <button name=decision value=approve>Approve</button> <button name=decision value=deny>Deny</button></form>",
            id = escape(&a.id),
            summary = escape(&a.summary),
            csrf = escape(csrf),
        );
    }
    out.push_str("<h2>Recent changes</h2><ul id=changes>");
    for change in &state.changes {
        let _ = write!(out, "<li>{}</li>", escape(change));
    }
    out.push_str("</ul></body></html>");
    out
}

/// The login form, with `error` (already plain text) when a login failed.
pub(super) fn login(error: Option<&str>) -> String {
    let error = error
        .map(|e| format!("<p id=error>{}</p>", escape(e)))
        .unwrap_or_default();
    format!(
        "<!doctype html><html><head><meta charset=utf-8><title>toolmesh admin: log in</title><style>{STYLE}</style></head><body>\
         <h1>toolmesh</h1>{error}<form id=login method=post action=/login>\
         <p>Log in with the token of a policy caller that has the role \"admin\" or \"operator\" \
         (under the development policy: <code>dev-approver</code>).</p>\
         <input type=password name=token placeholder=token autocomplete=off autofocus> <button>Log in</button></form></body></html>"
    )
}

/// A refusal or failure as a small page linking back.
pub(super) fn error_page(message: &str) -> String {
    format!(
        "<!doctype html><title>toolmesh admin</title><p id=error>{}</p><p><a href=/>back</a>",
        escape(message)
    )
}

const STYLE: &str = "body{font:14px system-ui,sans-serif;margin:2em;color:#222}table{border-collapse:collapse}\
td,th{border-bottom:1px solid #ddd;padding:4px 10px;text-align:left;vertical-align:top}\
.SERVING{color:#1a7f37;font-weight:600}.NOT_SERVING{color:#cf222e;font-weight:600}\
.instance.bad{color:#cf222e}small{color:#777}form.approval{margin:6px 0;padding:6px;background:#f6f8fa}";

/// `text` safe inside HTML text and attribute values.
pub(super) fn escape(text: &str) -> String {
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
