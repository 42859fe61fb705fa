//! The README's snippets run as printed: its code blocks are this test's
//! input, read from README.md itself, never a copy. The MCP client
//! configurations (stdio and URL forms) and the Python client reach a
//! running `toolmesh up`; the Python SDK's program and shell steps install
//! `sdk/python` in a fresh virtualenv and serve the tool to it. The only
//! substitutions are the placeholders a reader fills in: the address of
//! this run's `up` for the default ones, and a real token for
//! `YOUR-TOKEN`.

use std::process::{Command, Stdio};
use std::time::Duration;
use toolmesh_system_tests::readme::{blocks_under, shell, text, toolmesh_on_path};
use toolmesh_system_tests::*;

/// A running `toolmesh up` (default examples, development policy) and what
/// its banner says.
struct Up {
    _proc: Proc,
    _dir: TempDir,
    addr: String,
    mcp_url: String,
}

fn start_up(label: &str) -> Up {
    let dir = temp_dir(label);
    let (proc, printed) = up(&dir, &["--listen", "127.0.0.1:0"]);
    let first = |label: &str| {
        banner_after(&printed, label)
            .split_whitespace()
            .next()
            .expect("a word after the label")
            .to_owned()
    };
    // The README says agents need no token under `up`; so does its banner.
    assert!(
        banner_after(&printed, "agents").starts_with("need no token"),
        "{printed:#?}"
    );
    Up {
        addr: first("registry + dispatcher"),
        mcp_url: first("MCP (Streamable HTTP)"),
        _proc: proc,
        _dir: dir,
    }
}

/// The token the snippets' `YOUR-TOKEN` stands for: a caller the
/// development policy knows.
const YOUR_TOKEN: &str = "dev-approver";

/// `text` with the README's placeholders filled in for `up`.
fn filled(text: &str, up: &Up) -> String {
    text.replace("http://127.0.0.1:7071/mcp", &up.mcp_url)
        .replace("127.0.0.1:7070", &up.addr)
        .replace("YOUR-TOKEN", YOUR_TOKEN)
}

/// Starts the stdio configuration `server` (`command` and `args`) as a
/// client would and calls search_kb through it.
async fn stdio_form_calls(server: &serde_json::Value) {
    assert_eq!(server["command"], "toolmesh");
    let args: Vec<&str> = server["args"]
        .as_array()
        .expect("args")
        .iter()
        .filter_map(|a| a.as_str())
        .collect();
    let requests = [
        r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"readme","version":"1"}}}"#,
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
        r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"search_kb","arguments":{"query":"reset password"}}}"#,
    ];
    let mut bridge = tokio::process::Command::new(toolmesh_bin())
        .args(&args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .expect("start the stdio bridge");
    {
        use tokio::io::AsyncWriteExt;
        let stdin = bridge.stdin.as_mut().unwrap();
        for request in requests {
            stdin
                .write_all(format!("{request}\n").as_bytes())
                .await
                .unwrap();
        }
    }
    let answer = {
        use tokio::io::AsyncBufReadExt;
        let mut lines = tokio::io::BufReader::new(bridge.stdout.take().unwrap()).lines();
        let answered = async {
            while let Some(line) = lines.next_line().await.expect("read the bridge") {
                let message: serde_json::Value = serde_json::from_str(&line).unwrap_or_else(|e| {
                    panic!("the bridge wrote a line that is not JSON ({e}): {line}")
                });
                if message["id"] == 2 {
                    return message;
                }
            }
            panic!("the stdio bridge closed its output before answering the call")
        };
        tokio::time::timeout(toolmesh_testkit::patient(Duration::from_secs(30)), answered)
            .await
            .expect("the stdio bridge answers the call")
    };
    assert_eq!(answer["result"]["isError"], false, "{answer}");
    drop(bridge);
}

