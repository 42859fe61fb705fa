//! The client handle: one lazily connected channel per endpoint (TLS when
//! asked), requests sent to the endpoint that last answered and retried on
//! the others when it is unavailable, endpoints that failed set aside for a
//! while, and every request carrying the user's token when etcd wants one.

use crate::auth::{self, Call, Issued, Session};
use crate::error::{EtcdError, is_unavailable};
use crate::handshake;
use crate::options::ClientOptions;
use crate::pb::{
    self, auth_client::AuthClient, kv_client::KvClient, lease_client::LeaseClient,
    maintenance_client::MaintenanceClient,
};
use crate::watch::WatchStream;
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tokio::time::Instant;
use tonic::metadata::AsciiMetadataValue;
use tonic::transport::{Channel, Endpoint};
use tonic::{Code, Status};

/// How many answers to requests it gave up on (a keep-alive past
/// [`REQUEST_TIMEOUT`]) a connection refuses before closing itself: no
/// limit. HTTP/2 closes a connection by default at the 1,024th answer to
/// a stream it reset and forgot, over the connection's life; an etcd under
/// load answers late by the thousand, and each close failed every watch
/// and keep-alive on the connection (registries at 10,000 executors lost
/// etcd every few seconds, and executors their leases).
const LATE_ANSWERS_REFUSED: Option<usize> = None;
/// How long one request may take on one endpoint.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(1);
/// How long one request may take across every endpoint tried.
const TOTAL_TIMEOUT: Duration = Duration::from_secs(3);
/// How long a failed endpoint is tried only after the others.
const SET_ASIDE: Duration = Duration::from_secs(3);
/// Largest message accepted from etcd (a range over many definitions).
const MAX_MESSAGE: usize = 64 * 1024 * 1024;

