//! Helpers the toolmesh tests share, so each test says only what it pins:
//! the `toolmesh` binary, temporary directories that clean up, gRPC servers
//! on 127.0.0.1 port 0, bearer tokens, and polling instead of sleeps.

use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};
use tokio::net::TcpListener;
use tokio_stream::wrappers::TcpListenerStream;
use tonic::transport::server::Router;

/// The `toolmesh` binary beside the running test executable (or
/// `$TOOLMESH_BIN`), built once with cargo if it is not there yet.
pub fn toolmesh_bin() -> PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        if let Ok(path) = std::env::var("TOOLMESH_BIN") {
            return PathBuf::from(path);
        }
        let exe = std::env::current_exe().expect("test executable path");
        let profile_dir = exe
            .parent()
            .and_then(Path::parent)
            .expect("target/<profile>");
        let bin = profile_dir.join(format!("toolmesh{}", std::env::consts::EXE_SUFFIX));
        if !bin.exists() {
            let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
            let status = Command::new(cargo)
                .args(["build", "-p", "toolmesh-cli", "--bin", "toolmesh"])
                .status()
                .expect("run cargo build");
            assert!(status.success(), "building the toolmesh binary failed");
        }
        bin
    })
    .clone()
}

/// A fresh directory under the system temp dir, removed on drop.
#[derive(Debug)]
pub struct TempDir(PathBuf);

impl TempDir {
    /// Creates `toolmesh-<label>-<pid>-<random>`.
    pub fn new(label: &str) -> Self {
        let dir = std::env::temp_dir().join(format!(
            "toolmesh-{label}-{}-{}",
            std::process::id(),
            uuid::Uuid::new_v4().simple()
        ));
        std::fs::create_dir_all(&dir).expect("create temp dir");
        TempDir(dir)
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.0
    }

    /// A path inside it.
    pub fn join(&self, name: impl AsRef<Path>) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A request with `authorization: Bearer TOKEN` when a token is given.
pub fn with_token<T>(message: T, token: Option<&str>) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    if let Some(token) = token {
        request.metadata_mut().insert(
            "authorization",
            format!("Bearer {token}")
                .parse()
                .expect("a token fits a header"),
        );
    }
    request
}

/// Serves `router` on 127.0.0.1 port 0 in the background; its address.
pub async fn serve_router(router: Router) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind loopback");
    let addr = listener.local_addr().expect("local address");
    tokio::spawn(router.serve_with_incoming(TcpListenerStream::new(listener)));
    addr
}

/// Polls `check` every 10 ms until it returns `Some`; panics naming `what`
/// after `timeout`.
pub async fn eventually<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
