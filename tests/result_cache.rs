//! The result cache end to end over real processes: a read-only,
//! idempotent tool's answer is reused while fresh (marked, audited), identical
//! concurrent calls run once, a tool that is not read-only is never cached,
//! a disable is never hidden by the cache, and a stale answer stands in,
//! marked, when the executor is gone.

mod support;

use std::time::Duration;
use support::*;
use toolmesh::pb::{ErrorCode, InvokeResponse};

const POLICY: &str = r#"
[auth]
allow_anonymous = true
anonymous = { principal = "anonymous", tenant = "dev", roles = ["agent", "admin", "executor"] }

[[grants]]
name = "everything"
tools = ["*"]

[cache]
max_bytes = 1048576

[[cache.tools]]
tool = "acc_lookup"
ttl_ms = 1000
stale_if_error_ms = 60000

[[cache.tools]]
# Not read-only: the dispatcher never caches it, whatever this says.
tool = "acc_charge"
ttl_ms = 60000
"#;

fn cache_of(response: &InvokeResponse) -> (String, Option<String>) {
    let metadata = &response.result.as_ref().expect("a result").metadata;
    (
        metadata.get("toolmesh.cache").cloned().unwrap_or_default(),
        metadata.get("toolmesh.cache_age_ms").cloned(),
    )
}

fn runs(path: &std::path::Path, tool: &str) -> usize {
    ledger(path).iter().filter(|l| l["tool"] == tool).count()
}

/// Hits, coalescing, never-cached tools, disable, audit and stale answers.
#[tokio::test]
async fn cached_answers_are_marked_and_never_hide_checks() {
    let dir = temp_dir("result-cache");
    let policy = dir.join("policy.toml");
    std::fs::write(&policy, POLICY).unwrap();
    let (ledger_path, audit) = (dir.join("ledger.jsonl"), dir.join("audit.jsonl"));
    let mut mesh = acceptance(
        &[
            "--policy",
            policy.to_str().unwrap(),
            "--audit",
            audit.to_str().unwrap(),
        ],
        &["--ledger", ledger_path.to_str().unwrap()],
    )
    .await;
    let client = &mut mesh.client;

    let first = invoke(client, "acc_lookup", r#"{"key": "a"}"#, None).await;
    assert_eq!(code(&first), 0, "{}", message(&first));
    assert_eq!(cache_of(&first), ("miss".into(), None));
    let again = invoke(client, "acc_lookup", r#"{ "key" : "a" }"#, None).await;
    assert_eq!(code(&again), 0);
    let (state, age) = cache_of(&again);
    assert_eq!(state, "hit", "the same canonical arguments: {again:?}");
    assert!(age.is_some_and(|a| a.parse::<u64>().is_ok()));
    assert_eq!(again.attempts, 0, "a hit sends nothing");
    assert_eq!(again.result.unwrap().output, "value of a");
    assert_eq!(runs(&ledger_path, "acc_lookup"), 1);

    // Identical calls in flight run once.
    let calls: Vec<_> = (0..5)
        .map(|_| {
            let mut client = client.clone();
            tokio::spawn(async move {
                invoke(
                    &mut client,
                    "acc_lookup",
                    r#"{"key":"b","delay_ms":400}"#,
                    None,
                )
                .await
            })
        })
        .collect();
    let mut states = Vec::new();
    for call in calls {
        states.push(cache_of(&call.await.unwrap()).0);
    }
    states.sort();
    assert_eq!(
        states,
        ["coalesced", "coalesced", "coalesced", "coalesced", "miss"]
    );
    assert_eq!(runs(&ledger_path, "acc_lookup"), 2);

    // A tool that is not read-only is never cached.
    for _ in 0..2 {
        let charged = invoke(client, "acc_charge", r#"{"account":"x","cents":1}"#, None).await;
        assert_eq!(cache_of(&charged).0, "");
    }
    assert_eq!(runs(&ledger_path, "acc_charge"), 2);

    // A disable is checked before the cache.
    let cli = |args: &[&str]| {
        let mut all = args.to_vec();
        all.extend_from_slice(&["--server", &mesh.addr]);
        std::process::Command::new(toolmesh_bin())
            .args(&all)
            .output()
            .unwrap()
    };
    // A key cached just now, so the cache would answer if it were asked.
    invoke(client, "acc_lookup", r#"{"key":"c"}"#, None).await;
    let cached = invoke(client, "acc_lookup", r#"{"key":"c"}"#, None).await;
    assert_eq!(cache_of(&cached).0, "hit");
    assert!(
        cli(&["disable", "acc_lookup", "--reason", "maintenance"])
            .status
            .success()
    );
    let disabled = invoke(client, "acc_lookup", r#"{"key":"c"}"#, None).await;
    assert_eq!(code(&disabled), ErrorCode::Disabled as i32);
    assert!(cli(&["enable", "acc_lookup"]).status.success());

    let audited = ledger(&audit);
    assert!(
        audited
            .iter()
            .any(|r| r["tool"] == "acc_lookup" && r["cache"] == "hit"),
        "cache hits are audited"
    );

    // The executor is gone and the answer past its TTL: served stale, marked.
    mesh.exec.kill9();
    let stale = eventually(
        "a stale answer once the TTL passed",
        Duration::from_secs(5),
        || {
            let mut client = client.clone();
            async move {
                let answer = invoke(&mut client, "acc_lookup", r#"{"key":"a"}"#, None).await;
                (cache_of(&answer).0 == "stale").then_some(answer)
            }
        },
    )
    .await;
    assert_eq!(code(&stale), 0, "{}", message(&stale));
    let output = stale.result.unwrap().output;
    assert!(
        output.starts_with("[cached answer from ") && output.ends_with("\nvalue of a"),
        "{output}"
    );
    let unknown = invoke(client, "acc_lookup", r#"{"key":"never"}"#, None).await;
    assert_eq!(
        code(&unknown),
        ErrorCode::Unavailable as i32,
        "nothing cached to stand in"
    );
}
