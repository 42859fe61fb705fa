//! The bridge rows, one per upstream kind, each measured the same way: an echo upstream (the fixture's `mcp-echo`, `grpc-echo` or `http-echo`) behind `toolmesh bridge mcp|grpc|openapi`, called through a front door of the mesh beside the SDK executor's `acc_echo` through the same door, and beside that upstream called directly.

use crate::Binaries;
use crate::Plan;
use crate::error::BenchError;
use crate::load::{self, Client, Throughput, Workload};
use crate::mesh;
use crate::procs::{self, Proc, Ready, SpawnOptions};
use crate::stats::Latency;
use crate::turns::{self, MCP_IN_FLIGHT};
use serde::Serialize;
use std::path::Path;
use std::time::Duration;
use toolmesh_transport::Tls;

/// What a bridge row puts behind a bridge.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Upstream {
    /// `mcp-echo` behind `bridge mcp`, over stdio and over Streamable HTTP,
    /// called through the MCP door (HTTP/1.1).
    Mcp,
    /// `grpc-echo` (a unary method, server reflection) behind `bridge
    /// grpc`, called through gRPC Invoke.
    Grpc,
    /// `http-echo` (`POST /echo`, its `/openapi.json`) behind `bridge
    /// openapi`, called through gRPC Invoke.
    Openapi,
}

/// The mesh's front door a row calls through.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Door {
    /// MCP `tools/call` over HTTP/1.1.
    Mcp,
    /// gRPC `Dispatcher/Invoke`.
    Invoke,
}

/// One bridge row (small arguments).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BridgeRow {
    /// What is behind the bridge.
    pub upstream: Upstream,
    /// The door the mesh's paths (native and bridged) are called through.
    pub door: Door,
    /// Size of the JSON arguments.
    pub argument_bytes: usize,
    /// Latency at concurrency 1.
    pub latency: ByUpstream<Latency>,
    /// Throughput at 32 calls in flight.
    pub throughput: ByUpstream<Throughput>,
}

/// One figure per path of the same call.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ByUpstream<T> {
    /// Door → dispatcher → the SDK executor's `acc_echo`.
    pub native: T,
    /// Door → dispatcher → bridge → upstream, one per way the bridge
    /// reaches it.
    pub bridged: Vec<Bridged<T>>,
    /// The upstream called directly.
    pub direct: T,
}

/// The figure of one bridged path.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Bridged<T> {
    /// How the bridge reaches the upstream: `stdio`, `Streamable HTTP`,
    /// `gRPC` or `HTTP`.
    pub over: &'static str,
    /// The figure.
    pub figure: T,
}

impl<T: Default> ByUpstream<T> {
    /// Native, then one per `over`, then direct, as [`turns::measure`]
    /// answers them.
    fn from_vec(over: &[&'static str], values: Vec<T>) -> ByUpstream<T> {
        let mut values = values.into_iter();
        let mut next = || values.next().unwrap_or_default();
        let native = next();
        let bridged = over
            .iter()
            .map(|&over| Bridged {
                over,
                figure: next(),
            })
            .collect();
        ByUpstream {
            native,
            bridged,
            direct: next(),
        }
    }
}

impl<T> ByUpstream<T> {
    /// Each path's figure through `f`, in the same order.
    pub fn map<U>(&self, f: impl Fn(&T) -> U) -> ByUpstream<U> {
        ByUpstream {
            native: f(&self.native),
            bridged: self
                .bridged
                .iter()
                .map(|b| Bridged {
                    over: b.over,
                    figure: f(&b.figure),
                })
                .collect(),
            direct: f(&self.direct),
        }
    }
}

/// One bridge of a row: how it reaches the upstream, what its copy of the
/// echo is called in the mesh, and its upstream flags.
struct BridgeSetup {
    over: &'static str,
    tool: &'static str,
    upstream_flags: Vec<String>,
}

impl Upstream {
    /// Every kind, in the report's order.
    pub(crate) const ALL: [Upstream; 3] = [Upstream::Mcp, Upstream::Grpc, Upstream::Openapi];

