//! `toolmesh up`: registry and dispatcher in this process, each example executor and each bridge (`--bridge` to an MCP server, `--bridge-grpc` to a gRPC service, `--bridge-openapi` to an HTTP API) as its own OS process, until ctrl-c.

use crate::args::{DEFAULT_SERVER, UpArgs, UpBridge, UpUpstream};
use crate::{Failure, node_failure};
use anyhow::Context;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use tokio::process::Command;
use toolmesh_node::Role;
use toolmesh_policy::DEV_APPROVER_TOKEN;
use toolmesh_procs::{ArmParentDeath, ParentDeath, Proc, Spawn};
use toolmesh_transport::TlsFiles;

/// How often `up` looks for example executors that died.
const RESTART_CHECK: Duration = Duration::from_secs(1);

/// How long `up` waits for the examples' tools to become callable.
const READY_TIMEOUT: Duration = Duration::from_secs(30);

pub(crate) async fn run(
    args: UpArgs,
    tls: &toolmesh_transport::Tls,
    arm: ArmParentDeath,
) -> Result<(), Failure> {
    let started = Instant::now();
    let kinds = executors_asked(&args)?;
    // Examples register with a token made for this run; nothing else may
    // register under their owner.
    let token = format!("dev-{}", uuid::Uuid::new_v4().simple());
    let role = Role::Serve {
        default_ttl: Duration::from_millis(args.serve.default_ttl_ms),
    };
    let running = toolmesh_node::start(role, &node_config(&args, tls, &token))
        .await
        .map_err(node_failure)?;
    let server = &args.serve.server;
    let launch = Launch {
        exe: std::env::current_exe()
            .context("cannot find the toolmesh binary to start examples")?,
        registry: running.addr.to_string(),
        token,
        tls: tls.files().clone(),
        otlp_endpoint: server.ops.otlp_endpoint.clone(),
        admin_allowed_hosts: server.ops.admin_allowed_hosts.clone(),
        arm,
    };
    let mut children = start_children(&launch, kinds, &running)?;
    let dispatcher = running
        .dispatcher
        .as_ref()
        .context("serve always runs a dispatcher")?;
    let current = || dispatcher.current_snapshot();
    let ready = registered(current, children.len(), started).await;
    let tools = current().name_count();
    println!("toolmesh is up in {} ms", started.elapsed().as_millis());
    let me = shell_word(&command_name(&launch.exe));
    print_doors(&running, &me, tls, server.policy.is_none());
    print_executors(&children, &launch, &me, tls);
    if !ready {
        println!(
            "  warning: not every example registered within {READY_TIMEOUT:?}; see the logs above"
        );
    }
    println!("  {tools} tools registered\n");
    print_try(&me, &launch.registry, tls.files());
    println!("\nPress ctrl-c to stop.");
    restart_until_ctrl_c(&launch, &mut children).await;
    println!("stopping: draining executors, then the server");
    let grace = Duration::from_millis(server.grace_ms);
    stop_children(children, grace).await;
    running.stop(grace).await.map_err(node_failure)
}

/// The executors `args` asks for, examples first, or why they cannot all
/// run: none at all, a name taken twice, an unknown example.
fn executors_asked(args: &UpArgs) -> Result<Vec<Kind>, Failure> {
    let names = args.example_names();
    let bridges = UpBridge::all(args)?;
    if names.is_empty() && bridges.is_empty() {
        return Err(Failure::Usage(
            "--no-default-examples starts no example: name some with --examples, or bring a server with --bridge, --bridge-grpc or --bridge-openapi".to_owned(),
        ));
    }
    for (i, bridge) in bridges.iter().enumerate() {
        if names.contains(&bridge.name) || bridges[..i].iter().any(|b| b.name == bridge.name) {
            return Err(Failure::Usage(format!(
                "{} {}: the name is taken; give each bridge and example its own",
                bridge.upstream.flag(),
                bridge.name
            )));
        }
    }
    if let Some(name) = names
        .iter()
        .find(|name| toolmesh_examples::example(name, &Default::default()).is_none())
    {
        return Err(Failure::Usage(format!(
            "unknown example {name:?}; choose from {}",
            toolmesh_examples::EXAMPLE_NAMES.join(", ")
        )));
    }
    Ok(names
        .into_iter()
        .map(Kind::Example)
        .chain(bridges.into_iter().map(Kind::Bridge))
        .collect())
}

