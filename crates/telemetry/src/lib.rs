//! Telemetry every toolmesh server shares: Prometheus metrics ([`metrics`]),
//! the admin HTTP listener that serves them ([`admin`]) and OpenTelemetry
//! traces exported over OTLP with W3C trace context on gRPC metadata
//! ([`trace`]). Each server crate keeps its own small metrics module on top.
#![forbid(unsafe_code)]

pub mod admin;
pub mod metrics;
pub mod trace;

pub use admin::{AdminError, AdminServer};
pub use metrics::{MetricsRegistry, ToolLabels};
