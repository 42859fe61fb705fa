//! Shared helpers for the end-to-end tests: the `toolmesh` binary, real OS
//! processes on 127.0.0.1 port 0, gRPC clients, and polling instead of sleeps.
#![allow(dead_code, unused_imports, unreachable_pub, missing_docs)]

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, mpsc};
use std::time::{Duration, Instant};
use tonic::transport::Channel;
use toolmesh::pb::{
    CallContext, InvokeRequest, InvokeResponse, ListToolsRequest, ToolFormat,
    dispatcher_client::DispatcherClient,
};
pub use toolmesh_testkit::{
    TempDir, eventually, example_bin, fixture_bin, toolmesh_bin, with_token,
};

/// A child process that is killed when dropped, with its stdout lines
/// available to wait on.
pub struct Proc {
    pub name: String,
    child: Child,
    lines: mpsc::Receiver<String>,
    seen: Mutex<Vec<String>>,
}

impl Proc {
    /// Starts `toolmesh ARGS…`.
    pub fn toolmesh(name: &str, args: &[&str]) -> Proc {
        Proc::spawn(name, Command::new(toolmesh_bin()).args(args))
    }

    pub fn spawn(name: &str, command: &mut Command) -> Proc {
        let mut child = command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("start {name}: {e}"));
        let stdout = child.stdout.take().expect("piped stdout");
        let stderr = child.stderr.take().expect("piped stderr");
        let (tx, lines) = mpsc::channel();
        let echo = std::env::var_os("TOOLMESH_TEST_LOGS").is_some();
        let forward =
            |reader: Box<dyn std::io::Read + Send>, tx: mpsc::Sender<String>, echo: bool| {
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
            };
        forward(Box::new(stdout), tx.clone(), false);
        forward(Box::new(stderr), tx, echo);
        Proc {
            name: name.to_owned(),
            child,
            lines,
            seen: Mutex::new(Vec::new()),
        }
    }

    /// Waits for a line of its output (stdout or logs) containing `needle`.
    pub fn wait_for_line(&self, needle: &str, timeout: Duration) -> String {
        let deadline = Instant::now() + timeout;
        if let Some(line) = self
            .seen
            .lock()
            .unwrap()
            .iter()
            .find(|l| l.contains(needle))
        {
            return line.clone();
        }
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    self.seen.lock().unwrap().push(line.clone());
                    if line.contains(needle) {
                        return line;
                    }
                }
                Err(_) => panic!(
                    "{}: no line containing {needle:?} within {timeout:?}",
                    self.name
                ),
            }
        }
    }

    /// The address from its "listening on ADDR" line.
    pub fn listen_addr(&self) -> String {
        let line = self.wait_for_line("listening on ", Duration::from_secs(30));
        line.rsplit("listening on ")
            .next()
            .unwrap()
            .trim()
            .to_owned()
    }

    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    pub fn signal(&self, signal: i32) {
        unsafe { libc::kill(self.pid(), signal) };
    }

    /// SIGKILL and reap.
    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Whether it is still running.
    pub fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Waits for it to exit, up to `timeout`; its exit code if it did.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<std::process::ExitStatus> {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        None
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        // SIGCONT first so a stopped process can die.
        self.signal(libc::SIGCONT);
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `toolmesh serve` on a free port.
pub fn serve(extra: &[&str]) -> (Proc, String) {
    let mut args = vec!["serve", "--listen", "127.0.0.1:0"];
    args.extend_from_slice(extra);
    let proc = Proc::toolmesh("serve", &args);
    let addr = proc.listen_addr();
    (proc, addr)
}

/// `toolmesh ARGS…` started again on the port a killed process held
/// (retrying while the kernel frees it); `args` carry `--listen ADDR`.
pub fn restart_on(name: &str, args: &[&str]) -> Proc {
    for _ in 0..50 {
        let mut proc = Proc::toolmesh(name, args);
        if proc.wait_exit(Duration::from_millis(300)).is_none() {
            proc.listen_addr();
            return proc;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("{name} could not start again with {args:?}");
}

/// `toolmesh example NAME --registry ADDR …`, started and listening; the
/// test fixtures (`acceptance`) run from `toolmesh-fixture` with the same
/// command line.
pub fn example(name: &str, registry: &str, extra: &[&str]) -> Proc {
    let mut args = vec!["example", name, "--registry", registry];
    args.extend_from_slice(extra);
    let proc = Proc::spawn(
        &format!("example {name}"),
        Command::new(example_bin(name)).args(&args),
    );
    proc.listen_addr();
    proc
}

/// The acceptance executor's tools.
pub const ACCEPTANCE_TOOLS: [&str; 4] = ["acc_charge", "acc_echo", "acc_panic", "acc_sleep"];

/// `toolmesh serve` plus the acceptance executor, its tools listed.
pub struct Acceptance {
    pub serve: Proc,
    pub exec: Proc,
    pub addr: String,
    pub client: DispatcherClient<Channel>,
}

/// Starts [`Acceptance`] with extra `serve` and `example` arguments.
pub async fn acceptance(serve_args: &[&str], exec_args: &[&str]) -> Acceptance {
    let (serve, addr) = serve(serve_args);
    let exec = example("acceptance", &addr, exec_args);
    let mut client = dispatcher(&addr);
    until_listed(&mut client, &ACCEPTANCE_TOOLS, Duration::from_secs(10)).await;
    Acceptance {
        serve,
        exec,
        addr,
        client,
    }
}

/// A client for the dispatcher at `addr`.
pub fn dispatcher(addr: &str) -> DispatcherClient<Channel> {
    DispatcherClient::new(
        toolmesh::grpc::channel(addr, &toolmesh::grpc::Tls::none()).expect("valid address"),
    )
}

/// Names listed by ListTools, or None if the call failed.
pub async fn listed(client: &mut DispatcherClient<Channel>) -> Option<Vec<String>> {
    let response = client
        .list_tools(ListToolsRequest {
            format: ToolFormat::Native as i32,
            ..Default::default()
        })
        .await
        .ok()?;
    Some(
        response
            .into_inner()
            .tools
            .into_iter()
            .map(|t| t.name)
            .collect(),
    )
}

/// Waits until ListTools shows every name in `names`.
pub async fn until_listed(
    client: &mut DispatcherClient<Channel>,
    names: &[&str],
    timeout: Duration,
) {
    eventually(&format!("{names:?} listed"), timeout, || {
        let mut client = client.clone();
        async move {
            let listed = listed(&mut client).await?;
            names
                .iter()
                .all(|n| listed.iter().any(|l| l == n))
                .then_some(())
        }
    })
    .await
}

/// Invokes `tool` with `arguments`, optionally with a deadline.
pub async fn invoke(
    client: &mut DispatcherClient<Channel>,
    tool: &str,
    arguments: &str,
    timeout: Option<Duration>,
) -> InvokeResponse {
    let mut request = tonic::Request::new(InvokeRequest {
        tool: tool.to_owned(),
        arguments: arguments.to_owned(),
        context: Some(CallContext {
            caller: "e2e".into(),
            ..Default::default()
        }),
        ..Default::default()
    });
    if let Some(t) = timeout {
        request.set_timeout(t);
    }
    client
        .invoke(request)
        .await
        .expect("invoke RPC")
        .into_inner()
}

/// The error code of a response (0 = success).
pub fn code(response: &InvokeResponse) -> i32 {
    response
        .result
        .as_ref()
        .and_then(|r| r.error.as_ref())
        .map_or(0, |e| e.code)
}

/// The error message of a response ("" on success).
pub fn message(response: &InvokeResponse) -> String {
    response
        .result
        .as_ref()
        .and_then(|r| r.error.as_ref())
        .map(|e| e.message.clone())
        .unwrap_or_default()
}

/// A fresh temporary directory, removed when the returned guard drops.
pub fn temp_dir(label: &str) -> TempDir {
    TempDir::new(label)
}

/// Lines of a ledger file (each a JSON object).
pub fn ledger(path: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}
