//! The client handle: one lazily connected channel per endpoint, requests
//! sent to the endpoint that last answered and retried on the others when it
//! is unavailable, endpoints that failed set aside for a while.

use crate::error::{EtcdError, is_unavailable};
use crate::pb::{
    self, kv_client::KvClient, lease_client::LeaseClient, maintenance_client::MaintenanceClient,
};
use crate::watch::WatchStream;
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tokio::time::Instant;
use tonic::transport::{Channel, Endpoint};
use tonic::{Code, Status};

/// How long one request may take on one endpoint.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(1);
/// How long one request may take across every endpoint tried.
const TOTAL_TIMEOUT: Duration = Duration::from_secs(3);
/// How long a failed endpoint is tried only after the others.
const SET_ASIDE: Duration = Duration::from_secs(3);
/// Largest message accepted from etcd (a range over many definitions).
const MAX_MESSAGE: usize = 64 * 1024 * 1024;

/// Parses `etcd://host:port[,host:port…]` into `http://host:port` URLs.
pub fn parse_store_url(url: &str) -> Result<Vec<String>, EtcdError> {
    let bad = || EtcdError::BadUrl(url.to_owned());
    let rest = url.trim().strip_prefix("etcd://").ok_or_else(bad)?;
    let endpoints: Vec<String> = rest
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| format!("http://{}", s.trim_end_matches('/')))
        .collect();
    let valid = endpoints.iter().all(|e| {
        let host_port = &e["http://".len()..];
        host_port
            .rsplit_once(':')
            .is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok())
    });
    if endpoints.is_empty() || !valid {
        return Err(bad());
    }
    Ok(endpoints)
}

struct Member {
    url: String,
    channel: Channel,
    /// Tried after the others until then.
    aside_until: Mutex<Option<Instant>>,
}

impl Member {
    fn set_aside(&self) {
        *self
            .aside_until
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(Instant::now() + SET_ASIDE);
    }

    fn restore(&self) {
        *self
            .aside_until
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = None;
    }

    fn is_aside(&self, now: Instant) -> bool {
        self.aside_until
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_some_and(|until| until > now)
    }
}

/// An etcd client over several endpoints. Cheap to clone.
#[derive(Clone)]
pub struct Client {
    members: Arc<Vec<Member>>,
    /// The endpoint that answered last.
    preferred: Arc<AtomicUsize>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("endpoints", &self.endpoints())
            .finish()
    }
}

impl Client {
    /// A client for `etcd://host:port[,host:port…]`. Connects lazily.
    pub fn from_url(url: &str) -> Result<Client, EtcdError> {
        Client::new(parse_store_url(url)?)
    }

    /// A client for these `http://host:port` endpoints. Connects lazily.
    pub fn new(urls: Vec<String>) -> Result<Client, EtcdError> {
        let mut members = Vec::with_capacity(urls.len());
        for url in urls {
            let channel = Endpoint::from_shared(url.clone())
                .map_err(|_| EtcdError::BadUrl(url.clone()))?
                .connect_timeout(Duration::from_millis(500))
                .tcp_nodelay(true)
                .http2_keep_alive_interval(Duration::from_secs(5))
                .keep_alive_timeout(Duration::from_secs(3))
                .connect_lazy();
            members.push(Member {
                url,
                channel,
                aside_until: Mutex::new(None),
            });
        }
        if members.is_empty() {
            return Err(EtcdError::BadUrl(String::new()));
        }
        Ok(Client {
            members: Arc::new(members),
            preferred: Arc::new(AtomicUsize::new(0)),
        })
    }

