//! Approvals kept by the registry instead of this process: the book a
//! dispatcher uses when it follows a registry, so that every dispatcher of
//! the mesh sees the same tickets. One `Registry.Approvals` RPC per
//! operation, made only for calls that need or carry an approval.

use super::stored::StoredTicket;
use super::{ApprovalError, ApprovalSettings, ApprovalTicket};
use crate::Principal;
use std::time::Duration;
use tonic::transport::Channel;
use toolmesh::pb::{self, registry_client::RegistryClient};

/// How long one approval operation may wait for the registry.
const TIMEOUT: Duration = Duration::from_secs(3);

/// One operation on the shared book.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ApprovalOp {
    /// Ask for an approval (or get the open one for the same call).
    Request,
    /// Use an approved ticket.
    Consume,
    /// Approve a ticket.
    Approve,
    /// Deny a ticket.
    Deny,
    /// The pending tickets the principal may see. (There is no view of
    /// every tenant's tickets: the admin page lists what its reader may.)
    List,
}

impl ApprovalOp {
    /// The op's name on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            ApprovalOp::Request => "request",
            ApprovalOp::Consume => "consume",
            ApprovalOp::Approve => "approve",
            ApprovalOp::Deny => "deny",
            ApprovalOp::List => "list",
        }
    }

    /// Reads an op's name.
    pub fn parse(name: &str) -> Option<ApprovalOp> {
        [
            ApprovalOp::Request,
            ApprovalOp::Consume,
            ApprovalOp::Approve,
            ApprovalOp::Deny,
            ApprovalOp::List,
        ]
        .into_iter()
        .find(|op| op.as_str() == name)
    }
}

/// Where a dispatcher's approvals are kept when not in its own process:
/// the registry's shared book, over gRPC ([`ApprovalRelay`]) or in the
/// same process (a `serve` node).
#[tonic::async_trait]
pub trait ApprovalBackend: Send + Sync + 'static {
    /// Runs `op` on the shared book; the tickets it answered with.
    async fn call(
        &self,
        op: ApprovalOp,
        principal: &Principal,
        settings: &ApprovalSettings,
        fields: ApprovalFields<'_>,
    ) -> Result<Vec<ApprovalTicket>, ApprovalError>;
}

/// The registry's approval book, reached over gRPC.
#[derive(Debug, Clone)]
pub struct ApprovalRelay {
    client: RegistryClient<Channel>,
    token: Option<String>,
}

impl ApprovalRelay {
    /// A relay to the registry behind `channel`, authenticated with
    /// `token` (the dispatcher's registry token).
    pub fn new(channel: Channel, token: Option<String>) -> Self {
        ApprovalRelay {
            client: RegistryClient::new(channel),
            token,
        }
    }
}

#[tonic::async_trait]
impl ApprovalBackend for ApprovalRelay {
    async fn call(
        &self,
        op: ApprovalOp,
        principal: &Principal,
        settings: &ApprovalSettings,
        fields: ApprovalFields<'_>,
    ) -> Result<Vec<ApprovalTicket>, ApprovalError> {
        let unavailable = |reason: String| ApprovalError::Unavailable { reason };
        let message = pb::ApprovalsRequest {
            op: op.as_str().to_owned(),
            principal_json: serde_json::to_string(principal)
                .map_err(|e| unavailable(e.to_string()))?,
            settings_json: serde_json::to_string(settings)
                .map_err(|e| unavailable(e.to_string()))?,
            id: fields.id.to_owned(),
            tool: fields.tool.to_owned(),
            version: fields.version.to_owned(),
            arguments_sha256: fields.args_sha256.to_owned(),
            summary: fields.summary.to_owned(),
            reason: fields.reason.to_owned(),
        };
        let mut request = tonic::Request::new(message);
        request.set_timeout(TIMEOUT);
        if let Some(token) = &self.token {
            toolmesh_transport::set_bearer(request.metadata_mut(), token);
        }
        let response = self
            .client
            .clone()
            .approvals(request)
            .await
            .map_err(|status| unavailable(format!("{:?}: {}", status.code(), status.message())))?
            .into_inner();
        decode_response(response)
    }
}

/// The request fields an operation uses (the others stay empty).
#[derive(Debug, Clone, Copy, Default)]
pub struct ApprovalFields<'a> {
    /// The ticket (consume, approve, deny).
    pub id: &'a str,
    /// The tool (request, consume).
    pub tool: &'a str,
    /// Its version (request, consume).
    pub version: &'a str,
    /// The arguments' digest (request, consume).
    pub args_sha256: &'a str,
    /// What the approver reads (request).
    pub summary: &'a str,
    /// Why (deny).
    pub reason: &'a str,
}

/// The wire answer of an operation: its tickets, or the error it refused with.
pub fn encode_response(
    result: Result<Vec<ApprovalTicket>, ApprovalError>,
) -> pb::ApprovalsResponse {
    match result {
        Ok(tickets) => pb::ApprovalsResponse {
            tickets_json: tickets
                .iter()
                .filter_map(|t| serde_json::to_string(&StoredTicket::from(t)).ok())
                .collect(),
            error_json: String::new(),
        },
        Err(error) => pb::ApprovalsResponse {
            tickets_json: Vec::new(),
            error_json: serde_json::to_string(&error).unwrap_or_default(),
        },
    }
}

fn decode_response(response: pb::ApprovalsResponse) -> Result<Vec<ApprovalTicket>, ApprovalError> {
    if !response.error_json.is_empty() {
        return Err(
            serde_json::from_str(&response.error_json).unwrap_or_else(|e| {
                ApprovalError::Unavailable {
                    reason: format!("the registry's answer could not be read ({e})"),
                }
            }),
        );
    }
    response
        .tickets_json
        .iter()
        .map(|json| {
            serde_json::from_str::<StoredTicket>(json)
                .map(ApprovalTicket::from)
                .map_err(|e| ApprovalError::Unavailable {
                    reason: format!("the registry's answer could not be read ({e})"),
                })
        })
        .collect()
}