/// Parses `etcd://host:port[,host:port…]` into its `host:port` endpoints.
pub fn parse_store_url(url: &str) -> Result<Vec<String>, EtcdError> {
    let bad = || EtcdError::BadUrl(url.to_owned());
    let rest = url.trim().strip_prefix("etcd://").ok_or_else(bad)?;
    let endpoints: Vec<String> = rest
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| s.trim_end_matches('/').to_owned())
        .collect();
    let valid = endpoints.iter().all(|host_port| {
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

/// Why trying the endpoints did not succeed.
enum Failed {
    /// An endpoint answered with this refusal.
    Rejected(Status),
    /// None could be used.
    Error(EtcdError),
}

/// An etcd client over several endpoints. Cheap to clone.
#[derive(Clone)]
pub struct Client {
    members: Arc<Vec<Member>>,
    /// The endpoint that answered last.
    preferred: Arc<AtomicUsize>,
    /// Whether the endpoints speak TLS.
    tls: bool,
    /// The user and its token, when authenticating.
    session: Option<Arc<Session>>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("endpoints", &self.endpoints())
            .finish()
    }
}

impl Client {
    /// A plaintext client without authentication for
    /// `etcd://host:port[,host:port…]`. Connects lazily.
    pub fn from_url(url: &str) -> Result<Client, EtcdError> {
        Client::connect(url, ClientOptions::default())
    }

    /// A client for `etcd://host:port[,host:port…]` with `options` (TLS,
    /// credentials). Connects lazily: a wrong setting shows on the first
    /// request.
    pub fn connect(url: &str, options: ClientOptions) -> Result<Client, EtcdError> {
        Client::new(parse_store_url(url)?, options)
    }

    /// A client for these `host:port` endpoints. Connects lazily.
    pub fn new(endpoints: Vec<String>, options: ClientOptions) -> Result<Client, EtcdError> {
        let scheme = if options.tls.is_some() {
            "https"
        } else {
            "http"
        };
        let mut members = Vec::with_capacity(endpoints.len());
        for host_port in endpoints {
            let url = format!("{scheme}://{host_port}");
            let bad = || EtcdError::BadUrl(host_port.clone());
            let mut endpoint = Endpoint::from_shared(url.clone()).map_err(|_| bad())?;
            if let Some(tls) = &options.tls {
                endpoint = endpoint.tls_config(tls.clone()).map_err(|_| bad())?;
            }
            let channel = endpoint
                .connect_timeout(Duration::from_millis(500))
                .tcp_nodelay(true)
                .http2_keep_alive_interval(Duration::from_secs(5))
                .keep_alive_timeout(Duration::from_secs(3))
                .http2_max_local_error_reset_streams(LATE_ANSWERS_REFUSED)
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
            tls: options.tls.is_some(),
            session: options.credentials.map(|c| Arc::new(Session::new(c))),
        })
    }

    /// The user this client authenticates as, if any.
    pub fn user(&self) -> Option<&str> {
        self.session.as_ref().map(|s| s.credentials().user.as_str())
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
    /// something other than "unavailable", with the user's token; when etcd
    /// refuses the token, fetches a new one and runs `op` once more.
    pub(crate) async fn with_failover<T, F, Fut>(&self, op: F) -> Result<T, EtcdError>
    where
        F: Fn(Call) -> Fut,
        Fut: Future<Output = Result<T, Status>>,
    {
        let Some(session) = &self.session else {
            return self
                .on_endpoints(&op, None)
                .await
                .map_err(|f| self.error(f));
        };
        let issued = session.current(|| self.authenticate()).await?;
        match self.on_endpoints(&op, issued.token.clone()).await {
            Err(Failed::Rejected(status)) if auth::needs_fresh_token(&status) => {
                tracing::debug!(%status, "etcd refused the token; authenticating again");
                let fresh = session.renew(Some(&issued), || self.authenticate()).await?;
                self.on_endpoints(&op, fresh.token)
                    .await
                    .map_err(|f| self.error(f))
            }
            other => other.map_err(|f| self.error(f)),
        }
    }

    /// What a failure means to the caller.
    fn error(&self, failed: Failed) -> EtcdError {
        match failed {
            Failed::Rejected(status) => EtcdError::rejected(&status, self.user()),
            Failed::Error(error) => error,
        }
    }

    /// Asks etcd for a token for the session's user; `None` when etcd has
    /// authentication off.
    async fn authenticate(&self) -> Result<Option<AsciiMetadataValue>, EtcdError> {
        let Some(session) = &self.session else {
            return Ok(None);
        };
        let credentials = session.credentials();
        let request = pb::AuthenticateRequest {
            name: credentials.user.clone(),
            password: credentials.password.clone(),
        };
        let authenticate = |call: Call| {
            let request = request.clone();
            async move {
                Ok(AuthClient::new(call.channel)
                    .authenticate(request)
                    .await?
                    .into_inner())
            }
        };
        match self.on_endpoints(&authenticate, None).await {
            Ok(response) => AsciiMetadataValue::try_from(response.token)
                .map(Some)
                .map_err(|_| {
                    EtcdError::Refused("etcd issued a token that is not ASCII".to_owned())
                }),
            Err(Failed::Rejected(status)) if auth::auth_disabled(&status) => {
                tracing::warn!(
                    etcd = %self.endpoints(),
                    user = %credentials.user,
                    "etcd has authentication off: anyone who reaches it can change the registry; turn it on (etcdctl auth enable)"
                );
                Ok(None)
            }
            Err(Failed::Rejected(status)) => {
                Err(auth::authenticate_refused(&status, &credentials.user)
                    .unwrap_or_else(|| EtcdError::rejected(&status, Some(&credentials.user))))
            }
            Err(Failed::Error(error)) => Err(error),
        }
    }

    /// Runs `op` on one endpoint after another, sending `token`, until one
    /// answers with something other than "unavailable".
    async fn on_endpoints<T, F, Fut>(
        &self,
        op: &F,
        token: Option<AsciiMetadataValue>,
    ) -> Result<T, Failed>
    where
        F: Fn(Call) -> Fut,
        Fut: Future<Output = Result<T, Status>>,
    {
        let mut last = String::from("no endpoint tried");
        let mut handshake_failed = None;
        let deadline = Instant::now() + TOTAL_TIMEOUT;
        for i in self.order() {
            let member = &self.members[i];
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            let call = Call {
                channel: member.channel.clone(),
                token: token.clone(),
            };
            match tokio::time::timeout(left.min(REQUEST_TIMEOUT), op(call)).await {
                Ok(Ok(value)) => {
                    member.restore();
                    self.preferred.store(i, Ordering::Relaxed);
                    return Ok(value);
                }
                Ok(Err(status)) if is_unavailable(&status) => {
                    tracing::debug!(endpoint = %member.url, %status, "etcd endpoint unavailable");
                    member.set_aside();
                    last = format!("{}: {}", member.url, handshake::describe(&status));
                    if let Some(problem) = handshake::untrusted_server(&status) {
                        handshake_failed = Some(EtcdError::Tls {
                            endpoint: member.url.clone(),
                            problem,
                        });
                    }
                }
                Ok(Err(status)) => return Err(Failed::Rejected(status)),
                Err(_) => {
                    member.set_aside();
                    last = format!("{}: no answer within {REQUEST_TIMEOUT:?}", member.url);
                }
            }
        }
        Err(Failed::Error(handshake_failed.unwrap_or_else(|| {
            EtcdError::Unavailable {
                endpoints: self.endpoints(),
                last,
            }
        })))
    }

    /// Checks these settings against etcd with a read of `key`
    /// (authenticating first). When no endpoint answers, asks each a few
    /// times more: a connection accepted and then closed every time is a
    /// TLS mismatch ([`EtcdError::Tls`]), not a member that is down.
    pub async fn check(&self, key: &[u8]) -> Result<(), EtcdError> {
        let read = self.range(pb::RangeRequest {
            key: key.to_vec(),
            count_only: true,
            ..pb::RangeRequest::default()
        });
        match read.await {
            Ok(_) => Ok(()),
            Err(error @ EtcdError::Unavailable { .. }) => {
                Err(self.mismatch().await.unwrap_or(error))
            }
            Err(error) => Err(error),
        }
    }

    /// A TLS mismatch with some endpoint that no other endpoint answering
    /// contradicts: the same symptom on each of a few tries.
    async fn mismatch(&self) -> Option<EtcdError> {
        const TRIES: usize = 3;
        let mut found = None;
        'members: for member in self.members.iter() {
            let mut problem = None;
            for _ in 0..TRIES {
                let mut client = MaintenanceClient::new(member.channel.clone());
                let status = match tokio::time::timeout(
                    REQUEST_TIMEOUT,
                    client.status(pb::StatusRequest {}),
                )
                .await
                {
                    Ok(Ok(_)) => return None,
                    Ok(Err(status)) => status,
                    Err(_) => continue 'members,
                };
                problem = handshake::suggested_mismatch(&status, self.tls);
                if problem.is_none() {
                    continue 'members;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            if let Some(problem) = problem {
                found = Some(EtcdError::Tls {
                    endpoint: member.url.clone(),
                    problem,
                });
            }
        }
        found
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
        self.with_failover(|call| {
            let request = call.request(request.clone());
            async move { Ok(kv(call.channel).range(request).await?.into_inner()) }
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
        self.with_failover(|call| {
            let request = call.request(request.clone());
            async move { Ok(kv(call.channel).put(request).await?.into_inner()) }
        })
        .await
        .map(|r| r.header.map_or(0, |h| h.revision))
    }

    /// A transaction.
    pub async fn txn(&self, request: pb::TxnRequest) -> Result<pb::TxnResponse, EtcdError> {
        self.with_failover(|call| {
            let request = call.request(request.clone());
            async move { Ok(kv(call.channel).txn(request).await?.into_inner()) }
        })
        .await
    }

    /// Compacts history up to `revision`.
    pub async fn compact(&self, revision: i64) -> Result<(), EtcdError> {
        let request = pb::CompactionRequest {
            revision,
            physical: true,
        };
        self.with_failover(|call| async move {
            kv(call.channel.clone())
                .compact(call.request(request))
                .await?;
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
            .with_failover(|call| async move {
                Ok(LeaseClient::new(call.channel.clone())
                    .lease_grant(call.request(request))
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
        self.with_failover(|call| async move {
            match LeaseClient::new(call.channel.clone())
                .lease_revoke(call.request(pb::LeaseRevokeRequest { id }))
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
        self.with_failover(|call| async move {
            let requests = call.request(tokio_stream::once(pb::LeaseKeepAliveRequest { id }));
            let mut responses = LeaseClient::new(call.channel.clone())
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
        let call = Call {
            channel: member.channel.clone(),
            token: self
                .session
                .as_ref()
                .and_then(|s| s.cached())
                .and_then(|issued: Issued| issued.token),
        };
        let mut client = MaintenanceClient::new(call.channel.clone());
        let request = call.request(pb::StatusRequest {});
        match tokio::time::timeout(REQUEST_TIMEOUT, client.status(request)).await {
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
        self.with_failover(|call| WatchStream::open(call, create.clone()))
            .await?
    }
}

fn kv(channel: Channel) -> KvClient<Channel> {
    KvClient::new(channel).max_decoding_message_size(MAX_MESSAGE)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `etcd://` lists become endpoints; anything else is refused with an example.
    #[test]
    fn store_urls() {
        assert_eq!(
            parse_store_url("etcd://a:2379, b:2380/").unwrap(),
            ["a:2379", "b:2380"]
        );
        for bad in ["", "etcd://", "http://a:1", "etcd://a", "etcd://a:x"] {
            let err = parse_store_url(bad).unwrap_err().to_string();
            assert!(err.contains("etcd://host:port"), "{bad}: {err}");
        }
    }

    /// Requests given up on and answered late leave the connection up.
    #[tokio::test]
    async fn late_answers_keep_the_connection() {
        let server = toolmesh_testkit::slow::LateServer::start().await;
        let client = Client::new(vec![server.addr.to_string()], ClientOptions::default()).unwrap();
        server
            .abandon_calls(3_000, 250, || client.keep_alive(7))
            .await;
        assert_eq!(server.connections(), 1, "every request on one connection");
    }
}
