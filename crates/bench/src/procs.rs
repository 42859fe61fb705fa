//! Guards for everything the bench starts: child processes killed on drop
//! (and by the kernel if the bench itself dies), temporary directories
//! removed on drop, and in-process tasks aborted on drop.

use crate::error::BenchError;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

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
}

impl Default for SpawnOptions {
    fn default() -> Self {
        SpawnOptions {
            own_group: false,
            on_parent_death: OnParentDeath::Kill,
        }
    }
}

/// A child process that is killed (with its process group, if it has one)
/// when dropped, whose stdout lines can be awaited and whose stderr goes to
/// a log file.
#[derive(Debug)]
pub(crate) struct Proc {
    name: String,
    child: Child,
    pid: i32,
    own_group: bool,
    lines: mpsc::UnboundedReceiver<String>,
    log: PathBuf,
    reaped: bool,
}

impl Proc {
    /// Starts `program args…` with stdout piped and stderr written to
    /// `log_dir/<label>.log`. Child servers log at `warn` so their logging
    /// stays out of the measurement.
    pub(crate) fn spawn(
        name: &str,
        program: &Path,
        args: &[&str],
        log_dir: &Path,
        options: SpawnOptions,
    ) -> Result<Proc, BenchError> {
        let log = log_dir.join(format!("{}.log", file_label(name)));
        let stderr = std::fs::File::create(&log)
            .map_err(|e| BenchError::io(format!("create {}", log.display()), e))?;
        let mut command = Command::new(program);
        command
            .args(args)
            .env("TOOLMESH_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(stderr))
            .kill_on_drop(true);
        if options.own_group {
            command.process_group(0);
        }
        set_parent_death_signal(&mut command, options.on_parent_death);
        let mut child = command.spawn().map_err(|source| BenchError::Spawn {
            what: format!("{name} ({})", program.display()),
            source,
        })?;
        let pid = child
            .id()
            .and_then(|id| i32::try_from(id).ok())
            .ok_or_else(|| BenchError::failed(format!("start {name}"), "the child has no pid"))?;
        let (tx, lines) = mpsc::unbounded_channel();
        if let Some(stdout) = child.stdout.take() {
            // Keeps draining stdout until EOF so the child never blocks on a full pipe.
            tokio::spawn(async move {
                let mut reader = BufReader::new(stdout).lines();
                while let Ok(Some(line)) = reader.next_line().await {
                    let _ = tx.send(line);
                }
            });
        }
        Ok(Proc {
            name: name.to_owned(),
            child,
            pid,
            own_group: options.own_group,
            lines,
            log,
            reaped: false,
        })
    }

    /// Waits for its `… listening on ADDR` line and returns `ADDR`.
    pub(crate) async fn listen_addr(&mut self) -> Result<String, BenchError> {
        let line = self.wait_for_line("listening on ", READY_TIMEOUT).await?;
        parse_listen_line(&line).map(str::to_owned).ok_or_else(|| {
            BenchError::failed(
                format!("read the address of {}", self.name),
                format!("cannot parse {line:?}"),
            )
        })
    }

    /// Waits for a stdout line containing `needle`.
    pub(crate) async fn wait_for_line(
        &mut self,
        needle: &str,
        timeout: Duration,
    ) -> Result<String, BenchError> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            match tokio::time::timeout_at(deadline, self.lines.recv()).await {
                Ok(Some(line)) if line.contains(needle) => return Ok(line),
                Ok(Some(_)) => {}
                Ok(None) => return Err(self.exited().await),
                Err(_) => {
                    return Err(BenchError::Timeout {
                        what: format!(
                            "{} to print {needle:?} (log: {})",
                            self.name,
                            self.log_tail()
                        ),
                        timeout,
                    });
                }
            }
        }
    }

    /// Whether it has exited (reaping it if so).
    pub(crate) fn has_exited(&mut self) -> bool {
        let exited = matches!(self.child.try_wait(), Ok(Some(_)));
        self.reaped |= exited;
        exited
    }

    /// The error for a child that went away, with the end of its log.
    pub(crate) async fn exited(&mut self) -> BenchError {
        let status = match tokio::time::timeout(Duration::from_secs(2), self.child.wait()).await {
            Ok(Ok(status)) => status.to_string(),
            Ok(Err(e)) => format!("unknown status: {e}"),
            Err(_) => "stdout closed, still running".to_owned(),
        };
        BenchError::Exited {
            what: self.name.clone(),
            status,
            log: self.log_tail(),
        }
    }

    /// Sends SIGKILL now (the moment a freshness measurement starts from).
    pub(crate) fn kill_now(&mut self) {
        self.signal(libc::SIGKILL);
    }

    /// Sends `signal` to the process (or its group).
    pub(crate) fn signal(&self, signal: i32) {
        // A reaped pid may be reused; a group id is not reused while any
        // member (an nginx worker) lives.
        let target = match (self.own_group, self.reaped) {
            (true, _) => -self.pid,
            (false, false) => self.pid,
            (false, true) => return,
        };
        // SAFETY: kill(2) has no memory-safety preconditions; the target is
        // our own unreaped child, or its process group.
        unsafe {
            libc::kill(target, signal);
        }
    }

    /// Asks it to stop with `signal`, waits up to `grace`, then kills it
    /// (and its group) and reaps it.
    pub(crate) async fn stop(mut self, signal: i32, grace: Duration) {
        self.signal(signal);
        let _ = tokio::time::timeout(grace, self.child.wait()).await;
        self.kill_and_reap().await;
    }

    /// SIGKILL (group too) and wait for the exit.
    pub(crate) async fn kill_and_reap(&mut self) {
        self.signal(libc::SIGKILL);
        if let Ok(Ok(_)) = tokio::time::timeout(Duration::from_secs(5), self.child.wait()).await {
            self.reaped = true;
        }
    }

    /// The last lines of its stderr log.
    pub(crate) fn log_tail(&self) -> String {
        tail(&self.log, 2048)
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        // The group (nginx workers) or the unreaped child; `kill_on_drop`
        // then makes tokio reap it.
        self.signal(libc::SIGKILL);
    }
}