    /// The endpoints, comma-separated (for messages).
    pub fn endpoints(&self) -> String {
        self.members
            .iter()
            .map(|m| m.url.as_str())
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The order to try endpoints in: the preferred one first, those set
    /// aside last.
    fn order(&self) -> Vec<usize> {
        let n = self.members.len();
        let first = self.preferred.load(Ordering::Relaxed) % n;
        let now = Instant::now();
        let (mut live, aside): (Vec<usize>, Vec<usize>) = (0..n)
            .map(|i| (first + i) % n)
            .partition(|&i| !self.members[i].is_aside(now));
        live.extend(aside);
        live
    }

    /// Runs `op` on one endpoint after another until one answers with
    /// something other than "unavailable".
    pub(crate) async fn with_failover<T, F, Fut>(&self, op: F) -> Result<T, EtcdError>
    where
        F: Fn(Channel) -> Fut,
        Fut: Future<Output = Result<T, Status>>,
    {
        let mut last = String::from("no endpoint tried");
        let deadline = Instant::now() + TOTAL_TIMEOUT;
        for i in self.order() {
            let member = &self.members[i];
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            match tokio::time::timeout(left.min(REQUEST_TIMEOUT), op(member.channel.clone())).await
            {
                Ok(Ok(value)) => {
                    member.restore();
                    self.preferred.store(i, Ordering::Relaxed);
                    return Ok(value);
                }
                Ok(Err(status)) if is_unavailable(&status) => {
                    tracing::debug!(endpoint = %member.url, %status, "etcd endpoint unavailable");
                    member.set_aside();
                    last = format!("{}: {}", member.url, status.message());
                }
                Ok(Err(status)) => return Err(EtcdError::Refused(status.message().to_owned())),
                Err(_) => {
                    member.set_aside();
                    last = format!("{}: no answer within {REQUEST_TIMEOUT:?}", member.url);
                }
            }
        }
        Err(EtcdError::Unavailable {
            endpoints: self.endpoints(),
            last,
        })
    }

    /// Every key under `prefix` (linearizable), with the revision read at.
    pub async fn range_prefix(&self, prefix: &[u8]) -> Result<pb::RangeResponse, EtcdError> {
        let request = pb::RangeRequest {
            key: prefix.to_vec(),
            range_end: crate::prefix_end(prefix),
            ..pb::RangeRequest::default()
        };
        self.range(request).await
    }

    /// A range request.
    pub async fn range(&self, request: pb::RangeRequest) -> Result<pb::RangeResponse, EtcdError> {
        self.with_failover(|channel| {
            let request = request.clone();
            async move { Ok(kv(channel).range(request).await?.into_inner()) }
        })
        .await
    }

    /// One key's value, if present.
    pub async fn get(&self, key: &[u8]) -> Result<Option<pb::mvccpb::KeyValue>, EtcdError> {
        let response = self
            .range(pb::RangeRequest {
                key: key.to_vec(),
                ..pb::RangeRequest::default()
            })
            .await?;
        Ok(response.kvs.into_iter().next())
    }

    /// Puts `value` at `key`, attached to `lease` (0 for none).
    pub async fn put(&self, key: &[u8], value: Vec<u8>, lease: i64) -> Result<i64, EtcdError> {
        let request = pb::PutRequest {
            key: key.to_vec(),
            value,
            lease,
            ..pb::PutRequest::default()
        };
        self.with_failover(|channel| {
            let request = request.clone();
            async move { Ok(kv(channel).put(request).await?.into_inner()) }
        })
        .await
        .map(|r| r.header.map_or(0, |h| h.revision))
    }

    /// A transaction.
    pub async fn txn(&self, request: pb::TxnRequest) -> Result<pb::TxnResponse, EtcdError> {
        self.with_failover(|channel| {
            let request = request.clone();
            async move { Ok(kv(channel).txn(request).await?.into_inner()) }
        })
        .await
    }

    /// Compacts history up to `revision`.
    pub async fn compact(&self, revision: i64) -> Result<(), EtcdError> {
        let request = pb::CompactionRequest {
            revision,
            physical: true,
        };
        self.with_failover(|channel| async move {
            kv(channel).compact(request).await?;
            Ok(())
        })
        .await
    }

    /// Grants a lease of `ttl_secs`; returns its id and the TTL etcd
    /// granted (never below etcd's minimum, which depends on its election
    /// timing).
    pub async fn grant(&self, ttl_secs: i64) -> Result<(i64, i64), EtcdError> {
        let request = pb::LeaseGrantRequest {
            ttl: ttl_secs,
            id: 0,
        };
        let response = self
            .with_failover(|channel| async move {
                Ok(LeaseClient::new(channel)
                    .lease_grant(request)
                    .await?
                    .into_inner())
            })
            .await?;
        if response.error.is_empty() {
            Ok((response.id, response.ttl.max(ttl_secs)))
        } else {
            Err(EtcdError::Refused(response.error))
        }
    }

    /// Revokes a lease (its keys go with it).
    pub async fn revoke(&self, id: i64) -> Result<(), EtcdError> {
        self.with_failover(|channel| async move {
            match LeaseClient::new(channel)
                .lease_revoke(pb::LeaseRevokeRequest { id })
                .await
            {
                Ok(_) => Ok(()),
                // Already gone is what revoking wants.
                Err(status) if status.code() == Code::NotFound => Ok(()),
                Err(status) => Err(status),
            }
        })
        .await
    }

    /// Renews a lease once; returns its remaining TTL in seconds (0 or less:
    /// it has expired).
    pub async fn keep_alive(&self, id: i64) -> Result<i64, EtcdError> {
        self.with_failover(|channel| async move {
            let requests = tokio_stream::once(pb::LeaseKeepAliveRequest { id });
            let mut responses = LeaseClient::new(channel)
                .lease_keep_alive(requests)
                .await?
                .into_inner();
            match responses.message().await? {
                Some(response) => Ok(response.ttl),
                None => Err(Status::unavailable("keep-alive stream ended")),
            }
        })
        .await
    }

    /// The status of the endpoint at `url` (asked directly, no failover):
    /// its member id and the leader it knows (0: none).
    pub async fn status(&self, url: &str) -> Result<pb::StatusResponse, EtcdError> {
        let member = self
            .members
            .iter()
            .find(|m| m.url == url)
            .ok_or_else(|| EtcdError::BadUrl(url.to_owned()))?;
        let mut client = MaintenanceClient::new(member.channel.clone());
        match tokio::time::timeout(REQUEST_TIMEOUT, client.status(pb::StatusRequest {})).await {
            Ok(Ok(response)) => Ok(response.into_inner()),
            Ok(Err(status)) => Err(EtcdError::Unavailable {
                endpoints: url.to_owned(),
                last: status.message().to_owned(),
            }),
            Err(_) => Err(EtcdError::Unavailable {
                endpoints: url.to_owned(),
                last: "no answer".to_owned(),
            }),
        }
    }

    /// Watches every key under `prefix` from `start_revision`, on an
    /// endpoint that has a leader (etcd's require-leader metadata: a
    /// partitioned member ends the watch instead of staying silent).
    pub async fn watch_prefix(
        &self,
        prefix: &[u8],
        start_revision: i64,
    ) -> Result<WatchStream, EtcdError> {
        let create = pb::WatchCreateRequest {
            key: prefix.to_vec(),
            range_end: crate::prefix_end(prefix),
            start_revision,
            progress_notify: true,
            ..pb::WatchCreateRequest::default()
        };
        self.with_failover(|channel| WatchStream::open(channel, create.clone()))
            .await?
    }
}

fn kv(channel: Channel) -> KvClient<Channel> {
    KvClient::new(channel).max_decoding_message_size(MAX_MESSAGE)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `etcd://` lists become http URLs; anything else is refused with an example.
    #[test]
    fn store_urls() {
        assert_eq!(
            parse_store_url("etcd://a:2379, b:2380").unwrap(),
            ["http://a:2379", "http://b:2380"]
        );
        for bad in ["", "etcd://", "http://a:1", "etcd://a", "etcd://a:x"] {
            let err = parse_store_url(bad).unwrap_err().to_string();
            assert!(err.contains("etcd://host:port"), "{bad}: {err}");
        }
    }
}
