//! The admin page in a real browser: Debian's headless Chromium, driven over
//! WebDriver (chromedriver, plain HTTP + JSON) against a running mesh. It
//! shows the tools, reacts to a kill -9 of an executor, and approves an
//! approval through its button; an operator gets no switches and its
//! forged post is refused; an admin sees each tool's last minute of calls,
//! disables and enables a tool and aborts and promotes a rollout through its
//! buttons, each decision in the feed with its time and author; the
//! screenshot it takes is the README's.

use serde_json::{Value, json};
use std::time::Duration;
use tonic::transport::Channel;
use toolmesh::pb::{CallContext, ErrorCode, InvokeRequest, dispatcher_client::DispatcherClient};
use toolmesh_system_tests::*;
use toolmesh_testkit::http;

/// acme's agent, approver (an operator), admin and executor; acc_charge needs an approval.
fn admin_policy() -> String {
    PolicyBuilder::new()
        .no_anonymous()
        .caller(acme_agent())
        .caller(
            Caller::token("tok-approver", "alice")
                .tenant("acme")
                .roles(&["approver", "operator"]),
        )
        .caller(
            Caller::token("tok-admin", "ops")
                .tenant("acme")
                .roles(&["admin"]),
        )
        .caller(
            Caller::token("tok-exec", "platform-team")
                .tenant("acme")
                .roles(&["executor"]),
        )
        .grant(
            "agents",
            &["agent"],
            &["acc_echo", "acc_charge", "acc_panic", "search_kb"],
        )
        .then("[approval]\napprover_roles = [\"approver\"]\nrequire_for_tools = [\"acc_charge\"]\n")
        .build_toml()
}

/// The WebDriver element reference key (W3C).
const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

/// A chromedriver process and one browser session in it.
struct Browser {
    _driver: Proc,
    addr: String,
    session: String,
    _profile: TempDir,
}

