//! Executor `acceptance`: the tools end-to-end, chaos and benchmark tests drive (echo, sleep, panic, charge), each execution optionally appended to a JSON-lines ledger.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::{
    io::Write,
    path::{Path, PathBuf},
    sync::Arc,
    time::Duration,
};
use toolmesh_executor::{CallCx, Executor, RiskLevel, Tool, ToolFailure, ToolInfo, ToolOutput};

/// The `acceptance` executor; with `ledger`, every execution of every tool
/// appends one JSON line to that file before the tool returns.
pub fn executor(ledger: Option<PathBuf>) -> Executor {
    let ledger = Ledger(ledger.map(Arc::new));
    Executor::new("acceptance")
        .tool(AccEcho(ledger.clone()))
        .tool(AccSleep(ledger.clone()))
        .tool(AccPanic(ledger.clone()))
        .tool(AccCharge(ledger))
}

/// One ledger line.
#[derive(Serialize)]
struct Entry<'a> {
    call_id: &'a str,
    tool: &'a str,
    attempt: u32,
    executor_id: &'a str,
}

/// Where executions are counted, if anywhere.
#[derive(Clone)]
struct Ledger(Option<Arc<PathBuf>>);

impl Ledger {
    /// Appends this execution: the whole line in one `write_all` on a file
    /// opened for append, then flush, so lines from concurrent calls and
    /// processes do not interleave.
    fn record(&self, cx: &CallCx) -> Result<(), ToolFailure> {
        let Some(path) = &self.0 else {
            return Ok(());
        };
        let mut line = serde_json::to_string(&Entry {
            call_id: cx.call_id(),
            tool: cx.tool(),
            attempt: cx.attempt(),
            executor_id: cx.executor_id(),
        })
        .map_err(|e| ledger_failure(path, &e))?;
        line.push('\n');
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path.as_path())
            .and_then(|mut file| {
                file.write_all(line.as_bytes())?;
                file.flush()
            })
            .map_err(|e| ledger_failure(path, &e))
    }
}

fn ledger_failure(path: &Path, e: &dyn std::fmt::Display) -> ToolFailure {
    ToolFailure::new(format!(
        "could not write the acceptance ledger {}: {e}",
        path.display()
    ))
    .retryable()
}

/// One item of an `acc_echo` payload.
#[derive(Debug, Deserialize, JsonSchema)]
#[expect(
    dead_code,
    reason = "read only to check the payload's shape; the tool counts items"
)]
#[serde(deny_unknown_fields)]
struct Item {
    /// A non-negative id.
    id: u64,
    /// A name.
    name: String,
    /// Free labels.
    tags: Vec<String>,
}

/// An optional structured payload for `acc_echo`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct Payload {
    /// The items to count.
    items: Vec<Item>,
}

/// Arguments of `acc_echo`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct AccEchoArgs {
    /// The text to echo back.
    message: String,
    /// A payload whose items are counted (for large-message tests).
    #[serde(default)]
    payload: Option<Payload>,
}

/// `acc_echo`.
struct AccEcho(Ledger);

impl Tool for AccEcho {
    type Args = AccEchoArgs;

    fn info(&self) -> ToolInfo {
        ToolInfo::new(
            "acc_echo",
            "1.0.0",
            "Acceptance test tool: echoes `message` back as the output text, and returns \
             {\"message\", \"items\"} as data, where items is the number of payload items.",
        )
        .risk(RiskLevel::Low)
        .idempotent(true)
        .owner("toolmesh")
        .tags(["acceptance"])
    }

    async fn call(&self, args: AccEchoArgs, cx: CallCx) -> Result<ToolOutput, ToolFailure> {
        self.0.record(&cx)?;
        let items = args.payload.map_or(0, |p| p.items.len());
        Ok(ToolOutput::text(args.message.clone())
            .with_data(serde_json::json!({"message": args.message, "items": items})))
    }
}

/// Arguments of `acc_sleep`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct AccSleepArgs {
    /// How long to sleep, in milliseconds (0 to 60000).
    #[schemars(range(max = 60000))]
    ms: u64,
}

/// `acc_sleep`.
struct AccSleep(Ledger);

impl Tool for AccSleep {
    type Args = AccSleepArgs;

    fn info(&self) -> ToolInfo {
        ToolInfo::new(
            "acc_sleep",
            "1.0.0",
            "Acceptance test tool: sleeps `ms` milliseconds, stopping early when the call is \
             cancelled, then answers \"slept N ms\". Its timeout is 1 s.",
        )
        .risk(RiskLevel::Low)
        .idempotent(true)
        .timeout(Duration::from_secs(1))
        .owner("toolmesh")
        .tags(["acceptance"])
    }

    async fn call(&self, args: AccSleepArgs, cx: CallCx) -> Result<ToolOutput, ToolFailure> {
        self.0.record(&cx)?;
        tokio::select! {
            () = tokio::time::sleep(Duration::from_millis(args.ms)) => {
                Ok(ToolOutput::text(format!("slept {} ms", args.ms)))
            }
            () = cx.cancelled() => Err(ToolFailure::new(format!(
                "cancelled before {} ms had passed", args.ms
            ))),
        }
    }
}

/// Arguments of `acc_panic` (none).
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct AccPanicArgs {}

/// `acc_panic`.
struct AccPanic(Ledger);

impl Tool for AccPanic {
    type Args = AccPanicArgs;

    fn info(&self) -> ToolInfo {
        ToolInfo::new(
            "acc_panic",
            "1.0.0",
            "Acceptance test tool: panics on purpose, to show that the executor answers \
             EXECUTOR_FAILED and keeps serving.",
        )
        .risk(RiskLevel::Low)
        .owner("toolmesh")
        .tags(["acceptance"])
    }

    async fn call(&self, _args: AccPanicArgs, cx: CallCx) -> Result<ToolOutput, ToolFailure> {
        self.0.record(&cx)?;
        panic!("acc_panic panics on purpose (call {})", cx.call_id())
    }
}

/// Arguments of `acc_charge`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct AccChargeArgs {
    /// The account to charge.
    account: String,
    /// The amount in cents (at least 1).
    #[schemars(range(min = 1))]
    cents: u64,
}

/// `acc_charge`.
struct AccCharge(Ledger);

impl Tool for AccCharge {
    type Args = AccChargeArgs;

    fn info(&self) -> ToolInfo {
        ToolInfo::new(
            "acc_charge",
            "1.0.0",
            "Acceptance test tool: pretends to charge `cents` to `account` and answers \
             \"charged\". Not idempotent, so the dispatcher must never send one call twice; \
             the ledger shows whether it did.",
        )
        .risk(RiskLevel::Medium)
        .idempotent(false)
        .owner("toolmesh")
        .tags(["acceptance"])
    }

    async fn call(&self, args: AccChargeArgs, cx: CallCx) -> Result<ToolOutput, ToolFailure> {
        self.0.record(&cx)?;
        Ok(ToolOutput::text("charged")
            .with_data(serde_json::json!({"account": args.account, "cents": args.cents})))
    }
}
