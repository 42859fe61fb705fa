//! The result cache end to end over real processes: a read-only,
//! idempotent tool's answer is reused while fresh (marked, audited), identical
//! concurrent calls run once, a tool that is not read-only is never cached,
//! a disable is never hidden by the cache, a stale answer stands in,
//! marked, when the executor is gone, a contract changed under the same
//! name@version is never answered from the old one's cache, and a caller's
//! short deadline or hang-up fails no other caller's coalesced call.

use std::path::PathBuf;
use std::time::Duration;
use tonic::transport::Channel;
use toolmesh::pb::dispatcher_client::DispatcherClient;
use toolmesh::pb::{ErrorCode, InvokeResponse};
use toolmesh_system_tests::*;
use toolmesh_testkit::{patient, until};

/// A policy that caches acc_lookup's answers for `lookup_ttl_ms` (and a
/// minute more as stale), and names acc_charge, which is never cached.
fn policy_text(lookup_ttl_ms: u64) -> String {
    format!(
        r#"
[auth]
allow_anonymous = true
anonymous = {{ principal = "anonymous", tenant = "dev", roles = ["agent", "admin", "executor"] }}

[[grants]]
name = "everything"
tools = ["*"]

[cache]
max_bytes = 1048576

[[cache.tools]]
tool = "acc_lookup"
ttl_ms = {lookup_ttl_ms}
stale_if_error_ms = 60000

[[cache.tools]]
# Not read-only: the dispatcher never caches it, whatever this says.
tool = "acc_charge"
ttl_ms = 60000
"#
    )
}

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

/// Calls that ran `tool` (however many attempts each made).
fn calls(path: &std::path::Path, tool: &str) -> usize {
    let ids: std::collections::HashSet<String> = ledger(path)
        .iter()
        .filter(|l| l["tool"] == tool)
        .map(|l| l["call_id"].to_string())
        .collect();
    ids.len()
}

