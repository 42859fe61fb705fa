//! The `toolmesh` command line: parses the arguments, sets up logging, TLS
//! and the runtime, and calls into the libraries: servers through
//! `toolmesh-node` (`serve`, `registry`, `dispatcher`, and `up` with its
//! example processes), example executors (`example`), an MCP server as an
//! executor (`bridge mcp`, through `toolmesh-bridge`), the client commands
//! (`tools`, `call`, `health`, `snapshot`, `explain`, `approvals`, `approve`,
//! `deny`, `disable`, `enable`, `rollout`, `mcp`), `completions` and, with the `bench`
//! feature, `bench`. The binary's `main` only calls [`main`].
#![forbid(unsafe_code)]

/// `println!` for what a command prints: a reader that hangs up
/// (`toolmesh tools | head -1`) ends the command quietly, as it ends `cat`.
/// The process keeps ignoring SIGPIPE, so a peer closing a socket is an
/// error the command reports, not a silent death by signal.
macro_rules! println {
    ($($arg:tt)*) => {
        $crate::output::print_line(format_args!($($arg)*))
    };
}

mod args;
mod bridge;
mod call_input;
mod client;
mod completions;
mod embeddings_flags;
mod etcd_flags;
mod logging;
mod output;
mod rollout;
mod up;

use args::{ClientArgs, Command, ExampleArgs};
use client::Client;
use std::process::ExitCode;
use std::time::Duration;
use toolmesh_node::Role;

/// How a command failed, and so which exit code it gets.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Failure {
    /// Bad flags or configuration (exit 64, EX_USAGE).
    #[error("{0}")]
    Usage(String),
    /// The server could not be reached (exit 69, EX_UNAVAILABLE).
    #[error("{0}")]
    Unavailable(String),
    /// The operation ran and failed (exit 1).
    #[error("{0}")]
    Failed(String),
}

impl Failure {
    fn exit_code(&self) -> ExitCode {
        match self {
            Failure::Usage(_) => ExitCode::from(64),
            Failure::Unavailable(_) => ExitCode::from(69),
            Failure::Failed(_) => ExitCode::from(1),
        }
    }
}

impl From<call_input::ArgumentsError> for Failure {
    fn from(error: call_input::ArgumentsError) -> Self {
        Failure::Usage(error.to_string())
    }
}

impl From<args::FlagError> for Failure {
    fn from(error: args::FlagError) -> Self {
        Failure::Usage(error.to_string())
    }
}

impl From<anyhow::Error> for Failure {
    fn from(error: anyhow::Error) -> Self {
        Failure::Failed(format!("{error:#}"))
    }
}

/// What the binary does for the library that needs `unsafe` (which this
/// library forbids).
#[derive(Clone, Copy)]
pub struct Hooks {
    /// Sets the parent-death signal of the processes `up` and `bench` start.
    pub arm_parent_death: toolmesh_procs::ArmParentDeath,
}

/// Parses the command line, runs the command, and returns its exit code.
/// `arm` sets the parent-death signal of the processes `up` and `bench`
/// start (it needs `unsafe`, which this library forbids).
pub fn main(hooks: Hooks) -> ExitCode {
    let arm = hooks.arm_parent_death;
    let cli = match args::parse() {
        Ok(cli) => cli,
        // --help and --version print and succeed.
        Err(args::BadUsage::Clap(e)) if !e.use_stderr() => {
            let _ = e.print();
            return ExitCode::SUCCESS;
        }
        Err(args::BadUsage::Clap(e)) => {
            let _ = e.print();
            return ExitCode::from(64);
        }
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(64);
        }
    };
    let tls = match toolmesh_transport::Tls::from_files(&cli.tls.files()) {
        Ok(tls) => tls,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(64);
        }
    };
    // TOOLMESH_WORKER_THREADS sets the runtime's threads (default: one per
    // core, and one in all for a bridge).
    let threads = std::env::var("TOOLMESH_WORKER_THREADS")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .filter(|n| *n > 0);
    let mut builder = match threads {
        None if cli.command.one_thread() => tokio::runtime::Builder::new_current_thread(),
        None => tokio::runtime::Builder::new_multi_thread(),
        Some(threads) => {
            let mut builder = tokio::runtime::Builder::new_multi_thread();
            builder.worker_threads(threads);
            builder
        }
    };
    let runtime = match builder.enable_all().build() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let otlp = cli.command.ops().and_then(|ops| ops.otlp_endpoint.clone());
    let logged = {
        // The trace exporter's channel lives on the runtime.
        let _runtime = runtime.enter();
        let service = cli.command.service_name();
        logging::init(
            cli.log_format,
            &service,
            cli.command.ops().is_some(),
            otlp.as_deref(),
        )
    };
    if let Err(e) = logged {
        // The one way tracing fails to start: the endpoint it was given.
        eprintln!("error: --otlp-endpoint: {e}");
        return ExitCode::from(64);
    }
    let outcome = runtime.block_on(run(cli.command, &cli.client, &tls, arm));
    toolmesh_telemetry::trace::flush();
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) => {
            eprintln!("error: {failure}");
            failure.exit_code()
        }
    }
}

