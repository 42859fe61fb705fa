//! Rollouts (canaries) in the registry: the requests operators and
//! dispatchers make, the rules applied to them, how a rollout is written
//! over the key-value seam, and the desk that makes each change and tells
//! the journal.

mod desk;
mod error;
mod request;
mod rules;
mod writes;

pub use desk::{DecisionJournal, RolloutDesk};
pub use error::RolloutError;
pub use request::{RolloutChange, RolloutRequest};
pub(crate) use rules::{apply, now_ms, status};
pub(crate) use writes::write;

#[cfg(test)]
mod tests;
