//! Talking to a toolmesh dispatcher: which tools it lists, and waiting
//! (polling) until a tool appears or leaves.

use crate::error::BenchError;
use std::time::Duration;
use tokio::time::Instant;
use tonic::transport::Channel;
use toolmesh::pb::{
    GetSnapshotRequest, ListToolsRequest, ToolFormat, dispatcher_client::DispatcherClient,
    registry_client::RegistryClient,
};
use toolmesh_transport::{MAX_SNAPSHOT_MESSAGE_BYTES, Tls};

/// A Dispatcher client for `addr` speaking `tls` that accepts tool lists
/// of any size.
pub(crate) fn dispatcher_client(
    addr: &str,
    tls: &Tls,
) -> Result<DispatcherClient<Channel>, BenchError> {
    Ok(
        DispatcherClient::new(toolmesh_transport::channel(addr, tls)?)
            .max_decoding_message_size(MAX_SNAPSHOT_MESSAGE_BYTES),
    )
}

/// The token the bench's registries admit dispatchers with: under the
/// development policy (`--dev-dispatcher-token`), or as the `dispatcher`
/// caller of a policy it writes. No anonymous caller is a dispatcher.
pub(crate) const DISPATCHER_TOKEN: &str = "bench-dispatcher";

/// The token the executor at `endpoint` accepts Execute calls with, read
/// from the snapshot of the registry at `registry` (as a dispatcher would,
/// with [`DISPATCHER_TOKEN`], speaking `tls`; empty when it asked for
/// none). A direct call needs it.
pub(crate) async fn execute_token(
    registry: &str,
    endpoint: &str,
    tls: &Tls,
) -> Result<String, BenchError> {
    let channel = toolmesh_transport::channel(registry, tls)?;
    let mut request = tonic::Request::new(GetSnapshotRequest::default());
    let bearer = format!("Bearer {DISPATCHER_TOKEN}")
        .parse()
        .expect("a token fits a header");
    request.metadata_mut().insert("authorization", bearer);
    let snapshot = RegistryClient::new(channel)
        .max_decoding_message_size(MAX_SNAPSHOT_MESSAGE_BYTES)
        .get_snapshot(request)
        .await
        .map_err(|s| BenchError::rpc("Registry::GetSnapshot", s))?
        .into_inner();
    Ok(snapshot
        .tools
        .iter()
        .flat_map(|t| &t.instances)
        .find(|i| i.endpoint == endpoint)
        .map(|i| i.execute_token.clone())
        .unwrap_or_default())
}

/// Whether ListTools lists `tool` right now (on any page).
pub(crate) async fn is_listed(
    client: &mut DispatcherClient<Channel>,
    tool: &str,
) -> Result<bool, tonic::Status> {
    let request = ListToolsRequest {
        format: ToolFormat::Native as i32,
        ..ListToolsRequest::default()
    };
    let listing = crate::scale::list_over_grpc(client, request).await?;
    Ok(listing.tools.iter().any(|t| t.name == tool))
}

/// Polls ListTools every `poll` until `tool` is listed (`want`) or not;
/// returns the time since `since`, or `None` when that took over `limit`.
/// A failed ListTools counts as "not yet".
pub(crate) async fn until_listed(
    client: &mut DispatcherClient<Channel>,
    tool: &str,
    want: bool,
    since: Instant,
    limit: Duration,
    poll: Duration,
) -> Option<Duration> {
    loop {
        if is_listed(client, tool).await.ok() == Some(want) {
            return Some(since.elapsed());
        }
        if since.elapsed() > limit {
            return None;
        }
        tokio::time::sleep(poll).await;
    }
}

/// Like [`until_listed`] from now, as an error when it takes over `limit`.
pub(crate) async fn wait_listed(
    client: &mut DispatcherClient<Channel>,
    tool: &str,
    want: bool,
    limit: Duration,
) -> Result<(), BenchError> {
    until_listed(
        client,
        tool,
        want,
        Instant::now(),
        limit,
        Duration::from_millis(5),
    )
    .await
    .map(|_| ())
    .ok_or_else(|| {
        let state = if want { "listed" } else { "unlisted" };
        BenchError::timeout(format!("{tool} to be {state} by the dispatcher"), limit)
    })
}
