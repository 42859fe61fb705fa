//! TLS as a value: built once from PEM files, then carried in each server's
//! and client's configuration.

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tokio_rustls::rustls::{self, RootCertStore};
use tonic::transport::{Certificate, ClientTlsConfig, Identity, ServerTlsConfig};

/// PEM files that configure TLS for this process: every server it runs
/// and every channel it opens.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TlsFiles {
    /// CA that signs the servers' certificates; clients verify against it.
    /// Setting it makes every client connection TLS.
    pub ca: Option<PathBuf>,
    /// This process' certificate chain: servers present it, and clients
    /// present it too when a server asks (mTLS).
    pub cert: Option<PathBuf>,
    /// The key of `cert`.
    pub key: Option<PathBuf>,
    /// Servers require client certificates signed by this CA (mTLS).
    pub client_ca: Option<PathBuf>,
}

impl TlsFiles {
    /// Whether any TLS setting is given.
    pub fn is_set(&self) -> bool {
        *self != TlsFiles::default()
    }
}

/// TLS settings that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file could not be read.
    #[error("TLS file {path}: {error}")]
    Read {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        error: std::io::Error,
    },
    /// A certificate without its key, or the other way round.
    #[error("TLS needs both a certificate and its key: give --tls-cert and --tls-key together")]
    Incomplete,
    /// A file holds no usable PEM certificate or key.
    #[error("TLS file {path}: {detail}")]
    Pem {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        detail: String,
    },
    /// rustls refused the client configuration.
    #[error("TLS settings: {0}")]
    Config(#[from] rustls::Error),
}

/// The TLS of a process, built once from [`TlsFiles`] and handed to every
/// server and channel it makes. The default is plaintext.
#[derive(Debug, Clone, Default)]
pub struct Tls {
    files: TlsFiles,
    server: Option<ServerTlsConfig>,
    client: Option<ClientTlsConfig>,
    /// What the [`Connector`](super::Connector) speaks: the same CA and
    /// client certificate as `client`, for rustls directly.
    connector: Option<Arc<rustls::ClientConfig>>,
}

/// Two values are equal when they were built from the same files.
impl PartialEq for Tls {
    fn eq(&self, other: &Self) -> bool {
        self.files == other.files
    }
}

impl Eq for Tls {}

fn pem_error(path: &Path, detail: impl ToString) -> TlsError {
    TlsError::Pem {
        path: path.to_owned(),
        detail: detail.to_string(),
    }
}

/// Every certificate in the PEM file at `path`.
fn certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    CertificateDer::pem_file_iter(path)
        .map_err(|e| pem_error(path, e))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| pem_error(path, e))
}

/// The rustls client configuration of `files`: servers verified against
/// `ca`, this process' certificate presented when a server asks, HTTP/2.
fn client_config(
    ca: &Path,
    identity: Option<(&Path, &Path)>,
) -> Result<Arc<rustls::ClientConfig>, TlsError> {
    let mut roots = RootCertStore::empty();
    for certificate in certificates(ca)? {
        roots.add(certificate).map_err(|e| pem_error(ca, e))?;
    }
    let builder = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()?
    .with_root_certificates(roots);
    let mut config = match identity {
        Some((cert, key)) => builder.with_client_auth_cert(
            certificates(cert)?,
            PrivateKeyDer::from_pem_file(key).map_err(|e| pem_error(key, e))?,
        )?,
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = vec![b"h2".to_vec()];
    Ok(Arc::new(config))
}

fn read(path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|error| TlsError::Read {
        path: path.to_owned(),
        error,
    })
}

impl Tls {
    /// Plaintext: no TLS on servers or channels.
    pub fn none() -> Tls {
        Tls::default()
    }

    /// Reads `files`: a certificate and key make servers TLS (requiring
    /// client certificates with a client CA); a CA makes channels TLS.
    pub fn from_files(files: &TlsFiles) -> Result<Tls, TlsError> {
        let identity = match (&files.cert, &files.key) {
            (Some(cert), Some(key)) => Some(Identity::from_pem(read(cert)?, read(key)?)),
            (None, None) => None,
            _ => return Err(TlsError::Incomplete),
        };
        let server = match &identity {
            Some(identity) => {
                let mut config = ServerTlsConfig::new().identity(identity.clone());
                if let Some(ca) = &files.client_ca {
                    config = config.client_ca_root(Certificate::from_pem(read(ca)?));
                }
                Some(config)
            }
            None => None,
        };
        let (client, connector) = match &files.ca {
            Some(ca) => {
                let mut config =
                    ClientTlsConfig::new().ca_certificate(Certificate::from_pem(read(ca)?));
                if let Some(identity) = identity {
                    config = config.identity(identity);
                }
                let pair = files.cert.as_deref().zip(files.key.as_deref());
                (Some(config), Some(client_config(ca, pair)?))
            }
            None => (None, None),
        };
        Ok(Tls {
            files: files.clone(),
            server,
            client,
            connector,
        })
    }

    /// The files this was built from (to hand on to child processes).
    pub fn files(&self) -> &TlsFiles {
        &self.files
    }

    /// What servers present, if they speak TLS.
    pub fn server(&self) -> Option<&ServerTlsConfig> {
        self.server.as_ref()
    }

    /// What channels verify against, if they speak TLS.
    pub fn client(&self) -> Option<&ClientTlsConfig> {
        self.client.as_ref()
    }

    /// What a [`Connector`](super::Connector) speaks, if TLS: the same
    /// trust and client certificate as [`client`](Self::client).
    pub fn connector(&self) -> Option<&Arc<rustls::ClientConfig>> {
        self.connector.as_ref()
    }
}
