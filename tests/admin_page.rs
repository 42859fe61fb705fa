//! The admin page in a real browser: Debian's headless Chromium, driven over
//! WebDriver (chromedriver, plain HTTP + JSON) against a running mesh. It
//! shows the tools, reacts to a kill -9 of an executor, and approves an
//! approval through its button; the screenshot it takes is the README's.

mod support;

use serde_json::{Value, json};
use std::time::Duration;
use support::*;
use tonic::transport::Channel;
use toolmesh::pb::{CallContext, ErrorCode, InvokeRequest, dispatcher_client::DispatcherClient};
use toolmesh_testkit::http;

const POLICY: &str = r#"
[auth]
allow_anonymous = false

[[callers]]
token = "tok-agent"
principal = "support-bot"
tenant = "acme"
roles = ["agent"]

[[callers]]
token = "tok-approver"
principal = "alice"
tenant = "acme"
roles = ["approver", "operator"]

[[callers]]
token = "tok-exec"
principal = "platform-team"
tenant = "acme"
roles = ["executor"]

[[grants]]
name = "agents"
roles = ["agent"]
tools = ["acc_echo", "acc_charge", "search_kb"]

[approval]
approver_roles = ["approver"]
require_for_tools = ["acc_charge"]
"#;

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

    /// Clicks the element `css` selects.
    fn click(&self, css: &str) {
        let element = self.element(css);
        self.call(
            "POST",
            &format!("/element/{element}/click"),
            Some(json!({})),
        );
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
/// knowledge executor its tool turns NOT_SERVING and the change is listed;
/// an approval asked by an agent appears with buttons, and the Approve
/// button of the approver's session grants it (the agent's retry then runs).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_page_in_headless_chromium() {
    let dir = temp_dir("admin-page");
    let policy = dir.join("policy.toml");
    std::fs::write(&policy, POLICY).unwrap();
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
    browser.open(&page);
    browser.type_into("#login input[name=token]", "tok-approver");
    browser.click("#login button");
    eventually("logged in", Duration::from_secs(10), || {
        let who = browser
            .eval("const b = document.getElementById('who'); return b ? b.innerText : null;");
        std::future::ready((who == "alice").then_some(()))
    })
    .await;

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
    eventually(
        "search_kb NOT_SERVING after kill -9",
        Duration::from_secs(30),
        || std::future::ready((health_of(&browser, "search_kb") == "NOT_SERVING").then_some(())),
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

    let png = browser.screenshot();
    assert!(png.starts_with(b"\x89PNG"), "a PNG screenshot");
    let target = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/admin-page.png");
    std::fs::write(&target, &png).unwrap();
    if std::env::var_os("TOOLMESH_UPDATE_DOCS").is_some() {
        let docs = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/admin-page.png");
        std::fs::write(docs, &png).unwrap();
    }

    browser.click(&format!("{form} button[value=approve]"));
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
    drop(browser);
    drop(serve);
}
