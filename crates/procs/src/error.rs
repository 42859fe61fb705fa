//! What can go wrong with a child process.

use std::time::Duration;

/// Why a child could not be started or did not do what was awaited.
#[derive(Debug, thiserror::Error)]
pub enum ProcError {
    /// No etcd server binary was found.
    #[error(
        "no etcd server binary: run scripts/test (it installs Debian's etcd-server) or set TOOLMESH_TEST_ETCD=/path/to/etcd"
    )]
    NoEtcd,
    /// The program could not be started.
    #[error("cannot start {what}: {source}")]
    Spawn {
        /// The child and its program.
        what: String,
        /// What the OS said.
        source: std::io::Error,
    },
    /// A file operation failed.
    #[error("cannot {what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// What the OS said.
        source: std::io::Error,
    },
    /// A line did not come in time.
    #[error("timed out after {timeout:?} waiting for {what}")]
    Timeout {
        /// What was awaited.
        what: String,
        /// How long.
        timeout: Duration,
    },
    /// The child went away first.
    #[error("{what} exited ({status}); its log ends:\n{log}")]
    Exited {
        /// The child.
        what: String,
        /// How it ended.
        status: String,
        /// The end of its log.
        log: String,
    },
}
