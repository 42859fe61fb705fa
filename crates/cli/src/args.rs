//! Command-line arguments of `toolmesh`.

use clap::parser::ValueSource;
use clap::{ArgMatches, Args, CommandFactory, FromArgMatches, Parser, Subcommand, ValueEnum};
use std::net::SocketAddr;
use std::path::PathBuf;
use toolmesh_transport::{BadAddress, dial_address, listen_address};

/// toolmesh: a gRPC runtime for the tools that LLM agents call.
#[derive(Debug, Parser)]
#[command(name = "toolmesh", version, about, propagate_version = true)]
pub(crate) struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub(crate) command: Command,
    /// Log format for servers (logs go to stderr; filter with TOOLMESH_LOG).
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    pub(crate) log_format: LogFormat,
    /// TLS for every server and connection of this process.
    #[command(flatten)]
    pub(crate) tls: toolmesh_examples::TlsFlags,
    /// Where client commands connect and how they print (global: before or
    /// after the subcommand).
    #[command(flatten)]
    pub(crate) client: ClientArgs,
}

/// The client flags given on the command line of a command that is not a
/// client command: they would be ignored, so they are refused.
#[derive(Debug, thiserror::Error)]
#[error(
    "--{flag} is a flag of the client commands (tools, call, health, snapshot, …); `toolmesh {command}` does not use it{hint}"
)]
pub(crate) struct MisplacedFlag {
    flag: &'static str,
    command: String,
    hint: &'static str,
}

/// How an `up --bridge` value is written.
const BRIDGE_SHAPE: &str = "write it as NAME=-- COMMAND ARGS…, e.g. 'everything=-- npx -y @modelcontextprotocol/server-everything'";

/// How an `up --bridge-grpc` value is written.
const BRIDGE_GRPC_SHAPE: &str = "write it as NAME=HOST:PORT, e.g. orders=127.0.0.1:50051";

/// How an `up --bridge-openapi` value is written.
const BRIDGE_OPENAPI_SHAPE: &str = "write it as NAME=SPEC[,BASE_URL], e.g. pets=http://127.0.0.1:8000/openapi.json or pets=api.yaml,https://api.example.com/v2";

/// A flag whose value cannot be used: the flag named, with the fix
/// (exit 64, as every bad usage).
#[derive(Debug, thiserror::Error)]
pub(crate) enum FlagError {
    /// `up --bridge` not written as `NAME=-- COMMAND ARGS…`.
    #[error("--bridge {0:?}: {shape}", shape = BRIDGE_SHAPE)]
    BridgeShape(String),
    /// `up --bridge` whose command is empty or does not split.
    #[error(
        "--bridge {0:?}: the command after `--` is empty or its quotes do not close; {shape}",
        shape = BRIDGE_SHAPE
    )]
    BridgeCommand(String),
    /// `up --bridge-grpc` not written as `NAME=HOST:PORT`.
    #[error("--bridge-grpc {0:?}: {shape}", shape = BRIDGE_GRPC_SHAPE)]
    BridgeGrpcShape(String),
    /// `up --bridge-openapi` not written as `NAME=SPEC[,BASE_URL]`.
    #[error("--bridge-openapi {0:?}: {shape}", shape = BRIDGE_OPENAPI_SHAPE)]
    BridgeOpenapiShape(String),
    /// `bridge mcp --bearer-env VAR` with VAR unset or empty.
    #[error(
        "--bearer-env {0}: the variable is not set; export it with the token the MCP server expects"
    )]
    BearerUnset(String),
    /// A bridge's `--tools`, `--methods` or `--operations` with a pattern
    /// that is not a name glob.
    #[error("{flag}: {source}")]
    Select {
        /// The flag, with its dashes.
        flag: &'static str,
        /// What is wrong with the pattern.
        source: toolmesh::PatternError,
    },
    /// A `KEY=VALUE` flag without both sides.
    #[error("{flag} {pair:?}: write it as {shape}")]
    Pair {
        /// The flag, with its dashes.
        flag: &'static str,
        /// The value given.
        pair: String,
        /// How to write it.
        shape: &'static str,
    },
    /// `bridge mcp --risk TOOL=LEVEL` with an unknown level.
    #[error("--risk {pair}: {level:?} is not a risk level; use low, medium or high")]
    Risk {
        /// The value given.
        pair: String,
        /// The level in it.
        level: String,
    },
    /// `bridge mcp --timeout-ms` beyond what a tool may run.
    #[error("--timeout-ms {given} is longer than a tool may run ({max} ms)")]
    Timeout {
        /// The value given.
        given: u64,
        /// The longest a tool may run.
        max: u64,
    },
    /// The upstream flags of `bridge mcp` (`--url`, `--header`, `--url-ca`,
    /// the command after `--`).
    #[error(transparent)]
    Upstream(#[from] toolmesh_bridge::BridgeError),
}

/// The client flags, by clap id and as typed.
const CLIENT_FLAGS: [(&str, &str); 4] = [
    ("server", "server"),
    ("json", "json"),
    ("token", "token"),
    ("timeout_ms", "timeout-ms"),
];

/// What `toolmesh call --help` ends with.
const CALL_EXAMPLES: &str = "Examples:
  toolmesh call search_kb '{\"query\": \"reset password\"}'
  toolmesh call get_user_info@1.0.0 '{\"user_id\": \"u_1001\"}'
  toolmesh call create_ticket @ticket.json        arguments from a file
  echo '{\"query\": \"vpn\"}' | toolmesh call search_kb -
  toolmesh call export_report '{}' --stream        progress as it comes
  toolmesh --server 10.0.0.5:7070 --token \"$TOKEN\" call search_kb '{\"query\": \"vpn\"}'";

/// What `toolmesh search --help` ends with.
const SEARCH_EXAMPLES: &str = "Examples:
  toolmesh search \"refund a customer's order\"
  toolmesh search \"reset a password\" --limit 3 --json
  toolmesh search \"send a message\" --tag messaging --max-risk medium