/// The node `up` runs: `args`' settings, examples registering with
/// `token`, MCP and the admin page on the ports after `--listen` unless
/// told otherwise.
fn node_config(
    args: &UpArgs,
    tls: &toolmesh_transport::Tls,
    token: &str,
) -> toolmesh_node::NodeConfig {
    let mut config = toolmesh_node::NodeConfig {
        dev_executor_token: Some(token.to_owned()),
        ..args.serve.node_config(tls)
    };
    let server = &args.serve.server;
    if server.mcp_listen.is_none() {
        config.mcp_listen = next_port(config.listen, 1);
    }
    config.admin_listen = match server.ops.admin_listen.as_deref() {
        None => next_port(config.listen, 2).map(|addr| on_loopback(addr.to_string())),
        Some("none") => None,
        Some(addr) => Some(addr.to_owned()),
    };
    config
}

/// Starts each executor of `kinds`, each with an admin listener beside the
/// node's (when it has one) on a port kept for it across restarts.
fn start_children(
    launch: &Launch,
    kinds: Vec<Kind>,
    running: &toolmesh_node::Running,
) -> Result<Vec<Child>, Failure> {
    let mut children = Vec::with_capacity(kinds.len());
    for kind in kinds {
        let admin = match &running.admin {
            Some(admin) => Some(free_port_on(admin.addr.ip()).with_context(|| {
                format!(
                    "cannot find a free port for {}'s admin listener",
                    kind.label()
                )
            })?),
            None => None,
        };
        let proc = launch
            .spawn(&kind, admin)
            .with_context(|| format!("cannot start {}", kind.label()))?;
        children.push(Child {
            kind,
            admin,
            proc,
            given_up: false,
        });
    }
    Ok(children)
}