    /// How the report names it.
    pub fn label(self) -> &'static str {
        match self {
            Upstream::Mcp => "MCP",
            Upstream::Grpc => "gRPC",
            Upstream::Openapi => "OpenAPI",
        }
    }

    /// `toolmesh bridge KIND`.
    fn bridge_command(self) -> &'static str {
        match self {
            Upstream::Mcp => "mcp",
            Upstream::Grpc => "grpc",
            Upstream::Openapi => "openapi",
        }
    }

    /// The fixture command that serves the upstream on a free port.
    fn fixture_args(self) -> [&'static str; 3] {
        match self {
            Upstream::Mcp => ["mcp-echo", "--http", "127.0.0.1:0"],
            Upstream::Grpc => ["grpc-echo", "--listen", "127.0.0.1:0"],
            Upstream::Openapi => ["http-echo", "--listen", "127.0.0.1:0"],
        }
    }

    /// The door a row of this kind calls the mesh through.
    fn door(self) -> Door {
        match self {
            Upstream::Mcp => Door::Mcp,
            Upstream::Grpc | Upstream::Openapi => Door::Invoke,
        }
    }

    /// The upstream's own name of the echo, renamed in the mesh.
    fn upstream_tool(self) -> &'static str {
        match self {
            Upstream::Mcp => "acc_echo",
            Upstream::Grpc => "Echo_Echo",
            Upstream::Openapi => "echo",
        }
    }

    /// The bridges of a row, for an upstream listening at `addr`, the
    /// fixture binary being `fixture`.
    fn bridges(self, fixture: &str, addr: &str) -> Vec<BridgeSetup> {
        let flags = |words: &[&str]| words.iter().map(|w| (*w).to_owned()).collect();
        match self {
            Upstream::Mcp => vec![
                BridgeSetup {
                    over: "stdio",
                    tool: "acc_echo_stdio",
                    upstream_flags: flags(&["--", fixture, "mcp-echo"]),
                },
                BridgeSetup {
                    over: "Streamable HTTP",
                    tool: "acc_echo_http",
                    upstream_flags: flags(&["--url", &format!("http://{addr}/mcp")]),
                },
            ],
            Upstream::Grpc => vec![BridgeSetup {
                over: "gRPC",
                tool: "grpc_echo",
                upstream_flags: flags(&["--target", addr]),
            }],
            Upstream::Openapi => vec![BridgeSetup {
                over: "HTTP",
                tool: "openapi_echo",
                upstream_flags: flags(&["--spec", &format!("http://{addr}/openapi.json")]),
            }],
        }
    }

    /// A client of the upstream listening at `addr`, called directly.
    fn direct_client(self, addr: &str) -> Result<Client, BenchError> {
        match self {
            Upstream::Mcp => Client::mcp(&format!("http://{addr}/mcp"), false),
            Upstream::Grpc => Client::grpc_echo(addr),
            Upstream::Openapi => Client::http(&format!("http://{addr}/echo")),
        }
    }

    /// The arguments of the bridged tool for `acc_echo`'s `arguments`: the
    /// same, or for an OpenAPI operation the JSON request body under `body`.
    fn bridged_arguments(self, arguments: &str) -> String {
        match self {
            Upstream::Mcp | Upstream::Grpc => arguments.to_owned(),
            Upstream::Openapi => format!(r#"{{"body":{arguments}}}"#),
        }
    }
}

/// The front doors of the mesh a row may call through.
pub(crate) struct Doors<'a> {
    /// The registry + dispatcher (`toolmesh serve`) the bridges register
    /// with, host:port.
    pub(crate) serve: &'a str,
    /// Its MCP door, `http://HOST:PORT/mcp`.
    pub(crate) mcp_url: &'a str,
}

