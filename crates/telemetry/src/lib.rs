//! Telemetry every toolmesh server shares: Prometheus metrics ([`metrics`]),
//! the admin HTTP listener that serves them ([`admin`]) and OpenTelemetry
//! traces exported over OTLP with W3C trace context on gRPC metadata
//! ([`trace`]). `/metrics` answers in the format the scraper asks for
//! ([`exposition`]); a process' registry carries the `process_*` metrics
//! and `toolmesh_build_info`. Each server crate keeps its own small
//! metrics module on top.
//! The HTTP doors (admin, `/mcp`) share their HTTPS ([`https`]) and their
//! Host/Origin allow-lists ([`guard`]).
#![forbid(unsafe_code)]

pub mod admin;
pub mod exposition;
pub mod guard;
pub mod https;
pub mod metrics;
mod process;
pub mod trace;

pub use admin::{AdminError, AdminOptions, AdminServer, metrics_routes};
pub use exposition::Exposition;
pub use guard::{GuardRefusal, HostGuard};
pub use https::{ClientCertificate, HttpsError, TlsListener};
pub use metrics::{MetricsRegistry, ToolLabels};