/// Lists the tools at the URL configuration `server` (`url`, `headers`);
/// the URL, its host and its path.
fn url_form_lists(server: &serde_json::Value) -> (String, String, String) {
    let url = server["url"].as_str().expect("url");
    let (host, path) = url
        .strip_prefix("http://")
        .and_then(|rest| rest.split_once('/'))
        .expect("an http URL");
    let mut headers: Vec<(String, String)> = server["headers"]
        .as_object()
        .into_iter()
        .flatten()
        .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_owned()))
        .collect();
    headers.push(("content-type".into(), "application/json".into()));
    headers.push((
        "accept".into(),
        "application/json, text/event-stream".into(),
    ));
    let headers: Vec<(&str, &str)> = headers
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    let (status, body) = toolmesh_testkit::http(
        host,
        "POST",
        &format!("/{path}"),
        &headers,
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#,
    );
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("\"search_kb\""), "{body}");
    (url.to_owned(), host.to_owned(), path.to_owned())
}

/// "Use it from an MCP client": the stdio configurations' command and
/// args speak MCP with the dispatcher, without a token under `up` and with
/// one; the URL forms' addresses and headers list the tools; the Python client's program prints a successful call;
/// and the `pip install` line names the version the tests pin.
#[tokio::test]
async fn mcp_client_snippets_run_as_printed() {
    let up = start_up("readme-mcp");
    let heading = "Use it from an MCP client";
    let configs = blocks_under(heading, "json");
    assert_eq!(
        configs.len(),
        4,
        "stdio and URL forms without a token, both with one, and the OAuth form"
    );

    let parsed = |i: usize| -> serde_json::Value {
        serde_json::from_str(&filled(&configs[i].text, &up))
            .unwrap_or_else(|e| panic!("configuration {i} is not JSON: {e}"))
    };
    // Without a token (under `up`), then with the token forms.
    let (anonymous, with_token) = (parsed(0), parsed(2));
    stdio_form_calls(&anonymous["mcpServers"]["toolmesh"]).await;
    stdio_form_calls(&with_token["mcpServers"]["toolmesh"]).await;
    let (url, host, path) = url_form_lists(&parsed(1)["mcpServers"]["toolmesh"]);
    assert!(
        parsed(1)["mcpServers"]["toolmesh"]["headers"].is_null(),
        "the first URL form needs no token under up"
    );
    url_form_lists(&with_token["mcpServers"]["toolmesh-http"]);

    // OAuth form: only the URL, whose protected-resource metadata names it
    // as the resource a token must be minted for.
    let config: serde_json::Value =
        serde_json::from_str(&filled(&configs[3].text, &up)).expect("the OAuth config is JSON");
    let server = &config["mcpServers"]["toolmesh"];
    assert!(
        server["headers"].is_null(),
        "an OAuth client sends no fixed header"
    );
    let oauth_url = server["url"].as_str().expect("url");
    assert_eq!(oauth_url, url, "the same door");
    let (status, body) = toolmesh_testkit::http(
        &host,
        "GET",
        &format!("/.well-known/oauth-protected-resource/{path}"),
        &[],
        "",
    );
    assert_eq!(status, 200, "{body}");
    let metadata: serde_json::Value = serde_json::from_str(&body).expect("RFC 9728 JSON");
    assert_eq!(metadata["resource"], oauth_url, "{metadata}");

    // Python, with the official client, at the version the tests pin.
    let prose = std::fs::read_to_string(repo_root().join("README.md")).unwrap();
    let pinned = std::fs::read_to_string(python_script("requirements.txt")).unwrap();
    let pin = pinned
        .lines()
        .find(|l| l.starts_with("mcp=="))
        .expect("tests/python/requirements.txt pins mcp");
    assert!(
        prose.contains(&format!("`pip install {pin}`")),
        "the README's pip line names {pin}"
    );
    let program = filled(&blocks_under(heading, "python")[0].text, &up);
    let dir = temp_dir("readme-python-client");
    let script = dir.join("client.py");
    std::fs::write(&script, program).unwrap();
    let output = Command::new(test_python())
        .arg(&script)
        .output()
        .expect("run the Python client");
    assert!(
        output.status.success(),
        "{}\n{}",
        text(&output.stdout),
        text(&output.stderr)
    );
    let printed = text(&output.stdout);
    assert!(
        printed.starts_with("False ") && printed.contains("KB-"),
        "is_error False, then the text and data: {printed}"
    );
}

