//! Why an executor could not start, and why it refused a call's arguments.

use std::net::SocketAddr;
use toolmesh::pb::ErrorCode;
use toolmesh::schema::{ArgumentsError, Violations};
use toolmesh::spec::SpecError;
use toolmesh_transport::Unroutable;

/// Why an executor could not start or stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum ExecutorError {
    /// The service name is empty.
    #[error("the executor's service name is empty; name the team or service that owns the tools")]
    EmptyService,
    /// No tool was added.
    #[error("executor {0} has no tools; add at least one with Executor::tool")]
    NoTools(String),
    /// Two tools share a name.
    #[error("tool {0:?} was added twice; every tool of an executor needs its own name")]
    DuplicateTool(String),
    /// A tool's spec does not validate.
    #[error("tool {tool:?} has an invalid spec: {reason}")]
    InvalidTool {
        /// The tool's name.
        tool: String,
        /// What is wrong with its spec.
        reason: SpecError,
    },
    /// The registry address is not `host:port`.
    #[error("registry {0}")]
    BadRegistry(#[from] toolmesh_transport::BadAddress),
    /// The listen address could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address asked for.
        addr: SocketAddr,
        /// What the OS said.
        source: std::io::Error,
    },
    /// The endpoint to register cannot be dialled by a dispatcher.
    #[error("this executor would register {endpoint:?}, which dispatchers cannot reach: {reason}; {hint}", hint = toolmesh_transport::ADVERTISE_HINT)]
    Unroutable {
        /// The advertised endpoint, or the listen address when none is advertised.
        endpoint: String,
        /// Why it cannot be dialled.
        reason: Unroutable,
    },
    /// The health-only listener could not be bound.
    #[error("cannot listen for health checks on {addr} (--health-listen): {source}")]
    HealthBind {
        /// The address asked for.
        addr: SocketAddr,
        /// What the OS said.
        source: std::io::Error,
    },
    /// The gRPC server failed.
    #[error("gRPC server failed: {0}")]
    Serve(#[from] tonic::transport::Error),
    /// The server task ended abnormally.
    #[error("gRPC server task ended abnormally: {0}")]
    ServerTask(String),
    /// The admin listener (`/metrics`) could not start.
    #[error(transparent)]
    Admin(#[from] toolmesh_telemetry::AdminError),
    /// The TLS files cannot serve the admin listener over HTTPS.
    #[error(transparent)]
    Https(#[from] toolmesh_telemetry::HttpsError),
    /// Traces could not be exported as asked.
    #[error(transparent)]
    Trace(#[from] toolmesh_telemetry::trace::TraceError),
}

/// Arguments a tool's input schema refuses (answered `INVALID_ARGUMENTS`).
#[derive(Debug, thiserror::Error)]
pub(crate) enum BadArguments {
    /// Not JSON, or a key repeated in one object.
    #[error("calling {tool}: {source}")]
    Unreadable {
        /// The tool's name.
        tool: String,
        /// What is wrong with the text.
        source: ArgumentsError,
    },
    /// The tool's input schema, which compiled when the executor started,
    /// did not compile when the first call needed it (not expected).
    #[error("the input schema of {tool} could not be compiled: {source}")]
    SchemaUnusable {
        /// The tool's name.
        tool: String,
        /// Why.
        source: toolmesh::schema::SchemaError,
    },
    /// JSON the input schema does not accept.
    #[error("arguments for {tool} do not match its input schema: {violations}")]
    Invalid {
        /// The tool's name.
        tool: String,
        /// Every failing path.
        violations: Violations,
    },
}

impl BadArguments {
    /// The error code the caller reads: its arguments' fault, except for a
    /// schema that would not compile (the tool's).
    pub(crate) fn code(&self) -> ErrorCode {
        match self {
            BadArguments::SchemaUnusable { .. } => ErrorCode::ExecutorFailed,
            BadArguments::Unreadable { .. } | BadArguments::Invalid { .. } => {
                ErrorCode::InvalidArguments
            }
        }
    }
}

/// Why an executor does not run a call it was sent: the caller reads it as
/// the call's error.
#[derive(Debug, thiserror::Error)]
pub(crate) enum NotServed {
    /// No tool of that name here (answered `NOT_FOUND`).
    #[error("executor {executor_id} has no tool {shown:?}; {hint}")]
    NoSuchTool {
        executor_id: String,
        /// The start of the name asked for.
        shown: String,
        /// The names nearest it, or every name served.
        hint: String,
    },
    /// The tool's spec does not validate (answered `EXECUTOR_FAILED`).
    #[error("tool {tool} cannot run on executor {executor_id}: its spec is invalid ({reason})")]
    InvalidSpec {
        tool: String,
        executor_id: String,
        reason: SpecError,
    },
    /// Another version of the tool is served (answered `NOT_FOUND`).
    #[error("tool {label} is not served by executor {executor_id}; it serves version {served}")]
    OtherVersion {
        /// `name@version` as asked for.
        label: String,
        executor_id: String,
        served: String,
    },
}

impl NotServed {
    /// The code the caller reads.
    pub(crate) fn code(&self) -> toolmesh::pb::ErrorCode {
        match self {
            NotServed::NoSuchTool { .. } | NotServed::OtherVersion { .. } => {
                toolmesh::pb::ErrorCode::NotFound
            }
            NotServed::InvalidSpec { .. } => toolmesh::pb::ErrorCode::ExecutorFailed,
        }
    }
}
