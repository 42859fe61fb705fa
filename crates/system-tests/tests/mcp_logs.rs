//! The MCP door's logs under the default filter: MCP calls leave no rmcp
//! line per request (the dispatcher logs each call once, at debug), and a
//! client hanging up mid-call is a cancellation, not an error.

use std::time::Duration;
use tokio::io::AsyncWriteExt;
use toolmesh_system_tests::*;

/// A `tools/call` request for `/mcp` at `mcp` (`host:port`).
fn call(mcp: &str, tool: &str, arguments: &str) -> String {
    let body = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"{tool}","arguments":{arguments}}}}}"#
    );
    format!(
        "POST /mcp HTTP/1.1\r\nHost: {mcp}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nMCP-Protocol-Version: 2025-11-25\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
}

/// One exchange on a fresh connection: the whole answer.
async fn exchange(mcp: &str, request: &str) -> String {
    let mut stream = tokio::net::TcpStream::connect(mcp).await.unwrap();
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut answer = String::new();
    tokio::io::AsyncReadExt::read_to_string(&mut stream, &mut answer)
        .await
        .unwrap();
    answer
}

/// `toolmesh serve` with MCP and no log settings: successful calls, a
/// call of an unknown name and a call whose client hangs up mid-way leave
/// no rmcp line and no ERROR or WARN on stderr.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_calls_leave_no_rmcp_lines_under_default_logging() {
    let dir = temp_dir("mcp-logs");
    let log = dir.join("serve.log");
    let ledger_file = dir.join("ledger.jsonl");
    let mut command = std::process::Command::new(toolmesh_bin());
    command
        .args(["serve", "--listen", "127.0.0.1:0"])
        .args(["--mcp-listen", "127.0.0.1:0"])
        .env_remove("RUST_LOG")
        .env_remove("TOOLMESH_LOG");
    let serve = toolmesh_procs::Spawn::new("serve", command)
        .stdout_lines()
        .stderr(toolmesh_procs::Stderr::Log(log.clone()))
        .start()
        .unwrap();
    let addr = serve.listen_addr();
    let url = serve.wait_for_line("MCP listening on ", Duration::from_secs(30));
    let mcp = url
        .rsplit_once("http://")
        .and_then(|(_, rest)| rest.strip_suffix("/mcp"))
        .unwrap_or_else(|| panic!("no MCP address in {url:?}"))
        .to_owned();
    let _exec = example(
        "acceptance",
        &addr,
        &["--ledger", ledger_file.to_str().unwrap()],
    );
    until_listed(
        &mut dispatcher(&addr),
        &ACCEPTANCE_TOOLS,
        Duration::from_secs(10),
    )
    .await;

    for i in 0..20 {
        let answer = exchange(
            &mcp,
            &call(&mcp, "acc_echo", &format!(r#"{{"message":"m{i}"}}"#)),
        )
        .await;
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        assert!(answer.contains(&format!("\"m{i}\"")), "{answer}");
    }
    let unknown = exchange(&mcp, &call(&mcp, "acc_nope", "{}")).await;
    assert!(unknown.contains("-32602"), "{unknown}");

    let mut hung_up = tokio::net::TcpStream::connect(&mcp).await.unwrap();
    hung_up
        .write_all(call(&mcp, "acc_sleep", r#"{"ms":60000}"#).as_bytes())
        .await
        .unwrap();
    toolmesh_testkit::until("acc_sleep started", Duration::from_secs(10), || {
        ledger(&ledger_file)
            .iter()
            .any(|e| e["tool"] == "acc_sleep")
    })
    .await;
    drop(hung_up);
    let after = exchange(&mcp, &call(&mcp, "acc_echo", r#"{"message":"after"}"#)).await;
    assert!(after.starts_with("HTTP/1.1 200"), "{after}");
    serve
        .stop(
            libc::SIGTERM,
            toolmesh_testkit::patient(Duration::from_secs(5)),
        )
        .await;

    let logged = std::fs::read_to_string(&log).unwrap();
    let noise: Vec<&str> = logged
        .lines()
        .filter(|l| l.contains("rmcp") || l.contains("ERROR") || l.contains("WARN"))
        .filter(|l| !l.contains("no --policy given"))
        .collect();
    assert!(noise.is_empty(), "{}", noise.join("\n"));
}