impl Browser {
    /// Starts chromedriver and a headless Chromium session; fails loudly
    /// when scripts/prepare/chromium.sh has not run.
    fn start() -> Browser {
        let chromium = std::env::var("TOOLMESH_TEST_CHROMIUM").expect(
            "TOOLMESH_TEST_CHROMIUM is not set: run scripts/test (scripts/prepare/chromium.sh installs Debian's chromium and chromium-driver)",
        );
        let driver_bin = std::env::var("TOOLMESH_TEST_CHROMEDRIVER")
            .expect("TOOLMESH_TEST_CHROMEDRIVER is not set: run scripts/test");
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let mut command = std::process::Command::new(driver_bin);
        command.arg(format!("--port={port}"));
        let driver = toolmesh_procs::Spawn::new("chromedriver", command)
            .stdout_lines()
            .stderr(toolmesh_procs::Stderr::Lines { echo: false })
            .own_group()
            .start()
            .expect("start chromedriver");
        driver.wait_for_line("started successfully", Duration::from_secs(30));
        let addr = format!("127.0.0.1:{port}");
        let profile = temp_dir("chromium-profile");
        let args = [
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--window-size=1200,820",
            &format!("--user-data-dir={}", profile.path().display()),
        ];
        let capabilities = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {"binary": chromium, "args": args},
        }}});
        let created = webdriver(&addr, "POST", "/session", Some(capabilities));
        let session = created["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no session: {created}"))
            .to_owned();
        Browser {
            _driver: driver,
            addr,
            session,
            _profile: profile,
        }
    }

    fn call(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        let path = format!("/session/{}{path}", self.session);
        webdriver(&self.addr, method, &path, body)
    }

    fn open(&self, url: &str) {
        self.call("POST", "/url", Some(json!({ "url": url })));
    }

    /// Runs `script` in the page and returns its value.
    fn eval(&self, script: &str) -> Value {
        self.call(
            "POST",
            "/execute/sync",
            Some(json!({"script": script, "args": []})),
        )
    }

    /// The element `css` selects.
    fn element(&self, css: &str) -> String {
        let found = self.call(
            "POST",
            "/element",
            Some(json!({"using": "css selector", "value": css})),
        );
        found[ELEMENT]
            .as_str()
            .unwrap_or_else(|| panic!("no element {css}: {found}"))
            .to_owned()
    }

    /// Types `text` into the element `css` selects.
    fn type_into(&self, css: &str, text: &str) {
        let element = self.element(css);
        self.call(
            "POST",
            &format!("/element/{element}/value"),
            Some(json!({ "text": text })),
        );
    }

    /// Clicks the submit button `css` selects and waits until the page its
    /// form posts to has loaded, so that no reload cuts the post short.
    async fn submit(&self, css: &str) {
        let element = self.element(css);
        self.eval("window.toolmeshOldPage = true; return null;");
        self.call(
            "POST",
            &format!("/element/{element}/click"),
            Some(json!({})),
        );
        eventually(
            &format!("the page after clicking {css}"),
            Duration::from_secs(60),
            || {
                let loaded = self.eval(
                    "return window.toolmeshOldPage === undefined && document.readyState === 'complete';",
                );
                std::future::ready((loaded == true).then_some(()))
            },
        )
        .await;
    }

    /// The value `script` returns once it is neither null nor false, the
    /// page reloaded from `url` before each try; a script that throws (an
    /// element not rendered yet) counts as a try that did not see it.
    async fn until(&self, what: &str, url: &str, script: &str) -> Value {
        eventually(what, Duration::from_secs(30), || {
            self.open(url);
            // The page may not show the element yet: that is a "not yet".
            let value = self.eval(&format!("try {{ {script} }} catch (_) {{ return null; }}"));
            std::future::ready((!value.is_null() && value != false).then_some(value))
        })
        .await
    }

    /// Logs in on the login form with `token`; waits for the page to name `who`.
    async fn log_in(&self, url: &str, token: &str, who: &str) {
        self.open(url);
        self.type_into("#login input[name=token]", token);
        self.submit("#login button").await;
        eventually(
            &format!("logged in as {who}"),
            Duration::from_secs(10),
            || {
                let shown = self.eval(
                    "const b = document.getElementById('who'); return b ? b.innerText : null;",
                );
                std::future::ready((shown == who).then_some(()))
            },
        )
        .await;
    }

    fn screenshot(&self) -> Vec<u8> {
        let encoded = self.call("GET", "/screenshot", None);
        base64_decode(encoded.as_str().expect("screenshot as base64"))
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        // Best effort: the driver's process group is killed right after.
        let path = format!("/session/{}", self.session);
        let _ = std::net::TcpStream::connect(&self.addr).map(|_| {
            std::thread::spawn({
                let addr = self.addr.clone();
                move || http(&addr, "DELETE", &path, &[], "")
            })
            .join()
        });
    }
}

/// One WebDriver command; its `value`.
fn webdriver(addr: &str, method: &str, path: &str, body: Option<Value>) -> Value {
    let body = body.map(|b| b.to_string()).unwrap_or_default();
    let (status, answer) = http(
        addr,
        method,
        path,
        &[("content-type", "application/json")],
        &body,
    );
    let answer: Value = serde_json::from_str(&answer)
        .unwrap_or_else(|e| panic!("WebDriver {method} {path}: {e}: {answer}"));
    assert_eq!(status, 200, "WebDriver {method} {path}: {answer}");
    answer["value"].clone()
}

/// Standard base64 (the screenshot's encoding).
fn base64_decode(text: &str) -> Vec<u8> {
    let value = |c: u8| match c {
        b'A'..=b'Z' => Some(c - b'A'),
        b'a'..=b'z' => Some(c - b'a' + 26),
        b'0'..=b'9' => Some(c - b'0' + 52),
        b'+' => Some(62),
        b'/' => Some(63),
        _ => None,
    };
    let digits: Vec<u8> = text.bytes().filter_map(value).collect();
    digits
        .chunks(4)
        .flat_map(|chunk| {
            let n = chunk
                .iter()
                .enumerate()
                .fold(0u32, |n, (i, d)| n | u32::from(*d) << (18 - 6 * i));
            let bytes = [(n >> 16) as u8, (n >> 8) as u8, n as u8];
            bytes.into_iter().take(chunk.len().saturating_sub(1))
        })
        .collect()
}

