//! How a client reaches etcd: TLS (https endpoints, a client certificate
//! when etcd asks for one) and the user it authenticates as.

use tonic::transport::ClientTlsConfig;

/// A user name and its password for etcd's `Authenticate`.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    /// The etcd user.
    pub user: String,
    /// Its password.
    pub password: String,
}

/// The password stays out of logs and messages.
impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("user", &self.user)
            .field("password", &"<redacted>")
            .finish()
    }
}

/// Settings of a [`Client`](crate::Client) beyond its endpoints. The
/// default is plaintext without authentication.
#[derive(Debug, Clone, Default)]
pub struct ClientOptions {
    /// TLS with every endpoint (`https://`): the CA that signed etcd's
    /// server certificate, and a client identity for etcd's
    /// `--client-cert-auth`.
    pub tls: Option<ClientTlsConfig>,
    /// Authenticate as this user; every request carries the token etcd
    /// hands out, renewed when etcd says it has expired.
    pub credentials: Option<Credentials>,
}
