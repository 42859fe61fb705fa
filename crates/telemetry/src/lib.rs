//! Telemetry every toolmesh server shares: Prometheus metrics ([`metrics`]),
//! the admin HTTP listener that serves them ([`admin`]) and OpenTelemetry
//! traces exported over OTLP with W3C trace context on gRPC metadata
//! ([`trace`]). Each server crate keeps its own small metrics module on top.
//! The HTTP doors (admin, `/mcp`) share their HTTPS ([`https`]) and their
//! Host/Origin allow-lists ([`guard`]).
#![forbid(unsafe_code)]

pub mod admin;
pub mod guard;
pub mod https;
pub mod metrics;
pub mod trace;

pub use admin::{AdminError, AdminOptions, AdminServer, metrics_routes};
pub use guard::{GuardRefusal, HostGuard};
pub use https::{ClientCertificate, HttpsError, TlsListener};
pub use metrics::{MetricsRegistry, ToolLabels};
