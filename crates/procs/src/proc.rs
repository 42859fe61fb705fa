//! One child process: started with [`Spawn`], its output lines awaited
//! (blocking or async), signalled, stopped, and killed on drop.

use crate::error::ProcError;
use rustix::process::{Pid, Signal, kill_process, kill_process_group};
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::{Mutex, mpsc};
use std::time::{Duration, Instant};
use tokio::process::{Child, Command};

/// Arms the kernel's parent-death signal on a command before it starts
/// (`prctl(PR_SET_PDEATHSIG)` in `pre_exec`, which is `unsafe`, so a binary
/// provides it).
pub type ArmParentDeath = fn(&mut Command, i32);

/// Which signal the kernel sends the child when the thread that started it
/// dies, and the hook that arranges it.
#[derive(Debug, Clone, Copy)]
pub struct ParentDeath {
    /// The signal (for example `SIGKILL`, or `SIGTERM` for a process that
    /// must stop children of its own).
    pub signal: i32,
    /// Arms it.
    pub arm: ArmParentDeath,
}

/// Where a child's stderr goes.
#[derive(Debug, Clone)]
pub enum Stderr {
    /// To this process' stderr.
    Inherit,
    /// Into the lines that can be awaited, and also to this process' stderr
    /// when `echo` is set.
    Lines {
        /// Copy each line to this process' stderr.
        echo: bool,
    },
    /// To this file (see [`Proc::log_tail`]).
    Log(PathBuf),
}

/// How to start a child.
#[derive(Debug)]
pub struct Spawn {
    name: String,
    command: Command,
    stdout_lines: bool,
    stderr: Stderr,
    own_group: bool,
    parent_death: Option<ParentDeath>,
}

impl Spawn {
    /// Starts `command` as the child called `name` (for messages), with
    /// stdin closed and stdout and stderr inherited until told otherwise.
    pub fn new(name: impl Into<String>, command: impl Into<Command>) -> Spawn {
        Spawn {
            name: name.into(),
            command: command.into(),
            stdout_lines: false,
            stderr: Stderr::Inherit,
            own_group: false,
            parent_death: None,
        }
    }

    /// Collects stdout lines to wait on (drained until EOF, so the child
    /// never blocks on a full pipe).
    pub fn stdout_lines(mut self) -> Spawn {
        self.stdout_lines = true;
        self
    }

    /// Where stderr goes.
    pub fn stderr(mut self, stderr: Stderr) -> Spawn {
        self.stderr = stderr;
        self
    }

    /// Puts the child in a process group of its own, signalled and killed
    /// as a whole (a master process and its workers).
    pub fn own_group(mut self) -> Spawn {
        self.own_group = true;
        self
    }

    /// Has the kernel signal the child should this process die first.
    pub fn parent_death(mut self, parent_death: Option<ParentDeath>) -> Spawn {
        self.parent_death = parent_death;
        self
    }

    /// Starts it. Must be called inside a tokio runtime.
    pub fn start(self) -> Result<Proc, ProcError> {
        let Spawn {
            name,
            mut command,
            stdout_lines,
            stderr,
            own_group,
            parent_death,
        } = self;
        let (stderr_stdio, log) = match &stderr {
            Stderr::Inherit => (Stdio::inherit(), None),
            Stderr::Lines { .. } => (Stdio::piped(), None),
            Stderr::Log(path) => {
                let file = std::fs::File::create(path).map_err(|source| ProcError::Io {
                    what: format!("create {}", path.display()),
                    source,
                })?;
                (Stdio::from(file), Some(path.clone()))
            }
        };
        command
            .stdin(Stdio::null())
            .stdout(if stdout_lines {
                Stdio::piped()
            } else {
                Stdio::inherit()
            })
            .stderr(stderr_stdio)
            .kill_on_drop(true);
        if own_group {
            command.process_group(0);
        }
        if let Some(ParentDeath { signal, arm }) = parent_death {
            arm(&mut command, signal);
        }
        let program = command.as_std().get_program().to_owned();
        let mut child = command.spawn().map_err(|source| ProcError::Spawn {
            what: format!("{name} ({})", Path::new(&program).display()),
            source,
        })?;
        let pid = child
            .id()
            .and_then(|id| i32::try_from(id).ok())
            .ok_or_else(|| ProcError::Spawn {
                what: name.clone(),
                source: std::io::Error::other("the child has no pid"),
            })?;
        let (tx, lines) = mpsc::channel();
        if let Some(stdout) = child.stdout.take() {
            forward(stdout.into_owned_fd(), tx.clone(), false);
        }
        if let (Some(stderr_pipe), Stderr::Lines { echo }) = (child.stderr.take(), stderr) {
            forward(stderr_pipe.into_owned_fd(), tx, echo);
        }
        Ok(Proc {
            name,
            child,
            pid,
            own_group,
            lines: Mutex::new(lines),
            seen: Mutex::new(Vec::new()),
            log,
            reaped: false,
        })
    }
}

