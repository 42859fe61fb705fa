//! Client channels to other servers of the mesh, and the addresses they take.

use super::{CONNECT_TIMEOUT, Keepalive, LATE_ANSWERS_REFUSED, Tls};
use tonic::transport::{Channel, Endpoint};

/// A bad `host:port`.
#[derive(Debug, thiserror::Error)]
#[error("address {0:?} is not host:port (for example 127.0.0.1:7070)")]
pub struct BadAddress(pub String);

/// A lazily connecting channel to a server of the mesh at `host:port` (or
/// a full URI): TCP_NODELAY, a connect timeout and HTTP/2 keepalives so a
/// dead peer is noticed ([`Keepalive::MESH`]); TLS when `tls` has a CA
/// ([`Tls::client`]).
///
/// Several addresses separated by commas (`a:7070,b:7070`: the replicas of
/// a registry) make one channel that spreads calls over the replicas it can
/// reach, so a call retried after a failure finds a live one.
pub fn channel(address: &str, tls: &Tls) -> Result<Channel, BadAddress> {
    let mut endpoints = endpoints(address, tls, Keepalive::MESH)?;
    if address.contains(',') {
        return Ok(Channel::balance_list(endpoints.into_iter()));
    }
    Ok(endpoints.remove(0).connect_lazy())
}

/// A lazily connecting channel to one executor: as [`channel`], with the
/// pings every gRPC server permits by default ([`Keepalive::EXECUTOR`]).
pub fn executor_channel(address: &str, tls: &Tls) -> Result<Channel, BadAddress> {
    Ok(endpoint(address, tls, Keepalive::EXECUTOR)?.connect_lazy())
}

/// `address` if [`channel`] can dial it, checked without making a channel
/// (a flag is read before the runtime that would run one starts).
pub fn dial_address(address: &str) -> Result<String, BadAddress> {
    endpoints(address, &Tls::none(), Keepalive::MESH)?;
    Ok(address.to_owned())
}

/// The endpoints of `address`: one, or the replicas separated by commas.
fn endpoints(address: &str, tls: &Tls, keepalive: Keepalive) -> Result<Vec<Endpoint>, BadAddress> {
    if !address.contains(',') {
        return Ok(vec![endpoint(address, tls, keepalive)?]);
    }
    let endpoints = address
        .split(',')
        .map(str::trim)
        .filter(|a| !a.is_empty())
        .map(|a| endpoint(a, tls, keepalive))
        .collect::<Result<Vec<_>, _>>()?;
    if endpoints.is_empty() {
        return Err(BadAddress(address.to_owned()));
    }
    Ok(endpoints)
}

/// The endpoint of one `host:port` (or full URI) with the mesh's settings.
fn endpoint(address: &str, tls: &Tls, keepalive: Keepalive) -> Result<Endpoint, BadAddress> {
    let tls = tls.client().cloned();
    let scheme = if tls.is_some() { "https" } else { "http" };
    let uri = if address.contains("://") {
        address.to_owned()
    } else {
        format!("{scheme}://{address}")
    };
    let mut endpoint = Endpoint::from_shared(uri).map_err(|_| BadAddress(address.to_owned()))?;
    if let Some(tls) = tls {
        endpoint = endpoint
            .tls_config(tls)
            .map_err(|_| BadAddress(address.to_owned()))?;
    }
    Ok(endpoint
        .connect_timeout(CONNECT_TIMEOUT)
        .tcp_nodelay(true)
        .http2_keep_alive_interval(keepalive.interval)
        .keep_alive_timeout(keepalive.timeout)
        .keep_alive_while_idle(keepalive.while_idle)
        .http2_max_local_error_reset_streams(LATE_ANSWERS_REFUSED))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tonic_health::pb::{HealthCheckRequest, health_client::HealthClient};

    /// A channel keeps its connection when calls it gave up on are answered
    /// late (see the connector's test of the same name).
    #[tokio::test]
    async fn abandoned_calls_keep_the_connection() {
        let server = toolmesh_testkit::slow::LateServer::start().await;
        for channel in [
            channel(&server.addr.to_string(), &Tls::none()).unwrap(),
            executor_channel(&server.addr.to_string(), &Tls::none()).unwrap(),
        ] {
            let before = server.connections();
            server
                .abandon_calls(3_000, 250, || {
                    let mut client = HealthClient::new(channel.clone());
                    async move { client.check(HealthCheckRequest::default()).await }
                })
                .await;
            assert_eq!(
                server.connections(),
                before + 1,
                "every call on one connection"
            );
        }
    }
}
