//! etcd authentication: the token etcd's `Authenticate` hands out, shared by
//! every request of a client and fetched again when etcd no longer takes it
//! (simple tokens expire after etcd's `--auth-token-ttl`).

use crate::error::EtcdError;
use crate::options::Credentials;
use std::future::Future;
use std::sync::{Mutex, PoisonError};
use tonic::metadata::AsciiMetadataValue;
use tonic::transport::Channel;
use tonic::{Code, Status};

/// The metadata key etcd reads the token from.
pub(crate) const TOKEN_HEADER: &str = "token";

/// A token and which fetch it came from.
#[derive(Debug, Clone)]
pub(crate) struct Issued {
    /// `None`: etcd has authentication off and wants no token.
    pub(crate) token: Option<AsciiMetadataValue>,
    /// Counts fetches, so that requests failing together fetch once.
    generation: u64,
}

/// The token of one client's user.
#[derive(Debug)]
pub(crate) struct Session {
    credentials: Credentials,
    issued: Mutex<Option<Issued>>,
    /// Held while a token is fetched: requests that found theirs stale
    /// together wait for one fetch.
    fetching: tokio::sync::Mutex<()>,
}

impl Session {
    pub(crate) fn new(credentials: Credentials) -> Session {
        Session {
            credentials,
            issued: Mutex::new(None),
            fetching: tokio::sync::Mutex::new(()),
        }
    }

    pub(crate) fn credentials(&self) -> &Credentials {
        &self.credentials
    }

    /// The token fetched last, if any.
    pub(crate) fn cached(&self) -> Option<Issued> {
        self.issued
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The token to send: the one fetched last, else a new one.
    pub(crate) async fn current<F, Fut>(&self, authenticate: F) -> Result<Issued, EtcdError>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<Option<AsciiMetadataValue>, EtcdError>>,
    {
        match self.cached() {
            Some(issued) => Ok(issued),
            None => self.renew(None, authenticate).await,
        }
    }

    /// A token newer than `stale` (the one etcd refused): fetched now,
    /// unless a request that failed alongside already fetched it.
    pub(crate) async fn renew<F, Fut>(
        &self,
        stale: Option<&Issued>,
        authenticate: F,
    ) -> Result<Issued, EtcdError>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<Option<AsciiMetadataValue>, EtcdError>>,
    {
        let _fetching = self.fetching.lock().await;
        let last = self.cached();
        if let Some(last) = &last
            && stale.is_none_or(|stale| last.generation != stale.generation)
        {
            return Ok(last.clone());
        }
        let token = authenticate().await?;
        let issued = Issued {
            token,
            generation: last.map_or(1, |l| l.generation + 1),
        };
        *self.issued.lock().unwrap_or_else(PoisonError::into_inner) = Some(issued.clone());
        Ok(issued)
    }
}

/// Whether etcd refused a request for want of a valid token: expired or
/// unknown (a restarted member forgets simple tokens), issued before a
/// change of users or roles, or absent (authentication was turned on since
/// it was fetched). A watch created with an invalid token is cancelled as
/// "permission denied", so that counts too: a fresh token tells the two
/// apart.
pub(crate) fn needs_fresh_token(status: &Status) -> bool {
    let message = status.message();
    status.code() == Code::Unauthenticated
        || status.code() == Code::PermissionDenied
        || message.contains("invalid auth token")
        || message.contains("revision of auth store is old")
        || message.contains("user name is empty")
        || message.contains("permission denied")
}

/// What etcd's refusal of `Authenticate` means.
pub(crate) fn authenticate_refused(status: &Status, user: &str) -> Option<EtcdError> {
    let message = status.message();
    (message.contains("authentication failed") || message.contains("user name not found")).then(
        || EtcdError::AuthFailed {
            user: user.to_owned(),
            detail: message.to_owned(),
        },
    )
}

/// Whether etcd answered `Authenticate` with "authentication is not enabled".
pub(crate) fn auth_disabled(status: &Status) -> bool {
    status.message().contains("authentication is not enabled")
}

/// One attempt's way to an endpoint: its channel and the token to send.
#[derive(Clone)]
pub(crate) struct Call {
    pub(crate) channel: Channel,
    pub(crate) token: Option<AsciiMetadataValue>,
}

impl Call {
    /// `message` as a request carrying the token, if there is one.
    pub(crate) fn request<T>(&self, message: T) -> tonic::Request<T> {
        let mut request = tonic::Request::new(message);
        if let Some(token) = &self.token {
            request.metadata_mut().insert(TOKEN_HEADER, token.clone());
        }
        request
    }
}
