//! How the bench starts its processes (through `toolmesh-procs`: killed on
//! drop, and by the kernel if the bench itself dies), plus in-process tasks
//! aborted on drop and free ports.

use crate::error::BenchError;
use std::path::Path;
use std::time::Duration;
use tokio::task::JoinHandle;
pub(crate) use toolmesh_procs::{ArmParentDeath, ParentDeath, Proc, Spawn, Stderr, TempDir, tail};

/// How long a process may take to print its `listening on ADDR` line.
pub(crate) const READY_TIMEOUT: Duration = Duration::from_secs(30);

/// Which signal the kernel sends a child when the bench dies unexpectedly.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OnParentDeath {
    /// SIGKILL: for processes without children of their own.
    Kill,
    /// SIGTERM: for a master process (nginx) that must stop its workers.
    Terminate,
}

/// How a child is set up.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SpawnOptions {
    /// Put the child in a process group of its own and kill the whole group
    /// on drop (nginx: the master and its workers).
    pub(crate) own_group: bool,
    /// Signal on the bench's death.
    pub(crate) on_parent_death: OnParentDeath,
    /// The child's log filter (`TOOLMESH_LOG`).
    pub(crate) log: &'static str,
}

impl Default for SpawnOptions {
    fn default() -> Self {
        SpawnOptions {
            own_group: false,
            on_parent_death: OnParentDeath::Kill,
            log: "warn",
        }
    }
}

/// Starts `program args…` with stdout lines to wait on and stderr written
/// to `log_dir/<label>.log`. Child servers log at `warn` unless `options`
/// say otherwise, so their logging stays out of the measurement. `arm` sets the parent-death signal.
pub(crate) fn spawn(
    arm: Option<ArmParentDeath>,
    name: &str,
    program: &Path,
    args: &[&str],
    log_dir: &Path,
    options: SpawnOptions,
) -> Result<Proc, BenchError> {
    let mut command = tokio::process::Command::new(program);
    command.args(args).env("TOOLMESH_LOG", options.log);
    let signal = match options.on_parent_death {
        OnParentDeath::Kill => libc::SIGKILL,
        OnParentDeath::Terminate => libc::SIGTERM,
    };
    let mut spawn = Spawn::new(name, command)
        .stdout_lines()
        .stderr(Stderr::Log(
            log_dir.join(format!("{}.log", file_label(name))),
        ))
        .parent_death(arm.map(|arm| ParentDeath { signal, arm }));
    if options.own_group {
        spawn = spawn.own_group();
    }
    Ok(spawn.start()?)
}

/// Waiting for a bench child to be ready.
pub(crate) trait Ready {
    /// Waits for its `… listening on ADDR` line and returns `ADDR`.
    async fn listen_addr(&mut self) -> Result<String, BenchError>;
    /// Waits for its `… MCP listening on URL` line and returns `URL`.
    async fn mcp_url(&mut self) -> Result<String, BenchError>;
}

impl Ready for Proc {
    async fn listen_addr(&mut self) -> Result<String, BenchError> {
        Ok(self.address_async(READY_TIMEOUT).await?)
    }

    async fn mcp_url(&mut self) -> Result<String, BenchError> {
        let line = self
            .wait_line_async("MCP listening on ", READY_TIMEOUT)
            .await?;
        toolmesh_procs::parse_listen_line(&line)
            .map(str::to_owned)
            .ok_or_else(|| BenchError::failed("the MCP listening line", line.clone()))
    }
}

/// A name usable as a file name.
fn file_label(name: &str) -> String {
    name.chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect()
}

/// A spawned task aborted when dropped.
#[derive(Debug)]
pub(crate) struct AbortOnDrop<T>(pub(crate) JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// A free TCP port on 127.0.0.1 (bound, then released for a child to take).
pub(crate) fn free_port() -> Result<u16, BenchError> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")
        .map_err(|e| BenchError::io("find a free port on 127.0.0.1", e))?;
    listener
        .local_addr()
        .map(|a| a.port())
        .map_err(|e| BenchError::io("find a free port on 127.0.0.1", e))
}
