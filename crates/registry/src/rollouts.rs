//! Rollouts (canaries) in the registry: the requests operators and
//! dispatchers make, the rules both stores apply to them, the record both
//! stores keep, and the desk that makes each change and tells the journal.

mod desk;
mod error;
mod record;
mod request;
mod rules;

pub use desk::{DecisionJournal, RolloutDesk};
pub use error::RolloutError;
pub(crate) use record::RolloutRecord;
pub use request::{RolloutChange, RolloutRequest};
pub(crate) use rules::{apply, now_ms, status};

#[cfg(test)]
mod tests;
