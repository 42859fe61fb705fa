//! `toolmesh bridge mcp`, `toolmesh bridge grpc` and `toolmesh bridge openapi`: read the flags into `toolmesh-bridge`'s options, print the lines scripts wait for, and serve until SIGTERM.

use crate::Failure;
use crate::args::{
    BridgeArgs, BridgeGrpcArgs, BridgeKind, BridgeMcpArgs, BridgeOpenApiArgs, BridgeToolFlags,
    FlagError,
};
use std::time::Duration;
use toolmesh::ToolPattern;
use toolmesh::pb::RiskLevel;
use toolmesh_bridge::{
    Bridge, BridgeError, BridgeOptions, GrpcBridgeOptions, GrpcTarget, HttpsFiles,
    OpenApiBridgeOptions, OutboundAuth, SpecLocation, ToolSelection, Upstream, UpstreamKind,
};

/// Longest `--timeout-ms` a tool may declare.
const MAX_TIMEOUT_MS: u64 = toolmesh::spec::MAX_TIMEOUT.as_millis() as u64;

/// Starts the bridge, prints `toolmesh bridge KIND NAME (ID) listening on
/// ADDR` (and the health and admin addresses when asked for), and serves
/// until SIGTERM or ctrl-c.
pub(crate) async fn run(args: BridgeArgs, tls: &toolmesh_transport::Tls) -> Result<(), Failure> {
    let (kind, bridge) = match &args.kind {
        BridgeKind::Mcp(args) => ("mcp", Bridge::start(options(args, tls)?).await),
        BridgeKind::Grpc(args) => ("grpc", Bridge::start_grpc(grpc_options(args, tls)?).await),
        BridgeKind::Openapi(args) => (
            "openapi",
            Bridge::start_openapi(openapi_options(args, tls)?).await,
        ),
    };
    let bridge = bridge.map_err(failure)?;
    println!(
        "toolmesh bridge {kind} {} ({}) listening on {}",
        bridge.service(),
        bridge.executor_id(),
        bridge.local_addr()
    );
    println!(
        "toolmesh bridge {kind} {} serves {} tools: {}",
        bridge.service(),
        bridge.tools().len(),
        bridge.tools().join(", ")
    );
    if let Some(addr) = bridge.health_addr() {
        println!(
            "toolmesh bridge {kind} {} health checks on {addr}",
            bridge.service()
        );
    }
    if let Some(admin) = bridge.admin_url() {
        println!("toolmesh admin listening on {admin}");
    }
    bridge
        .run(toolmesh_transport::shutdown_signal())
        .await
        .map_err(failure)
}

/// Bad flags and tools the flags select that cannot join are usage (64);
/// an upstream that does not answer is unavailable (69).
fn failure(error: BridgeError) -> Failure {
    match error {
        e if e.is_usage() => Failure::Usage(e.to_string()),
        e @ (BridgeError::Connect { .. }
        | BridgeError::List { .. }
        | BridgeError::Reflection { .. }
        | BridgeError::Document { .. }) => Failure::Unavailable(e.to_string()),
        e => Failure::Failed(e.to_string()),
    }
}

/// The bridge options the flags ask for, or what is wrong with a flag.
fn options(
    args: &BridgeMcpArgs,
    tls: &toolmesh_transport::Tls,
) -> Result<BridgeOptions, FlagError> {
    let upstream = match &args.url {
        Some(url) => {
            let bearer = match &args.bearer_env {
                Some(var) => Some(
                    std::env::var(var)
                        .ok()
                        .filter(|v| !v.is_empty())
                        .ok_or_else(|| FlagError::BearerUnset(var.clone()))?,
                ),
                None => None,
            };
            let tls = HttpsFiles {
                ca: args.url_ca.clone(),
                cert: args.url_cert.clone(),
                key: args.url_key.clone(),
            };
            Upstream::http(url, &args.header, bearer, &tls)
        }
        None => Upstream::stdio(&args.command),
    }?;
    let serve = args.serve.serve_options(tls.clone());
    Ok(BridgeOptions {
        upstream,
        name: args.flags.name.clone(),
        selection: selection(&args.flags, UpstreamKind::Mcp, &args.tools)?,
        serve,
    })
}

/// The gRPC bridge options the flags ask for, or what is wrong with a flag.
fn grpc_options(
    args: &BridgeGrpcArgs,
    tls: &toolmesh_transport::Tls,
) -> Result<GrpcBridgeOptions, FlagError> {
    Ok(GrpcBridgeOptions {
        target: GrpcTarget::parse(&args.target)?,
        tls: HttpsFiles {
            ca: args.target_ca.clone(),
            cert: args.target_cert.clone(),
            key: args.target_key.clone(),
        },
        auth: outbound_auth(&args.bearer_file, &args.bearer_env, &args.header_env)?,
        services: args.services.clone(),
        name: args.tools.name.clone(),
        selection: selection(&args.tools, UpstreamKind::Grpc, &args.methods)?,
        serve: args.serve.serve_options(tls.clone()),
        refresh_every: args.refresh.every(),
    })
}

