//! Real etcd members on loopback for tests and the benchmark: a cluster of
//! one or three, with fast timing for tests (10 ms heartbeats, 100 ms
//! elections) or etcd's own for a loaded benchmark, data on tmpfs when there is one, members that can be
//! SIGKILLed, SIGSTOPped and resumed, and clients served over TLS (client
//! certificates required when asked) with a chosen auth token lifetime.

use crate::error::ProcError;
use crate::proc::{Proc, Spawn, Stderr};
use crate::temp::TempDir;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::time::Duration;
use tokio::process::Command;

/// How long a member may take to serve clients.
const READY: Duration = Duration::from_secs(20);

/// The etcd server binary: `TOOLMESH_TEST_ETCD`, else `etcd` on the PATH.
pub fn etcd_binary() -> Result<PathBuf, ProcError> {
    if let Some(path) = std::env::var_os("TOOLMESH_TEST_ETCD").filter(|p| !p.is_empty()) {
        return Ok(PathBuf::from(path));
    }
    std::env::var_os("PATH")
        .into_iter()
        .flat_map(|paths| std::env::split_paths(&paths).collect::<Vec<_>>())
        .map(|dir| dir.join("etcd"))
        .find(|p| p.is_file())
        .ok_or(ProcError::NoEtcd)
}

/// A free loopback port (bound, then released).
fn free_port() -> Result<u16, ProcError> {
    let io = |source| ProcError::Io {
        what: "find a free port".to_owned(),
        source,
    };
    let listener = TcpListener::bind("127.0.0.1:0").map_err(io)?;
    Ok(listener.local_addr().map_err(io)?.port())
}

/// TLS of the members' client URLs (`https://`).
#[derive(Debug, Clone)]
pub struct EtcdTls {
    /// The server certificate (`--cert-file`), for 127.0.0.1.
    pub cert: PathBuf,
    /// Its key (`--key-file`).
    pub key: PathBuf,
    /// Require client certificates signed by this CA
    /// (`--client-cert-auth --trusted-ca-file`).
    pub client_ca: Option<PathBuf>,
}

/// How the members serve clients. The default: plaintext, etcd's token
/// lifetime.
#[derive(Debug, Clone, Default)]
pub struct EtcdOptions {
    /// Serve clients over TLS.
    pub tls: Option<EtcdTls>,
    /// How long simple auth tokens live, in seconds (`--auth-token-ttl`;
    /// etcd's default is 300).
    pub auth_token_ttl_secs: Option<u32>,
    /// etcd's own timing (100 ms heartbeats, 1 s elections), which a
    /// saturated machine needs to keep a leader, instead of the fast one.
    pub default_timing: bool,
    /// Start each member at this niceness (through `nice`), as a machine
    /// etcd shares with a heavy load gives it the CPU first: a leader
    /// starved of CPU misses its heartbeats and loses leadership. Lowering
    /// niceness takes root; without it `nice` says so on the member's log
    /// and etcd runs at the usual priority.
    pub niceness: Option<i32>,
}

struct Member {
    name: String,
    client_port: u16,
    peer_port: u16,
    proc: Option<Proc>,
}

/// A running etcd cluster; every member is killed when it is dropped.
pub struct EtcdCluster {
    members: Vec<Member>,
    binary: PathBuf,
    initial_cluster: String,
    options: EtcdOptions,
    dir: TempDir,
}

impl std::fmt::Debug for EtcdCluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdCluster")
            .field("store_url", &self.store_url())
            .finish_non_exhaustive()
    }
}

impl EtcdCluster {
    /// Each member's log file (a restarted member's starts anew).
    pub fn log_files(&self) -> Vec<PathBuf> {
        self.members
            .iter()
            .map(|member| self.dir.join(format!("{}.log", member.name)))
            .collect()
    }

    /// Starts `size` plaintext members and waits until each serves clients.
    pub async fn start(size: usize) -> Result<EtcdCluster, ProcError> {
        EtcdCluster::start_with(size, EtcdOptions::default()).await
    }

    /// Starts `size` members serving clients as `options` say and waits
    /// until each does.
    pub async fn start_with(size: usize, options: EtcdOptions) -> Result<EtcdCluster, ProcError> {
        let binary = etcd_binary()?;
        let shm = Path::new("/dev/shm");
        let dir = if shm.is_dir() {
            TempDir::new_in(shm, "etcd")
        } else {
            TempDir::new("etcd")
        }
        .map_err(|source| ProcError::Io {
            what: "create the etcd data directory".to_owned(),
            source,
        })?;
        let mut members = Vec::with_capacity(size);
        for i in 0..size.max(1) {
            members.push(Member {
                name: format!("m{i}"),
                client_port: free_port()?,
                peer_port: free_port()?,
                proc: None,
            });
        }
        let initial_cluster = members
            .iter()
            .map(|m| format!("{}=http://127.0.0.1:{}", m.name, m.peer_port))
            .collect::<Vec<_>>()
            .join(",");
        let mut cluster = EtcdCluster {
            members,
            binary,
            initial_cluster,
            options,
            dir,
        };
        for i in 0..cluster.members.len() {
            cluster.spawn(i)?;
        }
        for i in 0..cluster.members.len() {
            cluster.wait_ready(i).await?;
        }
        Ok(cluster)
    }