/// "Finding tools" runs as printed under `toolmesh up`: each line
/// succeeds, the plain search answers a table of the example tools and the
/// `--json` one the shape docs/cli.md gives, the clock tool first; the
/// deferred Anthropic listing leads with `search_tools` and defers every
/// other tool, and calling `search_tools` prints `tool_reference` blocks,
/// the clock tool first.
#[tokio::test]
async fn finding_tools_runs_as_printed() {
    let heading = "Finding tools";
    let up = start_up("readme-finding-tools");
    let dir = temp_dir("readme-finding-tools-work");
    let path = toolmesh_on_path(dir.path());
    let env = [("TOOLMESH_SERVER", up.addr.as_str())];
    let steps = filled(&blocks_under(heading, "sh")[0].text, &up);
    let lines: Vec<&str> = steps.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 2, "{steps}");
    let outputs: Vec<_> = lines
        .iter()
        .map(|line| {
            let output = shell(line, dir.path(), &path, &env);
            assert!(
                output.status.success(),
                "`{line}` failed:\n{}\n{}",
                text(&output.stdout),
                text(&output.stderr)
            );
            text(&output.stdout)
        })
        .collect();
    assert!(
        outputs[0].contains("SCORE") && outputs[0].contains("search_kb"),
        "{}",
        outputs[0]
    );
    let json: serde_json::Value = serde_json::from_str(&outputs[1]).expect("--json prints JSON");
    assert!(json["snapshot_version"].as_u64().is_some(), "{json}");
    assert_eq!(json["matches"][0]["name"], "get_current_time", "{json}");

    let deferred = filled(&blocks_under(heading, "sh")[1].text, &up);
    let lines: Vec<&str> = deferred.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 2, "{deferred}");
    let outputs: Vec<String> = lines
        .iter()
        .map(|line| {
            let output = shell(line, dir.path(), &path, &env);
            assert!(
                output.status.success(),
                "`{line}` failed:\n{}\n{}",
                text(&output.stdout),
                text(&output.stderr)
            );
            text(&output.stdout)
        })
        .collect();
    let tools: Vec<serde_json::Value> =
        serde_json::from_slice(&std::fs::read(dir.join("tools.json")).unwrap())
            .expect("tools.json is an Anthropic tools array");
    assert_eq!(tools[0]["name"], "search_tools");
    assert!(tools.len() > 1 && tools[1..].iter().all(|t| t["defer_loading"] == true));
    let references: serde_json::Value =
        serde_json::from_str(outputs[1].trim()).expect("the output is JSON blocks");
    assert_eq!(
        references[0],
        serde_json::json!({"type": "tool_reference", "tool_name": "get_current_time"}),
        "{references}"
    );
}

