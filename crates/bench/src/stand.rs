//! What the per-call rows run on: `toolmesh serve`, the acceptance example
//! registered with it and nginx in front of it, in plaintext or with mutual
//! TLS on every hop, with a client and a CPU meter per target.

use crate::Binaries;
use crate::cpu::{self, Meter};
use crate::error::BenchError;
use crate::load::{self, Client, Workload};
use crate::mesh;
use crate::nginx;
use crate::procs::{self, Ready, SpawnOptions, TempDir};
use serde::Serialize;
use std::path::Path;
use std::time::Duration;
use toolmesh_transport::{Tls, TlsFiles};

pub(crate) use crate::load::TOOL;

/// Whether nginx took part, and why not.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum NginxStatus {
    /// Measured.
    Measured {
        /// The executable used.
        path: String,
        /// What `nginx -v` said.
        version: String,
    },
    /// No `nginx` on PATH.
    NotInstalled,
    /// Found, but it could not be started or could not proxy a call.
    Failed {
        /// Why.
        reason: String,
    },
}

impl NginxStatus {
    /// A short sentence for the report.
    pub fn describe(&self) -> String {
        match self {
            NginxStatus::Measured { path, version } => format!("{version} ({path})"),
            NginxStatus::NotInstalled => "nginx not installed".to_owned(),
            NginxStatus::Failed { reason } => format!("nginx failed: {reason}"),
        }
    }
}

/// One figure for each target; `nginx` is `None` when it was not measured.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct ByTarget<T> {
    /// Client → executor.
    pub direct: T,
    /// Client → nginx grpc_pass → executor.
    pub nginx: Option<T>,
    /// Client → dispatcher Invoke → executor.
    pub toolmesh: T,
}

/// The processes whose CPU the targets' calls cost.
pub(crate) struct Costs {
    /// The executor (every target calls it).
    pub(crate) executor: i32,
    /// nginx's master (its process group holds the workers), if it runs.
    pub(crate) nginx: Option<i32>,
    /// `toolmesh serve`.
    pub(crate) toolmesh: i32,
}

impl Costs {
    /// The meter of a call through `toolmesh serve`: serve, then the executor.
    pub(crate) fn toolmesh(&self) -> Meter {
        Meter::new(vec![vec![self.toolmesh], vec![self.executor]])
    }
}

/// The clients, one per target.
pub(crate) struct Clients {
    pub(crate) direct: Client,
    pub(crate) nginx: Option<Client>,
    pub(crate) toolmesh: Client,
}

/// What a [`Stand`] runs besides `toolmesh serve` and the acceptance example.
#[derive(Clone, Copy, Default)]
pub(crate) struct Setup<'a> {
    /// An MCP door on `toolmesh serve`.
    pub(crate) mcp: bool,
    /// Mutual TLS on every hop with these files (else plaintext).
    pub(crate) pki: Option<&'a Pki>,
    /// `toolmesh serve`'s policy file; it must name
    /// [`mesh::DISPATCHER_TOKEN`] as a `dispatcher` caller and let the
    /// example register. Else the development policy, with that token.
    pub(crate) policy: Option<&'a Path>,
    /// nginx in front of the example, when installed (a stand without it
    /// reports nginx as not installed).
    pub(crate) nginx: bool,
}

/// What one set of targets runs on: `toolmesh serve`, the acceptance
/// example registered with it and (if installed and asked for) nginx in
/// front of the example, in plaintext or with mutual TLS on every hop; a
/// client per target.
pub(crate) struct Stand {
    pub(crate) serve: procs::Proc,
    pub(crate) example: procs::Proc,
    pub(crate) nginx: Option<nginx::Nginx>,
    /// Whether nginx took part, and why not.
    pub(crate) nginx_status: NginxStatus,
    /// Where `toolmesh serve` listens (gRPC).
    pub(crate) serve_addr: String,
    /// Its MCP door, when asked for.
    pub(crate) mcp_url: Option<String>,
    pub(crate) clients: Clients,
    pub(crate) costs: Costs,
    /// nginx's prefix.
    pub(crate) _prefix: TempDir,
}