async fn charge(
    client: &mut DispatcherClient<Channel>,
    approval: &str,
) -> toolmesh::pb::InvokeResponse {
    let request = InvokeRequest {
        tool: "acc_charge".into(),
        arguments: r#"{"account": "acme-7", "cents": 1200}"#.into(),
        context: Some(CallContext::default()),
        approval_id: approval.into(),
        ..Default::default()
    };
    client
        .invoke(with_token(request, Some("tok-agent")))
        .await
        .expect("invoke")
        .into_inner()
}

/// The page lists the mesh's tools as SERVING; after a kill -9 of the
/// knowledge executor its tool turns NOT_SERVING (its row gone once past
/// its lease) and the change is listed;
/// an approval asked by an agent appears with its arguments one per line
/// and buttons, and the Approve button of the approver's session grants it
/// (the agent's retry then runs). Then the operator's and the admin's
/// controls, below.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_page_in_headless_chromium() {
    let dir = temp_dir("admin-page");
    let policy = dir.join("policy.toml");
    std::fs::write(&policy, admin_policy()).unwrap();
    let (serve, addr) = serve(&[
        "--policy",
        policy.to_str().unwrap(),
        "--admin-listen",
        "127.0.0.1:0",
    ]);
    let admin = serve
        .wait_for_line("admin listening on http://", Duration::from_secs(30))
        .rsplit("http://")
        .next()
        .unwrap_or_default()
        .trim()
        .to_owned();
    let _acceptance = example("acceptance", &addr, &["--token", "tok-exec"]);
    let mut knowledge = example("knowledge", &addr, &["--token", "tok-exec"]);
    let page = format!("http://{admin}/");
    let browser = tokio::task::spawn_blocking(Browser::start).await.unwrap();
    // Without a session the page is a login form; the approver (an
    // operator too) logs in once and the session cookie carries on.
    browser.log_in(&page, "tok-approver", "alice").await;

    let health_of = |browser: &Browser, tool: &str| {
        browser.open(&page);
        browser.eval(&format!(
            "const row = document.querySelector('tr[data-tool=\"{tool}\"]'); return row ? row.dataset.health : null;"
        ))
    };
    eventually(
        "both executors on the page",
        Duration::from_secs(30),
        || {
            let ready = health_of(&browser, "search_kb") == "SERVING"
                && health_of(&browser, "acc_charge") == "SERVING";
            std::future::ready(ready.then_some(()))
        },
    )
    .await;
    let text = browser.eval("return document.body.innerText;");
    let text = text.as_str().unwrap_or_default();
    for shown in [
        "acc_echo",
        "search_kb",
        "1.0.0",
        "Open approvals",
        "snapshot",
    ] {
        assert!(text.contains(shown), "{shown:?} not on the page:\n{text}");
    }

    knowledge.kill9();
    // NOT_SERVING while its lease runs (10 s), then no row at all: a page
    // read late on a loaded machine may see either.
    eventually(
        "search_kb NOT_SERVING (or gone past its lease) after kill -9",
        Duration::from_secs(30),
        || {
            let health = health_of(&browser, "search_kb");
            std::future::ready((health == "NOT_SERVING" || health.is_null()).then_some(()))
        },
    )
    .await;
    assert_eq!(health_of(&browser, "acc_charge"), "SERVING");
    let changes = browser.eval("return document.getElementById('changes').innerText;");
    assert!(
        changes.as_str().unwrap_or_default().contains("search_kb"),
        "the change is listed: {changes}"
    );

    let mut client = dispatcher(&addr);
    let asked = charge(&mut client, "").await;
    let error = asked.result.clone().unwrap().error.unwrap();
    assert_eq!(
        error.code,
        ErrorCode::ApprovalRequired as i32,
        "{}",
        error.message
    );
    let id = error.approval_id;
    browser.open(&page);
    let form = format!("#approval-{id}");
    let listed = browser.eval(&format!(
        "return document.querySelector('{form}').innerText;"
    ));
    assert!(
        listed.as_str().unwrap_or_default().contains("acc_charge"),
        "{listed}"
    );
    let arguments = browser.eval(&format!(
        "return [...document.querySelectorAll('{form} ol.args li')].map(li => li.innerText);"
    ));
    assert_eq!(
        arguments,
        json!(["account = \"acme-7\"", "cents = 1200"]),
        "one argument per line"
    );

    browser
        .submit(&format!("{form} button[value=approve]"))
        .await;
    eventually(
        "the approval leaves the page",
        Duration::from_secs(10),
        || {
            let gone = browser.eval(&format!(
                "return document.querySelector('{form}') === null;"
            ));
            std::future::ready((gone == true).then_some(()))
        },
    )
    .await;
    let url = browser.call("GET", "/url", None);
    assert!(
        url.as_str()
            .unwrap_or_default()
            .contains(&format!("decided={id}")),
        "{url}"
    );

    let approved = charge(&mut client, &id).await;
    assert_eq!(code(&approved), 0, "{}", message(&approved));

    operator_cannot_switch(&browser, &page, &mut client).await;
    browser.open(&page);
    browser.submit("#logout button").await;
    browser.log_in(&page, "tok-admin", "ops").await;
    admin_sees_the_last_minute(&browser, &page, &mut client).await;
    admin_switches_a_tool(&browser, &page, &mut client).await;
    let _canary = example(
        "acceptance",
        &addr,
        &["--token", "tok-exec", "--tool-version", "2.0.0"],
    );
    admin_decides_rollouts(&browser, &page, &addr).await;
    drop(browser);
    drop(serve);
}