async fn run(
    command: Command,
    client: &ClientArgs,
    tls: &toolmesh_transport::Tls,
    arm: toolmesh_procs::ArmParentDeath,
) -> Result<(), Failure> {
    let ttl = |ms: u64| Duration::from_millis(ms);
    let connect = || Client::connect(client, tls);
    match command {
        Command::Up(args) => up::run(args, tls, arm).await,
        Command::Serve(args) => {
            let role = Role::Serve {
                default_ttl: ttl(args.default_ttl_ms),
            };
            serve(role, &args.node_config(tls)).await
        }
        Command::Registry(args) => {
            let role = Role::Registry {
                default_ttl: ttl(args.default_ttl_ms),
            };
            serve(role, &args.node_config(tls)).await
        }
        Command::Dispatcher(args) => {
            let role = Role::Dispatcher {
                registry: args.registry.clone(),
                token: toolmesh_transport::Credential::from_flags(
                    args.registry_token.clone(),
                    args.registry_token_file.clone(),
                ),
            };
            serve(role, &args.server.node_config(tls)).await
        }
        Command::Example(args) => example(args, tls).await,
        Command::Bridge(args) => bridge::run(args, tls).await,
        Command::Tools(args) => client::tools(args, &connect()?).await,
        Command::Search(args) => client::search(args, &connect()?).await,
        Command::Call(args) => client::call(args, &connect()?).await,
        Command::Health(args) => client::health(args, &connect()?).await,
        Command::Snapshot(args) => client::snapshot(args, &connect()?).await,
        Command::Explain(args) => client::explain(args, &connect()?).await,
        Command::Approvals => client::approvals(&connect()?).await,
        Command::Approve(args) => client::decide(args, false, &connect()?).await,
        Command::Deny(args) => client::decide(args, true, &connect()?).await,
        Command::Disable(args) => client::disable(args, &connect()?).await,
        Command::Rollout(args) => rollout::run(args, &connect()?).await,
        Command::Enable(args) => client::enable(args, &connect()?).await,
        Command::Mcp(args) => client::mcp_bridge(&args, &connect()?).await,
        Command::Completions(args) => completions::print(args.shell),
        #[cfg(feature = "bench")]
        Command::Bench(args) => bench(args, arm).await,
        #[cfg(feature = "bench")]
        Command::McpEcho(args) => toolmesh_fixtures::mcp_echo::run(args.http.as_deref())
            .await
            .map_err(Failure::Failed),
        #[cfg(feature = "bench")]
        Command::EchoUpstream(upstream) => upstream.run().await.map_err(Failure::Failed),
    }
}

/// `toolmesh serve|registry|dispatcher`: a node until SIGTERM or ctrl-c.
async fn serve(role: Role, config: &toolmesh_node::NodeConfig) -> Result<(), Failure> {
    toolmesh_node::run(role, config, toolmesh_transport::shutdown_signal())
        .await
        .map_err(node_failure)
}

/// A node that could not start because of what its flags name (an address
/// in use, a policy or TLS file) is bad usage (64); one that failed while
/// serving failed (1).
fn node_failure(error: toolmesh_node::NodeError) -> Failure {
    if error.is_setting() {
        Failure::Usage(error.to_string())
    } else {
        Failure::Failed(error.to_string())
    }
}