impl Stand {
    /// Starts the processes as `setup` says, once `toolmesh serve` lists
    /// the tool.
    pub(crate) async fn start(
        bins: &Binaries,
        logs: &Path,
        setup: Setup<'_>,
    ) -> Result<Stand, BenchError> {
        let Setup {
            mcp,
            pki,
            policy,
            nginx: with_nginx,
        } = setup;
        let tls_flags = pki.map(Pki::flags).unwrap_or_default();
        let tls_flags: Vec<&str> = tls_flags.iter().map(String::as_str).collect();
        let client_tls = pki.map_or_else(|| Ok(Tls::none()), Pki::client)?;
        let policy = policy.map(|p| p.display().to_string());
        let mut serve_args = vec!["serve", "--listen", "127.0.0.1:0"];
        match &policy {
            Some(policy) => serve_args.extend(["--policy", policy]),
            None => serve_args.extend(["--dev-dispatcher-token", mesh::DISPATCHER_TOKEN]),
        }
        if mcp {
            serve_args.extend(["--mcp-listen", "127.0.0.1:0"]);
        }
        serve_args.extend(&tls_flags);
        let mut serve = procs::spawn(
            bins.parent_death,
            "toolmesh serve",
            &bins.toolmesh,
            &serve_args,
            logs,
            SpawnOptions::default(),
        )?;
        let serve_addr = serve.listen_addr().await?;
        let mcp_url = if mcp {
            Some(serve.mcp_url().await?)
        } else {
            None
        };
        let mut example_args = vec!["example", "acceptance", "--registry", &serve_addr];
        example_args.extend(&tls_flags);
        let mut example = procs::spawn(
            bins.parent_death,
            "toolmesh example acceptance",
            &bins.fixture,
            &example_args,
            logs,
            SpawnOptions::default(),
        )?;
        let executor_addr = example.listen_addr().await?;
        mesh::wait_listed(
            &mut mesh::dispatcher_client(&serve_addr, &client_tls)?,
            TOOL,
            true,
            Duration::from_secs(15),
        )
        .await?;

        let prefix = TempDir::new("bench-nginx")
            .map_err(|e| BenchError::io("create a temp dir for nginx", e))?;
        let (nginx, nginx_status) = match nginx::find().filter(|_| with_nginx) {
            None => (None, NginxStatus::NotInstalled),
            Some(path) => {
                let tls = pki.map(Pki::nginx);
                let started =
                    nginx::start(bins.parent_death, &path, prefix.path(), &executor_addr, tls);
                match started.await {
                    Ok(running) => {
                        let status = NginxStatus::Measured {
                            path: path.display().to_string(),
                            version: running.version.clone(),
                        };
                        (Some(running), status)
                    }
                    Err(e) => (
                        None,
                        NginxStatus::Failed {
                            reason: e.to_string(),
                        },
                    ),
                }
            }
        };
        let token = mesh::execute_token(&serve_addr, &executor_addr, &client_tls).await?;
        let clients = Clients {
            direct: Client::executor(&executor_addr, &token, &client_tls)?,
            nginx: nginx
                .as_ref()
                .map(|n| Client::executor(&n.addr, &token, &client_tls))
                .transpose()?,
            toolmesh: Client::dispatcher(&serve_addr, &client_tls)?,
        };
        let costs = Costs {
            executor: example.pid(),
            nginx: nginx.as_ref().map(nginx::Nginx::pid),
            toolmesh: serve.pid(),
        };
        Ok(Stand {
            serve,
            example,
            nginx,
            nginx_status,
            serve_addr,
            mcp_url,
            clients,
            costs,
            _prefix: prefix,
        })
    }

    /// Checks that `work` goes through every target; nginx failing it
    /// leaves the run (with the reason) instead of failing it.
    pub(crate) async fn check_works(&mut self, work: &Workload) -> Result<(), BenchError> {
        load::check_works(&self.clients.direct, work, "the executor").await?;
        load::check_works(&self.clients.toolmesh, work, "the toolmesh dispatcher").await?;
        if let Some(client) = &self.clients.nginx
            && let Err(e) = load::check_works(client, work, "nginx").await
        {
            self.nginx_status = NginxStatus::Failed {
                reason: e.to_string(),
            };
            self.clients.nginx = None;
        }
        Ok(())
    }