Each match is shown as `toolmesh tools` lists it to you; tools you may not
list are never found. --json prints
{\"snapshot_version\": N, \"matches\": [{\"name\", \"version\", \"score\", \"description\"}, ...]}.";

/// Parses the command line (printing help, or the error and exiting 2, as
/// clap does) and refuses client flags given to a command they do nothing for.
pub(crate) fn parse() -> Result<Cli, BadUsage> {
    let matches = Cli::command().try_get_matches()?;
    checked(&matches)
}

/// Why the command line cannot run.
#[derive(Debug, thiserror::Error)]
pub(crate) enum BadUsage {
    /// clap's own verdict: an unknown flag, a missing value, … (or help
    /// and version, which are not failures).
    #[error(transparent)]
    Clap(#[from] clap::Error),
    /// A client flag on a command that does not use it.
    #[error(transparent)]
    Misplaced(#[from] MisplacedFlag),
}

/// The command line `matches` stands for, its client flags checked.
fn checked(matches: &ArgMatches) -> Result<Cli, BadUsage> {
    let cli = Cli::from_arg_matches(matches)?;
    check_client_flags(matches, &cli.command)?;
    Ok(cli)
}

/// Fails on the first client flag typed on the command line of a command
/// that is not a client command.
fn check_client_flags(matches: &ArgMatches, command: &Command) -> Result<(), MisplacedFlag> {
    if command.is_client() {
        return Ok(());
    }
    let name = matches.subcommand_name().unwrap_or_default();
    for (id, flag) in CLIENT_FLAGS {
        // `toolmesh example --token` is the executor's registration token;
        // a bridge's --token is too, and its --timeout-ms bounds its tools.
        let own = match command {
            Command::Example(_) => id == "token",
            Command::Bridge(_) => id == "token" || id == "timeout_ms",
            _ => false,
        };
        if !own && matches.value_source(id) == Some(ValueSource::CommandLine) {
            return Err(MisplacedFlag {
                flag,
                command: name.to_owned(),
                hint: misplaced_hint(flag, command),
            });
        }
    }
    Ok(())
}

/// What to do instead of giving `flag` to `command`.
fn misplaced_hint(flag: &str, command: &Command) -> &'static str {
    match flag {
        "server" if command.ops().is_some() => {
            " (a server takes --listen; an executor, --registry)"
        }
        #[cfg(feature = "bench")]
        "json" if matches!(command, Command::Bench(_)) => {
            " (it writes its report as JSON with --json-file FILE)"
        }
        _ => "; remove it",
    }
}

/// How logs are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

impl Command {
    /// Whether this is a client command, which talks to `--server`.
    pub(crate) fn is_client(&self) -> bool {
        matches!(
            self,
            Command::Tools(_)
                | Command::Search(_)
                | Command::Call(_)
                | Command::Health(_)
                | Command::Snapshot(_)
                | Command::Explain(_)
                | Command::Approvals
                | Command::Approve(_)
                | Command::Deny(_)
                | Command::Mcp(_)
                | Command::Disable(_)
                | Command::Enable(_)
                | Command::Rollout(_)
        )
    }

    /// The operations flags of a server command (none for client commands).
    pub(crate) fn ops(&self) -> Option<&toolmesh_examples::OpsFlags> {
        match self {
            Command::Up(args) => Some(&args.serve.server.ops),
            Command::Serve(args) | Command::Registry(args) => Some(&args.server.ops),
            Command::Dispatcher(args) => Some(&args.server.ops),
            Command::Example(args) => Some(&args.serve.ops),
            Command::Bridge(args) => Some(&args.serve().ops),
            _ => None,
        }
    }

    /// Whether it runs on one thread unless `TOOLMESH_WORKER_THREADS`
    /// says otherwise: a bridge's calls each wait on one upstream, so a
    /// second worker adds nothing but the hand-offs between them (a bridged
    /// call crossed threads three to five times on the default runtime).
    pub(crate) fn one_thread(&self) -> bool {
        matches!(self, Command::Bridge(_))
    }

    /// The `service.name` this process exports traces as.
    pub(crate) fn service_name(&self) -> String {
        match self {
            Command::Up(_) => "toolmesh-up".to_owned(),
            Command::Serve(_) => "toolmesh-serve".to_owned(),
            Command::Registry(_) => "toolmesh-registry".to_owned(),
            Command::Dispatcher(_) => "toolmesh-dispatcher".to_owned(),
            Command::Example(args) => format!("toolmesh-example-{}", args.name),
            Command::Bridge(_) => "toolmesh-bridge".to_owned(),
            _ => "toolmesh-cli".to_owned(),
        }
    }
}

/// Every subcommand.
#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Run registry, dispatcher and the example executors on localhost.
    Up(UpArgs),
    /// Run registry and dispatcher together on one port.
    Serve(ServeArgs),
    /// Run only the registry.
    Registry(ServeArgs),
    /// Run only a dispatcher that follows a registry elsewhere.
    Dispatcher(DispatcherArgs),
    /// Run one of the example executors (knowledge, accounts, support, files).
    Example(ExampleArgs),
    /// Bring an existing server's tools into the mesh (`bridge mcp`).
    Bridge(BridgeArgs),
    /// List the tools you can call.
    Tools(ToolsArgs),
    /// Find the tools you can call that best match what you want done.
    #[command(after_help = SEARCH_EXAMPLES)]
    Search(SearchArgs),
    /// Call a tool with JSON arguments.
    #[command(after_help = CALL_EXAMPLES)]
    Call(CallArgs),
    /// Show health of the server, or of one tool.
    Health(HealthArgs),
    /// Show the registry's snapshot of every known tool.
    Snapshot(SnapshotArgs),
    /// Say why a tool is visible, hidden or denied for a caller.
    Explain(ExplainArgs),
    /// List approvals waiting for an approver.
    Approvals,
    /// Approve a pending approval.
    Approve(DecideArgs),
    /// Deny a pending approval.
    Deny(DecideArgs),
    /// Serve MCP on stdin/stdout for a desktop client that starts a command,
    /// over a dispatcher reached by gRPC.
    Mcp(McpArgs),
    /// Switch a tool off (admin): it leaves every listing, calls answer DISABLED.
    Disable(DisableArgs),
    /// Switch a disabled tool back on (admin).
    Enable(ToolArg),
    /// Release a tool version gradually (canary): start, set, promote,
    /// abort, status.
    Rollout(RolloutArgs),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell).
    Completions(CompletionsArgs),
    /// Measure per-call overhead (against a direct call and nginx), registry
    /// scale and freshness, on loopback; prints a table.
    #[cfg(feature = "bench")]
    Bench(BenchArgs),
    /// The bench's acc_echo as a plain MCP server (stdio, or --http ADDR).
    #[cfg(feature = "bench")]
    #[command(hide = true)]
    McpEcho(McpEchoArgs),
    /// The bench's gRPC and HTTP echo upstreams (`grpc-echo`, `http-echo`).
    #[cfg(feature = "bench")]
    #[command(flatten)]
    EchoUpstream(toolmesh_fixtures::EchoUpstream),
}

/// `toolmesh mcp`.
#[derive(Debug, Args, Clone, Copy)]
pub(crate) struct McpArgs {
    /// Tool search for the MCP client.
    #[command(flatten)]
    pub(crate) tool_search: McpToolSearchFlags,
}

/// `toolmesh mcp-echo` (bench builds).
#[cfg(feature = "bench")]
#[derive(Debug, Args, Clone)]
pub(crate) struct McpEchoArgs {
    /// Serve Streamable HTTP at http://ADDR/mcp instead of stdio.
    #[arg(long)]
    pub(crate) http: Option<String>,
}

/// `toolmesh bench`.
#[cfg(feature = "bench")]
#[derive(Debug, Args, Clone)]
pub(crate) struct BenchArgs {
    /// A benchmark other than the per-call one.
    #[command(subcommand)]
    pub(crate) what: Option<BenchWhat>,
    /// Short series (a smoke test) instead of the full run.
    #[arg(long)]
    pub(crate) quick: bool,
    /// Also write the report as JSON to this file (`--json` is the client
    /// commands' flag).
    #[arg(long, value_name = "FILE")]
    pub(crate) json_file: Option<PathBuf>,
}

/// `toolmesh bench SUBCOMMAND`.
#[cfg(feature = "bench")]
#[derive(Debug, Subcommand, Clone)]
pub(crate) enum BenchWhat {
    /// Organisation scale: simulated executors and dispatchers on three
    /// registry replicas and a three-member etcd cluster (etcd on PATH), at
    /// 1/100, 1/10 and the full scale; MET or MISS per target.
    Scale(BenchScaleArgs),
    /// Tool search: SearchTools beside ListTools at 10,000 and 100,000
    /// visible tools, index upkeep and memory; with --eval, retrieval
    /// quality on the Berkeley Function Calling Leaderboard beside a plain
    /// BM25 (source scripts/bench/bfcl.sh first).
    Search(BenchSearchArgs),
    /// Another build beside this one on the same calls: each `toolmesh
    /// serve` with its own acceptance example, taking turns in every round
    /// (p50/p99 at concurrency 1, calls/s and serve CPU per call at 1, 32
    /// and 128 in flight, 100 B and 10 KB arguments).
    Compare(BenchCompareArgs),
}

/// `toolmesh bench compare`.
#[cfg(feature = "bench")]
#[derive(Debug, Args, Clone)]
pub(crate) struct BenchCompareArgs {
    /// The build to measure against: its `toolmesh` binary.
    #[arg(long, value_name = "PATH")]
    pub(crate) baseline: PathBuf,
    /// Two rounds of short series instead of six of the full ones.
    #[arg(long)]
    pub(crate) quick: bool,
    /// Also write the report as JSON to this file.
    #[arg(long, value_name = "FILE")]
    pub(crate) json_file: Option<PathBuf>,
}

/// `toolmesh bench search`.
#[cfg(feature = "bench")]
#[derive(Debug, Args, Clone)]
pub(crate) struct BenchSearchArgs {
    /// 1,000 and 10,000 tools and fewer calls.
    #[arg(long)]
    pub(crate) quick: bool,
    /// The retrieval evaluation instead of the speed part (development
    /// categories only, unless --held-out).
    #[arg(long)]
    pub(crate) eval: bool,
    /// With --eval, also score the held-out live_* categories (report
    /// them; never tune on them).
    #[arg(long, requires = "eval")]
    pub(crate) held_out: bool,
    /// With --eval, search the ranking's parameters for the best on the
    /// development categories and print them.
    #[arg(long, requires = "eval", conflicts_with = "held_out")]
    pub(crate) tune: bool,
    /// The bfcl-eval package's bfcl_eval/data directory.
    #[arg(long, value_name = "DIR", env = "TOOLMESH_BFCL_DATA")]
    pub(crate) bfcl_data: Option<PathBuf>,
    /// A python with rank_bm25, for the baseline.
    #[arg(long, value_name = "PATH", env = "TOOLMESH_BFCL_PYTHON")]
    pub(crate) bfcl_python: Option<PathBuf>,
    /// Also write the report as JSON to this file.
    #[arg(long, value_name = "FILE")]
    pub(crate) json_file: Option<PathBuf>,
}

