//! Example executors written with the toolmesh SDK the way a team would:
//! typed arguments with strict schemas (required fields, enums, no extra
//! properties), descriptions written for the model, data as in-process
//! fixtures (`files` works on a real directory, see [`files`]).
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! use toolmesh_examples::{example, ExampleOptions};
//! let accounts = example("accounts", &ExampleOptions::default()).unwrap();
//! let result = accounts
//!     .call("get_user_info", serde_json::json!({"user_id": "u_1"}))
//!     .await;
//! assert!(result.output.contains("Ada Lovelace"));
//! # }
//! ```
#![forbid(unsafe_code)]

pub mod accounts;
pub mod files;
mod flags;
pub mod knowledge;
pub mod support;

pub use flags::{OpsFlags, ServeFlags, TlsFlags};
use std::future::Future;
use std::path::PathBuf;
use toolmesh_executor::{Executor, ExecutorError, ServeOptions};

/// Options shared by the examples.
#[derive(Debug, Clone, Default)]
pub struct ExampleOptions {
    /// For `files`: the directory the file tools are confined to (created
    /// if missing). `None` means a fresh `toolmesh-files-<pid>` directory
    /// under the system temp dir, seeded with a few fixture files.
    pub files_root: Option<PathBuf>,
}

/// The example executors, by name.
pub const EXAMPLE_NAMES: [&str; 4] = ["knowledge", "accounts", "support", "files"];

/// The example executor called `name` (one of [`EXAMPLE_NAMES`]), or `None`.
pub fn example(name: &str, opts: &ExampleOptions) -> Option<Executor> {
    Some(match name {
        "knowledge" => knowledge::executor(),
        "accounts" => accounts::executor(),
        "support" => support::executor(),
        "files" => files::executor(opts.files_root.clone()),
        _ => return None,
    })
}

/// Serves `executor` as `toolmesh example NAME` does until `shutdown`:
/// binds, prints the `toolmesh example NAME (ID) listening on ADDR` line
/// that scripts and tests read (and `toolmesh example NAME health checks on
/// ADDR` with a health-only listener), then serves, registers and drains.
pub async fn serve(
    name: &str,
    executor: Executor,
    options: ServeOptions,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), ExecutorError> {
    let bound = executor.bind(options).await?;
    println!(
        "toolmesh example {name} ({}) listening on {}",
        bound.executor_id(),
        bound.local_addr()
    );
    if let Some(addr) = bound.health_addr() {
        println!("toolmesh example {name} health checks on {addr}");
    }
    if let Some(admin) = bound.admin_url() {
        println!("toolmesh admin listening on {admin}");
    }
    bound.run(shutdown).await
}
