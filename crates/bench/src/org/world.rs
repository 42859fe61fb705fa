//! The real parts of one organisation-scale run: a three-member etcd
//! cluster on loopback and three `toolmesh registry` processes on it, with
//! what `/proc` and etcd's own metrics say about them.

use crate::Binaries;
use crate::error::BenchError;
use crate::procs::{self, Proc, Ready, SpawnOptions};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use toolmesh_procs::{EtcdCluster, EtcdOptions};

/// Registry replicas started.
pub(crate) const REGISTRIES: usize = 3;
/// Where the replicas keep which of them watches an executor's health.
const WATCHER_PREFIX: &str = "/toolmesh/watcher/";
/// Where the replicas keep the executors' registrations.
const EXEC_PREFIX: &str = "/toolmesh/exec/";
/// etcd members started.
const MEMBERS: usize = 3;
/// The etcd members' niceness: the simulated fleet and followers stand
/// for thousands of other machines, yet share these two cores with etcd;
/// given the CPU first, as etcd's operators give it, a leader is not
/// starved into missing its heartbeats by load that would run elsewhere.
const ETCD_NICENESS: i32 = -10;

/// etcd and the registry replicas on it.
pub(crate) struct World {
    pub(crate) etcd: EtcdCluster,
    pub(crate) registries: Vec<Option<Proc>>,
    /// Each replica's gRPC address (it keeps it across a restart).
    pub(crate) addrs: Vec<String>,
    store_url: String,
    /// The replicas' log filter.
    log: &'static str,
    /// Where the processes' logs go; etcd's are copied there at the end,
    /// a failed run's included.
    logs: PathBuf,
}

impl Drop for World {
    fn drop(&mut self) {
        for file in self.etcd.log_files() {
            if let Some(name) = file.file_name() {
                let kept = self.logs.join(format!("etcd-{}", name.to_string_lossy()));
                let _ = std::fs::copy(&file, kept);
            }
        }
    }
}

impl World {
    /// Starts etcd and the replicas, which log at `log`.
    pub(crate) async fn start(
        bins: &Binaries,
        logs: &Path,
        log: &'static str,
    ) -> Result<World, BenchError> {
        let options = EtcdOptions {
            default_timing: true,
            niceness: Some(ETCD_NICENESS),
            ..EtcdOptions::default()
        };
        let etcd = EtcdCluster::start_with(MEMBERS, options).await?;
        if let Some(niceness) = etcd.pid(0).and_then(niceness_of)
            && niceness != ETCD_NICENESS
        {
            crate::progress(&format!(
                "  etcd runs at niceness {niceness}, not {ETCD_NICENESS} (that takes root): its leader may starve under the load"
            ));
        }
        let store_url = etcd.store_url();
        let mut world = World {
            etcd,
            registries: Vec::new(),
            addrs: Vec::new(),
            store_url,
            log,
            logs: logs.to_path_buf(),
        };
        for i in 0..REGISTRIES {
            let (proc, addr) = world.registry(bins, logs, i, "127.0.0.1:0").await?;
            world.registries.push(Some(proc));
            world.addrs.push(addr);
        }
        Ok(world)
    }

    async fn registry(
        &self,
        bins: &Binaries,
        logs: &Path,
        i: usize,
        listen: &str,
    ) -> Result<(Proc, String), BenchError> {
        let args = ["registry", "--listen", listen, "--store", &self.store_url];
        let mut proc = procs::spawn(
            bins.parent_death,
            &format!("org registry {i}"),
            &bins.toolmesh,
            &args,
            logs,
            SpawnOptions {
                log: self.log,
                ..SpawnOptions::default()
            },
        )?;
        let addr = proc.listen_addr().await?;
        Ok((proc, addr))
    }

    /// Every replica's address, comma-separated (what a dispatcher follows).
    pub(crate) fn registry_list(&self) -> String {
        self.addrs.join(",")
    }

    /// SIGKILLs replica `i`.
    pub(crate) async fn kill_registry(&mut self, i: usize) {
        if let Some(mut proc) = self.registries[i].take() {
            proc.kill_and_reap().await;
        }
    }

    /// Starts replica `i` again on its old address.
    pub(crate) async fn restart_registry(
        &mut self,
        bins: &Binaries,
        logs: &Path,
        i: usize,
    ) -> Result<(), BenchError> {
        let listen = self.addrs[i].clone();
        let (proc, _) = self.registry(bins, logs, i, &listen).await?;
        self.registries[i] = Some(proc);
        Ok(())
    }

    /// The replicas' pids (the live ones).
    pub(crate) fn registry_pids(&self) -> Vec<Option<i32>> {
        self.registries
            .iter()
            .map(|p| p.as_ref().map(Proc::pid))
            .collect()
    }

    /// What `/proc` says of each live replica and each etcd member now.
    pub(crate) fn stats(&self) -> (Vec<ProcStat>, Vec<ProcStat>) {
        let registries = self
            .registry_pids()
            .into_iter()
            .flatten()
            .map(ProcStat::read);
        let members = self.etcd_pids().into_iter().map(ProcStat::read);
        (registries.collect(), members.collect())
    }