/// Asks the kernel to signal the child when the thread that spawned it
/// dies. Tokio's worker threads live as long as the runtime, so this covers
/// the bench being killed or aborting; drop guards cover everything else.
fn set_parent_death_signal(command: &mut Command, on_death: OnParentDeath) {
    #[cfg(target_os = "linux")]
    {
        let signal = match on_death {
            OnParentDeath::Kill => libc::SIGKILL,
            OnParentDeath::Terminate => libc::SIGTERM,
        };
        // SAFETY: getpid is async-signal-safe.
        let parent = unsafe { libc::getpid() };
        // SAFETY: the closure runs between fork and exec and only calls
        // async-signal-safe functions (prctl, getppid).
        unsafe {
            command.pre_exec(move || {
                if libc::prctl(libc::PR_SET_PDEATHSIG, signal) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                if libc::getppid() != parent {
                    return Err(std::io::Error::other("the bench exited while starting"));
                }
                Ok(())
            });
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (command, on_death);
}

/// `ADDR` from a `… listening on ADDR` line.
pub(crate) fn parse_listen_line(line: &str) -> Option<&str> {
    let (_, addr) = line.rsplit_once("listening on ")?;
    let addr = addr.trim();
    (!addr.is_empty() && !addr.contains(char::is_whitespace)).then_some(addr)
}

/// A name usable as a file name.
fn file_label(name: &str) -> String {
    name.chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect()
}

/// The last `max` bytes of a file, lossily decoded, starting at a line.
pub(crate) fn tail(path: &Path, max: u64) -> String {
    let read = || -> std::io::Result<String> {
        let mut file = std::fs::File::open(path)?;
        let len = file.metadata()?.len();
        file.seek(SeekFrom::Start(len.saturating_sub(max)))?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes)?;
        let text = String::from_utf8_lossy(&bytes).into_owned();
        Ok(if len > max {
            text.split_once('\n')
                .map_or(text.clone(), |(_, rest)| rest.to_owned())
        } else {
            text
        })
    };
    match read() {
        Ok(text) if text.trim().is_empty() => "(empty)".to_owned(),
        Ok(text) => text.trim_end().to_owned(),
        Err(e) => format!("(cannot read {}: {e})", path.display()),
    }
}

/// A directory under the system temp dir, removed with everything in it on drop.
#[derive(Debug)]
pub(crate) struct TempDir(PathBuf);

impl TempDir {
    /// Creates `toolmesh-bench-<label>-<pid>-<unique>`.
    pub(crate) fn new(label: &str) -> Result<TempDir, BenchError> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let path = std::env::temp_dir().join(format!(
            "toolmesh-bench-{label}-{}-{}-{nanos}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&path)
            .map_err(|e| BenchError::io(format!("create {}", path.display()), e))?;
        Ok(TempDir(path))
    }

    /// Its path.
    pub(crate) fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The address is the last word of the line every toolmesh server prints.
    #[test]
    fn listen_lines() {
        assert_eq!(
            parse_listen_line("toolmesh registry+dispatcher listening on 127.0.0.1:4242"),
            Some("127.0.0.1:4242")
        );
        assert_eq!(
            parse_listen_line("toolmesh example acceptance (acceptance-1f) listening on [::1]:9 "),
            Some("[::1]:9")
        );
        assert_eq!(parse_listen_line("listening on "), None);
        assert_eq!(parse_listen_line("ready"), None);
    }

    /// A temp dir disappears with its guard.
    #[test]
    fn temp_dir_is_removed() {
        let dir = TempDir::new("unit").unwrap();
        let path = dir.path().to_owned();
        std::fs::write(path.join("f"), b"x").unwrap();
        drop(dir);
        assert!(!path.exists());
    }
}