/// `toolmesh bench scale`.
#[cfg(feature = "bench")]
#[derive(Debug, Args, Clone)]
pub(crate) struct BenchScaleArgs {
    /// Only 1/100 and 1/10 of the full scale, with shorter phases.
    #[arg(long)]
    pub(crate) quick: bool,
    /// Executors at full scale (ten tools each).
    #[arg(long, default_value_t = 10_000)]
    pub(crate) executors: usize,
    /// Simulated dispatchers (at every scale).
    #[arg(long, default_value_t = 100)]
    pub(crate) dispatchers: usize,
    /// Also write the report as JSON to this file.
    #[arg(long, value_name = "FILE")]
    pub(crate) json_file: Option<PathBuf>,
    /// Keep the logs of the processes it starts in this directory.
    #[arg(long, value_name = "DIR")]
    pub(crate) keep_logs: Option<PathBuf>,
}

/// `toolmesh completions`.
#[derive(Debug, Args, Clone)]
pub(crate) struct CompletionsArgs {
    /// The shell to complete for.
    #[arg(value_enum)]
    pub(crate) shell: clap_complete::Shell,
}

/// `toolmesh explain`.
#[derive(Debug, Args, Clone)]
pub(crate) struct ExplainArgs {
    /// Explain for the caller holding this token (default: you).
    #[arg(long)]
    pub(crate) caller: Option<String>,
    /// The session of an anonymous caller (its rollout assignment is the
    /// session's).
    #[arg(long)]
    pub(crate) session: Option<String>,
    /// The tool (name or name@version).
    pub(crate) tool: String,
}

/// `toolmesh approve` / `toolmesh deny`.
#[derive(Debug, Args, Clone)]
pub(crate) struct DecideArgs {
    /// The approval id, e.g. a-3.
    pub(crate) id: String,
    /// Why (for deny).
    #[arg(long, default_value = "")]
    pub(crate) reason: String,
}

/// `toolmesh disable`.
#[derive(Debug, Args, Clone)]
pub(crate) struct DisableArgs {
    /// The tool name.
    pub(crate) tool: String,
    /// Why: callers and operators read it.
    #[arg(long)]
    pub(crate) reason: String,
}

/// `toolmesh enable`.
#[derive(Debug, Args, Clone)]
pub(crate) struct ToolArg {
    /// The tool name.
    pub(crate) tool: String,
}

/// Server settings shared by serve, registry and dispatcher.
#[derive(Debug, Args, Clone)]
pub(crate) struct ServerArgs {
    /// Address to listen on (port 0 picks a free port).
    #[arg(long, env = "TOOLMESH_LISTEN", default_value = "127.0.0.1:7070", value_parser = listen_address)]
    pub(crate) listen: SocketAddr,
    /// Also serve grpc.health.v1 alone, in plaintext, on this address (for
    /// probes that cannot present a client certificate).
    #[arg(long, env = "TOOLMESH_HEALTH_LISTEN", value_parser = listen_address)]
    pub(crate) health_listen: Option<SocketAddr>,
    /// How long in-flight calls may take to finish on SIGTERM, in milliseconds.
    #[arg(long, default_value_t = 10_000)]
    pub(crate) grace_ms: u64,
    /// Calls a dispatcher keeps in flight before it sheds load.
    #[arg(long, default_value_t = 4096)]
    pub(crate) max_in_flight: usize,
    /// Serve gRPC on N threads of their own, thread per core: each serves
    /// the connections handed to it in turn and keeps its own connections to
    /// executors, so a call never changes threads. Default: one per core;
    /// 0 serves on the process' shared runtime.
    #[arg(long, env = "TOOLMESH_SERVE_THREADS", default_value_t = cores())]
    pub(crate) serve_threads: usize,
    /// Recent snapshots a dispatcher keeps so callers can pin a version.
    #[arg(long, default_value_t = 64)]
    pub(crate) snapshot_history: usize,
    /// Policy file (TOML): callers, grants, approvals, rate limits. Without
    /// it, the development policy (anonymous callers may use every tool).
    #[arg(long, env = "TOOLMESH_POLICY")]
    pub(crate) policy: Option<PathBuf>,
    /// Write one JSON audit record per call to this file ("-" for stdout).
    #[arg(long, env = "TOOLMESH_AUDIT")]
    pub(crate) audit: Option<String>,
    /// Directory for state that survives restarts (disabled tools, tool
    /// owners); without it that state lives in memory.
    #[arg(long, env = "TOOLMESH_DATA_DIR", value_parser = writable_dir)]
    pub(crate) data_dir: Option<PathBuf>,
    /// Metrics, admin page and traces.
    #[command(flatten)]
    pub(crate) ops: toolmesh_examples::OpsFlags,
    /// Also serve MCP over Streamable HTTP at http://ADDR/mcp (serve,
    /// dispatcher, up; `up` does by default on the --listen port + 1;
    /// "none" turns it off).
    #[arg(long, env = "TOOLMESH_MCP_LISTEN", value_parser = McpListen::parse)]
    pub(crate) mcp_listen: Option<McpListen>,
    /// Host header values the MCP endpoint accepts (comma-separated; `*`
    /// for any, as behind a Kubernetes Service); default loopback only.
    #[arg(long, env = "TOOLMESH_MCP_ALLOWED_HOSTS", value_delimiter = ',')]
    pub(crate) mcp_allowed_hosts: Vec<String>,
    /// Origin header values the MCP endpoint accepts from browser pages
    /// (comma-separated `scheme://host[:port]`, `null`, or `*`); default:
    /// origins on an allowed host. Requests without Origin always pass.
    #[arg(long, env = "TOOLMESH_MCP_ALLOWED_ORIGINS", value_delimiter = ',')]
    pub(crate) mcp_allowed_origins: Vec<String>,
    /// Tool search at the MCP endpoint.
    #[command(flatten)]
    pub(crate) mcp_tool_search: McpToolSearchFlags,
    /// Semantic ranking of tool search.
    #[command(flatten)]
    pub(crate) search_embeddings: crate::embeddings_flags::EmbeddingsFlags,
    /// Serve /metrics on the admin listener without a credential. Its
    /// labels name tools (hidden ones too); without this flag it needs the
    /// token of a policy caller with the role "admin" or "operator".
    #[arg(long, env = "TOOLMESH_PUBLIC_METRICS")]
    pub(crate) public_metrics: bool,
}

/// The MCP door's search mode (`--mcp-listen` of serve, dispatcher and
/// up, and `toolmesh mcp`).
#[derive(Debug, Args, Clone, Copy)]
pub(crate) struct McpToolSearchFlags {
    /// Search mode for MCP clients: `tools/list` answers two tools,
    /// `search_tools` (query, limit, tags) and `call_tool` (name,
    /// arguments), instead of every tool; `auto` does when the caller may
    /// use more tools than --mcp-tool-search-threshold. Every tool stays
    /// callable by name.
    #[arg(long, env = "TOOLMESH_MCP_TOOL_SEARCH", value_enum, default_value_t = McpToolSearch::Off)]
    pub(crate) mcp_tool_search: McpToolSearch,
    /// With `--mcp-tool-search auto`: search mode for a caller that may
    /// use more tools than this.
    #[arg(long, env = "TOOLMESH_MCP_TOOL_SEARCH_THRESHOLD", default_value_t = toolmesh_mcp::DEFAULT_SEARCH_THRESHOLD)]
    pub(crate) mcp_tool_search_threshold: usize,
}

/// `--mcp-tool-search`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum McpToolSearch {
    /// When the caller may use more tools than the threshold.
    Auto,
    /// Always.
    On,
    /// Never: `tools/list` lists every tool.
    Off,
}

impl McpToolSearchFlags {
    /// The door's setting these flags ask for.
    pub(crate) fn setting(self) -> toolmesh_mcp::ToolSearch {
        use toolmesh_mcp::ToolSearchMode;
        toolmesh_mcp::ToolSearch {
            mode: match self.mcp_tool_search {
                McpToolSearch::Auto => ToolSearchMode::Auto,
                McpToolSearch::On => ToolSearchMode::On,
                McpToolSearch::Off => ToolSearchMode::Off,
            },
            threshold: self.mcp_tool_search_threshold,
        }
    }
}

/// `--mcp-listen`: an address, or "none".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum McpListen {
    /// No MCP endpoint.
    Off,
    /// MCP at this address.
    At(SocketAddr),
}

impl McpListen {
    /// Reads "none" or a listen address.
    fn parse(text: &str) -> Result<McpListen, BadAddress> {
        match text {
            "none" => Ok(McpListen::Off),
            text => listen_address(text).map(McpListen::At),
        }
    }

