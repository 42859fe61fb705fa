//! Session facts kept by the registry instead of this process, so that
//! every dispatcher following it judges a precondition alike: the same
//! facts and rules as the local store, sent as digests (the registry never
//! sees a caller, a session id or an argument) in one `Registry.SessionFacts`
//! call per check or record, made only for tools that preconditions involve.

use super::{Declared, Fact, PreconditionError, SessionLimits, facts_of, verdict, wanted};
use crate::Principal;
use crate::digest::{hex, sha256};
use serde_json::Value;
use std::sync::Arc;
use std::time::Duration;
use tonic::transport::Channel;
use toolmesh::pb::{self, Precondition, registry_client::RegistryClient};

/// How long one exchange may wait for the registry.
const TIMEOUT: Duration = Duration::from_secs(3);

/// Where shared session facts are kept: the registry, over gRPC
/// ([`SessionRelay`]) or in the same process (a `serve` node).
#[tonic::async_trait]
pub trait SessionBackend: Send + Sync + 'static {
    /// Records and looks up facts of one session; the error says why the
    /// registry could not answer.
    async fn exchange(
        &self,
        request: pb::SessionFactsRequest,
    ) -> Result<pb::SessionFactsResponse, String>;
}

/// The registry's session facts, reached over gRPC.
#[derive(Debug, Clone)]
pub struct SessionRelay {
    client: RegistryClient<Channel>,
    token: Option<String>,
}

impl SessionRelay {
    /// A relay to the registry behind `channel`, authenticated with
    /// `token` (the dispatcher's registry token).
    pub fn new(channel: Channel, token: Option<String>) -> Self {
        SessionRelay {
            client: RegistryClient::new(channel),
            token,
        }
    }
}

#[tonic::async_trait]
impl SessionBackend for SessionRelay {
    async fn exchange(
        &self,
        message: pb::SessionFactsRequest,
    ) -> Result<pb::SessionFactsResponse, String> {
        let mut request = tonic::Request::new(message);
        request.set_timeout(TIMEOUT);
        if let Some(token) = &self.token {
            toolmesh_transport::set_bearer(request.metadata_mut(), token);
        }
        self.client
            .clone()
            .session_facts(request)
            .await
            .map(tonic::Response::into_inner)
            .map_err(|status| format!("{:?}: {}", status.code(), status.message()))
    }
}

/// Session facts in a registry's store, under this dispatcher's limits.
#[derive(Clone)]
pub struct SharedSessions {
    backend: Arc<dyn SessionBackend>,
    limits: SessionLimits,
}

impl std::fmt::Debug for SharedSessions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedSessions")
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

impl SharedSessions {
    /// Facts kept by `backend`, bounded by `limits` (idle time, sessions
    /// per caller, facts per session; the byte bounds are the local
    /// store's alone).
    pub fn new(backend: Arc<dyn SessionBackend>, limits: SessionLimits) -> Self {
        SharedSessions { backend, limits }
    }

    /// As [`Sessions::check`](super::Sessions::check), against the
    /// registry's facts.
    pub async fn check(
        &self,
        who: &Principal,
        session_id: &str,
        tool: &str,
        preconditions: &[Precondition],
        arguments: &Value,
    ) -> Result<(), PreconditionError> {
        if preconditions.is_empty() || session_id.is_empty() {
            return verdict(tool, session_id, preconditions, arguments, |_| false);
        }
        let check: Vec<String> = preconditions
            .iter()
            .filter_map(|p| wanted(p, arguments))
            .map(|fact| fact_digest(&fact))
            .collect();
        let held = self
            .exchange(who, session_id, Vec::new(), check)
            .await
            .map_err(|reason| PreconditionError::Unavailable {
                tool: tool.to_owned(),
                reason,
            })?
            .held;
        verdict(tool, session_id, preconditions, arguments, |fact| {
            held.contains(&fact_digest(fact))
        })
    }

    /// As [`Sessions::record`](super::Sessions::record), in the registry's
    /// facts; the error says why the registry could not take them.
    pub async fn record(
        &self,
        who: &Principal,
        session_id: &str,
        tool: &str,
        arguments: &Value,
        declared: &Declared,
    ) -> Result<(), String> {
        if session_id.is_empty() {
            return Ok(());
        }
        let facts: Vec<String> = facts_of(tool, arguments, declared)
            .iter()
            .map(fact_digest)
            .collect();
        if facts.is_empty() {
            return Ok(());
        }
        self.exchange(who, session_id, facts, Vec::new())
            .await
            .map(drop)
    }

    async fn exchange(
        &self,
        who: &Principal,
        session_id: &str,
        record: Vec<String>,
        check: Vec<String>,
    ) -> Result<pb::SessionFactsResponse, String> {
        let caller = who.key();
        let clamp = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
        self.backend
            .exchange(pb::SessionFactsRequest {
                caller: hex(&sha256(format!("caller\0{caller}").as_bytes())),
                session: hex(&sha256(
                    format!("session\0{caller}\0{session_id}").as_bytes(),
                )),
                record,
                check,
                idle_ms: clamp(self.limits.idle.as_millis() as usize),
                facts_per_session: clamp(self.limits.facts_per_session),
                sessions_per_caller: clamp(self.limits.sessions_per_caller),
            })
            .await
    }
}

/// The digest a fact travels as: of its tool, argument name and value digest.
fn fact_digest((tool, argument, value): &Fact) -> String {
    let mut bytes = Vec::with_capacity(tool.len() + argument.len() + 34);
    bytes.extend_from_slice(tool.as_bytes());
    bytes.push(0);
    bytes.extend_from_slice(argument.as_bytes());
    bytes.push(0);
    bytes.extend_from_slice(value);
    hex(&sha256(&bytes))
}