/// Reads lines on a thread of its own, so waiting for one works whether or
/// not the caller blocks its async runtime.
fn forward(fd: std::io::Result<std::os::fd::OwnedFd>, tx: mpsc::Sender<String>, echo: bool) {
    let Ok(fd) = fd else { return };
    let reader = std::fs::File::from(fd);
    std::thread::spawn(move || {
        for line in BufReader::new(reader).lines() {
            let Ok(line) = line else { break };
            if echo {
                eprintln!("{line}");
            }
            if tx.send(line).is_err() {
                break;
            }
        }
    });
}

/// A child process, killed (with its group, if it has one) when dropped.
#[derive(Debug)]
pub struct Proc {
    name: String,
    child: Child,
    pid: i32,
    own_group: bool,
    lines: Mutex<mpsc::Receiver<String>>,
    seen: Mutex<Vec<String>>,
    log: Option<PathBuf>,
    reaped: bool,
}

/// How often the async waits look again.
const POLL: Duration = Duration::from_millis(2);

/// What the line receiver said.
enum Next {
    Line(String),
    Nothing,
    Closed,
}

impl Proc {
    /// The name it was started under.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its process id.
    pub fn pid(&self) -> i32 {
        self.pid
    }

    fn next(&self, wait: Option<Duration>) -> Next {
        let lines = self.lines.lock().unwrap_or_else(|e| e.into_inner());
        let received = match wait {
            Some(wait) => lines.recv_timeout(wait).map_err(|e| match e {
                mpsc::RecvTimeoutError::Timeout => Next::Nothing,
                mpsc::RecvTimeoutError::Disconnected => Next::Closed,
            }),
            None => lines.try_recv().map_err(|e| match e {
                mpsc::TryRecvError::Empty => Next::Nothing,
                mpsc::TryRecvError::Disconnected => Next::Closed,
            }),
        };
        match received {
            Ok(line) => Next::Line(line),
            Err(next) => next,
        }
    }

    /// A line seen before that contains `needle`, or the next one taken
    /// that does (every line taken is remembered).
    fn take(&self, needle: &str, wait: Option<Duration>) -> Result<Option<String>, ()> {
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(line) = seen.iter().find(|l| l.contains(needle)) {
            return Ok(Some(line.clone()));
        }
        loop {
            match self.next(wait) {
                Next::Line(line) => {
                    seen.push(line.clone());
                    if line.contains(needle) {
                        return Ok(Some(line));
                    }
                }
                Next::Nothing => return Ok(None),
                Next::Closed => return Err(()),
            }
        }
    }

    fn timeout(&self, needle: &str, timeout: Duration) -> ProcError {
        let log = self
            .log
            .as_ref()
            .map_or(String::new(), |_| format!(" (log: {})", self.log_tail()));
        ProcError::Timeout {
            what: format!("{} to print {needle:?}{log}", self.name),
            timeout,
        }
    }