/// The selector of `tool@version`'s row.
fn row(tool: &str, version: &str) -> String {
    format!("tr[data-tool=\"{tool}\"][data-version=\"{version}\"]")
}

/// A script returning the text of the feed's first entry that contains
/// `what` and names `by` (null until there is one), with its timestamp.
fn feed_entry(what: &str, by: &str) -> String {
    format!(
        "for (const li of document.querySelectorAll('#changes li')) {{ \
           if (li.innerText.includes({what:?}) && li.dataset.by === {by:?}) \
             return [li.querySelector('time').getAttribute('datetime'), li.innerText]; }} \
         return null;"
    )
}

/// A change's timestamp is RFC 3339 in UTC to the millisecond.
fn assert_timestamp(entry: &Value) {
    let at = entry[0].as_str().unwrap_or_default();
    let shape = at.len() == 24
        && at.ends_with('Z')
        && at.as_bytes()[10] == b'T'
        && at[..4].parse::<u32>().is_ok_and(|year| year >= 2024);
    assert!(shape, "not an RFC 3339 time: {entry}");
    assert!(
        entry[1].as_str().unwrap_or_default().contains(at),
        "the time is shown: {entry}"
    );
}

/// Calls `tool` as the agent: its error code (0: OK).
async fn call(client: &mut DispatcherClient<Channel>, tool: &str, arguments: &str) -> i32 {
    let request = InvokeRequest {
        tool: tool.into(),
        arguments: arguments.into(),
        context: Some(CallContext::default()),
        ..Default::default()
    };
    code(&invoke_with_token(client, request, Some("tok-agent")).await)
}

/// Whether the agent's listing holds `tool`.
async fn agent_lists(client: &mut DispatcherClient<Channel>, tool: &str) -> bool {
    let request = toolmesh::pb::ListToolsRequest {
        format: toolmesh::pb::ToolFormat::Native as i32,
        ..Default::default()
    };
    client
        .list_tools(with_token(request, Some("tok-agent")))
        .await
        .expect("list tools")
        .into_inner()
        .tools
        .iter()
        .any(|t| t.name == tool)
}

/// The operator (alice) sees the page read only: no switch and no rollout
/// button; a disable form forged in her page, with her session's own CSRF
/// token, is refused and changes nothing.
async fn operator_cannot_switch(
    browser: &Browser,
    page: &str,
    client: &mut DispatcherClient<Channel>,
) {
    browser.open(page);
    let forms = browser.eval(
        "return document.querySelectorAll('form.disable, form.enable, form.rollout-decision').length;",
    );
    assert_eq!(forms, 0, "an operator gets no switches");
    let notice = browser.eval("return document.getElementById('read-only').innerText;");
    assert!(
        notice.as_str().unwrap_or_default().contains("\"admin\""),
        "says which role acts: {notice}"
    );
    browser.eval(
        "const form = document.createElement('form'); \
         form.method = 'post'; form.action = '/tools/disable'; \
         const csrf = document.querySelector('#logout input[name=csrf]').value; \
         for (const [name, value] of [['tool', 'acc_echo'], ['reason', 'forged'], ['csrf', csrf]]) { \
           const input = document.createElement('input'); \
           input.type = 'hidden'; input.name = name; input.value = value; form.appendChild(input); } \
         document.body.appendChild(form); form.submit(); return true;",
    );
    let refused = eventually("the forged post answered", Duration::from_secs(10), || {
        let error = browser
            .eval("const e = document.getElementById('error'); return e ? e.innerText : null;");
        std::future::ready(error.as_str().map(str::to_owned))
    })
    .await;
    assert!(
        refused.contains("may not disable or enable tools"),
        "{refused}"
    );
    assert!(
        agent_lists(client, "acc_echo").await,
        "nothing was disabled"
    );
}