    /// The CPU meter of calls through `toolmesh serve`: serve, then the
    /// executor.
    pub(crate) fn toolmesh_meter(&self) -> Meter {
        self.costs.toolmesh()
    }

    /// The CPU meter of `toolmesh serve` alone.
    pub(crate) fn serve_meter(&self) -> Meter {
        Meter::new(vec![vec![self.costs.toolmesh]])
    }

    /// Stops every process.
    pub(crate) async fn stop(mut self) {
        if let Some(nginx) = self.nginx.take() {
            nginx.stop().await;
        }
        self.example.kill_and_reap().await;
        self.serve.kill_and_reap().await;
    }
}

/// A CA and one certificate signed by it (for `localhost` and 127.0.0.1)
/// that every process of a TLS stand presents and verifies peers against.
pub(crate) struct Pki {
    ca: std::path::PathBuf,
    cert: std::path::PathBuf,
    key: std::path::PathBuf,
    _dir: TempDir,
}

impl Pki {
    /// Fresh files in a temporary directory.
    pub(crate) fn new() -> Result<Pki, BenchError> {
        let dir = TempDir::new("bench-pki")
            .map_err(|e| BenchError::io("create a temp dir for certificates", e))?;
        let (ca, cert, key) = toolmesh_testkit::pki(&dir, "mesh");
        Ok(Pki {
            ca,
            cert,
            key,
            _dir: dir,
        })
    }

    /// The `--tls-*` flags of a process with mutual TLS: its certificate,
    /// peers verified against the CA, client certificates required.
    pub(crate) fn flags(&self) -> Vec<String> {
        let path = |p: &Path| p.display().to_string();
        vec![
            "--tls-ca".into(),
            path(&self.ca),
            "--tls-cert".into(),
            path(&self.cert),
            "--tls-key".into(),
            path(&self.key),
            "--tls-client-ca".into(),
            path(&self.ca),
        ]
    }

    /// The bench's clients: the CA and the certificate.
    pub(crate) fn client(&self) -> Result<Tls, BenchError> {
        Tls::from_files(&TlsFiles {
            ca: Some(self.ca.clone()),
            cert: Some(self.cert.clone()),
            key: Some(self.key.clone()),
            client_ca: None,
        })
        .map_err(|e| BenchError::failed("read the bench's certificates", e.to_string()))
    }

    /// nginx's files.
    pub(crate) fn nginx(&self) -> nginx::NginxTls<'_> {
        nginx::NginxTls {
            ca: &self.ca,
            cert: &self.cert,
            key: &self.key,
        }
    }
}

impl Clients {
    /// direct, nginx (when measured), toolmesh.
    pub(crate) fn all(&self) -> impl Iterator<Item = &Client> {
        std::iter::once(&self.direct)
            .chain(self.nginx.as_ref())
            .chain(std::iter::once(&self.toolmesh))
    }

    /// The CPU meter of each target, in the order of [`all`](Self::all):
    /// the proxy's processes (none for a direct call), then the executor.
    pub(crate) fn meters(&self, costs: &Costs) -> Vec<Meter> {
        let executor = vec![costs.executor];
        let nginx = costs
            .nginx
            .filter(|_| self.nginx.is_some())
            .map(|master| Meter::new(vec![cpu::process_group(master), executor.clone()]));
        std::iter::once(Meter::new(vec![Vec::new(), executor]))
            .chain(nginx)
            .chain(std::iter::once(costs.toolmesh()))
            .collect()
    }

    /// A fresh accumulator per measured target.
    pub(crate) fn each<T>(&self, mut make: impl FnMut() -> T) -> ByTarget<T> {
        ByTarget {
            direct: make(),
            nginx: self.nginx.as_ref().map(|_| make()),
            toolmesh: make(),
        }
    }
}
