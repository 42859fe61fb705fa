//! Child processes and temporary directories that clean up after
//! themselves, shared by `toolmesh up`, the tests and the benchmark: a
//! [`Proc`] is killed (with its process group, if it has one) when dropped
//! and its output lines can be waited on; a [`TempDir`] is removed on drop.
//!
//! The parent-death signal needs `pre_exec`, which is `unsafe`; this crate
//! has none, so binaries hand in a [`ParentDeath`] hook that arms it.
#![forbid(unsafe_code)]

mod error;
mod etcd;
mod proc;
mod temp;

pub use error::ProcError;
pub use etcd::{EtcdCluster, EtcdOptions, EtcdTls, etcd_binary};
pub use proc::{ArmParentDeath, ParentDeath, Proc, Spawn, Stderr, parse_listen_line, tail};
pub use temp::TempDir;
