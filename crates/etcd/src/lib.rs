//! A small etcd v3 client: the generated KV, Watch, Lease, Maintenance and
//! Auth stubs, endpoint failover, leader-required watches, TLS and
//! authentication with tokens renewed as they expire.
#![forbid(unsafe_code)]

mod admin;
mod auth;
mod client;
mod error;
mod handshake;
mod options;
mod watch;

pub use client::{Client, parse_store_url};
pub use error::{EtcdError, TlsProblem};
pub use options::{ClientOptions, Credentials};
pub use watch::{WatchBatch, WatchStream};

/// The generated etcd v3 messages and clients (a vendored subset of etcd's
/// `rpc.proto`, `kv.proto` and `auth.proto`).
#[allow(missing_docs, unreachable_pub, clippy::all)]
pub mod pb {
    /// etcd's `mvccpb`: keys, values and watch events.
    pub mod mvccpb {
        tonic::include_proto!("mvccpb");
    }
    /// etcd's `authpb`: the permissions roles are granted.
    pub mod authpb {
        tonic::include_proto!("authpb");
    }
    /// etcd's `etcdserverpb`: the KV, Watch, Lease, Maintenance and Auth
    /// services.
    pub mod etcdserverpb {
        tonic::include_proto!("etcdserverpb");
    }
    pub use etcdserverpb::*;
}

/// The key just after every key that starts with `prefix`: the `range_end`
/// that makes a range or watch cover the whole prefix.
pub fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    // All 0xff (or empty): every key from the prefix on.
    vec![0]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A prefix's range end is the prefix with its last byte incremented.
    #[test]
    fn prefix_ends() {
        assert_eq!(prefix_end(b"/a/"), b"/a0".to_vec());
        assert_eq!(prefix_end(b"a\xff"), b"b".to_vec());
        assert_eq!(prefix_end(b""), vec![0]);
    }
}
