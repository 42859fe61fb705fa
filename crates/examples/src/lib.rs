//! Example executors written with the toolmesh SDK the way a team would:
//! typed arguments with strict schemas (required fields, enums, no extra
//! properties), descriptions written for the model, data as in-process
//! fixtures.
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

pub mod acceptance;
pub mod accounts;
pub mod knowledge;
pub mod support;

use std::path::PathBuf;
use toolmesh_executor::Executor;

/// Options shared by the examples.
#[derive(Debug, Clone, Default)]
pub struct ExampleOptions {
    /// For `acceptance`: a file to which every execution appends one JSON
    /// line `{"call_id","tool","attempt","executor_id"}`.
    pub ledger: Option<PathBuf>,
}

/// The example executors, by name.
pub const EXAMPLE_NAMES: [&str; 4] = ["knowledge", "accounts", "support", "acceptance"];

/// The example executor called `name` (one of [`EXAMPLE_NAMES`]), or `None`.
pub fn example(name: &str, opts: &ExampleOptions) -> Option<Executor> {
    Some(match name {
        "knowledge" => knowledge::executor(),
        "accounts" => accounts::executor(),
        "support" => support::executor(),
        "acceptance" => acceptance::executor(opts.ledger.clone()),
        _ => return None,
    })
}
