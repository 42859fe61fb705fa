//! The composition root of a toolmesh server process: which halves run
//! ([`Role`]), their settings ([`NodeConfig`]), and [`start`] / [`run`],
//! which wire registry, dispatcher, governance, `grpc.health.v1` and
//! reflection onto one listener and drain them on shutdown. The CLI maps its
//! flags into a [`NodeConfig`]; tests and the bench call the same functions.
#![forbid(unsafe_code)]

mod admin;
mod approval_backlog;
mod config;
mod error;
mod governance;
mod issuer_health;
mod issuer_metrics;
mod lanes;
mod readiness;
mod registry_records;
mod rollouts;
mod server;

pub use admin::{
    AdminState, ApprovalView, CallsView, ChangeView, InstanceView, RolloutView, ToolView,
};
pub use config::{NodeConfig, Role};
pub use error::NodeError;
pub use governance::{PolicyGate, PolicySetup, audit_sink, load_policy};
pub use server::{Running, run, start};
/// How a node reaches etcd (part of [`NodeConfig`]).
pub use toolmesh_registry::EtcdAccess;