    /// The address, unless "none".
    pub(crate) fn addr(self) -> Option<SocketAddr> {
        match self {
            McpListen::Off => None,
            McpListen::At(addr) => Some(addr),
        }
    }
}

/// The cores this process may use (its CPU quota counted), at least one.
fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, usize::from)
}

impl ServerArgs {
    /// The node settings these flags ask for.
    pub(crate) fn node_config(&self, tls: &toolmesh_transport::Tls) -> toolmesh_node::NodeConfig {
        toolmesh_node::NodeConfig {
            listen: self.listen,
            health_listen: self.health_listen,
            grace: std::time::Duration::from_millis(self.grace_ms),
            max_in_flight: self.max_in_flight,
            serve_threads: self.serve_threads,
            snapshot_history: self.snapshot_history,
            policy: self.policy.clone(),
            audit: self.audit.clone(),
            data_dir: self.data_dir.clone(),
            dev_executor_token: None,
            dev_dispatcher_token: None,
            store: None,
            etcd: toolmesh_node::EtcdAccess::default(),
            tls: tls.clone(),
            admin_listen: self.ops.admin_listen.clone(),
            admin_allowed_hosts: self.ops.admin_allowed_hosts.clone(),
            public_metrics: self.public_metrics,
            otlp_endpoint: self.ops.otlp_endpoint.clone(),
            mcp_listen: self.mcp_listen.and_then(McpListen::addr),
            mcp_allowed_hosts: self.mcp_allowed_hosts.clone(),
            mcp_allowed_origins: self.mcp_allowed_origins.clone(),
            mcp_tool_search: self.mcp_tool_search.setting(),
            search_embeddings: self.search_embeddings.setting(),
        }
    }
}

/// `toolmesh serve` / `toolmesh registry`.
#[derive(Debug, Args, Clone)]
pub(crate) struct ServeArgs {
    /// Server settings.
    #[command(flatten)]
    pub(crate) server: ServerArgs,
    /// Lease granted to executors that ask for none, in milliseconds.
    #[arg(long, default_value_t = 10_000)]
    pub(crate) default_ttl_ms: u64,
    /// Where the registry keeps its state: in this process (the default) or
    /// `etcd://host:2379[,host:2379…]`, shared by every registry replica
    /// pointed at the same etcd cluster.
    #[arg(long, env = "TOOLMESH_STORE", value_parser = crate::etcd_flags::store_url)]
    pub(crate) store: Option<String>,
    /// Without --policy: the token a separate dispatcher follows this
    /// registry with (its --registry-token); replicas of one registry take
    /// the same. Made for the run and logged when not given.
    #[arg(long, env = "TOOLMESH_DEV_DISPATCHER_TOKEN", hide_env_values = true)]
    pub(crate) dev_dispatcher_token: Option<String>,
    /// TLS and the etcd user for an etcd store.
    #[command(flatten)]
    pub(crate) etcd: crate::etcd_flags::EtcdFlags,
}

impl ServeArgs {
    /// The node settings these flags ask for.
    pub(crate) fn node_config(&self, tls: &toolmesh_transport::Tls) -> toolmesh_node::NodeConfig {
        toolmesh_node::NodeConfig {
            store: self.store.clone(),
            dev_dispatcher_token: self.dev_dispatcher_token.clone(),
            etcd: self.etcd.access(),
            ..self.server.node_config(tls)
        }
    }
}

/// `toolmesh dispatcher`.
#[derive(Debug, Args, Clone)]
pub(crate) struct DispatcherArgs {
    /// Server settings.
    #[command(flatten)]
    pub(crate) server: ServerArgs,
    /// The registry to follow (host:port), or several replicas of it
    /// (host:port,host:port,…): one is followed at a time, with failover.
    #[arg(long, env = "TOOLMESH_REGISTRY", value_parser = dial_address)]
    pub(crate) registry: String,
    /// Bearer token to follow the registry with: a policy caller with the
    /// role "dispatcher" (snapshots are not for everyone to read).
    #[arg(long, env = "TOOLMESH_REGISTRY_TOKEN", hide_env_values = true)]
    pub(crate) registry_token: Option<String>,
    /// A file holding that token, read again at each connection (a
    /// projected service-account token the kubelet rotates); wins over
    /// --registry-token.
    #[arg(long, env = "TOOLMESH_REGISTRY_TOKEN_FILE")]
    pub(crate) registry_token_file: Option<std::path::PathBuf>,
}

/// `toolmesh up`.
#[derive(Debug, Args, Clone)]
pub(crate) struct UpArgs {
    /// Registry and dispatcher settings.
    #[command(flatten)]
    pub(crate) serve: ServeArgs,
    /// More example executors to start, besides knowledge, accounts and
    /// support (comma-separated; `files` adds the file tools).
    #[arg(long, value_delimiter = ',')]
    pub(crate) examples: Vec<String>,
    /// Start only the --examples named, not the default three.
    #[arg(long)]
    pub(crate) no_default_examples: bool,
    /// Also bring in an MCP server, started by COMMAND, as the executor
    /// NAME (repeatable), as `toolmesh bridge mcp --name NAME -- COMMAND
    /// ARGS…` would: e.g. 'everything=-- npx -y
    /// @modelcontextprotocol/server-everything'.
    #[arg(long, value_name = "NAME=-- COMMAND ARGS")]
    pub(crate) bridge: Vec<String>,
    /// Also bring in a gRPC service with server reflection at HOST:PORT as
    /// the executor NAME (repeatable), as `toolmesh bridge grpc --name NAME
    /// --target HOST:PORT` would: e.g. orders=127.0.0.1:50051.
    #[arg(long, value_name = "NAME=HOST:PORT")]
    pub(crate) bridge_grpc: Vec<String>,
    /// Also bring in an HTTP API by its OpenAPI document (a URL or a file)
    /// as the executor NAME (repeatable), as `toolmesh bridge openapi
    /// --name NAME --spec SPEC [--base-url BASE_URL]` would: e.g.
    /// pets=http://127.0.0.1:8000/openapi.json.
    #[arg(long, value_name = "NAME=SPEC[,BASE_URL]")]
    pub(crate) bridge_openapi: Vec<String>,
}

/// One bridge `up` runs: the executor's name and what it bridges.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct UpBridge {
    pub(crate) name: String,
    pub(crate) upstream: UpUpstream,
}

/// What an `up` bridge brings in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum UpUpstream {
    /// `--bridge`: an MCP server started by this command.
    Mcp(Vec<String>),
    /// `--bridge-grpc`: a gRPC service at this HOST:PORT.
    Grpc(String),
    /// `--bridge-openapi`: an HTTP API by its document, and where its
    /// paths are appended when not where the document says.
    Openapi {
        spec: String,
        base_url: Option<String>,
    },
}

impl UpUpstream {
    /// The `toolmesh bridge` subcommand that serves it.
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            UpUpstream::Mcp(_) => "mcp",
            UpUpstream::Grpc(_) => "grpc",
            UpUpstream::Openapi { .. } => "openapi",
        }
    }

    /// The `up` flag that asks for it.
    pub(crate) fn flag(&self) -> &'static str {
        match self {
            UpUpstream::Mcp(_) => "--bridge",
            UpUpstream::Grpc(_) => "--bridge-grpc",
            UpUpstream::Openapi { .. } => "--bridge-openapi",
        }
    }
}

impl UpBridge {
    /// Every bridge `args` asks for: `--bridge`, then `--bridge-grpc`,
    /// then `--bridge-openapi`, each in the order given.
    pub(crate) fn all(args: &UpArgs) -> Result<Vec<UpBridge>, FlagError> {
        let mcp = args.bridge.iter().map(|text| UpBridge::parse(text));
        let grpc = args.bridge_grpc.iter().map(|text| UpBridge::grpc(text));
        let openapi = args
            .bridge_openapi
            .iter()
            .map(|text| UpBridge::openapi(text));
        mcp.chain(grpc).chain(openapi).collect()
    }

    /// `NAME=VALUE` with both non-empty (trimmed), or `None`.
    fn named(text: &str) -> Option<(String, &str)> {
        let (name, value) = text.split_once('=')?;
        let (name, value) = (name.trim(), value.trim());
        (!name.is_empty() && !value.is_empty()).then(|| (name.to_owned(), value))
    }

