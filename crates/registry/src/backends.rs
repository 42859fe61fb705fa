//! Test support: a real etcd member for the etcd half of the tests, and the
//! macro that runs each test body over both key-value backends.

use toolmesh_procs::EtcdCluster;

/// A fresh one-member etcd cluster. Needs an `etcd` binary
/// (`scripts/test` installs it); without one the etcd half fails, never
/// skips.
pub(crate) async fn etcd_cluster() -> EtcdCluster {
    EtcdCluster::start(1)
        .await
        .unwrap_or_else(|e| panic!("the etcd half of these tests needs etcd: {e}"))
}

/// One test per backend for each body: `<body>::memory` and
/// `<body>::etcd` call it with what the calling module's `memory()` and
/// `etcd()` make.
macro_rules! on_both_backends {
    ($($body:ident),* $(,)?) => {
        $(
            mod $body {
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn memory() {
                    super::$body(super::memory().await).await;
                }

                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn etcd() {
                    super::$body(super::etcd().await).await;
                }
            }
        )*
    };
}

pub(crate) use on_both_backends;
