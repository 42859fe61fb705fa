//! `toolmesh up`: registry and dispatcher in this process, each example
//! executor as its own OS process, until ctrl-c.

use crate::args::UpArgs;
use anyhow::Context;
use std::time::{Duration, Instant};
use tokio::process::Command;
use toolmesh_node::Role;
use toolmesh_procs::{ArmParentDeath, ParentDeath, Proc, Spawn};

/// How often `up` looks for example executors that died.
const RESTART_CHECK: Duration = Duration::from_secs(1);

/// How long `up` waits for the examples' tools to become callable.
const READY_TIMEOUT: Duration = Duration::from_secs(30);

pub(crate) async fn run(
    args: UpArgs,
    tls: &toolmesh::grpc::Tls,
    arm: ArmParentDeath,
) -> anyhow::Result<()> {
    let started = Instant::now();
    let role = Role::Serve {
        default_ttl: Duration::from_millis(args.serve.default_ttl_ms),
    };
    // Examples register with a token made for this run; nothing else may
    // register under their owner.
    let token = format!("dev-{}", uuid::Uuid::new_v4().simple());
    let mut config = toolmesh_node::NodeConfig {
        dev_executor_token: Some(token.clone()),
        ..args.serve.node_config(tls)
    };
    if args.serve.server.mcp_listen.is_none() {
        config.mcp_listen = default_mcp_listen(&config.listen);
    }
    let running = toolmesh_node::start(role, &config).await?;
    let addr = running.addr.to_string();
    let exe =
        std::env::current_exe().context("cannot find the toolmesh binary to start examples")?;
    let mut children: Vec<(String, Proc)> = Vec::new();
    for name in &args.examples {
        if toolmesh_examples::example(name, &Default::default()).is_none() {
            anyhow::bail!(
                "unknown example {name:?}; choose from {}",
                toolmesh_examples::EXAMPLE_NAMES.join(", ")
            );
        }
        let child = spawn_example(&exe, name, &addr, &token, tls.files(), arm)
            .with_context(|| format!("cannot start example executor {name}"))?;
        children.push((name.clone(), child));
    }
    let dispatcher = running
        .dispatcher
        .clone()
        .context("serve always runs a dispatcher")?;
    let expected = args.examples.len();
    let ready = loop {
        let snapshot = dispatcher.current_snapshot();
        let services: std::collections::HashSet<&str> = snapshot
            .entries()
            .filter(|e| e.exposed())
            .flat_map(|e| e.instances.iter().map(|i| &*i.service))
            .collect();
        if services.len() >= expected {
            break true;
        }
        if started.elapsed() > READY_TIMEOUT {
            break false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let tools = dispatcher.current_snapshot().name_count();
    println!("toolmesh is up in {} ms", started.elapsed().as_millis());
    println!("  registry + dispatcher  {addr}  (grpc.health.v1, reflection)");
    if let Some(url) = running.mcp_url() {
        println!(
            "  MCP (Streamable HTTP)  {url}  (stdio: {} mcp --server {addr})",
            command_name(&exe)
        );
    }
    for (name, child) in &children {
        println!("  executor {name:<13} pid {}", child.pid());
    }
    if !ready {
        println!(
            "  warning: not every example registered within {READY_TIMEOUT:?}; see the logs above"
        );
    }
    println!("  {tools} tools registered\n");
    let me = command_name(&exe);
    let server = if addr == "127.0.0.1:7070" {
        String::new()
    } else {
        format!(" --server {addr}")
    };
    println!("Try, in another terminal:");
    for example in [
        "tools",
        "tools --format openai",
        r#"call search_kb '{"query": "reset password"}'"#,
        r#"call get_user_info '{"user_id": "u_9"}'"#,
        r#"call --stream export_report '{"topic": "billing"}'"#,
        r#"call create_ticket '{"title": "Printer on fire", "body": "3rd floor", "priority": "soon"}'"#,
        "health search_kb",
        "snapshot",
    ] {
        println!("  {me}{server} {example}");
    }
    println!("  grpcurl -plaintext {addr} list");
    println!("\nPress ctrl-c to stop.");

    // Until ctrl-c: an example that dies is started again.
    let mut shutdown = std::pin::pin!(toolmesh::grpc::shutdown_signal());
    loop {
        tokio::select! {
            _ = &mut shutdown => break,
            _ = tokio::time::sleep(RESTART_CHECK) => {}
        }
        for (name, child) in children.iter_mut() {
            if let Some(status) = child.try_exit() {
                tracing::warn!(example = %name, %status, "example executor exited; starting it again");
                match spawn_example(&exe, name, &addr, &token, tls.files(), arm) {
                    Ok(again) => *child = again,
                    Err(e) => tracing::error!(example = %name, error = %e, "cannot start it again"),
                }
            }
        }
    }
    println!("stopping: draining executors, then the server");
    for (_, child) in &children {
        // SIGTERM lets each executor deregister and drain.
        child.signal(libc::SIGTERM);
    }
    let grace = Duration::from_millis(args.serve.server.grace_ms);
    for (name, mut child) in children {
        if child.wait_timeout(grace).await.is_none() {
            tracing::warn!(example = %name, "did not stop in time; killing it");
            child.kill_and_reap().await;
        }
    }
    Ok(running.stop(grace).await?)
}

/// Where `up` serves MCP when not told: the --listen port + 1 on the same
/// host (port 0 stays 0, so tests get a free port for both).
fn default_mcp_listen(listen: &str) -> Option<String> {
    let addr = toolmesh::grpc::listen_address(listen).ok()?;
    let port = match addr.port() {
        0 => 0,
        port => port.checked_add(1)?,
    };
    Some(std::net::SocketAddr::new(addr.ip(), port).to_string())
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

/// Starts `toolmesh example NAME` registering with `registry`, its output
/// on this terminal; it gets SIGTERM should `up` die, even by SIGKILL.
fn spawn_example(
    exe: &std::path::Path,
    name: &str,
    registry: &str,
    token: &str,
    tls: &toolmesh::grpc::TlsFiles,
    arm: ArmParentDeath,
) -> Result<Proc, toolmesh_procs::ProcError> {
    let mut command = Command::new(exe);
    // The examples speak TLS exactly as `up` does.
    for (var, file) in [
        ("TOOLMESH_TLS_CA", &tls.ca),
        ("TOOLMESH_TLS_CERT", &tls.cert),
        ("TOOLMESH_TLS_KEY", &tls.key),
        ("TOOLMESH_TLS_CLIENT_CA", &tls.client_ca),
    ] {
        if let Some(file) = file {
            command.env(var, file);
        }
    }
    command
        .args(["example", name, "--registry", registry])
        .env("TOOLMESH_TOKEN", token)
        // Meant for `up` itself: examples listen on loopback port 0 and
        // register what they bind.
        .env_remove("TOOLMESH_ADVERTISE")
        .env_remove("TOOLMESH_HEALTH_LISTEN");
    Spawn::new(format!("example {name}"), command)
        .parent_death(Some(ParentDeath {
            signal: libc::SIGTERM,
            arm,
        }))
        .start()
}
