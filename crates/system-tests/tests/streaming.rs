//! Streaming and progress end to end over real OS processes on 127.0.0.1:
//! `toolmesh serve` with the acceptance executor (`acc_progress`) or the
//! knowledge example (`export_report`), driven through
//! `Dispatcher.InvokeStream`, the unary `Invoke` and `toolmesh call --stream`.

use std::time::{Duration, Instant};
use toolmesh::pb::ErrorCode;
use toolmesh_system_tests::*;

fn steps(n: u32, total: u32) -> Vec<String> {
    (1..=n)
        .map(|i| format!("{i}/{total} step {i} of {total}"))
        .collect()
}

/// Progress reports and output chunks arrive in order, each step's report
/// before its chunk and all before the response; the unary Invoke of the
/// same tool waits for the end and answers the same result; InvokeStream of
/// a tool that does not stream answers only the response. The audit log and
/// the metrics count each call once.
#[tokio::test]
async fn progress_arrives_in_order_before_the_result() {
    let dir = temp_dir("streaming-order");
    let audit = dir.join("audit.jsonl");
    let mesh = acceptance(
        &[
            "--audit",
            audit.to_str().unwrap(),
            "--admin-listen",
            "127.0.0.1:0",
        ],
        &[],
    )
    .await;
    let mut client = mesh.client.clone();
    let streamed = stream(
        &mut client,
        "acc_progress",
        r#"{"steps": 5, "step_ms": 20}"#,
        None,
    )
    .await;
    assert_eq!(streamed.progress, steps(5, 5));
    assert_eq!(streamed.chunks, ["1", "2", "3", "4", "5"]);
    let mut order = ["progress", "chunk"].repeat(5);
    order.push("done");
    assert_eq!(streamed.order, order);
    let done = streamed.done.expect("a response");
    assert_eq!(code(&done), 0, "{}", message(&done));
    assert_eq!(done.result.as_ref().unwrap().output, "5 steps");
    assert_eq!(done.attempts, 1);

    let unary = invoke(
        &mut client,
        "acc_progress",
        r#"{"steps": 3, "step_ms": 20}"#,
        None,
    )
    .await;
    assert_eq!(code(&unary), 0, "{}", message(&unary));
    assert_eq!(unary.result.as_ref().unwrap().output, "3 steps");

    let plain = stream(&mut client, "acc_echo", r#"{"message": "hi"}"#, None).await;
    assert_eq!(plain.order, ["done"], "a tool that does not stream");
    assert_eq!(plain.done.unwrap().result.unwrap().output, "hi");

    let ids = [done.call_id.clone(), unary.call_id.clone()];
    let records = eventually("both calls audited", Duration::from_secs(10), || {
        let lines = ledger(&audit);
        let ours: Vec<serde_json::Value> = lines
            .into_iter()
            .filter(|r| ids.iter().any(|id| r["call_id"] == id.as_str()))
            .collect();
        std::future::ready((ours.len() >= 2).then_some(ours))
    })
    .await;
    assert_eq!(records.len(), 2, "one record per call: {records:?}");
    assert!(records.iter().all(|r| r["outcome"] == "OK"), "{records:?}");

    let auth = [("authorization", "Bearer dev-approver")];
    let metrics = toolmesh_testkit::http(&admin_addr(&mesh.serve), "GET", "/metrics", &auth, "").1;
    let tool = r#"tool="acc_progress",version="1.0.0""#;
    for (series, value) in [
        (
            format!("toolmesh_dispatcher_calls_total{{{tool},code=\"OK\"}}"),
            2.0,
        ),
        (format!("toolmesh_dispatcher_attempts_total{{{tool}}}"), 2.0),
        ("toolmesh_dispatcher_in_flight".to_owned(), 0.0),
    ] {
        assert_eq!(
            sample(&metrics, &series),
            Some(value),
            "{series} in\n{metrics}"
        );
    }
}

/// A streamed attempt that fails before it reported anything is retried
/// (the tool is idempotent) and the caller sees only the attempt that ran;
/// one that fails after its first report is not retried, and the caller
/// reads the failure after that report. A unary caller saw nothing before
/// the end, so the same failure is retried for it.
#[tokio::test]
async fn streams_are_retried_only_before_anything_reached_the_caller() {
    let dir = temp_dir("streaming-retry");
    let executions = dir.join("ledger.jsonl");
    let mesh = acceptance(&[], &["--ledger", executions.to_str().unwrap()]).await;
    let mut client = mesh.client.clone();
    let runs_of = |call_id: &str| {
        ledger(&executions)
            .iter()
            .filter(|e| e["call_id"] == call_id && e["tool"] == "acc_progress")
            .count()
    };

    let before = stream(
        &mut client,
        "acc_progress",
        r#"{"steps": 3, "fail": "before_first"}"#,
        None,
    )
    .await;
    let done = before.done.expect("a response");
    assert_eq!(code(&done), 0, "{}", message(&done));
    assert_eq!(done.attempts, 2, "retried: nothing had been streamed");
    assert_eq!(before.progress, steps(3, 3), "only the attempt that ran");
    assert_eq!(runs_of(&done.call_id), 2);

    let after = stream(
        &mut client,
        "acc_progress",
        r#"{"steps": 3, "fail": "after_first"}"#,
        None,
    )
    .await;
    let done = after.done.expect("a response");
    assert_eq!(code(&done), ErrorCode::Unavailable as i32, "{done:?}");
    assert!(
        message(&done).contains("injected fault"),
        "{}",
        message(&done)
    );
    assert_eq!(
        done.attempts, 1,
        "never retried once something was streamed"
    );
    assert_eq!(after.progress, steps(1, 3));
    assert_eq!(after.order, ["progress", "chunk", "done"]);
    assert_eq!(runs_of(&done.call_id), 1);

    let unary = invoke(
        &mut client,
        "acc_progress",
        r#"{"steps": 3, "fail": "after_first"}"#,
        None,
    )
    .await;
    assert_eq!(code(&unary), 0, "{}", message(&unary));
    assert_eq!(unary.attempts, 2, "a unary caller had received nothing");
    assert_eq!(runs_of(&unary.call_id), 2);
}

/// The caller's deadline cuts a long stream: the reports made in time
/// arrive, then DEADLINE_EXCEEDED, at the deadline and not at the end of
/// the tool's 100 steps.
#[tokio::test]
async fn a_deadline_cuts_a_long_stream() {
    let mesh = acceptance(&[], &[]).await;
    let mut client = mesh.client.clone();
    let started = Instant::now();
    let cut = stream(
        &mut client,
        "acc_progress",
        r#"{"steps": 100, "step_ms": 50}"#,
        Some(Duration::from_millis(600)),
    )
    .await;
    let took = started.elapsed();
    let done = cut.done.expect("a response before the stream ends");
    assert_eq!(
        code(&done),
        ErrorCode::DeadlineExceeded as i32,
        "{}",
        message(&done)
    );
    assert_eq!(done.attempts, 1);
    assert!(
        (3..100).contains(&cut.progress.len()),
        "some reports, not all: {:?}",
        cut.progress
    );
    assert_eq!(cut.progress, steps(cut.progress.len() as u32, 100));
    // At the 600 ms deadline, not after the tool's 5 s (with room for a
    // loaded machine).
    assert!(took < Duration::from_millis(3000), "{took:?}");
}

/// `toolmesh call --stream` prints a line per progress report, then the
/// result; with --json, one JSON object per line and event, the result last.
#[tokio::test]
async fn cli_call_stream_prints_progress() {
    let (_serve, addr) = serve(&[]);
    let _knowledge = example("knowledge", &addr, &[]);
    let mut client = dispatcher(&addr);
    until_listed(&mut client, &["export_report"], Duration::from_secs(30)).await;
    let run = |args: &[&str]| {
        let out = std::process::Command::new(toolmesh_bin())
            .args(["call", "--server", &addr, "--stream"])
            .args(args)
            .output()
            .expect("run toolmesh");
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(out.status.success(), "{stderr}");
        String::from_utf8(out.stdout).unwrap()
    };

    let text = run(&["export_report", r#"{"pace_ms": 10}"#]);
    let lines: Vec<&str> = text.lines().collect();
    for (i, id) in (1..=8).zip(101..) {
        assert_eq!(
            lines[i - 1],
            format!("[{i}/8] exported KB-{id} ({i} of 8)"),
            "{text}"
        );
    }
    assert_eq!(lines[8], "## [KB-101] Reset your password", "{text}");
    assert!(
        text.trim_end().ends_with("Retry-After header in seconds."),
        "{text}"
    );

    let json = run(&[
        "--json",
        "export_report",
        r#"{"topic": "refund", "pace_ms": 10}"#,
    ]);
    let events: Vec<serde_json::Value> = json
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    let kinds: Vec<&str> = events
        .iter()
        .map(|e| e["event"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["chunk", "progress", "result"], "{json}");
    assert_eq!(events[1]["progress"], 1.0);
    assert_eq!(events[1]["total"], 1.0);
    assert_eq!(events[1]["message"], "exported KB-104 (1 of 1)");
    assert!(
        events[0]["text"]
            .as_str()
            .unwrap()
            .contains("Request a refund")
    );
    assert_eq!(
        events[2]["result"]["data"]["articles"],
        serde_json::json!(["KB-104"])
    );
    assert_eq!(events[2]["attempts"], 1);
}