/// "In Python": the SDK program, saved under the name its run line uses,
/// and the shell lines, run in order in a fresh directory: the virtualenv
/// with `pip install ./sdk/python`, the executor started with the token
/// `up` prints, and the call it ends with succeeds. The input schema the
/// prose says the mesh lists is the one it lists.
#[tokio::test]
async fn python_sdk_snippets_run_as_printed() {
    let heading = "In Python";
    let programs = blocks_under(heading, "python");
    assert_eq!(programs.len(), 1, "one Python program under \"{heading}\"");
    let up = start_up("readme-python-sdk");
    let dir = temp_dir("readme-python-sdk-work");
    std::os::unix::fs::symlink(repo_root().join("sdk"), dir.join("sdk")).unwrap();
    let path = toolmesh_on_path(dir.path());
    let steps = filled(&blocks_under(heading, "sh")[0].text, &up);
    let lines: Vec<&str> = steps.lines().filter(|l| !l.trim().is_empty()).collect();
    let serving = lines
        .iter()
        .position(|l| l.split_whitespace().any(|w| w.ends_with(".py")))
        .expect("a line that runs the program");
    let program_file = lines[serving]
        .split_whitespace()
        .find(|w| w.ends_with(".py"))
        .unwrap();
    std::fs::write(dir.join(program_file), filled(&programs[0].text, &up)).unwrap();
    // No token: under `up` an executor needs none.
    let env = [("TOOLMESH_SERVER", up.addr.as_str())];
    for line in &lines[..serving] {
        let output = shell(line, dir.path(), &path, &env);
        assert!(
            output.status.success(),
            "`{line}` failed:\n{}\n{}",
            text(&output.stdout),
            text(&output.stderr)
        );
    }
    let mut command = Command::new("sh");
    command
        .args(["-c", &format!("exec env {}", lines[serving])])
        .current_dir(dir.path())
        .env("PATH", &path)
        .envs(env);
    let mut executor = Proc::spawn("python sdk executor", command);
    for line in &lines[serving + 1..] {
        let output = eventually(
            &format!("`{line}` succeeds once the executor registered"),
            Duration::from_secs(60),
            || {
                let output = shell(line, dir.path(), &path, &env);
                std::future::ready(output.status.success().then_some(output))
            },
        )
        .await;
        assert!(
            text(&output.stdout).contains("shipped"),
            "{}",
            text(&output.stdout)
        );
    }

    // The schema the prose quotes is the one listed.
    let readme = std::fs::read_to_string(repo_root().join("README.md")).unwrap();
    let section = &readme[readme.find("### In Python").expect("the section")..];
    let quoted = section
        .split('`')
        .find(|span| span.starts_with(r#"{"type":"object""#))
        .expect("the section quotes the input schema");
    let quoted: serde_json::Value =
        serde_json::from_str(quoted).expect("the quoted schema is JSON");
    let mut client = dispatcher(&up.addr);
    let listed = client
        .list_tools(toolmesh::pb::ListToolsRequest::default())
        .await
        .expect("ListTools")
        .into_inner()
        .tools
        .into_iter()
        .find(|t| t.name == "get_order")
        .expect("get_order listed");
    let listed: serde_json::Value = serde_json::from_str(&listed.input_schema).unwrap();
    assert_eq!(listed, quoted);
    executor.kill9();
}

/// "In Rust": the program builds as a crate of its own, outside this
/// workspace, from nothing but the section's dependency lines (their
/// `path` pointing at this checkout, as a team's clone beside its own
/// project would) and its source, so the section can be followed in
/// another repository.
#[test]
fn rust_sdk_example_builds_outside_the_workspace() {
    let heading = "In Rust";
    let manifests = blocks_under(heading, "toml");
    assert_eq!(
        manifests.len(),
        1,
        "one dependency block under \"{heading}\""
    );
    let program = blocks_under(heading, "rust,no_run");
    let dir = temp_dir("readme-rust-sdk");
    let checkout = repo_root().display().to_string();
    let dependencies = manifests[0].text.replace("../toolmesh", &checkout);
    assert!(
        dependencies.contains(&checkout),
        "the dependency line names a path to the checkout: {}",
        manifests[0].text
    );
    std::fs::write(
        dir.join("Cargo.toml"),
        format!(
            "[package]\nname = \"orders\"\nversion = \"0.1.0\"\nedition = \"2024\"\n\n# Not part of any workspace above it.\n[workspace]\n\n{dependencies}"
        ),
    )
    .unwrap();
    std::fs::create_dir_all(dir.join("src")).unwrap();
    std::fs::write(dir.join("src/main.rs"), &program[0].text).unwrap();
    // The workspace's lock pins the same versions, so nothing new is fetched.
    std::fs::copy(repo_root().join("Cargo.lock"), dir.join("Cargo.lock")).unwrap();
    let output = Command::new(env!("CARGO"))
        .args(["build", "--quiet", "--offline"])
        .current_dir(dir.path())
        .env(
            "CARGO_TARGET_DIR",
            repo_root().join("target/outside-workspace"),
        )
        .env_remove("RUSTFLAGS")
        .output()
        .expect("run cargo");
    assert!(
        output.status.success(),
        "the README's Rust executor does not build outside the workspace:\n{}",
        text(&output.stderr)
    );
}