    fn spawn(&mut self, i: usize) -> Result<(), ProcError> {
        let client = self.client_url(i);
        let member = &self.members[i];
        let peer = format!("http://127.0.0.1:{}", member.peer_port);
        let data = self.dir.join(&member.name);
        let mut command = match self.options.niceness {
            Some(niceness) => {
                let mut nice = Command::new("nice");
                nice.arg("-n").arg(niceness.to_string()).arg(&self.binary);
                nice
            }
            None => Command::new(&self.binary),
        };
        command
            .arg("--name")
            .arg(&member.name)
            .arg("--data-dir")
            .arg(&data)
            .args(["--listen-client-urls", &client])
            .args(["--advertise-client-urls", &client])
            .args(["--listen-peer-urls", &peer])
            .args(["--initial-advertise-peer-urls", &peer])
            .args(["--initial-cluster", &self.initial_cluster])
            .args(["--initial-cluster-state", "new"])
            .args(match self.options.default_timing {
                true => ["--heartbeat-interval", "100", "--election-timeout", "1000"],
                false => ["--heartbeat-interval", "10", "--election-timeout", "100"],
            })
            .args(["--logger", "zap", "--log-level", "info"])
            // Cheap password hashing: tests authenticate often.
            .args(["--bcrypt-cost", "4"]);
        if let Some(tls) = &self.options.tls {
            command
                .arg("--cert-file")
                .arg(&tls.cert)
                .arg("--key-file")
                .arg(&tls.key);
            if let Some(ca) = &tls.client_ca {
                command
                    .arg("--client-cert-auth")
                    .arg("--trusted-ca-file")
                    .arg(ca);
            }
        }
        if let Some(ttl) = self.options.auth_token_ttl_secs {
            command.args([
                "--auth-token",
                "simple",
                "--auth-token-ttl",
                &ttl.to_string(),
            ]);
        }
        let log = self.dir.join(format!("{}.log", member.name));
        let proc = Spawn::new(format!("etcd {}", member.name), command)
            .stderr(Stderr::Log(log))
            .start()?;
        self.members[i].proc = Some(proc);
        Ok(())
    }

    async fn wait_ready(&mut self, i: usize) -> Result<(), ProcError> {
        let log = self.dir.join(format!("{}.log", self.members[i].name));
        let deadline = tokio::time::Instant::now() + READY;
        loop {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            if text.contains("serving client traffic")
                || text.contains("ready to serve client requests")
            {
                return Ok(());
            }
            if let Some(proc) = self.members[i].proc.as_mut()
                && !proc.alive()
            {
                return Err(ProcError::Exited {
                    what: proc.name().to_owned(),
                    status: "exited before serving clients".to_owned(),
                    log: crate::proc::tail(&log, 2000),
                });
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(ProcError::Timeout {
                    what: format!("etcd {} to serve clients", self.members[i].name),
                    timeout: READY,
                });
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// `etcd://127.0.0.1:P[,…]`: the `--store` value for every member.
    pub fn store_url(&self) -> String {
        let endpoints: Vec<String> = self
            .members
            .iter()
            .map(|m| format!("127.0.0.1:{}", m.client_port))
            .collect();
        format!("etcd://{}", endpoints.join(","))
    }

    /// `http://127.0.0.1:P` of member `i` (`https://` when it serves TLS).
    pub fn client_url(&self, i: usize) -> String {
        let scheme = if self.options.tls.is_some() {
            "https"
        } else {
            "http"
        };
        format!("{scheme}://127.0.0.1:{}", self.members[i].client_port)
    }

    /// How many members the cluster has.
    pub fn len(&self) -> usize {
        self.members.len()
    }

    /// Whether it has no members (never: at least one is started).
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// SIGKILLs member `i` and reaps it.
    pub async fn kill(&mut self, i: usize) {
        if let Some(mut proc) = self.members[i].proc.take() {
            proc.kill_and_reap().await;
        }
    }

    /// Starts member `i` again on its ports and data (after [`kill`](Self::kill)).
    pub async fn restart(&mut self, i: usize) -> Result<(), ProcError> {
        self.kill(i).await;
        let log = self.dir.join(format!("{}.log", self.members[i].name));
        let _ = std::fs::remove_file(&log);
        self.spawn(i)?;
        self.wait_ready(i).await
    }

    /// The process id of member `i`, while it runs.
    pub fn pid(&self, i: usize) -> Option<i32> {
        self.members[i].proc.as_ref().map(Proc::pid)
    }

    /// Sends `signal` (for example SIGSTOP or SIGCONT) to member `i`.
    pub fn signal(&self, i: usize, signal: i32) {
        if let Some(proc) = &self.members[i].proc {
            proc.signal(signal);
        }
    }
}