    /// Reads `--bridge-grpc NAME=HOST:PORT`.
    pub(crate) fn grpc(text: &str) -> Result<UpBridge, FlagError> {
        let shape = || FlagError::BridgeGrpcShape(text.to_owned());
        let (name, target) = UpBridge::named(text).ok_or_else(shape)?;
        let port = target.rsplit_once(':').map(|(_, port)| port.parse::<u16>());
        if target.contains(char::is_whitespace) || !matches!(port, Some(Ok(_))) {
            return Err(shape());
        }
        Ok(UpBridge {
            name,
            upstream: UpUpstream::Grpc(target.to_owned()),
        })
    }

    /// Reads `--bridge-openapi NAME=SPEC[,BASE_URL]`.
    pub(crate) fn openapi(text: &str) -> Result<UpBridge, FlagError> {
        let shape = || FlagError::BridgeOpenapiShape(text.to_owned());
        let (name, value) = UpBridge::named(text).ok_or_else(shape)?;
        let (spec, base_url) = match value.split_once(',') {
            Some((spec, base)) => (spec.trim(), Some(base.trim())),
            None => (value, None),
        };
        if spec.is_empty() || base_url.is_some_and(|base| !base.contains("://")) {
            return Err(shape());
        }
        Ok(UpBridge {
            name,
            upstream: UpUpstream::Openapi {
                spec: spec.to_owned(),
                base_url: base_url.map(str::to_owned),
            },
        })
    }

    /// Reads `NAME=-- COMMAND ARGS…`, the command split as a POSIX shell
    /// would (quotes and backslashes).
    pub(crate) fn parse(text: &str) -> Result<UpBridge, FlagError> {
        let shape = || FlagError::BridgeShape(text.to_owned());
        let (name, rest) = text.split_once('=').ok_or_else(shape)?;
        let name = name.trim();
        let command = rest
            .trim_start()
            .strip_prefix("--")
            .filter(|_| !name.is_empty())
            .ok_or_else(shape)?;
        let command = shlex::split(command)
            .filter(|words| !words.is_empty())
            .ok_or_else(|| FlagError::BridgeCommand(text.to_owned()))?;
        Ok(UpBridge {
            name: name.to_owned(),
            upstream: UpUpstream::Mcp(command),
        })
    }
}

/// The example executors `up` starts unless told `--no-default-examples`.
pub(crate) const DEFAULT_EXAMPLES: [&str; 3] = ["knowledge", "accounts", "support"];

impl UpArgs {
    /// The examples to start, each once, in order: the default three (unless
    /// `--no-default-examples`), then the `--examples` named.
    pub(crate) fn example_names(&self) -> Vec<String> {
        let defaults = DEFAULT_EXAMPLES
            .iter()
            .filter(|_| !self.no_default_examples)
            .map(|name| (*name).to_owned());
        let mut names: Vec<String> = Vec::new();
        for name in defaults.chain(self.examples.iter().cloned()) {
            if !names.contains(&name) {
                names.push(name);
            }
        }
        names
    }
}

/// `toolmesh example`.
#[derive(Debug, Args, Clone)]
pub(crate) struct ExampleArgs {
    /// Which example: knowledge, accounts, support or files.
    pub(crate) name: String,
    /// Where it listens, what it advertises, how it registers.
    #[command(flatten)]
    pub(crate) serve: toolmesh_examples::ServeFlags,
    /// Append one JSON line per execution to this file (acceptance example).
    #[cfg(feature = "bench")]
    #[arg(long)]
    pub(crate) ledger: Option<PathBuf>,
    /// Directory the files example is confined to (default: a fresh temp dir).
    #[arg(long)]
    pub(crate) files_root: Option<PathBuf>,
}

/// `toolmesh bridge`.
#[derive(Debug, Args, Clone)]
pub(crate) struct BridgeArgs {
    /// What kind of server.
    #[command(subcommand)]
    pub(crate) kind: BridgeKind,
}

impl BridgeArgs {
    /// The flags of `bridge mcp`, if that is the kind.
    #[cfg(test)]
    pub(crate) fn mcp(&self) -> Option<&BridgeMcpArgs> {
        match &self.kind {
            BridgeKind::Mcp(args) => Some(args),
            BridgeKind::Grpc(_) | BridgeKind::Openapi(_) => None,
        }
    }

    /// Where the bridge listens, what it advertises, how it registers.
    pub(crate) fn serve(&self) -> &toolmesh_examples::ServeFlags {
        match &self.kind {
            BridgeKind::Mcp(args) => &args.serve,
            BridgeKind::Grpc(args) => &args.serve,
            BridgeKind::Openapi(args) => &args.serve,
        }
    }
}

/// The kinds of servers `bridge` brings in.
#[derive(Debug, Subcommand, Clone)]
pub(crate) enum BridgeKind {
    /// An MCP server as an executor: started with `-- COMMAND ARGS…` (stdio,
    /// started again when it exits) or reached at --url (Streamable HTTP);
    /// its tools are registered and kept in step with it.
    #[command(
        after_help = "Examples:\n  toolmesh bridge mcp --registry 127.0.0.1:7070 -- npx -y @modelcontextprotocol/server-everything\n  toolmesh bridge mcp --url http://127.0.0.1:8000/mcp --bearer-env MCP_TOKEN --tools 'search_*'"
    )]
    Mcp(BridgeMcpArgs),
    /// A gRPC service with server reflection as an executor: each unary
    /// method of its services a tool (named Service_Method), its schemas
    /// from the request and response messages in the proto3 JSON mapping.
    #[command(
        after_help = "Examples:\n  toolmesh bridge grpc --registry 127.0.0.1:7070 --target 127.0.0.1:50051\n  toolmesh bridge grpc --target orders:50051 --services Orders --methods '*.Get*' --rename Orders_GetOrder=get_order"
    )]
    Grpc(BridgeGrpcArgs),
    /// An HTTP API described by an OpenAPI 3.0 or 3.1 document (JSON or
    /// YAML) as an executor: each operation a tool named by its
    /// operationId, its input from the path, query and header parameters
    /// and the JSON body (under `body`), its output from the 2xx response.
    #[command(
        after_help = "Examples:\n  toolmesh bridge openapi --registry 127.0.0.1:7070 --spec http://127.0.0.1:8000/openapi.json\n  toolmesh bridge openapi --spec api.yaml --base-url https://api.example.com/v2 --bearer-env API_TOKEN --operations 'get_*,list_*'"
    )]
    Openapi(BridgeOpenApiArgs),
}

/// What every bridge says of the tools it brings in beyond what the
/// upstream says.
#[derive(Debug, Args, Clone)]
pub(crate) struct BridgeToolFlags {
    /// The executor's service name (default: an MCP server's
    /// serverInfo.name; for gRPC, grpc- and the first service's name).
    #[arg(long)]
    pub(crate) name: Option<String>,
    /// Who answers for the tools (their spec's owner).
    #[arg(long)]
    pub(crate) owner: Option<String>,
    /// Labels added to every tool (comma-separated).
    #[arg(long = "tag", value_delimiter = ',', value_name = "TAG")]
    pub(crate) tags: Vec<String>,
    /// Also tag every tool owner:OWNER (the --owner given), so a policy
    /// grant can cover all of the owner's tools with tags = ["owner:OWNER"]
    /// (grants select tools by name or tag, not by owner).
    #[arg(long, requires = "owner")]
    pub(crate) owner_tag: bool,
    /// Give an upstream tool another name in the mesh (repeatable), e.g.
    /// for a name with characters the mesh's names cannot hold.
    #[arg(long, value_name = "OLD=NEW")]
    pub(crate) rename: Vec<String>,
    /// A tool's risk, whatever the upstream says (repeatable):
    /// low, medium or high (high needs an approval).
    #[arg(long, value_name = "TOOL=LEVEL")]
    pub(crate) risk: Vec<String>,
    /// Tools the dispatcher may retry, whatever the upstream says
    /// (comma-separated).
    #[arg(long, value_delimiter = ',', value_name = "TOOL")]
    pub(crate) idempotent: Vec<String>,
    /// Upper bound of one call of every tool, in milliseconds (default
    /// 10000, at most 600000).
    #[arg(long, value_name = "MS")]
    pub(crate) timeout_ms: Option<u64>,
}

/// When a bridge of descriptors or a document reads its upstream again.
#[derive(Debug, Args, Clone)]
pub(crate) struct BridgeRefreshFlags {
    /// Read the upstream's descriptors or document again every SECS
    /// seconds (and on SIGHUP), registering the tools again if they
    /// changed; 0: on SIGHUP only.
    #[arg(long, value_name = "SECS", default_value_t = toolmesh_bridge::DEFAULT_REFRESH.as_secs())]
    pub(crate) refresh_secs: u64,
}

