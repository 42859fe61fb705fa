//! Rollouts (canaries) in the registry: the requests operators and
//! dispatchers make, the rules applied to them, the record kept and
//! how it is written over the key-value seam, and the desk that makes each change and tells the journal.

mod desk;
mod error;
mod record;
mod request;
mod rules;
mod writes;

pub use desk::{DecisionJournal, RolloutDesk};
pub use error::RolloutError;
pub(crate) use record::RolloutRecord;
pub use request::{RolloutChange, RolloutRequest};
pub(crate) use rules::{apply, now_ms, status};
pub(crate) use writes::{decode, write};

#[cfg(test)]
mod tests;
