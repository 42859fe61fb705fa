//! The admin page's HTML: the mesh view — per tool version its instances, last minute of calls, switch and rollout, with disable/enable and promote/abort forms for admins — recent changes, approvals with approve/deny forms (every form carrying the session's CSRF token), and the login form.

use super::feed::ChangeView;
use super::state::{AdminState, ApprovalView, CallsView, IssuerView, RolloutView, ToolView};
use std::fmt::Write as _;

/// The page's HTML; its forms carry `csrf`.
pub(super) fn render(state: &AdminState, who: &str, csrf: &str) -> String {
    let mut out = String::with_capacity(8192);
    let csrf = escape(csrf);
    let _ = write!(
        out,
        "<!doctype html><html><head><meta charset=utf-8><title>toolmesh admin</title><style>{STYLE}</style></head><body>\
         <h1>toolmesh</h1><p>snapshot <b id=snapshot>v{}</b> · <a href=/>refresh</a> · <a href=/api/state>JSON</a> · <a href=/metrics>metrics</a></p>\
         <form id=logout method=post action=/logout>signed in as <b id=who>{}</b> <input type=hidden name=csrf value=\"{csrf}\"><button>Log out</button></form>",
        state.snapshot_version,
        escape(who),
    );
    if let Some(why) = &state.may_not_act_because {
        let _ = write!(out, "<p id=read-only>Read only: {}</p>", escape(why));
    }
    out.push_str(
        "<h2>Tools</h2><table id=tools><tr><th>tool</th><th>version</th><th>owner</th><th>health</th>\
         <th>instances</th><th>last minute</th><th>rollout</th>",
    );
    if state.may_act {
        out.push_str("<th>switch</th>");
    }
    out.push_str("</tr>");
    let mut previous: Option<&str> = None;
    for tool in &state.tools {
        // A switch covers every version of a name: one form, on its first row.
        let switch = state
            .may_act
            .then_some(previous != Some(tool.name.as_str()));
        tool_row(&mut out, tool, switch, state.may_act, &csrf);
        previous = Some(&tool.name);
    }
    out.push_str("</table><h2>Open approvals</h2>");
    if state.approvals.is_empty() {
        out.push_str("<p id=no-approvals>none</p>");
    }
    for approval in &state.approvals {
        approval_form(&mut out, approval, &csrf);
    }
    out.push_str("<h2>Recent changes</h2><ul id=changes>");
    for change in &state.changes {
        change_item(&mut out, change);
    }
    out.push_str("</ul>");
    issuers(&mut out, &state.issuers);
    out.push_str("</body></html>");
    out
}

/// The identity providers' keys, when the policy trusts any.
fn issuers(out: &mut String, issuers: &[IssuerView]) {
    if issuers.is_empty() {
        return;
    }
    out.push_str(
        "<h2>Identity providers</h2><table id=issuers><tr><th>issuer</th><th>keys</th><th>state</th></tr>",
    );
    for issuer in issuers {
        let state = match (issuer.keys, issuer.stale, &issuer.last_error) {
            (0, _, Some(why)) => format!("NO KEYS: tokens refused ({})", escape(why)),
            (0, _, None) => "fetching".to_owned(),
            (_, true, why) => format!(
                "STALE: last good keys serve ({})",
                escape(why.as_deref().unwrap_or_default())
            ),
            (_, false, _) => format!("fresh ({} s old)", issuer.age_s.unwrap_or_default()),
        };
        let _ = write!(
            out,
            "<tr data-issuer=\"{issuer_url}\" data-keys={keys} data-stale={stale}><td>{issuer_url}</td><td>{keys}</td><td>{state}</td></tr>",
            issuer_url = escape(&issuer.issuer),
            keys = issuer.keys,
            stale = issuer.stale,
        );
    }
    out.push_str("</table>");
}

