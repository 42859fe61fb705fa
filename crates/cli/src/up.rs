//! `toolmesh up`: registry and dispatcher in this process, each example
//! executor as its own OS process, until ctrl-c.

use crate::args::UpArgs;
use anyhow::Context;
use std::process::Stdio;
use std::time::{Duration, Instant};
use tokio::process::{Child, Command};
use toolmesh_node::Role;

/// How often `up` looks for example executors that died.
const RESTART_CHECK: Duration = Duration::from_secs(1);

/// How long `up` waits for the examples' tools to become callable.
const READY_TIMEOUT: Duration = Duration::from_secs(30);

pub(crate) async fn run(args: UpArgs, tls: &toolmesh::grpc::Tls) -> anyhow::Result<()> {
    let started = Instant::now();
    let role = Role::Serve {
        default_ttl: Duration::from_millis(args.serve.default_ttl_ms),
    };
    // Examples register with a token made for this run; nothing else may
    // register under their owner.
    let token = format!("dev-{}", uuid::Uuid::new_v4().simple());
    let config = toolmesh_node::NodeConfig {
        dev_executor_token: Some(token.clone()),
        ..args.serve.server.node_config(tls)
    };
    let running = toolmesh_node::start(role, &config).await?;
    let addr = running.addr.to_string();
    let exe =
        std::env::current_exe().context("cannot find the toolmesh binary to start examples")?;
    let mut children: Vec<(String, Child)> = Vec::new();
    for name in &args.examples {
        if toolmesh_examples::example(name, &Default::default()).is_none() {
            anyhow::bail!(
                "unknown example {name:?}; choose from {}",
                toolmesh_examples::EXAMPLE_NAMES.join(", ")
            );
        }
        let child = spawn_example(&exe, name, &addr, &token, tls.files())
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
    for (name, child) in &children {
        println!(
            "  executor {name:<13} pid {}",
            child.id().unwrap_or_default()
        );
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
            if let Ok(Some(status)) = child.try_wait() {
                tracing::warn!(example = %name, %status, "example executor exited; starting it again");
                match spawn_example(&exe, name, &addr, &token, tls.files()) {
                    Ok(again) => *child = again,
                    Err(e) => tracing::error!(example = %name, error = %e, "cannot start it again"),
                }
            }
        }
    }
    println!("stopping: draining executors, then the server");
    for (_, child) in &children {
        if let Some(pid) = child.id() {
            // SIGTERM lets each executor deregister and drain.
            unsafe { libc::kill(pid as i32, libc::SIGTERM) };
        }
    }
    let grace = Duration::from_millis(args.serve.server.grace_ms);
    for (name, mut child) in children {
        if tokio::time::timeout(grace, child.wait()).await.is_err() {
            tracing::warn!(example = %name, "did not stop in time; killing it");
            let _ = child.kill().await;
        }
    }
    Ok(running.stop(grace).await?)
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

fn spawn_example(
    exe: &std::path::Path,
    name: &str,
    registry: &str,
    token: &str,
    tls: &toolmesh::grpc::TlsFiles,
) -> std::io::Result<Child> {
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
        .stdin(Stdio::null())
        .kill_on_drop(true);
    #[cfg(target_os = "linux")]
    unsafe {
        // The examples die with `up`, even if `up` is killed with SIGKILL.
        command.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
            Ok(())
        });
    }
    command.spawn()
}