/// Hits, coalescing, never-cached tools, disable, audit and stale answers.
#[tokio::test]
async fn cached_answers_are_marked_and_never_hide_checks() {
    let dir = temp_dir("result-cache");
    let policy = dir.join("policy.toml");
    std::fs::write(&policy, policy_text(1000)).unwrap();
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

/// `toolmesh serve` under a policy caching acc_lookup, logging each call
/// that joins an identical one in flight; acceptance executors come and go.
struct Mesh {
    _dir: TempDir,
    serve: Proc,
    addr: String,
    client: DispatcherClient<Channel>,
    ledger: PathBuf,
}

/// What a call joining an identical one in flight logs.
const JOINS: &str = "joins the identical call in flight";

/// A call long enough that a caller hangs up, surely, while it runs.
const HANG: &str = r#"{"key":"hang","delay_ms":3000}"#;

impl Mesh {
    async fn start(label: &str, lookup_ttl_ms: u64) -> Mesh {
        let dir = temp_dir(label);
        let policy_path = dir.join("policy.toml");
        std::fs::write(&policy_path, policy_text(lookup_ttl_ms)).unwrap();
        let mut command = std::process::Command::new(toolmesh_bin());
        command
            .args(["serve", "--listen", "127.0.0.1:0", "--policy"])
            .arg(&policy_path)
            .env(
                "TOOLMESH_LOG",
                "info,toolmesh_dispatcher::result_cache=debug",
            );
        let serve = <Proc as TestProc>::spawn("serve", command);
        let addr = serve.listen_addr();
        let ledger = dir.join("ledger.jsonl");
        Mesh {
            client: dispatcher(&addr),
            _dir: dir,
            serve,
            addr,
            ledger,
        }
    }

    /// The acceptance executor (with `extra` flags) once acc_lookup is listed.
    async fn executor(&mut self, extra: &[&str]) -> Proc {
        let mut args = vec!["--ledger", self.ledger.to_str().unwrap()];
        args.extend_from_slice(extra);
        let exec = example("acceptance", &self.addr, &args);
        until_listed(&mut self.client, &["acc_lookup"], Duration::from_secs(10)).await;
        exec
    }

    /// acc_lookup with `arguments`, in a task of its own (as another caller).
    fn call(
        &self,
        arguments: &'static str,
        timeout: Option<Duration>,
    ) -> tokio::task::JoinHandle<Result<InvokeResponse, tonic::Status>> {
        let mut client = self.client.clone();
        tokio::spawn(async move { try_invoke(&mut client, "acc_lookup", arguments, timeout).await })
    }

    /// Waits until `n` calls in all have run acc_lookup.
    async fn until_calls(&self, n: usize) {
        let ledger = self.ledger.clone();
        until(
            &format!("{n} calls running acc_lookup"),
            Duration::from_secs(10),
            || calls(&ledger, "acc_lookup") >= n,
        )
        .await;
    }

    /// How many calls ran acc_lookup.
    fn calls(&self) -> usize {
        calls(&self.ledger, "acc_lookup")
    }
}

/// acc_lookup re-registered under the same name@version with another
/// output schema is a new contract: its first call runs the tool instead of
/// getting the answer cached under the old schema (which has an hour to live).
#[tokio::test]
async fn a_changed_contract_is_never_answered_from_the_old_ones_cache() {
    let mut mesh = Mesh::start("cache-contract", 3_600_000).await;
    let old = mesh
        .executor(&["--lookup-output-schema", r#"{"type":"object"}"#])
        .await;
    let key_a = r#"{"key":"a"}"#;
    let first = invoke(&mut mesh.client, "acc_lookup", key_a, None).await;
    assert_eq!(code(&first), 0, "{}", message(&first));
    assert_eq!(cache_of(&first).0, "miss");
    let cached = invoke(&mut mesh.client, "acc_lookup", key_a, None).await;
    assert_eq!(cache_of(&cached).0, "hit", "{cached:?}");

    // The executor drains (deregistering), and another serves acc_lookup@1.0.0
    // whose data must now carry a string `key`.
    old.stop(libc::SIGTERM, patient(Duration::from_secs(5)))
        .await;
    eventually("acc_lookup gone", Duration::from_secs(10), || {
        let mut client = mesh.client.clone();
        async move {
            let names = listed(&mut client).await?;
            (!names.iter().any(|n| n == "acc_lookup")).then_some(())
        }
    })
    .await;
    let new_schema =
        r#"{"type":"object","properties":{"key":{"type":"string"}},"required":["key"]}"#;
    let _new = mesh.executor(&["--lookup-output-schema", new_schema]).await;
    let changed = invoke(&mut mesh.client, "acc_lookup", key_a, None).await;
    assert_eq!(code(&changed), 0, "{}", message(&changed));
    assert_eq!(
        cache_of(&changed).0,
        "miss",
        "not the old contract's answer: {changed:?}"
    );
    assert_eq!(mesh.calls(), 2);
    let cached = invoke(&mut mesh.client, "acc_lookup", key_a, None).await;
    assert_eq!(
        cache_of(&cached).0,
        "hit",
        "the new contract's answer is cached"
    );
}

/// Asserts a call ended DEADLINE_EXCEEDED: the dispatcher's answer, or —
/// when a loaded machine delays that answer past the small margin by which
/// it precedes the caller's deadline — the caller's own timer.
fn out_of_time(call: Result<InvokeResponse, tonic::Status>) {
    match call {
        Ok(answer) => assert_eq!(
            code(&answer),
            ErrorCode::DeadlineExceeded as i32,
            "{answer:?}"
        ),
        Err(status) => assert!(status.message().contains("Timeout expired"), "{status:?}"),
    }
}

/// The leader of a coalesced call whose short deadline cuts it short gets
/// its DEADLINE_EXCEEDED; a caller that joined it with time to spare gets
/// the answer. A joiner with less time than the leader gets its own
/// DEADLINE_EXCEEDED (an answer, not a dropped RPC); the leader its answer.
#[tokio::test]
async fn a_short_deadline_fails_only_its_own_call() {
    let mut mesh = Mesh::start("cache-deadlines", 60_000).await;
    let _exec = mesh.executor(&[]).await;
    let (short, long) = (Duration::from_millis(300), patient(Duration::from_secs(5)));

    let slow = r#"{"key":"slow","delay_ms":1000}"#;
    let leader = mesh.call(slow, Some(short));
    mesh.until_calls(1).await;
    let joiner = mesh.call(slow, Some(long));
    let (leader, joiner) = (leader.await.unwrap(), joiner.await.unwrap().unwrap());
    out_of_time(leader);
    assert_eq!(code(&joiner), 0, "{}", message(&joiner));
    assert_eq!(joiner.result.unwrap().output, "value of slow");

    // Long enough that the joiner surely finds it in flight.
    let slower = r#"{"key":"slower","delay_ms":3000}"#;
    let leader = mesh.call(slower, Some(long));
    mesh.until_calls(3).await;
    let joiner = mesh.call(slower, Some(short));
    let (leader, joiner) = (leader.await.unwrap().unwrap(), joiner.await.unwrap());
    out_of_time(joiner);
    assert_eq!(code(&leader), 0, "{}", message(&leader));
    assert_eq!(cache_of(&leader).0, "miss");
    assert_eq!(mesh.calls(), 3, "the joiner ran nothing");
}

/// A leader that hangs up while another caller waits on its call does not
/// fail that caller: it runs the call itself.
#[tokio::test]
async fn a_leaders_hang_up_fails_no_joiner() {
    let mut mesh = Mesh::start("cache-leader-hangs-up", 60_000).await;
    let _exec = mesh.executor(&[]).await;
    let leader = mesh.call(HANG, None);
    mesh.until_calls(1).await;
    let joiner = mesh.call(HANG, None);
    mesh.serve
        .wait_line_async(JOINS, patient(Duration::from_secs(10)))
        .await
        .unwrap();
    leader.abort();
    assert!(leader.await.unwrap_err().is_cancelled());
    let joiner = joiner.await.unwrap().unwrap();
    assert_eq!(code(&joiner), 0, "{}", message(&joiner));
    assert_eq!(joiner.result.unwrap().output, "value of hang");
}

/// A joiner that hangs up changes nothing for the leader: its call goes
/// on, once, and its answer is cached.
#[tokio::test]
async fn a_joiners_hang_up_fails_no_leader() {
    let mut mesh = Mesh::start("cache-joiner-hangs-up", 60_000).await;
    let _exec = mesh.executor(&[]).await;
    let leader = mesh.call(HANG, None);
    mesh.until_calls(1).await;
    let joiner = mesh.call(HANG, None);
    mesh.serve
        .wait_line_async(JOINS, patient(Duration::from_secs(10)))
        .await
        .unwrap();
    joiner.abort();
    assert!(joiner.await.unwrap_err().is_cancelled());
    let leader = leader.await.unwrap().unwrap();
    assert_eq!(code(&leader), 0, "{}", message(&leader));
    assert_eq!(cache_of(&leader).0, "miss");
    let again = invoke(&mut mesh.client, "acc_lookup", HANG, None).await;
    assert_eq!(cache_of(&again).0, "hit");
    assert_eq!(mesh.calls(), 1);
}
