//! Why a bridge could not start or stopped: every error names the upstream or the flag at fault and what to do.

use crate::mapping::ToolProblem;
use toolmesh_executor::ExecutorError;

/// Why a bridge could not start or stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum BridgeError {
    /// No command after `--`.
    #[error(
        "no upstream MCP server: give its command after `--` (e.g. `-- npx -y @modelcontextprotocol/server-everything`) or its address with --url"
    )]
    NoCommand,
    /// The URL is not one the bridge can reach.
    #[error("--url {0:?} is not an MCP server address: {1}")]
    BadUrl(String, String),
    /// A `--url-ca` file that holds no usable certificate.
    #[error(
        "--url-ca {path}: {reason}; give a PEM file with the certificate of the CA that signed the server's certificate"
    )]
    BadCa {
        /// The file.
        path: String,
        /// What was wrong with it.
        reason: String,
    },
    /// A `--url-cert` or `--url-key` file that cannot serve as the
    /// bridge's client certificate.
    #[error(
        "{flag} {path}: {reason}; give --url-cert a PEM file with the bridge's client certificate (and any intermediates) and --url-key a PEM file with its private key (PKCS#8, RSA or SEC1)"
    )]
    BadIdentity {
        /// The flag, with its dashes.
        flag: &'static str,
        /// The file.
        path: String,
        /// What was wrong with it.
        reason: String,
    },
    /// A client certificate without its key, or a key alone.
    #[error("{0} needs {1}: a client certificate is given as both its certificate and its key")]
    HalfIdentity(&'static str, &'static str),
    /// A `--header` that does not parse.
    #[error("--header {0:?}: {1}")]
    BadHeader(String, String),
    /// The command could not be started.
    #[error(
        "cannot start the MCP server {command}: {source}; check the command after `--` (is it installed and on PATH?)"
    )]
    Spawn {
        /// The command line.
        command: String,
        /// What the OS said.
        source: std::io::Error,
    },
    /// The upstream did not open a session.
    #[error("the MCP server {upstream} did not open a session: {reason}")]
    Connect {
        /// The command line or URL.
        upstream: String,
        /// What went wrong.
        reason: String,
    },
    /// The upstream did not list its tools.
    #[error("the MCP server {upstream} did not list its tools: {reason}")]
    List {
        /// The command line or URL.
        upstream: String,
        /// What went wrong.
        reason: String,
    },
    /// Selected tools that cannot join the mesh.
    #[error("{}", problems(.0))]
    Tools(Vec<ToolProblem>),
    /// Nothing to expose.
    #[error("{upstream} offers no tool to expose{selected}; it offers: {offered}")]
    NoTools {
        /// The upstream, as "the MCP server `cmd`", "the gRPC service at
        /// HOST:PORT" or "the HTTP API described by URL".
        upstream: String,
        /// ` matching --tools …` (or `--methods`, `--operations`), when given.
        selected: String,
        /// The upstream's tool names, or "nothing".
        offered: String,
    },
    /// A `--target` the gRPC bridge cannot reach.
    #[error("--target {0:?} is not a gRPC service address: {1}")]
    BadTarget(String, String),
    /// A `--services` name the target does not serve.
    #[error("--services {0}: the gRPC service at {1} does not serve it; it serves: {2}")]
    NoService(String, String, String),
    /// The target did not answer server reflection, or answered with
    /// descriptors that do not fit together.
    #[error(
        "the gRPC service at {target} did not describe itself by server reflection (grpc.reflection.v1 or v1alpha): {reason}"
    )]
    Reflection {
        /// HOST:PORT or the URL.
        target: String,
        /// What went wrong.
        reason: String,
    },
    /// A `--spec` that is neither a URL nor a file name.
    #[error("--spec {0:?} is not an OpenAPI document's URL or file: {1}")]
    BadSpec(String, String),
    /// A `--base-url` that is not an http(s) URL.
    #[error("--base-url {0:?}: write it as http://HOST:PORT/PATH or https://HOST/PATH")]
    BadBaseUrl(String),
    /// The OpenAPI document could not be fetched or read, or names no
    /// server to call.
    #[error("the OpenAPI document {spec} could not be used: {reason}")]
    Document {
        /// Its URL or file.
        spec: String,
        /// What went wrong.
        reason: String,
    },
    /// The document is not one the bridge reads.
    #[error(
        "the document {spec} cannot be bridged: {reason}; give an OpenAPI 3.0 or 3.1 document in JSON or YAML"
    )]
    NotOpenApi {
        /// Its URL or file.
        spec: String,
        /// What it is instead.
        reason: String,
    },
    /// `--bearer-file`, `--bearer-env` or `--header-env` that gives no
    /// usable credential.
    #[error("{0}")]
    Credentials(String),
    /// The task that follows the upstream stopped unexpectedly.
    #[error(
        "the bridge stopped following the upstream MCP server ({0}); it drained and exits so it can be started again"
    )]
    Supervisor(String),
    /// The executor could not start or failed.
    #[error(transparent)]
    Executor(#[from] ExecutorError),
}

impl BridgeError {
    /// Whether the command line is at fault (a flag or the upstream's
    /// tools as the flags select them), rather than the environment.
    pub fn is_usage(&self) -> bool {
        match self {
            BridgeError::NoCommand
            | BridgeError::BadUrl(..)
            | BridgeError::BadCa { .. }
            | BridgeError::BadIdentity { .. }
            | BridgeError::HalfIdentity(..)
            | BridgeError::BadHeader(..)
            | BridgeError::Spawn { .. }
            | BridgeError::Tools(_)
            | BridgeError::BadTarget(..)
            | BridgeError::NoService(..)
            | BridgeError::BadSpec(..)
            | BridgeError::BadBaseUrl(..)
            | BridgeError::NotOpenApi { .. }
            | BridgeError::Credentials(_)
            | BridgeError::NoTools { .. } => true,
            BridgeError::Executor(e) => matches!(
                e,
                ExecutorError::Unroutable { .. } | ExecutorError::BadRegistry(_)
            ),
            BridgeError::Connect { .. }
            | BridgeError::List { .. }
            | BridgeError::Reflection { .. }
            | BridgeError::Document { .. }
            | BridgeError::Supervisor(_) => false,
        }
    }
}

/// An upstream that did not answer a `ping`: it is gone.
#[derive(Debug, thiserror::Error)]
#[error("it did not answer ping ({0})")]
pub(crate) struct NoPong(pub(crate) rmcp::service::ServiceError);

fn problems(problems: &[ToolProblem]) -> String {
    let noun = problems
        .first()
        .map_or("tool", |problem| problem.offered_by.noun());
    let mut text = format!(
        "{} of the upstream's {noun}s cannot join the mesh:",
        problems.len()
    );
    for problem in problems {
        text.push_str("\n  - ");
        text.push_str(&problem.to_string());
    }
    text
}