impl BridgeRefreshFlags {
    /// The interval, none for 0.
    pub(crate) fn every(&self) -> Option<std::time::Duration> {
        (self.refresh_secs > 0).then(|| std::time::Duration::from_secs(self.refresh_secs))
    }
}

/// `toolmesh bridge grpc`.
#[derive(Debug, Args, Clone)]
pub(crate) struct BridgeGrpcArgs {
    /// Where the bridge listens, what it advertises, how it registers.
    #[command(flatten)]
    pub(crate) serve: toolmesh_examples::ServeFlags,
    /// Names, renames, risk, idempotency and timeout of the tools.
    #[command(flatten)]
    pub(crate) tools: BridgeToolFlags,
    /// How often the descriptors are read again.
    #[command(flatten)]
    pub(crate) refresh: BridgeRefreshFlags,
    /// The gRPC service, HOST:PORT (plaintext, unless a --target-* file is
    /// given) or https://HOST:PORT (TLS); it must serve
    /// grpc.reflection.v1 or v1alpha.
    #[arg(long, value_name = "HOST:PORT")]
    pub(crate) target: String,
    /// Reach the target over TLS, trusting the CA certificates in this PEM
    /// file (a service with a private CA).
    #[arg(long, value_name = "PEM")]
    pub(crate) target_ca: Option<std::path::PathBuf>,
    /// Present the client certificate in this PEM file to a target that
    /// asks for one (mTLS); needs --target-key.
    #[arg(long, requires = "target_key", value_name = "PEM")]
    pub(crate) target_cert: Option<std::path::PathBuf>,
    /// The private key of --target-cert (PEM).
    #[arg(long, requires = "target_cert", value_name = "PEM")]
    pub(crate) target_key: Option<std::path::PathBuf>,
    /// Send `authorization: Bearer …` metadata with the token this file
    /// holds (read again on every reconnection).
    #[arg(long, value_name = "PATH", conflicts_with = "bearer_env")]
    pub(crate) bearer_file: Option<std::path::PathBuf>,
    /// Send `authorization: Bearer …` metadata with the token this
    /// environment variable holds.
    #[arg(long, value_name = "VAR")]
    pub(crate) bearer_env: Option<String>,
    /// Send the metadata NAME with the value this environment variable
    /// holds (repeatable), e.g. --header-env x-api-key=API_KEY.
    #[arg(long, value_name = "NAME=VAR")]
    pub(crate) header_env: Vec<String>,
    /// The services to expose, full (demo.v1.Library) or short (Library)
    /// names (comma-separated); default all but the server's own grpc.*.
    #[arg(long, value_delimiter = ',', value_name = "NAME")]
    pub(crate) services: Vec<String>,
    /// The methods to expose: full names (demo.v1.Library.GetBook) or
    /// globs with `*` and `?` (comma-separated); default all unary ones.
    #[arg(long, value_delimiter = ',', value_name = "GLOB")]
    pub(crate) methods: Vec<String>,
}

/// `toolmesh bridge openapi`.
#[derive(Debug, Args, Clone)]
pub(crate) struct BridgeOpenApiArgs {
    /// Where the bridge listens, what it advertises, how it registers.
    #[command(flatten)]
    pub(crate) serve: toolmesh_examples::ServeFlags,
    /// Names, renames, risk, idempotency and timeout of the tools.
    #[command(flatten)]
    pub(crate) tools: BridgeToolFlags,
    /// How often the document is read again.
    #[command(flatten)]
    pub(crate) refresh: BridgeRefreshFlags,
    /// The OpenAPI document: its http(s):// URL (its fetch is also how the
    /// API is probed) or a file; read again on SIGHUP and every
    /// --refresh-secs.
    #[arg(long, value_name = "URL|FILE")]
    pub(crate) spec: String,
    /// Where the operations' paths are appended (default: the document's
    /// first server, else the origin of --spec's URL).
    #[arg(long, value_name = "URL")]
    pub(crate) base_url: Option<String>,
    /// The operations to expose: operationIds or globs with `*` and `?`
    /// (comma-separated); default all.
    #[arg(long, value_delimiter = ',', value_name = "GLOB")]
    pub(crate) operations: Vec<String>,
    /// Send `Authorization: Bearer …` with the token this file holds (read
    /// again as the API is probed, so a rotated token is picked up).
    #[arg(long, value_name = "PATH", conflicts_with = "bearer_env")]
    pub(crate) bearer_file: Option<std::path::PathBuf>,
    /// Send `Authorization: Bearer …` with the token this environment
    /// variable holds.
    #[arg(long, value_name = "VAR")]
    pub(crate) bearer_env: Option<String>,
    /// Send the header NAME with the value this environment variable holds
    /// (repeatable), e.g. an API key: --header-env X-Api-Key=API_KEY.
    #[arg(long, value_name = "NAME=VAR")]
    pub(crate) header_env: Vec<String>,
}

/// `toolmesh bridge mcp`.
#[derive(Debug, Args, Clone)]
pub(crate) struct BridgeMcpArgs {
    /// Where the bridge listens, what it advertises, how it registers.
    #[command(flatten)]
    pub(crate) serve: toolmesh_examples::ServeFlags,
    /// Names, renames, risk, idempotency and timeout of the tools.
    #[command(flatten)]
    pub(crate) flags: BridgeToolFlags,
    /// The upstream tools to expose: names or globs with `*` and `?`
    /// (comma-separated); default all. The others are never listed.
    #[arg(long, value_delimiter = ',', value_name = "GLOB")]
    pub(crate) tools: Vec<String>,
    /// The server's Streamable HTTP endpoint, http://HOST:PORT/PATH or
    /// https://… (instead of a command).
    #[arg(long, conflicts_with = "command")]
    pub(crate) url: Option<String>,
    /// A header sent with every request to --url, 'Name: value'
    /// (repeatable): the bridge's own credentials, never a caller's.
    #[arg(long, requires = "url", value_name = "'NAME: VALUE'")]
    pub(crate) header: Vec<String>,
    /// Send `Authorization: Bearer …` to --url with the token this
    /// environment variable holds.
    #[arg(long, requires = "url", value_name = "VAR")]
    pub(crate) bearer_env: Option<String>,
    /// Trust the CA certificates in this PEM file for an https:// --url,
    /// besides the system's roots (a server with a private CA).
    #[arg(long, requires = "url", value_name = "PEM")]
    pub(crate) url_ca: Option<std::path::PathBuf>,
    /// Present the client certificate in this PEM file (with any
    /// intermediates) to an https:// --url that asks for one; needs
    /// --url-key.
    #[arg(long, requires_all = ["url", "url_key"], value_name = "PEM")]
    pub(crate) url_cert: Option<std::path::PathBuf>,
    /// The private key of --url-cert (PEM: PKCS#8, RSA or SEC1).
    #[arg(long, requires_all = ["url", "url_cert"], value_name = "PEM")]
    pub(crate) url_key: Option<std::path::PathBuf>,
    /// The command that starts the server, after `--`; it is spoken to
    /// over stdio and does not inherit TOOLMESH_* variables.
    #[arg(last = true, value_name = "COMMAND")]
    pub(crate) command: Vec<String>,
}

/// Where client commands connect unless told (`--server`, `TOOLMESH_SERVER`).
pub(crate) const DEFAULT_SERVER: &str = "127.0.0.1:7070";

/// Where client commands connect and how they print. Global, so they may
/// come before or after the subcommand: `toolmesh --server X tools` and
/// `toolmesh tools --server X` are the same.
#[derive(Debug, Args, Clone)]
#[command(next_help_heading = "Client options")]
pub(crate) struct ClientArgs {
    /// The toolmesh server (dispatcher or serve) to talk to.
    #[arg(
        long,
        global = true,
        env = "TOOLMESH_SERVER",
        default_value = DEFAULT_SERVER
    )]
    pub(crate) server: String,
    /// Print JSON instead of tables (the README's CLI section gives each
    /// command's shape).
    #[arg(long, global = true)]
    pub(crate) json: bool,
    /// Bearer token identifying you to the server.
    #[arg(long, global = true, env = "TOOLMESH_TOKEN", hide_env_values = true)]
    pub(crate) token: Option<String>,
    /// Deadline of each request, in milliseconds (for `call`: the whole
    /// call, retries included).
    #[arg(long, global = true, value_name = "MS")]
    pub(crate) timeout_ms: Option<u64>,
}

