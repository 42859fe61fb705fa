//! nginx as the baseline gateway: found on PATH, given a minimal
//! `grpc_pass` config (plaintext, or mutual TLS on both hops) in a
//! temporary prefix, started and stopped by the bench.

use crate::error::BenchError;
use crate::procs::{self, ArmParentDeath, OnParentDeath, Proc, SpawnOptions, free_port};
use std::path::{Path, PathBuf};
use std::time::Duration;
use tokio::time::Instant;

/// How long nginx may take to accept connections.
const START_TIMEOUT: Duration = Duration::from_secs(10);

/// A running nginx proxying gRPC to one upstream.
#[derive(Debug)]
pub(crate) struct Nginx {
    proc: Proc,
    /// Where it listens (h2c).
    pub(crate) addr: String,
    /// What `nginx -v` says, e.g. `nginx/1.22.1`.
    pub(crate) version: String,
}

impl Nginx {
    /// The master's pid, which is also its process group's.
    pub(crate) fn pid(&self) -> i32 {
        self.proc.pid()
    }

    /// Fast shutdown (SIGTERM to the master), then SIGKILL to the group.
    pub(crate) async fn stop(self) {
        self.proc.stop(libc::SIGTERM, Duration::from_secs(2)).await;
    }
}

/// The `nginx` executable: `TOOLMESH_NGINX` when set (Debian installs it in
/// /usr/sbin, off a user's PATH), else the first on PATH or in /usr/sbin.
pub(crate) fn find() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("TOOLMESH_NGINX") {
        return Some(PathBuf::from(path));
    }
    let mut path = std::env::var_os("PATH").unwrap_or_default();
    path.push(":/usr/sbin");
    find_in(&path)
}