#[cfg(feature = "bench")]
/// `toolmesh bench`: the benchmark, with this binary as the one measured.
async fn bench(args: args::BenchArgs, arm: toolmesh_procs::ArmParentDeath) -> Result<(), Failure> {
    let exe = std::env::current_exe()
        .map_err(|e| Failure::Failed(format!("cannot find the toolmesh binary: {e}")))?;
    if let Some(args::BenchWhat::Search(search)) = args.what {
        return bench_search(search).await;
    }
    if let Some(args::BenchWhat::Compare(compare)) = args.what {
        let report = toolmesh_bench::run_compare(toolmesh_bench::CompareOptions {
            baseline_exe: compare.baseline,
            toolmesh_exe: exe.clone(),
            fixture_exe: exe,
            quick: compare.quick,
            json: compare.json_file,
            parent_death: Some(arm),
        })
        .await;
        return printed(report);
    }
    if let Some(args::BenchWhat::Scale(scale)) = args.what {
        let report = toolmesh_bench::run_org(toolmesh_bench::OrgOptions {
            toolmesh_exe: exe,
            executors: scale.executors,
            dispatchers: scale.dispatchers,
            quick: scale.quick,
            json: scale.json_file,
            keep_logs: scale.keep_logs,
            parent_death: Some(arm),
        })
        .await;
        return printed(report);
    }
    let report = toolmesh_bench::run(toolmesh_bench::BenchOptions {
        toolmesh_exe: exe.clone(),
        fixture_exe: exe,
        parent_death: Some(arm),
        quick: args.quick,
        json: args.json_file,
    })
    .await;
    printed(report)
}

#[cfg(feature = "bench")]
/// A benchmark's report on stdout, or why it could not run.
fn printed(
    report: Result<impl std::fmt::Display, toolmesh_bench::BenchError>,
) -> Result<(), Failure> {
    let report = report.map_err(|e| Failure::Failed(e.to_string()))?;
    println!("{report}");
    Ok(())
}

#[cfg(feature = "bench")]
/// `toolmesh bench search`: search speed, or with `--eval` retrieval quality.
async fn bench_search(args: args::BenchSearchArgs) -> Result<(), Failure> {
    let eval = if args.eval {
        let prepared = "source scripts/bench/bfcl.sh, or give";
        let data = args.bfcl_data.ok_or_else(|| {
            Failure::Usage(format!(
                "--eval needs the BFCL data: {prepared} --bfcl-data DIR"
            ))
        })?;
        let python = args.bfcl_python.ok_or_else(|| {
            Failure::Usage(format!(
                "--eval needs a python with rank_bm25: {prepared} --bfcl-python PATH"
            ))
        })?;
        Some(toolmesh_bench::EvalOptions {
            data,
            python,
            held_out: args.held_out,
            tune: args.tune,
        })
    } else {
        None
    };
    let report = toolmesh_bench::run_search(toolmesh_bench::SearchOptions {
        quick: args.quick,
        eval,
        json: args.json_file,
    })
    .await
    .map_err(|e| Failure::Failed(e.to_string()))?;
    println!("{report}");
    Ok(())
}

/// `toolmesh example NAME`: one example executor, registered with a registry.
async fn example(args: ExampleArgs, tls: &toolmesh_transport::Tls) -> Result<(), Failure> {
    let options = toolmesh_examples::ExampleOptions {
        files_root: args.files_root.clone(),
    };
    let executor = toolmesh_examples::example(&args.name, &options);
    #[cfg(feature = "bench")]
    let executor = executor.or_else(|| {
        let options = toolmesh_fixtures::FixtureOptions {
            ledger: args.ledger.clone(),
            ..Default::default()
        };
        toolmesh_fixtures::fixture(&args.name, &options)
    });
    let executor = executor.ok_or_else(|| {
        Failure::Usage(format!(
            "unknown example {:?}; choose from {}",
            args.name,
            toolmesh_examples::EXAMPLE_NAMES.join(", ")
        ))
    })?;
    let options = args.serve.serve_options(tls.clone());
    let shutdown = toolmesh_transport::shutdown_signal();
    toolmesh_examples::serve(&args.name, executor, options, shutdown)
        .await
        .map_err(|e| match e {
            toolmesh_executor::ExecutorError::Unroutable { .. } => Failure::Usage(e.to_string()),
            e => Failure::Failed(e.to_string()),
        })
}
