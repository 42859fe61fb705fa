//! A small etcd v3 client: the generated KV, Watch, Lease and Maintenance
//! stubs, endpoint failover, and leader-required watches.
#![forbid(unsafe_code)]

mod client;
mod error;
mod watch;

pub use client::{Client, parse_store_url};
pub use error::EtcdError;
pub use watch::{WatchBatch, WatchStream};

/// The generated etcd v3 messages and clients (a vendored subset of etcd's
/// `rpc.proto` and `kv.proto`).
#[allow(missing_docs, unreachable_pub, clippy::all)]
pub mod pb {
    /// etcd's `mvccpb`: keys, values and watch events.
    pub mod mvccpb {
        tonic::include_proto!("mvccpb");
    }
    /// etcd's `etcdserverpb`: the KV, Watch, Lease and Maintenance services.
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