    /// Waits, blocking this thread, for an output line containing `needle`.
    pub fn wait_line(&self, needle: &str, timeout: Duration) -> Result<String, ProcError> {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.take(needle, Some(left)) {
                Ok(Some(line)) => return Ok(line),
                Ok(None) if left.is_zero() => return Err(self.timeout(needle, timeout)),
                Ok(None) => {}
                Err(()) => return Err(self.gone()),
            }
        }
    }

    /// Waits, without blocking the runtime, for an output line containing `needle`.
    pub async fn wait_line_async(
        &mut self,
        needle: &str,
        timeout: Duration,
    ) -> Result<String, ProcError> {
        let deadline = Instant::now() + timeout;
        loop {
            match self.take(needle, None) {
                Ok(Some(line)) => return Ok(line),
                Ok(None) if Instant::now() >= deadline => {
                    return Err(self.timeout(needle, timeout));
                }
                Ok(None) => tokio::time::sleep(POLL).await,
                Err(()) => return Err(self.exited().await),
            }
        }
    }

    /// Every output line the waits have read so far, in order: wait for the
    /// last line of interest first, then read those before it here.
    pub fn lines_read(&self) -> Vec<String> {
        self.seen.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The address from its `… listening on ADDR` line, blocking.
    pub fn address(&self, timeout: Duration) -> Result<String, ProcError> {
        let line = self.wait_line("listening on ", timeout)?;
        self.address_in(&line)
    }

    /// The address from its `… listening on ADDR` line, async.
    pub async fn address_async(&mut self, timeout: Duration) -> Result<String, ProcError> {
        let line = self.wait_line_async("listening on ", timeout).await?;
        self.address_in(&line)
    }

    fn address_in(&self, line: &str) -> Result<String, ProcError> {
        parse_listen_line(line)
            .map(str::to_owned)
            .ok_or_else(|| ProcError::Exited {
                what: self.name.clone(),
                status: format!("printed {line:?}, which names no address"),
                log: String::new(),
            })
    }

    /// The error for a child whose output ended, without waiting.
    fn gone(&self) -> ProcError {
        ProcError::Exited {
            what: self.name.clone(),
            status: "its output ended".to_owned(),
            log: self.log_tail(),
        }
    }

    /// The error for a child that went away, with its exit status and the
    /// end of its log.
    pub async fn exited(&mut self) -> ProcError {
        let status = match self.wait_timeout(Duration::from_secs(2)).await {
            Some(status) => status.to_string(),
            None => "output closed, still running".to_owned(),
        };
        ProcError::Exited {
            what: self.name.clone(),
            status,
            log: self.log_tail(),
        }
    }

    /// Its exit status if it has exited (reaping it), without waiting.
    pub fn try_exit(&mut self) -> Option<ExitStatus> {
        let status = self.child.try_wait().ok().flatten();
        self.reaped |= status.is_some();
        status
    }

    /// Whether it is still running.
    pub fn alive(&mut self) -> bool {
        self.try_exit().is_none()
    }

    /// Waits, blocking, up to `timeout` for it to exit.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.try_exit() {
                return Some(status);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Waits, async, up to `timeout` for it to exit.
    pub async fn wait_timeout(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let status = tokio::time::timeout(timeout, self.child.wait())
            .await
            .ok()
            .and_then(Result::ok);
        self.reaped |= status.is_some();
        status
    }

    /// Sends `signal` to it (or its group). A reaped child is not signalled:
    /// its pid may be reused; a group id is not reused while any member lives.
    pub fn signal(&self, signal: i32) {
        let (Some(pid), Some(signal)) = (Pid::from_raw(self.pid), Signal::from_named_raw(signal))
        else {
            return;
        };
        let _ = match (self.own_group, self.reaped) {
            (true, _) => kill_process_group(pid, signal),
            (false, false) => kill_process(pid, signal),
            (false, true) => return,
        };
    }

    /// SIGKILL now (the moment a freshness measurement starts from).
    pub fn kill_now(&self) {
        self.signal(Signal::KILL.as_raw());
    }

    /// SIGKILL and reap, blocking.
    pub fn kill_blocking(&mut self) {
        self.kill_now();
        self.wait_exit(Duration::from_secs(5));
    }

    /// SIGKILL (the group too) and reap.
    pub async fn kill_and_reap(&mut self) {
        self.kill_now();
        self.wait_timeout(Duration::from_secs(5)).await;
    }

    /// Asks it to stop with `signal`, waits up to `grace`, then kills it
    /// (and its group) and reaps it.
    pub async fn stop(mut self, signal: i32, grace: Duration) {
        self.signal(signal);
        self.wait_timeout(grace).await;
        self.kill_and_reap().await;
    }

    /// The last lines of its stderr log, if it writes one.
    pub fn log_tail(&self) -> String {
        match &self.log {
            Some(log) => tail(log, 2048),
            None => "(not logged to a file)".to_owned(),
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        // A stopped process must continue to die; then the group (nginx
        // workers) or the unreaped child. `kill_on_drop` makes tokio reap it.
        self.signal(Signal::CONT.as_raw());
        self.kill_now();
    }
}

/// `ADDR` from a `… listening on ADDR` line.
pub fn parse_listen_line(line: &str) -> Option<&str> {
    let (_, addr) = line.rsplit_once("listening on ")?;
    let addr = addr.trim();
    (!addr.is_empty() && !addr.contains(char::is_whitespace)).then_some(addr)
}

/// The last `max` bytes of a file, lossily decoded, starting at a line.
pub fn tail(path: &Path, max: u64) -> String {
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

    /// Lines from stdout and stderr can be awaited, seen lines are found
    /// again, and a dropped child is gone.
    #[tokio::test]
    async fn lines_and_drop() {
        let mut command = std::process::Command::new("sh");
        command.args([
            "-c",
            "echo out; echo err >&2; echo 'x listening on 1.2.3.4:5'; sleep 30",
        ]);
        let mut proc = Spawn::new("sh", command)
            .stdout_lines()
            .stderr(Stderr::Lines { echo: false })
            .start()
            .unwrap();
        assert_eq!(
            proc.wait_line("err", Duration::from_secs(5)).unwrap(),
            "err"
        );
        assert_eq!(proc.address(Duration::from_secs(5)).unwrap(), "1.2.3.4:5");
        assert_eq!(
            proc.address_async(Duration::from_secs(5)).await.unwrap(),
            "1.2.3.4:5"
        );
        assert!(proc.wait_line("never", Duration::from_millis(50)).is_err());
        assert!(proc.alive());
        proc.kill_and_reap().await;
        assert!(!proc.alive());
    }
}