    /// How many executors' health watches each replica holds now, by the
    /// replica's id (the claims the replicas keep in etcd).
    pub(crate) async fn health_watches(&self) -> std::collections::BTreeMap<String, usize> {
        let mut held = std::collections::BTreeMap::new();
        for value in self.values_under(WATCHER_PREFIX).await {
            *held
                .entry(String::from_utf8_lossy(&value).into_owned())
                .or_default() += 1;
        }
        held
    }

    /// How many executors are registered now (their keys in etcd).
    pub(crate) async fn registered_executors(&self) -> usize {
        self.values_under(EXEC_PREFIX).await.len()
    }

    /// The values of every key under `prefix` in etcd (none when etcd
    /// does not answer).
    async fn values_under(&self, prefix: &str) -> Vec<Vec<u8>> {
        let Ok(client) = toolmesh_etcd::Client::from_url(&self.store_url) else {
            return Vec::new();
        };
        match client.range_prefix(prefix.as_bytes()).await {
            Ok(range) => range.kvs.into_iter().map(|kv| kv.value).collect(),
            Err(_) => Vec::new(),
        }
    }

    /// The etcd members' pids.
    pub(crate) fn etcd_pids(&self) -> Vec<i32> {
        (0..self.etcd.len())
            .filter_map(|i| self.etcd.pid(i))
            .collect()
    }

    /// One of etcd's own metrics (summed over its label sets), read from
    /// member `i`'s `/metrics`.
    pub(crate) async fn etcd_metric(&self, i: usize, name: &str) -> Option<f64> {
        let url = self.etcd.client_url(i);
        let name = name.to_owned();
        tokio::task::spawn_blocking(move || {
            let text = http_get(&url, "/metrics")?;
            let values: Vec<f64> = text
                .lines()
                .filter(|l| {
                    l.strip_prefix(name.as_str())
                        .is_some_and(|rest| rest.starts_with([' ', '{']))
                })
                .filter_map(|l| l.rsplit(' ').next()?.parse().ok())
                .collect();
            (!values.is_empty()).then(|| values.iter().sum())
        })
        .await
        .ok()
        .flatten()
    }
}

/// A plain HTTP/1.0 GET of `path` on `base` (`http://host:port`): etcd's
/// metrics, read without a client library.
fn http_get(base: &str, path: &str) -> Option<String> {
    let host = base.strip_prefix("http://")?.trim_end_matches('/');
    let mut stream = std::net::TcpStream::connect(host).ok()?;
    stream
        .set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .ok()?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: {host}\r\n\r\n").ok()?;
    let mut body = String::new();
    stream.read_to_string(&mut body).ok()?;
    body.split_once("\r\n\r\n").map(|(_, b)| b.to_owned())
}

/// What `/proc` says of a process: CPU time (user + system) in seconds,
/// resident memory now and at its highest, and bytes written through
/// system calls (sockets too).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct ProcStat {
    pub(crate) cpu_secs: f64,
    pub(crate) rss_bytes: u64,
    pub(crate) peak_rss_bytes: u64,
    pub(crate) written_bytes: u64,
}

impl ProcStat {
    /// Reads `pid`'s figures (zeros for a process that is gone).
    pub(crate) fn read(pid: i32) -> ProcStat {
        let ticks = rustix::param::clock_ticks_per_second().max(1) as f64;
        let cpu_secs = crate::cpu::cpu_ticks(pid) as f64 / ticks;
        let written_bytes = std::fs::read_to_string(format!("/proc/{pid}/io"))
            .ok()
            .and_then(|text| {
                text.lines()
                    .find_map(|l| l.strip_prefix("wchar:"))
                    .and_then(|v| v.trim().parse().ok())
            })
            .unwrap_or_default();
        ProcStat {
            cpu_secs,
            rss_bytes: crate::scale::rss_of(&pid.to_string()).unwrap_or_default(),
            peak_rss_bytes: peak_rss_of(pid).unwrap_or_default(),
            written_bytes,
        }
    }
}

/// The most memory process `pid` has held resident (`VmHWM`), in bytes.
pub(crate) fn peak_rss_of(pid: i32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kib * 1024)
}

/// The niceness of process `pid` (field 19 of `/proc/PID/stat`).
fn niceness_of(pid: i32) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name, which may hold spaces, in parentheses.
    let after_name = &stat[stat.rfind(')')? + 2..];
    after_name.split(' ').nth(16)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The niceness read from `/proc` is the one a process was started at.
    #[test]
    fn niceness_is_read() {
        let own = niceness_of(i32::try_from(std::process::id()).unwrap()).unwrap();
        let mut child = std::process::Command::new("nice")
            .args(["-n", "3", "sleep", "30"])
            .spawn()
            .unwrap();
        let pid = i32::try_from(child.id()).unwrap();
        // `nice` execs `sleep`: same process, its niceness set before.
        let execed = || {
            std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() == "sleep")
        };
        let limit = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while !execed() && std::time::Instant::now() < limit {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert_eq!(niceness_of(pid), Some((own + 3).min(19)));
        let _ = child.kill();
        let _ = child.wait();
    }
}