/// `toolmesh tools`.
#[derive(Debug, Args, Clone)]
pub(crate) struct ToolsArgs {
    /// Output shape.
    #[arg(long, value_enum, default_value_t = Format::Native)]
    pub(crate) format: Format,
    /// List from this snapshot version (0 = newest).
    #[arg(long, default_value_t = 0, conflicts_with = "watch")]
    pub(crate) snapshot: u64,
    /// Keep watching: after the list, print each change of it as it
    /// happens (tools added or changed, names removed) until interrupted.
    /// With --json or a --format other than native, one JSON object per
    /// message (`snapshot_version`, `synced`, `tools`, `removed`).
    #[arg(long)]
    pub(crate) watch: bool,
    /// For tool search on the model's side: list `search_tools` first (the
    /// dispatcher's own tool, called through Invoke like any other) and,
    /// with --format anthropic, mark every other tool
    /// `"defer_loading": true`.
    #[arg(long)]
    pub(crate) defer_loading: bool,
}

/// `toolmesh search`.
#[derive(Debug, Args, Clone)]
pub(crate) struct SearchArgs {
    /// What you want done, in plain words (1 to 1024 bytes).
    pub(crate) query: String,
    /// How many matches: 0 means 10; at most 50 (more is 50).
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub(crate) limit: u32,
    /// Only tools carrying this tag (repeat: every one of them).
    #[arg(long = "tag", value_name = "TAG")]
    pub(crate) tags: Vec<String>,
    /// Only tools of at most this risk.
    #[arg(long, value_enum, value_name = "RISK")]
    pub(crate) max_risk: Option<Risk>,
}

/// A risk level on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Risk {
    /// Read-only.
    Low,
    /// A reversible write.
    Medium,
    /// Irreversible: needs approval.
    High,
}

impl Risk {
    /// The contract's level.
    pub(crate) fn to_pb(self) -> toolmesh::pb::RiskLevel {
        use toolmesh::pb::RiskLevel;
        match self {
            Risk::Low => RiskLevel::Low,
            Risk::Medium => RiskLevel::Medium,
            Risk::High => RiskLevel::High,
        }
    }
}

/// Tool list shapes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Format {
    /// toolmesh's own specs.
    Native,
    /// OpenAI Chat Completions function-calling tools array.
    Openai,
    /// OpenAI Responses tools array (flat, with `strict`).
    OpenaiResponses,
    /// Anthropic Messages tools array.
    Anthropic,
    /// Gemini `functionDeclarations`.
    Gemini,
    /// MCP `Tool` objects, as `tools/list` returns them.
    Mcp,
}

impl Format {
    /// The ListTools format this shape asks for.
    pub(crate) fn to_pb(self) -> toolmesh::pb::ToolFormat {
        use toolmesh::pb::ToolFormat;
        match self {
            Format::Native => ToolFormat::Native,
            Format::Openai => ToolFormat::Openai,
            Format::OpenaiResponses => ToolFormat::OpenaiResponses,
            Format::Anthropic => ToolFormat::Anthropic,
            Format::Gemini => ToolFormat::Gemini,
            Format::Mcp => ToolFormat::Mcp,
        }
    }
}

/// `toolmesh call`.
#[derive(Debug, Args, Clone)]
pub(crate) struct CallArgs {
    /// Tool name, or name@version.
    pub(crate) tool: String,
    /// Arguments: a JSON object, `@FILE` to read it from a file, or `-`
    /// to read it from stdin.
    #[arg(default_value = "{}", value_name = "JSON|@FILE|-")]
    pub(crate) arguments: String,
    /// Idempotency key (generated when absent).
    #[arg(long)]
    pub(crate) call_id: Option<String>,
    /// Caller name sent in the call context.
    #[arg(long, default_value = "cli")]
    pub(crate) caller: String,
    /// A granted approval for this exact call (see `toolmesh approvals`).
    #[arg(long)]
    pub(crate) approval: Option<String>,
    /// Session the call belongs to (for tools with preconditions).
    #[arg(long)]
    pub(crate) session: Option<String>,
    /// Stream the call (InvokeStream): print the tool's progress as it
    /// comes, then the result; with --json, one JSON object per line for
    /// each event (progress, output chunk, result).
    #[arg(long)]
    pub(crate) stream: bool,
}

/// `toolmesh health`.
#[derive(Debug, Args, Clone)]
pub(crate) struct HealthArgs {
    /// A tool name; without it, the server and every known tool.
    pub(crate) tool: Option<String>,
}

/// `toolmesh snapshot`.
#[derive(Debug, Args, Clone)]
pub(crate) struct SnapshotArgs {
    /// Snapshot version (0 = newest).
    #[arg(value_name = "VERSION", default_value_t = 0)]
    pub(crate) snapshot_version: u64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    /// Every subcommand's flags are consistent (clap's own checks).
    #[test]
    fn command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    fn parse(line: &[&str]) -> Result<Cli, BadUsage> {
        let matches = Cli::command()
            .try_get_matches_from(std::iter::once("toolmesh").chain(line.iter().copied()))
            .unwrap_or_else(|e| panic!("{line:?}: {e}"));
        checked(&matches)
    }

    /// The MCP door's search mode: off by default with the documented
    /// threshold, set by the same flags on the commands that serve the
    /// door and on the stdio bridge.
    #[test]
    fn mcp_tool_search_flags() {
        use toolmesh_mcp::{ToolSearch, ToolSearchMode};
        let setting = |line: &[&str]| match parse(line).unwrap().command {
            Command::Up(args) => args.serve.server.mcp_tool_search.setting(),
            Command::Serve(args) => args.server.mcp_tool_search.setting(),
            Command::Dispatcher(args) => args.server.mcp_tool_search.setting(),
            Command::Mcp(args) => args.tool_search.setting(),
            other => panic!("{other:?}"),
        };
        assert_eq!(setting(&["serve"]), ToolSearch::default());
        assert_eq!(ToolSearch::default().mode, ToolSearchMode::Off);
        assert_eq!(
            setting(&["mcp"]).threshold,
            toolmesh_mcp::DEFAULT_SEARCH_THRESHOLD
        );
        let auto = ToolSearch {
            mode: ToolSearchMode::Auto,
            threshold: 7,
        };
        let flags = [
            "--mcp-tool-search",
            "auto",
            "--mcp-tool-search-threshold",
            "7",
        ];
        for command in [
            &["up"][..],
            &["serve"],
            &["dispatcher", "--registry", "127.0.0.1:7070"],
            &["mcp"],
        ] {
            let line: Vec<&str> = command.iter().chain(&flags).copied().collect();
            assert_eq!(setting(&line), auto, "{line:?}");
        }
        assert_eq!(
            setting(&["mcp", "--mcp-tool-search", "on"]).mode,
            ToolSearchMode::On
        );
    }

    /// `up --examples` adds to the default three, once each, in order;
    /// `--no-default-examples` keeps only those named.
    #[test]
    fn up_examples_add_to_the_defaults() {
        let names = |line: &[&str]| match parse(line).unwrap().command {
            Command::Up(args) => args.example_names(),
            other => panic!("{other:?}"),
        };
        assert_eq!(names(&["up"]), DEFAULT_EXAMPLES);
        assert_eq!(
            names(&["up", "--examples", "files,knowledge"]),
            ["knowledge", "accounts", "support", "files"]
        );
        assert_eq!(
            names(&["up", "--no-default-examples", "--examples", "files"]),
            ["files"]
        );
    }

    /// `up --bridge` reads a name and a command split as a shell would;
    /// anything else is refused with the shape to use.
    #[test]
    fn up_bridges_parse() {
        let bridge = UpBridge::parse("fs=-- npx -y server-filesystem '/srv/my docs'").unwrap();
        assert_eq!(bridge.name, "fs");
        assert_eq!(
            bridge.upstream,
            UpUpstream::Mcp(
                ["npx", "-y", "server-filesystem", "/srv/my docs"]
                    .map(str::to_owned)
                    .to_vec()
            )
        );
        for bad in ["fs", "=-- cmd", "fs=cmd", "fs=--", "fs=-- 'open"] {
            let error = UpBridge::parse(bad).unwrap_err().to_string();
            assert!(error.contains("NAME=-- COMMAND"), "{bad}: {error}");
        }
    }

