//! The one encoding of the records the registry stores (registrations,
//! health verdicts, rollouts), in etcd and in the embedded store alike.
//!
//! A value written now is one version byte, [`PROTOBUF`] (`0x01`), then the
//! record's protobuf message: `toolmesh.store.v1.ExecutorRecord`,
//! `toolmesh.store.v1.HealthRecord`, or the contract's `toolmesh.v1.Rollout`
//! (`proto/toolmesh/store/v1/records.proto`). The byte is what tells the
//! layouts apart: protobuf decoding is lenient enough to "read" many a JSON
//! document as some message, so bytes are never tried as one layout and
//! then the other. Registries before this one wrote each record as a JSON
//! document, which starts with `{` (after any whitespace), a byte no version
//! takes: such values are still read ([`legacy`]), so a store or state file
//! written by the previous version loses nothing, and each is written in
//! the new layout at its next change. Any other value is refused with what
//! it is, never read as some record.

mod legacy;

use crate::keys::{ExecRecord, HealthRecord};
use prost::Message;
use serde::de::DeserializeOwned;
use toolmesh::Rollout;
use toolmesh::pb;
use toolmesh::pb::store::HealthState;

/// The first byte of every value written now: protobuf, layout 1.
pub(crate) const PROTOBUF: u8 = 0x01;

/// A record the registry stores, and the forms it has been stored in.
pub(crate) trait StoredRecord: Sized {
    /// What it is, for messages.
    const KIND: &'static str;
    /// Its protobuf message.
    type Message: Message + Default;
    /// Its JSON document in the previous layout.
    type Legacy: DeserializeOwned;

    /// The message written for it.
    fn to_message(&self) -> Self::Message;
    /// The record a message holds; what is wrong when it holds none.
    fn from_message(message: Self::Message) -> Result<Self, String>;
    /// The record a JSON document of the previous layout holds.
    fn from_legacy(legacy: Self::Legacy) -> Result<Self, String>;
}

/// A stored value that holds no record.
#[derive(Debug, thiserror::Error)]
pub(crate) enum CodecError {
    /// Nothing was stored.
    #[error("stored {kind} is empty")]
    Empty {
        /// What was expected.
        kind: &'static str,
    },
    /// The first byte is neither a layout version nor the start of JSON.
    #[error(
        "stored {kind} starts with byte {byte:#04x}: neither protobuf (layout {PROTOBUF}) nor a JSON document of the previous layout; a newer registry may have written it"
    )]
    UnknownLayout {
        /// What was expected.
        kind: &'static str,
        /// The value's first byte.
        byte: u8,
    },
    /// The version byte says protobuf, the rest is not the message.
    #[error("stored {kind} is not valid protobuf: {source}")]
    Protobuf {
        /// What was expected.
        kind: &'static str,
        /// What prost found wrong.
        source: prost::DecodeError,
    },
    /// A JSON document that is not the record's previous layout.
    #[error("stored {kind} is not valid JSON of the previous layout: {source}")]
    Json {
        /// What was expected.
        kind: &'static str,
        /// What serde found wrong.
        source: serde_json::Error,
    },
    /// Well-formed, but not a record this build can use.
    #[error("stored {kind} cannot be used: {problem}")]
    Unusable {
        /// What was expected.
        kind: &'static str,
        /// What is wrong.
        problem: String,
    },
}

/// The value stored for `record`: the version byte, then its message.
pub(crate) fn encode<R: StoredRecord>(record: &R) -> Vec<u8> {
    let mut value = record.to_message().encode_to_vec();
    value.insert(0, PROTOBUF);
    value
}

/// The record a stored value holds, in the current layout or the previous one.
pub(crate) fn decode<R: StoredRecord>(value: &[u8]) -> Result<R, CodecError> {
    let kind = R::KIND;
    let unusable = |problem| CodecError::Unusable { kind, problem };
    match value.first() {
        None => Err(CodecError::Empty { kind }),
        Some(&PROTOBUF) => {
            let message = R::Message::decode(&value[1..])
                .map_err(|source| CodecError::Protobuf { kind, source })?;
            R::from_message(message).map_err(unusable)
        }
        Some(_) if value.trim_ascii_start().starts_with(b"{") => {
            let legacy = serde_json::from_slice(value)
                .map_err(|source| CodecError::Json { kind, source })?;
            R::from_legacy(legacy).map_err(unusable)
        }
        Some(&byte) => Err(CodecError::UnknownLayout { kind, byte }),
    }
}

impl StoredRecord for ExecRecord {
    const KIND: &'static str = "registration";
    type Message = pb::store::ExecutorRecord;
    type Legacy = ExecRecord;

    fn to_message(&self) -> pb::store::ExecutorRecord {
        pb::store::ExecutorRecord {
            owner: self.owner.clone(),
            service: self.service.clone(),
            endpoint: self.endpoint.clone(),
            execute_token: self.execute_token.clone(),
            ttl_ms: self.ttl_ms,
            tools: self.tools.clone(),
        }
    }

    fn from_message(message: pb::store::ExecutorRecord) -> Result<ExecRecord, String> {
        Ok(ExecRecord {
            owner: message.owner,
            service: message.service,
            endpoint: message.endpoint,
            execute_token: message.execute_token,
            ttl_ms: message.ttl_ms,
            tools: message.tools,
        })
    }

    fn from_legacy(legacy: ExecRecord) -> Result<ExecRecord, String> {
        Ok(legacy)
    }
}

impl StoredRecord for HealthRecord {
    const KIND: &'static str = "health verdict";
    type Message = pb::store::HealthRecord;
    type Legacy = HealthRecord;

    fn to_message(&self) -> pb::store::HealthRecord {
        let state = if self.healthy {
            HealthState::Serving
        } else {
            HealthState::NotServing
        };
        pb::store::HealthRecord {
            lease: self.lease,
            state: state.into(),
            reason: self.reason.clone(),
        }
    }

    fn from_message(message: pb::store::HealthRecord) -> Result<HealthRecord, String> {
        let healthy = match HealthState::try_from(message.state) {
            Ok(HealthState::Serving) => true,
            Ok(HealthState::NotServing) => false,
            Ok(HealthState::Unspecified) | Err(_) => {
                return Err(format!(
                    "health state {} is not one this build knows",
                    message.state
                ));
            }
        };
        Ok(HealthRecord {
            lease: message.lease,
            healthy,
            reason: message.reason,
        })
    }

    fn from_legacy(legacy: HealthRecord) -> Result<HealthRecord, String> {
        Ok(legacy)
    }
}

impl StoredRecord for Rollout {
    const KIND: &'static str = "rollout";
    type Message = pb::Rollout;
    type Legacy = legacy::LegacyRollout;

    fn to_message(&self) -> pb::Rollout {
        self.to_pb()
    }

    fn from_message(message: pb::Rollout) -> Result<Rollout, String> {
        Rollout::from_pb(&message).map_err(|bad| bad.problem)
    }

    fn from_legacy(legacy: legacy::LegacyRollout) -> Result<Rollout, String> {
        Rollout::try_from(legacy)
    }
}

#[cfg(test)]
pub(crate) mod tests;