/// The first executable `nginx` in the directories of `path`.
fn find_in(path: &std::ffi::OsStr) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    std::env::split_paths(path)
        .map(|dir| dir.join("nginx"))
        .find(|candidate| {
            std::fs::metadata(candidate)
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

/// The files nginx speaks mutual TLS with, on both hops: its listener
/// presents `cert` and requires client certificates signed by `ca`; its
/// upstream connections verify the executor against `ca` (as `localhost`)
/// and present `cert`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct NginxTls<'a> {
    pub(crate) ca: &'a Path,
    pub(crate) cert: &'a Path,
    pub(crate) key: &'a Path,
}

/// The whole nginx.conf: one worker, an h2c listener on `listen_port`
/// that `grpc_pass`es everything to `upstream`, every path inside `prefix`;
/// with `tls`, mutual TLS on both hops instead (`grpc_pass grpcs://`, TLS
/// sessions reused on the kept-alive upstream connections).
///
/// Upstream connections are kept alive (nginx does not multiplex gRPC
/// upstream streams, so it needs one connection per call in flight), and
/// neither side closes a connection after 1000 requests as nginx does by
/// default: the comparison is with nginx at its best on this path.
pub(crate) fn render_config(
    prefix: &Path,
    listen_port: u16,
    upstream: &str,
    tls: Option<NginxTls<'_>>,
) -> String {
    let p = prefix.display();
    // The listener's `ssl` flag and TLS lines, and the pass with its own.
    let (ssl, server_tls, pass) = match tls {
        None => ("", String::new(), "grpc_pass grpc://executor;".to_owned()),
        Some(NginxTls { ca, cert, key }) => {
            let (ca, cert, key) = (ca.display(), cert.display(), key.display());
            (
                " ssl",
                format!(
                    "
        ssl_certificate {cert};
        ssl_certificate_key {key};
        ssl_client_certificate {ca};
        ssl_verify_client on;"
                ),
                format!(
                    "grpc_pass grpcs://executor;
            grpc_ssl_certificate {cert};
            grpc_ssl_certificate_key {key};
            grpc_ssl_trusted_certificate {ca};
            grpc_ssl_verify on;
            grpc_ssl_name localhost;
            grpc_ssl_session_reuse on;"
                ),
            )
        }
    };
    format!(
        "# Written by `toolmesh bench`: nginx as a plain gRPC proxy.
daemon off;
master_process on;
worker_processes 1;
pid {p}/nginx.pid;
error_log {p}/error.log warn;

events {{
    worker_connections 4096;
}}

http {{
    access_log off;
    client_body_temp_path {p}/client_body;
    proxy_temp_path {p}/proxy;
    fastcgi_temp_path {p}/fastcgi;
    uwsgi_temp_path {p}/uwsgi;
    scgi_temp_path {p}/scgi;
    keepalive_requests 1000000;
    keepalive_timeout 300s;
    http2_max_concurrent_streams 512;

    upstream executor {{
        server {upstream};
        keepalive 512;
        keepalive_requests 1000000;
        keepalive_timeout 300s;
    }}

    server {{
        listen 127.0.0.1:{listen_port}{ssl} http2;{server_tls}
        location / {{
            {pass}
        }}
    }}
}}
"
    )
}

/// The version line of `nginx -v` (it prints to stderr).
async fn version(exe: &Path) -> String {
    match tokio::process::Command::new(exe).arg("-v").output().await {
        Ok(out) => {
            let text = String::from_utf8_lossy(&out.stderr).trim().to_owned();
            text.strip_prefix("nginx version: ")
                .map_or(text.clone(), str::to_owned)
        }
        Err(e) => format!("unknown ({e})"),
    }
}

/// Writes the config under `prefix` and starts `nginx -p PREFIX -c CONF`
/// proxying to `upstream` (with mutual TLS on both hops when `tls` is
/// given); returns once it accepts TCP connections.
pub(crate) async fn start(
    arm: Option<ArmParentDeath>,
    exe: &Path,
    prefix: &Path,
    upstream: &str,
    tls: Option<NginxTls<'_>>,
) -> Result<Nginx, BenchError> {
    let port = free_port()?;
    let conf = prefix.join("nginx.conf");
    std::fs::write(&conf, render_config(prefix, port, upstream, tls))
        .map_err(|e| BenchError::io(format!("write {}", conf.display()), e))?;
    let version = version(exe).await;
    let prefix_arg = format!("{}/", prefix.display());
    let conf_arg = conf.display().to_string();
    let error_log = format!("{}/error.log", prefix.display());
    let mut proc = procs::spawn(
        arm,
        "nginx",
        exe,
        &["-p", &prefix_arg, "-c", &conf_arg, "-e", &error_log],
        prefix,
        SpawnOptions {
            own_group: true,
            on_parent_death: OnParentDeath::Terminate,
            ..SpawnOptions::default()
        },
    )?;
    let addr = format!("127.0.0.1:{port}");
    let deadline = Instant::now() + START_TIMEOUT;
    loop {
        if proc.try_exit().is_some() {
            let mut err = proc.exited().await;
            if let toolmesh_procs::ProcError::Exited { log, .. } = &mut err {
                log.push_str(&format!("\n{}", procs::tail(Path::new(&error_log), 2048)));
            }
            return Err(err.into());
        }
        if tokio::net::TcpStream::connect(&addr).await.is_ok() {
            return Ok(Nginx {
                proc,
                addr,
                version,
            });
        }
        if Instant::now() > deadline {
            return Err(BenchError::timeout(
                format!(
                    "nginx to listen on {addr} (error log: {})",
                    procs::tail(Path::new(&error_log), 2048)
                ),
                START_TIMEOUT,
            ));
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The config is self-contained: every path under the prefix, h2c on
    /// loopback, grpc_pass to the upstream, no daemon, one worker, no access log.
    #[test]
    fn config_rendering() {
        let conf = render_config(Path::new("/tmp/nx"), 4321, "127.0.0.1:9999", None);
        for needle in [
            "daemon off;",
            "master_process on;",
            "worker_processes 1;",
            "pid /tmp/nx/nginx.pid;",
            "error_log /tmp/nx/error.log warn;",
            "access_log off;",
            "client_body_temp_path /tmp/nx/client_body;",
            "server 127.0.0.1:9999;",
            "listen 127.0.0.1:4321 http2;",
            "grpc_pass grpc://executor;",
            "keepalive 512;",
        ] {
            assert!(conf.contains(needle), "missing {needle:?} in\n{conf}");
        }
        // Absolute paths only, and none outside the prefix.
        for line in conf
            .lines()
            .filter(|l| l.contains("_path ") || l.contains("pid "))
        {
            assert!(line.contains("/tmp/nx/"), "{line}");
        }
        let opens = conf.matches('{').count();
        assert_eq!(opens, conf.matches('}').count(), "balanced braces");
    }

    /// With TLS, the listener requires client certificates and the pass
    /// is `grpcs://`, presenting the same certificate and verifying the
    /// executor's.
    #[test]
    fn tls_config_rendering() {
        let files = NginxTls {
            ca: Path::new("/tmp/nx/ca.pem"),
            cert: Path::new("/tmp/nx/cert.pem"),
            key: Path::new("/tmp/nx/key.pem"),
        };
        let conf = render_config(Path::new("/tmp/nx"), 4321, "127.0.0.1:9999", Some(files));
        for needle in [
            "listen 127.0.0.1:4321 ssl http2;",
            "ssl_certificate /tmp/nx/cert.pem;",
            "ssl_certificate_key /tmp/nx/key.pem;",
            "ssl_client_certificate /tmp/nx/ca.pem;",
            "ssl_verify_client on;",
            "grpc_pass grpcs://executor;",
            "grpc_ssl_certificate /tmp/nx/cert.pem;",
            "grpc_ssl_trusted_certificate /tmp/nx/ca.pem;",
            "grpc_ssl_verify on;",
            "keepalive 512;",
        ] {
            assert!(conf.contains(needle), "missing {needle:?} in\n{conf}");
        }
        assert!(!render_config(Path::new("/tmp/nx"), 4321, "x:1", None).contains("ssl"));
    }

    /// Only an executable file counts as found.
    #[test]
    fn finding_on_a_path() {
        use std::os::unix::fs::PermissionsExt;
        let dir = crate::procs::TempDir::new("bench-nginx-find").unwrap();
        let empty = crate::procs::TempDir::new("bench-nginx-find-empty").unwrap();
        let path = std::env::join_paths([empty.path(), dir.path()]).unwrap();
        assert_eq!(find_in(&path), None);
        let exe = dir.path().join("nginx");
        std::fs::write(&exe, b"#!/bin/sh\n").unwrap();
        assert_eq!(find_in(&path), None, "not executable yet");
        std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert_eq!(find_in(&path), Some(exe));
    }
}