/// Waits until `expected` executors serve exposed tools in the `current`
/// snapshot, or until [`READY_TIMEOUT`] after `started`; whether they do.
async fn registered(
    current: impl Fn() -> std::sync::Arc<toolmesh::Snapshot>,
    expected: usize,
    started: Instant,
) -> bool {
    loop {
        let snapshot = current();
        let services: std::collections::HashSet<&str> = snapshot
            .entries()
            .filter(|e| e.exposed())
            .flat_map(|e| e.instances.iter().map(|i| &*i.service))
            .collect();
        if services.len() >= expected {
            return true;
        }
        if started.elapsed() > READY_TIMEOUT {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Where the node serves, and how agents and operators get in.
fn print_doors(
    running: &toolmesh_node::Running,
    me: &str,
    tls: &toolmesh_transport::Tls,
    dev_policy: bool,
) {
    let addr = running.addr;
    let flags = tls_flags(tls.files());
    println!("  registry + dispatcher  {addr}  (grpc.health.v1, reflection)");
    if let Some(token) = running.dev_dispatcher_token() {
        println!(
            "  another dispatcher     {me}{flags} dispatcher --registry {addr} --registry-token {token}"
        );
    }
    if let Some(url) = running.mcp_url() {
        println!("  MCP (Streamable HTTP)  {url}  (stdio: {me} --server {addr}{flags} mcp)");
    }
    if dev_policy {
        println!(
            "  agents                 need no token: the development policy lets anyone list and call (HIGH-risk calls wait for an approval)"
        );
    } else {
        println!(
            "  agents                 send a token of the policy's [[callers]] or a JWT of its [[issuers]]"
        );
    }
    if let Some(admin) = &running.admin {
        let login = if dev_policy {
            format!("log in with the token {DEV_APPROVER_TOKEN}")
        } else {
            "log in with the token of an admin or operator".to_owned()
        };
        println!("  admin page, /metrics   {}/  ({login})", admin.url());
    }
}

/// The executors `up` started, and how to add more.
fn print_executors(children: &[Child], launch: &Launch, me: &str, tls: &toolmesh_transport::Tls) {
    for child in children {
        let metrics = match child.admin {
            Some(admin) => format!("  metrics {}://{admin}/metrics", admin_scheme(tls)),
            None => String::new(),
        };
        match &child.kind {
            Kind::Example(name) => {
                println!("  executor {name:<13} pid {}{metrics}", child.proc.pid())
            }
            Kind::Bridge(bridge) => println!(
                "  bridge {:<15} pid {}{metrics}  ({})",
                bridge.name,
                child.proc.pid(),
                bridged(&bridge.upstream)
            ),
        }
    }
    let (token, addr) = (&launch.token, &launch.registry);
    let flags = tls_flags(tls.files());
    println!(
        "  another executor       TOOLMESH_TOKEN={token} {me}{flags} example NAME --registry {addr}"
    );
    println!(
        "  an MCP server          TOOLMESH_TOKEN={token} {me}{flags} bridge mcp --registry {addr} -- COMMAND ARGS"
    );
}

/// What a bridge brings in, as the banner says it.
fn bridged(upstream: &UpUpstream) -> String {
    match upstream {
        UpUpstream::Mcp(command) => format!("MCP server: {}", command.join(" ")),
        UpUpstream::Grpc(target) => format!("gRPC service: {target}"),
        UpUpstream::Openapi { spec, base_url } => match base_url {
            Some(base) => format!("OpenAPI: {spec} at {base}"),
            None => format!("OpenAPI: {spec}"),
        },
    }
}

/// The commands to try against `addr`, and grpcurl's.
fn print_try(me: &str, addr: &str, tls: &TlsFiles) {
    println!("Try, in another terminal:");
    for line in try_lines(me, addr, tls) {
        println!("  {line}");
    }
    // Apart from the lines above: grpcurl is not part of toolmesh.
    println!(
        "\nWith grpcurl installed (reflection is on): {}",
        grpcurl_line(addr, tls)
    );
}

/// Until ctrl-c: an executor that dies is started again, unless it refused
/// its settings (it would fail again).
async fn restart_until_ctrl_c(launch: &Launch, children: &mut [Child]) {
    let mut shutdown = std::pin::pin!(toolmesh_transport::shutdown_signal());
    loop {
        tokio::select! {
            _ = &mut shutdown => return,
            _ = tokio::time::sleep(RESTART_CHECK) => {}
        }
        for child in children.iter_mut().filter(|c| !c.given_up) {
            let Some(status) = child.proc.try_exit() else {
                continue;
            };
            let label = child.kind.label();
            if status.code() == Some(USAGE_EXIT) {
                // Its flags or its server's tools are wrong: it would fail again.
                tracing::error!(executor = %label, %status, "exited refusing its settings (see its error above); not starting it again");
                child.given_up = true;
                continue;
            }
            tracing::warn!(executor = %label, %status, "exited; starting it again");
            match launch.spawn(&child.kind, child.admin) {
                Ok(again) => child.proc = again,
                Err(e) => tracing::error!(executor = %label, error = %e, "cannot start it again"),
            }
        }
    }
}

/// Stops every executor: SIGTERM lets each deregister and drain; one still
/// running after `grace` is killed.
async fn stop_children(children: Vec<Child>, grace: Duration) {
    for child in &children {
        child.proc.signal(libc::SIGTERM);
    }
    for mut child in children {
        if child.proc.wait_timeout(grace).await.is_none() {
            tracing::warn!(executor = %child.kind.label(), "did not stop in time; killing it");
            child.proc.kill_and_reap().await;
        }
    }
}

/// The exit code of a process that refused its settings (EX_USAGE).
const USAGE_EXIT: i32 = 64;

/// An executor `up` runs: an example, or a bridge.
enum Kind {
    Example(String),
    Bridge(UpBridge),
}

impl Kind {
    /// How logs and errors name it.
    fn label(&self) -> String {
        match self {
            Kind::Example(name) => format!("example {name}"),
            Kind::Bridge(bridge) => format!("bridge {}", bridge.name),
        }
    }
}

/// An executor `up` runs, and where its admin listener is.
struct Child {
    kind: Kind,
    admin: Option<SocketAddr>,
    proc: Proc,
    /// It refused its settings: not started again.
    given_up: bool,
}

/// The client commands `up` suggests (each must succeed as printed).
const TRY: [&str; 9] = [
    "tools",
    "tools --format openai",
    r#"call search_kb '{"query": "reset password"}'"#,
    r#"call get_user_info '{"user_id": "u_1"}'"#,
    r#"call --stream export_report '{"topic": "billing"}'"#,
    r#"call create_ticket '{"title": "Printer on fire", "body": "3rd floor", "priority": "high"}'"#,
    "health",
    "health search_kb",
    "snapshot",
];

/// The command lines printed under "Try, in another terminal": `me` (the
/// binary, shell-quoted) with the flags that reach `addr` as served with
/// `tls`. Each works as printed, pasted into a POSIX shell; they need
/// nothing but this binary (grpcurl is suggested apart, [`grpcurl_line`]).
fn try_lines(me: &str, addr: &str, tls: &TlsFiles) -> Vec<String> {
    let mut flags = tls_flags(tls);
    if addr != DEFAULT_SERVER {
        flags.insert_str(0, &format!(" --server {}", shell_word(addr)));
    }
    TRY.iter()
        .map(|command| format!("{me}{flags} {command}"))
        .collect()
}

/// The TLS flags a client needs for a server run with `tls`: the CA that
/// signs its certificate, and for mTLS this certificate (which the
/// examples present too), each after a space.
fn tls_flags(tls: &TlsFiles) -> String {
    let mut flags = String::new();
    let mut flag = |name: &str, file: &Path| {
        flags.push_str(&format!(
            " --{name} {}",
            shell_word(&file.display().to_string())
        ));
    };
    if let Some(ca) = &tls.ca {
        flag("tls-ca", ca);
    }
    if let (Some(_), Some(cert), Some(key)) = (&tls.client_ca, &tls.cert, &tls.key) {
        flag("tls-cert", cert);
        flag("tls-key", key);
    }
    flags
}

/// `grpcurl … ADDR list`, in plaintext or with the TLS files as grpcurl
/// names them.
fn grpcurl_line(addr: &str, tls: &TlsFiles) -> String {
    let file = |path: &Path| shell_word(&path.display().to_string());
    let mut line = "grpcurl".to_owned();
    if tls.cert.is_none() {
        line.push_str(" -plaintext");
    }
    if let (Some(ca), Some(_)) = (&tls.ca, &tls.cert) {
        line.push_str(&format!(" -cacert {}", file(ca)));
    }
    if let (Some(_), Some(cert), Some(key)) = (&tls.client_ca, &tls.cert, &tls.key) {
        line.push_str(&format!(" -cert {} -key {}", file(cert), file(key)));
    }
    format!("{line} {} list", shell_word(addr))
}

/// `word` as a POSIX shell reads it back: bare when every character is
/// safe, else in single quotes.
fn shell_word(word: &str) -> String {
    let safe = |c: char| c.is_ascii_alphanumeric() || "-_./:@,=+%".contains(c);
    if !word.is_empty() && word.chars().all(safe) {
        word.to_owned()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

/// The --listen address with its port moved up by `by` (port 0 stays 0,
/// so tests get free ports for everything): where `up` serves MCP (+1)
/// and its admin page (+2) when not told.
fn next_port(listen: SocketAddr, by: u16) -> Option<SocketAddr> {
    let port = match listen.port() {
        0 => 0,
        port => port.checked_add(by)?,
    };
    Some(SocketAddr::new(listen.ip(), port))
}

/// `addr` with a loopback host when its host is a wildcard: the admin page
/// `up` serves unasked stays on this machine.
fn on_loopback(addr: String) -> String {
    match addr.parse::<SocketAddr>() {
        Ok(mut parsed) if parsed.ip().is_unspecified() => {
            parsed.set_ip(std::net::Ipv4Addr::LOCALHOST.into());
            parsed.to_string()
        }
        _ => addr,
    }
}

/// A port free on `ip` now, for a child to bind: the port the kernel
/// hands out for port 0, released at once.
fn free_port_on(ip: IpAddr) -> std::io::Result<SocketAddr> {
    let bind = if ip.is_unspecified() {
        IpAddr::from(std::net::Ipv4Addr::LOCALHOST)
    } else {
        ip
    };
    std::net::TcpListener::bind((bind, 0))?.local_addr()
}

/// `https` when admin listeners serve TLS (they do with a certificate).
fn admin_scheme(tls: &toolmesh_transport::Tls) -> &'static str {
    if tls.files().cert.is_some() {
        "https"
    } else {
        "http"
    }
}

/// `toolmesh` when that is the binary on PATH, else the path to this binary.
fn command_name(exe: &std::path::Path) -> String {
    let on_path = std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join("toolmesh") == exe));
    if on_path {
        return "toolmesh".to_owned();
    }
    let relative = std::env::current_dir().ok().and_then(|cwd| {
        exe.strip_prefix(cwd)
            .ok()
            .map(|p| format!("./{}", p.display()))
    });
    relative.unwrap_or_else(|| exe.display().to_string())
}

/// How `up` starts its executors (examples and bridges): the same binary,
/// registering with this node under the run's token, with its TLS files,
/// traces and admin listener settings.
struct Launch {
    exe: PathBuf,
    registry: String,
    token: String,
    tls: TlsFiles,
    otlp_endpoint: Option<String>,
    admin_allowed_hosts: Vec<String>,
    arm: ArmParentDeath,
}

impl Launch {
    /// Starts `toolmesh example NAME` or `toolmesh bridge KIND --name NAME
    /// …` (with `-- COMMAND`, `--target` or `--spec`), its admin listener on `admin` if given, its output on
    /// this terminal; it gets SIGTERM should `up` die, even by SIGKILL.
    fn spawn(
        &self,
        kind: &Kind,
        admin: Option<SocketAddr>,
    ) -> Result<Proc, toolmesh_procs::ProcError> {
        let mut command = Command::new(&self.exe);
        // The examples speak TLS exactly as `up` does.
        for (var, file) in [
            ("TOOLMESH_TLS_CA", &self.tls.ca),
            ("TOOLMESH_TLS_CERT", &self.tls.cert),
            ("TOOLMESH_TLS_KEY", &self.tls.key),
            ("TOOLMESH_TLS_CLIENT_CA", &self.tls.client_ca),
        ] {
            if let Some(file) = file {
                command.env(var, file);
            }
        }
        match kind {
            Kind::Example(name) => command.args(["example", name]),
            Kind::Bridge(bridge) => {
                command.args(["bridge", bridge.upstream.kind(), "--name", &bridge.name])
            }
        };
        command
            .args(["--registry", &self.registry])
            .env("TOOLMESH_TOKEN", &self.token)
            // Meant for `up` itself: examples listen on loopback port 0 and
            // register what they bind.
            .env_remove("TOOLMESH_ADVERTISE")
            .env_remove("TOOLMESH_HEALTH_LISTEN")
            .env_remove("TOOLMESH_ADMIN_LISTEN");
        if let Some(admin) = admin {
            command.args(["--admin-listen", &admin.to_string()]);
        }
        if !self.admin_allowed_hosts.is_empty() {
            command.args(["--admin-allowed-hosts", &self.admin_allowed_hosts.join(",")]);
        }
        if let Some(endpoint) = &self.otlp_endpoint {
            command.args(["--otlp-endpoint", endpoint]);
        }
        if let Kind::Bridge(bridge) = kind {
            match &bridge.upstream {
                UpUpstream::Mcp(server) => command.arg("--").args(server),
                UpUpstream::Grpc(target) => command.args(["--target", target]),
                UpUpstream::Openapi { spec, base_url } => {
                    command.args(["--spec", spec]);
                    command.args(base_url.iter().flat_map(|base| ["--base-url", base]))
                }
            };
        }
        Spawn::new(kind.label(), command)
            .parent_death(Some(ParentDeath {
                signal: libc::SIGTERM,
                arm: self.arm,
            }))
            .start()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    #[test]
    fn shell_words_are_quoted_only_when_needed() {
        assert_eq!(
            shell_word("./target/debug/toolmesh"),
            "./target/debug/toolmesh"
        );
        assert_eq!(shell_word("127.0.0.1:7272"), "127.0.0.1:7272");
        assert_eq!(shell_word("/tmp/my dir/ca.pem"), "'/tmp/my dir/ca.pem'");
        assert_eq!(shell_word("it's"), r"'it'\''s'");
        assert_eq!(shell_word(""), "''");
    }

    /// The default address needs no --server; any other does, before the
    /// subcommand, and grpcurl goes plaintext.
    #[test]
    fn try_lines_name_the_server_unless_default() {
        let plain = TlsFiles::default();
        let lines = try_lines("toolmesh", DEFAULT_SERVER, &plain);
        assert_eq!(lines[0], "toolmesh tools");
        assert_eq!(lines.len(), TRY.len());
        let lines = try_lines("toolmesh", "127.0.0.1:7272", &plain);
        assert_eq!(lines[0], "toolmesh --server 127.0.0.1:7272 tools");
        assert_eq!(
            grpcurl_line("127.0.0.1:7272", &plain),
            "grpcurl -plaintext 127.0.0.1:7272 list"
        );
    }

    /// With TLS the lines carry the CA, and for mTLS the certificate too.
    #[test]
    fn try_lines_carry_the_tls_files() {
        let tls = TlsFiles {
            ca: Some(PathBuf::from("/pki/ca.pem")),
            cert: Some(PathBuf::from("/pki/cert.pem")),
            key: Some(PathBuf::from("/pki/key.pem")),
            client_ca: None,
        };
        let lines = try_lines("toolmesh", "127.0.0.1:7272", &tls);
        assert_eq!(
            lines[0],
            "toolmesh --server 127.0.0.1:7272 --tls-ca /pki/ca.pem tools"
        );
        assert_eq!(
            grpcurl_line("127.0.0.1:7272", &tls),
            "grpcurl -cacert /pki/ca.pem 127.0.0.1:7272 list"
        );
        let mtls = TlsFiles {
            client_ca: Some(PathBuf::from("/pki/ca.pem")),
            ..tls
        };
        let lines = try_lines("toolmesh", DEFAULT_SERVER, &mtls);
        assert_eq!(
            lines[0],
            "toolmesh --tls-ca /pki/ca.pem --tls-cert /pki/cert.pem --tls-key /pki/key.pem tools"
        );
        assert!(
            grpcurl_line(DEFAULT_SERVER, &mtls).contains("-cert /pki/cert.pem -key /pki/key.pem")
        );
    }

    /// MCP and the admin page take the next ports unless --listen asks for
    /// port 0; the admin page `up` adds on its own stays on loopback.
    #[test]
    fn unasked_doors_take_the_next_ports() {
        let next_port = |listen: &str, by| {
            super::next_port(listen.parse().unwrap(), by).map(|addr| addr.to_string())
        };
        assert_eq!(
            next_port("127.0.0.1:7070", 1).as_deref(),
            Some("127.0.0.1:7071")
        );
        assert_eq!(
            next_port("127.0.0.1:7070", 2).as_deref(),
            Some("127.0.0.1:7072")
        );
        assert_eq!(next_port("127.0.0.1:0", 2).as_deref(), Some("127.0.0.1:0"));
        assert_eq!(next_port("127.0.0.1:65535", 1), None);
        assert_eq!(on_loopback("0.0.0.0:7072".into()), "127.0.0.1:7072");
        assert_eq!(on_loopback("10.1.2.3:7072".into()), "10.1.2.3:7072");
    }
}