/// The OpenAPI bridge options the flags ask for, or what is wrong with a
/// flag.
fn openapi_options(
    args: &BridgeOpenApiArgs,
    tls: &toolmesh_transport::Tls,
) -> Result<OpenApiBridgeOptions, FlagError> {
    let base_url = args
        .base_url
        .as_deref()
        .map(SpecLocation::base_url)
        .transpose()?;
    Ok(OpenApiBridgeOptions {
        spec: SpecLocation::parse(&args.spec)?,
        base_url,
        auth: outbound_auth(&args.bearer_file, &args.bearer_env, &args.header_env)?,
        name: args.tools.name.clone(),
        selection: selection(&args.tools, UpstreamKind::OpenApi, &args.operations)?,
        serve: args.serve.serve_options(tls.clone()),
        refresh_every: args.refresh.every(),
    })
}

/// `--bearer-file`, `--bearer-env` and `--header-env NAME=VAR` as the
/// bridge's own credentials.
fn outbound_auth(
    bearer_file: &Option<std::path::PathBuf>,
    bearer_env: &Option<String>,
    header_env: &[String],
) -> Result<OutboundAuth, FlagError> {
    let header_env = header_env
        .iter()
        .map(|pair| split_pair("--header-env", pair, "NAME=VAR"))
        .collect::<Result<_, _>>()?;
    Ok(OutboundAuth {
        bearer_file: bearer_file.clone(),
        bearer_env: bearer_env.clone(),
        header_env,
    })
}

/// The globs of the kind's selecting flag (`--tools`, `--methods`,
/// `--operations`), `--rename`, `--risk`, `--idempotent`, `--timeout-ms`,
/// `--owner`, `--tag` and `--owner-tag` as a [`ToolSelection`].
fn selection(
    args: &BridgeToolFlags,
    kind: UpstreamKind,
    globs: &[String],
) -> Result<ToolSelection, FlagError> {
    let tools = globs
        .iter()
        .map(|glob| ToolPattern::parse(glob))
        .collect::<Result<_, _>>()
        .map_err(|source| FlagError::Select {
            flag: kind.select_flag(),
            source,
        })?;
    let mut renames = std::collections::BTreeMap::new();
    for pair in &args.rename {
        let (old, new) = split_pair("--rename", pair, "OLD=NEW")?;
        renames.insert(old, new);
    }
    let mut risk = std::collections::BTreeMap::new();
    for pair in &args.risk {
        let (tool, level) = split_pair("--risk", pair, "TOOL=LEVEL")?;
        let level = match level.to_ascii_lowercase().as_str() {
            "low" => RiskLevel::Low,
            "medium" => RiskLevel::Medium,
            "high" => RiskLevel::High,
            _ => {
                return Err(FlagError::Risk {
                    pair: pair.clone(),
                    level,
                });
            }
        };
        risk.insert(tool, level);
    }
    let timeout_ms = args.timeout_ms.unwrap_or(0);
    if timeout_ms > MAX_TIMEOUT_MS {
        return Err(FlagError::Timeout {
            given: timeout_ms,
            max: MAX_TIMEOUT_MS,
        });
    }
    Ok(ToolSelection {
        tools,
        renames,
        risk,
        idempotent: args.idempotent.iter().cloned().collect(),
        timeout: Duration::from_millis(timeout_ms),
        owner: args.owner.clone().unwrap_or_default(),
        tags: args.tags.clone(),
        owner_tag: args.owner_tag,
    })
}