/// After calls, acc_echo's row counts them and acc_panic's its failures,
/// from the dispatcher's own counters; both show a p95.
async fn admin_sees_the_last_minute(
    browser: &Browser,
    page: &str,
    client: &mut DispatcherClient<Channel>,
) {
    for _ in 0..6 {
        assert_eq!(call(client, "acc_echo", r#"{"message": "hi"}"#).await, 0);
    }
    for _ in 0..2 {
        assert_ne!(call(client, "acc_panic", "{}").await, 0, "acc_panic fails");
    }
    let cells = |tool: &str| {
        format!(
            "const c = document.querySelector('{} td.calls'); \
             return c ? [Number(c.dataset.calls), Number(c.dataset.errors), c.innerText] : null;",
            row(tool, "1.0.0")
        )
    };
    browser.open(page);
    let echo = browser.eval(&cells("acc_echo"));
    assert!(echo[0].as_u64() >= Some(6), "acc_echo's calls: {echo}");
    assert_eq!(echo[1], 0, "acc_echo did not fail: {echo}");
    let panics = browser.eval(&cells("acc_panic"));
    assert_eq!(panics[0], 2, "acc_panic's calls: {panics}");
    assert_eq!(panics[1], 2, "acc_panic's failures: {panics}");
    for text in [&echo[2], &panics[2]] {
        let text = text.as_str().unwrap_or_default();
        assert!(text.contains("/s") && text.contains("p95 "), "{text}");
        assert!(!text.contains("p95 –"), "a p95 after calls: {text}");
    }
    assert!(
        panics[2]
            .as_str()
            .unwrap_or_default()
            .contains("100.0% errors"),
        "{panics}"
    );
    let instances = browser.eval(&format!(
        "return document.querySelector('{} td.instances b').innerText;",
        row("acc_echo", "1.0.0")
    ));
    assert_eq!(instances, "1/1 healthy");
}

/// The admin disables acc_echo with a reason: agents no longer list it and
/// a call is refused as DISABLED; the feed shows who and when; Enable
/// brings it back.
async fn admin_switches_a_tool(
    browser: &Browser,
    page: &str,
    client: &mut DispatcherClient<Channel>,
) {
    browser.open(page);
    let echo = row("acc_echo", "1.0.0");
    browser.type_into(
        &format!("{echo} form.disable input[name=reason]"),
        "incident 7: wrong answers",
    );
    browser.submit(&format!("{echo} form.disable button")).await;
    browser
        .until(
            "acc_echo shown disabled",
            page,
            &format!("return document.querySelector('{echo}').dataset.disabled === 'true';"),
        )
        .await;
    assert!(
        !agent_lists(client, "acc_echo").await,
        "unlisted for agents"
    );
    assert_eq!(
        call(client, "acc_echo", r#"{"message": "hi"}"#).await,
        ErrorCode::Disabled as i32
    );
    let entry = browser
        .until(
            "the disable in the feed",
            page,
            &feed_entry("acc_echo disabled: incident 7: wrong answers", "ops"),
        )
        .await;
    assert_timestamp(&entry);

    browser.submit(&format!("{echo} form.enable button")).await;
    browser
        .until(
            "acc_echo shown enabled",
            page,
            &format!("return document.querySelector('{echo}').dataset.disabled === 'false';"),
        )
        .await;
    assert!(agent_lists(client, "acc_echo").await, "listed again");
    assert_eq!(call(client, "acc_echo", r#"{"message": "hi"}"#).await, 0);
    let entry = browser
        .until(
            "the enable in the feed",
            page,
            &feed_entry("acc_echo enabled", "ops"),
        )
        .await;
    assert_timestamp(&entry);
}

/// A rollout of acc_echo@2.0.0 started with the CLI shows on the canary's
/// row with its share and state; the admin aborts it with a reason, then
/// (started again) promotes it, from the page; the registry says so, and
/// the feed has both decisions with time and author.
async fn admin_decides_rollouts(browser: &Browser, page: &str, addr: &str) {
    let canary = row("acc_echo", "2.0.0");
    browser
        .until(
            "acc_echo 2.0.0 on the page",
            page,
            &format!("return document.querySelector('{canary}') !== null;"),
        )
        .await;
    let start = || {
        let out = cli_as(
            addr,
            "tok-admin",
            &["rollout", "start", "acc_echo@2.0.0", "--percent", "25"],
        );
        assert!(
            out.status.success(),
            "rollout start: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let state = || {
        let out = cli_as(
            addr,
            "tok-admin",
            &["rollout", "status", "acc_echo", "--json"],
        );
        let status: Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
        status["rollouts"][0].clone()
    };
    let shown = format!(
        "const r = document.querySelector('{canary} span.rollout'); \
         return r ? [r.dataset.state, r.innerText] : null;"
    );
    start();
    browser.open(page);
    let active = browser.eval(&shown);
    assert_eq!(active[0], "active", "{active}");
    assert!(
        active[1]
            .as_str()
            .unwrap_or_default()
            .contains("acc_echo@2.0.0 at 25%"),
        "{active}"
    );
    let stable = browser.eval(&format!(
        "return document.querySelector('{} span.rollout').dataset.side;",
        row("acc_echo", "1.0.0")
    ));
    assert_eq!(stable, "stable");

    let png = browser.screenshot();
    assert!(png.starts_with(b"\x89PNG"), "a PNG screenshot");
    let target = repo_root().join("target/admin-page.png");
    std::fs::write(&target, &png).unwrap();
    if std::env::var_os("TOOLMESH_UPDATE_DOCS").is_some() {
        let docs = repo_root().join("docs/admin-page.png");
        std::fs::write(docs, &png).unwrap();
    }

    browser.type_into(
        &format!("{canary} form.rollout-decision input[name=reason]"),
        "latency doubled",
    );
    browser
        .submit(&format!(
            "{canary} form.rollout-decision button[value=abort]"
        ))
        .await;
    browser
        .until(
            "the rollout shown aborted",
            page,
            &format!(
                "return document.querySelector('{canary} span.rollout').dataset.state === 'aborted';"
            ),
        )
        .await;
    let aborted = state();
    assert_eq!(aborted["state"], "aborted", "{aborted}");
    assert_eq!(aborted["reason"], "latency doubled", "{aborted}");
    assert_eq!(aborted["changed_by"], "ops", "{aborted}");
    let entry = browser
        .until(
            "the abort in the feed",
            page,
            &feed_entry("rollout of acc_echo@2.0.0 aborted: latency doubled", "ops"),
        )
        .await;
    assert_timestamp(&entry);

    start();
    browser
        .until(
            "the new rollout shown active",
            page,
            &format!(
                "return document.querySelector('{canary} span.rollout').dataset.state === 'active';"
            ),
        )
        .await;
    browser
        .submit(&format!(
            "{canary} form.rollout-decision button[value=promote]"
        ))
        .await;
    browser
        .until(
            "the rollout shown promoted",
            page,
            &format!(
                "return document.querySelector('{canary} span.rollout').dataset.state === 'promoted';"
            ),
        )
        .await;
    let promoted = state();
    assert_eq!(promoted["state"], "promoted", "{promoted}");
    assert_eq!(promoted["changed_by"], "ops", "{promoted}");
    let entry = browser
        .until(
            "the promotion in the feed",
            page,
            &feed_entry("rollout of acc_echo@2.0.0 promoted", "ops"),
        )
        .await;
    assert_timestamp(&entry);
    let buttons = browser.eval("return document.querySelectorAll('form.rollout-decision').length;");
    assert_eq!(buttons, 0, "nothing to decide once promoted");
}