/// One tool version's row; `switch`: whether it has the switch column
/// (Some) and the name's switch form (Some(true)).
fn tool_row(out: &mut String, tool: &ToolView, switch: Option<bool>, may_act: bool, csrf: &str) {
    let name = escape(&tool.name);
    let health = match &tool.disabled {
        Some(reason) => format!("DISABLED ({})", escape(reason)),
        None => tool.health.to_owned(),
    };
    let _ = write!(
        out,
        "<tr class=tool data-tool=\"{name}\" data-version=\"{version}\" data-health=\"{h}\" data-disabled=\"{disabled}\">\
         <td>{name}</td><td>{version}</td><td>{owner}</td><td class=\"health {h}\">{health}</td><td class=instances><b>{healthy}/{total} healthy</b>",
        version = escape(&tool.version),
        owner = escape(&tool.owner),
        h = tool.health,
        disabled = tool.disabled.is_some(),
        healthy = tool.healthy_instances,
        total = tool.instances.len(),
    );
    for i in &tool.instances {
        let status = match (i.healthy, i.ejected_ms) {
            (_, Some(ms)) => format!("ejected {ms} ms"),
            (true, None) => "healthy".to_owned(),
            (false, None) => "unhealthy".to_owned(),
        };
        let _ = write!(
            out,
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
    out.push_str("</td>");
    calls_cell(out, tool.calls.as_ref());
    out.push_str("<td class=rollout>");
    if let Some(rollout) = &tool.rollout {
        rollout_cell(out, rollout, may_act, csrf);
    }
    out.push_str("</td>");
    match switch {
        Some(true) => switch_cell(out, tool, csrf),
        Some(false) => out.push_str("<td></td>"),
        None => {}
    }
    out.push_str("</tr>");
}

/// Calls per second, error rate and p95 over the last minute.
fn calls_cell(out: &mut String, calls: Option<&CallsView>) {
    let Some(c) = calls else {
        out.push_str("<td class=calls>no dispatcher here</td>");
        return;
    };
    let p95 = match c.p95_ms {
        Some(ms) if ms < 10.0 => format!("{ms:.2} ms"),
        Some(ms) => format!("{ms:.0} ms"),
        None => "–".to_owned(),
    };
    let _ = write!(
        out,
        "<td class=calls data-calls={} data-errors={} title=\"{} calls, {} failed, over the last {} s\">\
         {:.2}/s<br>{:.1}% errors<br>p95 {p95}</td>",
        c.calls,
        c.errors,
        c.calls,
        c.errors,
        c.window_s,
        c.per_second,
        c.error_rate * 100.0,
    );
}

/// The rollout: side, canary, share, state, who; promote and abort for an
/// admin on the canary's row while it is active.
fn rollout_cell(out: &mut String, rollout: &RolloutView, may_act: bool, csrf: &str) {
    let canary = escape(&rollout.canary);
    let _ = write!(
        out,
        "<span class=\"rollout {state}\" data-side={side} data-state={state}>{side}{of} {canary} at {share} · {state}</span> <small>by {by}</small>",
        of = if rollout.side == "canary" {
            ""
        } else {
            "; canary"
        },
        side = rollout.side,
        state = rollout.state,
        share = escape(&rollout.share),
        by = escape(&rollout.changed_by),
    );
    if !rollout.reason.is_empty() {
        let how = if rollout.automatic {
            "automatically: "
        } else {
            ""
        };
        let _ = write!(out, "<div class=why>{how}{}</div>", escape(&rollout.reason));
    }
    if may_act && rollout.side == "canary" && rollout.state == "active" {
        let _ = write!(
            out,
            "<form class=rollout-decision method=post action=/rollouts/decide>\
             <input type=hidden name=tool value=\"{canary}\"><input type=hidden name=csrf value=\"{csrf}\">\
             <input name=reason placeholder=\"reason (abort)\"> \
             <button name=action value=promote>Promote</button> <button name=action value=abort>Abort</button></form>"
        );
    }
}

/// Disable (with its reason) or enable.
fn switch_cell(out: &mut String, tool: &ToolView, csrf: &str) {
    let name = escape(&tool.name);
    let hidden = format!(
        "<input type=hidden name=tool value=\"{name}\"><input type=hidden name=csrf value=\"{csrf}\">"
    );
    if tool.disabled.is_some() {
        let _ = write!(
            out,
            "<td><form class=enable method=post action=/tools/enable>{hidden}\
             <button title=\"switches every version of {name} back on\">Enable</button></form></td>"
        );
    } else {
        let _ = write!(
            out,
            "<td><form class=disable method=post action=/tools/disable>{hidden}\
             <input name=reason required placeholder=\"reason (required)\"> \
             <button title=\"switches off every version of {name}\">Disable</button></form></td>"
        );
    }
}

/// An open approval: its heading, one argument per line, and the buttons.
fn approval_form(out: &mut String, approval: &ApprovalView, csrf: &str) {
    let id = escape(&approval.id);
    let _ = write!(
        out,
        "<form class=approval id=\"approval-{id}\" method=post action=/approvals/decide>\
         <b>{id}</b> {}<ol class=args>",
        escape(&approval.heading),
    );
    for argument in &approval.arguments {
        let _ = write!(out, "<li>{}</li>", argument_line(argument));
    }
    let _ = write!(
        out,
        "</ol><input type=hidden name=id value=\"{id}\"><input type=hidden name=csrf value=\"{csrf}\">\
         <input name=reason placeholder=\"reason (deny)\">\
         <button name=decision value=approve>Approve</button> <button name=decision value=deny>Deny</button></form>"
    );
}

/// One `name = value` line, escaped, its cut marker (`… (N characters)`)
/// made to stand out.
fn argument_line(line: &str) -> String {
    if line.ends_with(" characters)")
        && let Some(at) = line.rfind("… (")
    {
        let (value, marker) = line.split_at(at);
        return format!("{}<mark class=cut>{}</mark>", escape(value), escape(marker));
    }
    escape(line)
}

/// One change of the feed: when, which snapshot, what, who.
fn change_item(out: &mut String, change: &ChangeView) {
    let at = escape(&change.at);
    let _ = write!(
        out,
        "<li data-by=\"{by}\"><time datetime=\"{at}\">{at}</time> <small>v{}</small> {}",
        change.snapshot_version,
        escape(&change.what),
        by = escape(change.by.as_deref().unwrap_or_default()),
    );
    if let Some(by) = &change.by {
        let _ = write!(out, " <small>by</small> <b>{}</b>", escape(by));
    }
    out.push_str("</li>");
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
.instance.bad{color:#cf222e}small,time{color:#777}form.approval{margin:6px 0;padding:6px;background:#f6f8fa}\
ol.args{margin:4px 0;font-family:ui-monospace,monospace;white-space:pre-wrap;word-break:break-all}mark.cut{background:#fff3bf}\
td.calls{white-space:nowrap}.rollout.active{color:#9a6700}.rollout.aborted{color:#cf222e}#read-only{color:#777}form{margin:2px 0}";

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

    const HOSTILE: &str = "<script>alert(1)</script>";

    /// A state whose every text field is hostile markup: a disabled tool
    /// and one under an active rollout, an approval, a change.
    fn hostile_state(may_act: bool) -> AdminState {
        let tool = |name: &str, version: &str, disabled: Option<String>, rollout| ToolView {
            name: format!("{name}{HOSTILE}"),
            version: version.to_owned(),
            owner: HOSTILE.into(),
            health: "SERVING",
            disabled,
            healthy_instances: 1,
            instances: vec![],
            calls: Some(CallsView {
                window_s: 60,
                calls: 120,
                errors: 3,
                per_second: 2.0,
                error_rate: 0.025,
                p95_ms: Some(12.5),
            }),
            rollout,
        };
        let rollout = RolloutView {
            side: "canary",
            canary: format!("t{HOSTILE}@2.0.0"),
            share: "25%".into(),
            state: "active",
            changed_by: HOSTILE.into(),
            reason: HOSTILE.into(),
            automatic: false,
        };
        AdminState {
            snapshot_version: 7,
            tools: vec![
                tool("t", "1.0.0", Some(HOSTILE.into()), None),
                tool("t", "2.0.0", None, Some(rollout)),
                tool("u", "1.0.0", None, None),
            ],
            approvals: vec![ApprovalView {
                id: "a-1".into(),
                tool: "pay@1.0.0".into(),
                caller: "bot".into(),
                summary: String::new(),
                heading: format!("pay@1.0.0 for {HOSTILE}:"),
                arguments: vec![
                    format!("payee = \"{HOSTILE}\""),
                    "memo = \"mmmm… (430 characters)".into(),
                ],
            }],
            changes: vec![ChangeView {
                at: "2026-12-01T10:00:00.000Z".into(),
                at_ms: 0,
                snapshot_version: 7,
                what: format!("t{HOSTILE} disabled: {HOSTILE}"),
                by: Some(HOSTILE.into()),
            }],
            may_act,
            may_not_act_because: (!may_act).then(|| format!("{HOSTILE} is an operator")),
            issuers: vec![IssuerView {
                issuer: format!("https://idp.test/{HOSTILE}"),
                keys: 2,
                age_s: Some(400),
                stale: true,
                failures: 3,
                last_error: Some(format!("GET {HOSTILE}: HTTP 500")),
            }],
        }
    }

    /// An admin gets disable (with a required reason) or enable once per
    /// tool name, and promote/abort on the active canary's row, each form
    /// with the CSRF token; nothing hostile reaches the page as markup.
    #[test]
    fn admins_get_the_forms_and_everything_is_escaped() {
        let page = render(&hostile_state(true), HOSTILE, "c0ffee");
        assert!(!page.contains("<script"), "{page}");
        assert_eq!(page.matches("action=/tools/disable").count(), 1, "{page}");
        assert_eq!(page.matches("action=/tools/enable").count(), 1, "{page}");
        assert_eq!(page.matches("action=/rollouts/decide").count(), 1, "{page}");
        assert!(page.contains("<input name=reason required"), "{page}");
        // logout, approval, disable, enable, rollout: each carries the token.
        assert_eq!(page.matches("name=csrf value=\"c0ffee\"").count(), 5);
        assert!(page.contains("data-calls=120 data-errors=3"), "{page}");
        assert!(
            page.contains("2.00/s<br>2.5% errors<br>p95 12 ms"),
            "{page}"
        );
        assert!(page.contains("<b>1/0 healthy</b>"), "{page}");
        assert!(page.contains("<time datetime=\"2026-12-01T10:00:00.000Z\">"));
        assert!(page.contains("data-keys=2 data-stale=true"), "{page}");
        assert!(
            page.contains("STALE: last good keys serve (GET &lt;script"),
            "{page}"
        );
        assert!(!page.contains("id=read-only"));
    }

    /// A reader who may not act sees why, and no form but logout and the
    /// approvals'.
    #[test]
    fn readers_who_may_not_act_get_no_forms() {
        let page = render(&hostile_state(false), "alice", "c0ffee");
        for action in ["/tools/disable", "/tools/enable", "/rollouts/decide"] {
            assert!(!page.contains(action), "{action}: {page}");
        }
        assert!(page.contains("<p id=read-only>Read only: &lt;script&gt;"));
        assert!(!page.contains("<script"), "{page}");
    }

    /// One argument per line, escaped; a cut value's marker stands out.
    #[test]
    fn approvals_show_one_argument_per_line() {
        let page = render(&hostile_state(true), "ops", "c");
        assert!(
            page.contains(
                "<ol class=args><li>payee = &quot;&lt;script&gt;alert(1)&lt;/script&gt;&quot;</li>\
                 <li>memo = &quot;mmmm<mark class=cut>… (430 characters)</mark></li></ol>"
            ),
            "{page}"
        );
        assert_eq!(argument_line("a = 1"), "a = 1");
        assert_eq!(argument_line("a = \"… (\""), "a = &quot;… (&quot;");
    }
}