    /// `up --bridge-grpc NAME=HOST:PORT` and `--bridge-openapi
    /// NAME=SPEC[,BASE_URL]` read a name and the bridge's target; anything
    /// else is refused with the shape to use.
    #[test]
    fn up_grpc_and_openapi_bridges_parse() {
        let grpc = UpBridge::grpc("orders=orders.svc:50051").unwrap();
        assert_eq!(grpc.name, "orders");
        assert_eq!(grpc.upstream, UpUpstream::Grpc("orders.svc:50051".into()));
        for bad in [
            "orders",
            "=h:1",
            "orders=",
            "orders=host",
            "orders=host:port",
        ] {
            let error = UpBridge::grpc(bad).unwrap_err().to_string();
            assert!(error.contains("NAME=HOST:PORT"), "{bad}: {error}");
        }
        let pets = UpBridge::openapi("pets=http://127.0.0.1:8000/openapi.json").unwrap();
        assert_eq!(pets.name, "pets");
        assert_eq!(
            pets.upstream,
            UpUpstream::Openapi {
                spec: "http://127.0.0.1:8000/openapi.json".into(),
                base_url: None
            }
        );
        let file = UpBridge::openapi("pets=api.yaml, https://api.example.com/v2").unwrap();
        assert_eq!(
            file.upstream,
            UpUpstream::Openapi {
                spec: "api.yaml".into(),
                base_url: Some("https://api.example.com/v2".into())
            }
        );
        for bad in [
            "pets",
            "=api.yaml",
            "pets=",
            "pets=,http://x",
            "pets=api.yaml,x",
        ] {
            let error = UpBridge::openapi(bad).unwrap_err().to_string();
            assert!(error.contains("NAME=SPEC[,BASE_URL]"), "{bad}: {error}");
        }
        let line = [
            "up",
            "--bridge-grpc",
            "a=h:1",
            "--bridge",
            "b=-- cmd",
            "--bridge-openapi",
            "c=api.yaml",
        ];
        let Command::Up(up) = parse(&line).unwrap().command else {
            panic!("not up")
        };
        let kinds: Vec<_> = UpBridge::all(&up)
            .unwrap()
            .iter()
            .map(|b| (b.name.clone(), b.upstream.kind()))
            .collect();
        assert_eq!(
            kinds,
            [
                ("b".into(), "mcp"),
                ("a".into(), "grpc"),
                ("c".into(), "openapi")
            ]
        );
    }

    /// The client flags mean the same before and after the subcommand.
    #[test]
    fn client_flags_go_before_or_after_the_subcommand() {
        let flags = [
            "--server",
            "10.0.0.1:9",
            "--json",
            "--token",
            "t0k",
            "--timeout-ms",
            "250",
            "--tls-ca",
            "ca.pem",
        ];
        let before = parse(&[&flags[..], &["call", "search_kb", "{}"]].concat()).unwrap();
        let after = parse(&[&["call", "search_kb", "{}"], &flags[..]].concat()).unwrap();
        for cli in [before, after] {
            assert_eq!(cli.client.server, "10.0.0.1:9");
            assert!(cli.client.json);
            assert_eq!(cli.client.token.as_deref(), Some("t0k"));
            assert_eq!(cli.client.timeout_ms, Some(250));
            assert_eq!(cli.tls.tls_ca, Some(PathBuf::from("ca.pem")));
            assert!(matches!(cli.command, Command::Call(_)));
        }
    }

    /// A client flag on a server command is refused, saying which flag and
    /// what to use instead; `example --token` is the executor's own.
    #[test]
    fn client_flags_on_other_commands_are_refused() {
        let error = parse(&["up", "--server", "127.0.0.1:7272"]).unwrap_err();
        let text = error.to_string();
        assert!(
            text.contains("--server") && text.contains("--listen"),
            "{text}"
        );
        let error = parse(&["--json", "completions", "bash"]).unwrap_err();
        assert!(error.to_string().contains("--json"), "{error}");
        parse(&["example", "knowledge", "--token", "t"]).unwrap();
        parse(&["up", "--listen", "127.0.0.1:0"]).unwrap();
    }

    /// `bridge mcp` takes its own --token (registration) and --timeout-ms
    /// (its tools' bound), the command after `--`, or --url with headers;
    /// not both.
    #[test]
    fn bridge_mcp_flags() {
        let cli = parse(&[
            "bridge",
            "mcp",
            "--token",
            "t",
            "--timeout-ms",
            "30000",
            "--tools",
            "a*,b",
            "--rename",
            "x.y=x_y",
            "--",
            "npx",
            "-y",
            "server",
            "--flag",
        ])
        .unwrap();
        let Command::Bridge(args) = cli.command else {
            panic!("{:?}", cli.command)
        };
        let mcp = args.mcp().expect("bridge mcp");
        assert_eq!(mcp.serve.token.as_deref(), Some("t"));
        assert_eq!(mcp.flags.timeout_ms, Some(30_000));
        assert_eq!(mcp.tools, ["a*", "b"]);
        assert_eq!(mcp.command, ["npx", "-y", "server", "--flag"]);
        let url = parse(&[
            "bridge",
            "mcp",
            "--url",
            "http://h:1/mcp",
            "--header",
            "X: y",
        ])
        .unwrap();
        let Command::Bridge(args) = url.command else {
            panic!()
        };
        assert_eq!(args.mcp().expect("bridge mcp").header, ["X: y"]);
        let both = Cli::command().try_get_matches_from([
            "toolmesh",
            "bridge",
            "mcp",
            "--url",
            "http://h/mcp",
            "--",
            "cmd",
        ]);
        assert!(both.is_err());
    }
}

/// `toolmesh rollout`.
#[derive(Debug, Args, Clone)]
pub(crate) struct RolloutArgs {
    /// What to do.
    #[command(subcommand)]
    pub(crate) action: RolloutCommand,
}

/// The rollout subcommands.
#[derive(Debug, Subcommand, Clone)]
pub(crate) enum RolloutCommand {
    /// Release TOOL@VERSION to a share of callers (admin).
    Start(StartArgs),
    /// Change an active rollout's share (admin).
    Set(SetArgs),
    /// Give every caller the canary and end the rollout (admin).
    Promote(NameArgs),
    /// Give every caller the stable version again (admin).
    Abort(AbortArgs),
    /// Show every rollout, or one tool's.
    Status(StatusArgs),
}

/// `toolmesh rollout start`.
#[derive(Debug, Args, Clone)]
pub(crate) struct StartArgs {
    /// The canary: name@version, e.g. search_kb@2.0.0.
    pub(crate) tool: String,
    /// Share of callers that get it, in percent (0 to 100, e.g. 5 or 0.5).
    #[arg(long)]
    pub(crate) percent: String,
    /// Only callers of these tenants (comma-separated; default any).
    #[arg(long, value_delimiter = ',')]
    pub(crate) tenants: Vec<String>,
    /// Only these principals (comma-separated; default any).
    #[arg(long, value_delimiter = ',')]
    pub(crate) principals: Vec<String>,
    /// Abort by itself when the canary's error rate exceeds the stable
    /// version's by more than this (0.05 = five points).
    #[arg(long, default_value_t = 0.05)]
    pub(crate) max_error_margin: f64,
    /// Canary calls in the window before its error rate is judged.
    #[arg(long, default_value_t = 20)]
    pub(crate) min_calls: u32,
    /// The sliding window errors are counted over, in seconds.
    #[arg(long, default_value_t = 60)]
    pub(crate) window_s: u32,
}

/// `toolmesh rollout set`.
#[derive(Debug, Args, Clone)]
pub(crate) struct SetArgs {
    /// The tool name.
    pub(crate) tool: String,
    /// The new share of callers, in percent.
    #[arg(long)]
    pub(crate) percent: String,
}

/// `toolmesh rollout promote`.
#[derive(Debug, Args, Clone)]
pub(crate) struct NameArgs {
    /// The tool name.
    pub(crate) tool: String,
}

/// `toolmesh rollout abort`.
#[derive(Debug, Args, Clone)]
pub(crate) struct AbortArgs {
    /// The tool name.
    pub(crate) tool: String,
    /// Why (operators and the audit log read it).
    #[arg(long, default_value = "")]
    pub(crate) reason: String,
}

/// `toolmesh rollout status`.
#[derive(Debug, Args, Clone)]
pub(crate) struct StatusArgs {
    /// One tool's rollout (default: every rollout).
    pub(crate) tool: Option<String>,
}

/// `--data-dir`: a directory this process can write in, made if missing,
/// checked as the command line is read (not at the first write, after
/// the registry has started and accepted registrations).
fn writable_dir(text: &str) -> Result<PathBuf, String> {
    let dir = PathBuf::from(text);
    let probe = dir.join(format!(".toolmesh-write-check-{}", std::process::id()));
    std::fs::create_dir_all(&dir)
        .and_then(|()| std::fs::write(&probe, b""))
        .and_then(|()| std::fs::remove_file(&probe))
        .map_err(|e| {
            format!(
                "cannot write in {} ({e}); give a directory this user can write",
                dir.display()
            )
        })?;
    Ok(dir)
}