/// The `upstream` row of `work` (an `acc_echo` call): starts the upstream
/// and its bridges registering with `doors.serve`, measures the native,
/// bridged and direct paths taking turns, and stops what it started.
pub(crate) async fn measure(
    plan: &Plan,
    bins: &Binaries,
    logs: &Path,
    doors: &Doors<'_>,
    upstream: Upstream,
    work: &Workload,
) -> Result<BridgeRow, BenchError> {
    let start = |name: &str, program: &Path, args: &[&str]| {
        procs::spawn(
            bins.parent_death,
            name,
            program,
            args,
            logs,
            SpawnOptions::default(),
        )
    };
    let kind = upstream.bridge_command();
    let mut server = start(
        &format!("{} echo upstream", upstream.label()),
        &bins.fixture,
        &upstream.fixture_args(),
    )?;
    let measured = async {
        let addr = server.listen_addr().await?;
        let setups = upstream.bridges(&bins.fixture.display().to_string(), &addr);
        let mut bridges = Vec::with_capacity(setups.len());
        for setup in &setups {
            let name = format!("bench-bridge-{kind}-{}", bridges.len());
            let rename = format!("{}={}", upstream.upstream_tool(), setup.tool);
            let mut args = vec![
                "bridge",
                kind,
                "--registry",
                doors.serve,
                "--name",
                &name,
                "--rename",
                &rename,
            ];
            args.extend(setup.upstream_flags.iter().map(String::as_str));
            bridges.push(start(&name, &bins.toolmesh, &args)?);
        }
        let measured = measure_started(plan, doors, upstream, &addr, &setups, &mut bridges, work);
        let measured = measured.await;
        for bridge in &mut bridges {
            Proc::kill_and_reap(bridge).await;
        }
        measured
    }
    .await;
    Proc::kill_and_reap(&mut server).await;
    measured
}

/// The row's measurements once its upstream (at `addr`) and `bridges`
/// (set up as `setups`) are started.
async fn measure_started(
    plan: &Plan,
    doors: &Doors<'_>,
    upstream: Upstream,
    addr: &str,
    setups: &[BridgeSetup],
    bridges: &mut [Proc],
    work: &Workload,
) -> Result<BridgeRow, BenchError> {
    for bridge in bridges.iter_mut() {
        bridge.listen_addr().await?;
    }
    let mut dispatcher = mesh::dispatcher_client(doors.serve, &Tls::none())?;
    for setup in setups {
        mesh::wait_listed(&mut dispatcher, setup.tool, true, Duration::from_secs(15)).await?;
    }
    let door = match upstream.door() {
        Door::Mcp => Client::mcp(doors.mcp_url, false)?,
        Door::Invoke => Client::dispatcher(doors.serve, &Tls::none())?,
    };
    let direct = upstream.direct_client(addr)?;
    let bridged_arguments: std::sync::Arc<str> = upstream.bridged_arguments(&work.arguments).into();
    let bridged_work: Vec<Workload> = setups
        .iter()
        .map(|setup| Workload {
            tool: setup.tool.into(),
            arguments: bridged_arguments.clone(),
            ..work.clone()
        })
        .collect();
    let mut targets = vec![(&door, work)];
    targets.extend(bridged_work.iter().map(|work| (&door, work)));
    targets.push((&direct, work));
    let mut names = vec!["the SDK executor".to_owned()];
    names.extend(setups.iter().map(|s| format!("the {} bridge", s.over)));
    names.push(format!("the {} upstream directly", upstream.label()));
    for (name, (client, work)) in names.iter().zip(&targets) {
        load::check_works(client, work, name).await?;
    }
    let (latency, mut throughput) = turns::measure(plan, &targets, &[], &[MCP_IN_FLIGHT]).await;
    let over: Vec<&'static str> = setups.iter().map(|s| s.over).collect();
    Ok(BridgeRow {
        upstream,
        door: upstream.door(),
        argument_bytes: work.arguments.len(),
        latency: ByUpstream::from_vec(&over, latency),
        throughput: ByUpstream::from_vec(&over, throughput.pop().unwrap_or_default()),
    })
}
