//! `toolmesh up`: registry and dispatcher in this process, each example
//! executor as its own OS process, until ctrl-c.

use crate::args::UpArgs;
use crate::server::{self, Role};
use anyhow::Context;
use std::process::Stdio;
use std::time::{Duration, Instant};
use tokio::process::{Child, Command};

/// How long `up` waits for the examples' tools to become callable.
const READY_TIMEOUT: Duration = Duration::from_secs(30);

pub(crate) async fn run(args: UpArgs) -> anyhow::Result<()> {
    let started = Instant::now();
    let role = Role::Serve {
        default_ttl: Duration::from_millis(args.serve.default_ttl_ms),
    };
    let running = server::start(role, &args.serve.server).await?;
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
        let child = spawn_example(&exe, name, &addr)
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
    println!("Try, in another terminal:");
    println!("  toolmesh tools");
    println!("  toolmesh tools --format openai");
    println!("  toolmesh call search_kb '{{\"query\": \"reset password\"}}'");
    println!("  toolmesh call get_user_info '{{\"user_id\": \"u_9\"}}'");
    println!(
        "  toolmesh call create_ticket '{{\"title\": \"Printer on fire\", \"body\": \"3rd floor\", \"priority\": \"soon\"}}'"
    );
    println!("  toolmesh health search_kb");
    println!("  toolmesh snapshot");
    println!("  grpcurl -plaintext {addr} list");
    println!("\nPress ctrl-c to stop.");

    toolmesh::grpc::shutdown_signal().await;
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
    running.stop(grace).await
}

fn spawn_example(exe: &std::path::Path, name: &str, registry: &str) -> std::io::Result<Child> {
    let mut command = Command::new(exe);
    command
        .args(["example", name, "--registry", registry])
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