/// `KEY=VALUE` with both sides non-empty, or an error showing `shape`.
fn split_pair(
    flag: &'static str,
    pair: &str,
    shape: &'static str,
) -> Result<(String, String), FlagError> {
    match pair.split_once('=') {
        Some((key, value)) if !key.trim().is_empty() && !value.trim().is_empty() => {
            Ok((key.trim().to_owned(), value.trim().to_owned()))
        }
        _ => Err(FlagError::Pair {
            flag,
            pair: pair.to_owned(),
            shape,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn args(line: &[&str]) -> BridgeMcpArgs {
        let cli = crate::args::Cli::try_parse_from(
            ["toolmesh", "bridge", "mcp"].iter().chain(line.iter()),
        )
        .unwrap();
        match cli.command {
            crate::args::Command::Bridge(args) => args.mcp().expect("bridge mcp").clone(),
            other => panic!("{other:?}"),
        }
    }

    /// The flags become the selection; a bad glob, pair, level or timeout
    /// and a missing command are refused naming the flag and the fix.
    #[test]
    fn flags_become_options() {
        let tls = toolmesh_transport::Tls::none();
        let parsed = args(&[
            "--tools",
            "get_*,echo",
            "--rename",
            "a.b=a_b",
            "--risk",
            "wipe=HIGH",
            "--idempotent",
            "echo",
            "--timeout-ms",
            "30000",
            "--tag",
            "mcp,x",
            "--",
            "srv",
        ]);
        let built = options(&parsed, &tls).unwrap();
        let selection = built.selection;
        assert!(selection.exposes("get_sum") && selection.exposes("echo"));
        assert!(!selection.exposes("wipe"));
        assert_eq!(selection.renames["a.b"], "a_b");
        assert_eq!(selection.risk["wipe"], RiskLevel::High);
        assert!(selection.idempotent.contains("echo"));
        assert_eq!(selection.timeout, Duration::from_secs(30));
        assert_eq!(selection.tags, ["mcp", "x"]);
        assert!(built.upstream.is_child());

        let refused = |line: &[&str], needle: &str| {
            let error = options(&args(line), &tls).unwrap_err().to_string();
            assert!(error.contains(needle), "{line:?}: {error}");
        };
        refused(&["--tools", "a[b]", "--", "srv"], "--tools");
        refused(&["--rename", "ab", "--", "srv"], "OLD=NEW");
        refused(&["--risk", "x=extreme", "--", "srv"], "low, medium or high");
        refused(&["--timeout-ms", "700000", "--", "srv"], "600000");
        refused(&[], "after `--`");
        refused(
            &[
                "--url",
                "http://h/mcp",
                "--bearer-env",
                "TOOLMESH_TEST_NO_SUCH_VAR",
            ],
            "TOOLMESH_TEST_NO_SUCH_VAR",
        );
    }

    /// `--refresh-secs` reads the upstream again every 30 s unless told
    /// otherwise; 0 leaves SIGHUP alone.
    #[test]
    fn refresh_defaults_to_thirty_seconds() {
        let tls = toolmesh_transport::Tls::none();
        let grpc = |line: &[&str]| {
            let cli = crate::args::Cli::try_parse_from(
                ["toolmesh", "bridge", "grpc", "--target", "h:1"]
                    .iter()
                    .chain(line.iter()),
            )
            .unwrap();
            match cli.command {
                crate::args::Command::Bridge(BridgeArgs {
                    kind: BridgeKind::Grpc(args),
                }) => grpc_options(&args, &tls).unwrap().refresh_every,
                other => panic!("{other:?}"),
            }
        };
        assert_eq!(grpc(&[]), Some(Duration::from_secs(30)));
        assert_eq!(grpc(&["--refresh-secs", "5"]), Some(Duration::from_secs(5)));
        assert_eq!(grpc(&["--refresh-secs", "0"]), None);
        let cli = crate::args::Cli::try_parse_from([
            "toolmesh",
            "bridge",
            "openapi",
            "--spec",
            "a.json",
            "--refresh-secs",
            "0",
        ])
        .unwrap();
        let crate::args::Command::Bridge(BridgeArgs {
            kind: BridgeKind::Openapi(args),
        }) = cli.command
        else {
            panic!("bridge openapi")
        };
        assert_eq!(openapi_options(&args, &tls).unwrap().refresh_every, None);
    }

    /// A bad glob is refused naming the flag of the bridge's own kind.
    #[test]
    fn bad_globs_name_their_kinds_flag() {
        let tls = toolmesh_transport::Tls::none();
        let parse = |line: &[&str]| {
            let cli =
                crate::args::Cli::try_parse_from(["toolmesh", "bridge"].iter().chain(line.iter()))
                    .unwrap();
            match cli.command {
                crate::args::Command::Bridge(args) => args.kind,
                other => panic!("{other:?}"),
            }
        };
        let grpc = parse(&["grpc", "--target", "h:1", "--methods", "a[b]"]);
        let BridgeKind::Grpc(grpc) = grpc else {
            panic!("{grpc:?}")
        };
        let error = grpc_options(&grpc, &tls).unwrap_err().to_string();
        assert!(error.starts_with("--methods: "), "{error}");
        let openapi = parse(&["openapi", "--spec", "a.json", "--operations", "a[b]"]);
        let BridgeKind::Openapi(openapi) = openapi else {
            panic!("{openapi:?}")
        };
        let error = openapi_options(&openapi, &tls).unwrap_err().to_string();
        assert!(error.starts_with("--operations: "), "{error}");
    }
}
