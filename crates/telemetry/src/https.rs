//! HTTPS for the HTTP doors (`/mcp`, the admin listener) from the process'
//! own `--tls-*` files: its certificate and key, and with a client CA,
//! client certificates required; and serving a router over it or plaintext.

use axum::Router;
use axum::extract::connect_info::Connected;
use axum::serve::IncomingStream;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls::{self, RootCertStore, ServerConfig, server::WebPkiClientVerifier};
use toolmesh_transport::{PeerCertificate, TlsFiles};

/// How long a client may take to finish its TLS handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Finished handshakes waiting for the server to take them.
const READY_BACKLOG: usize = 64;

/// Why the TLS files cannot serve HTTPS.
#[derive(Debug, thiserror::Error)]
pub enum HttpsError {
    /// A certificate without its key, or the other way round.
    #[error("HTTPS (the admin listener, /mcp) needs both --tls-cert and --tls-key")]
    Incomplete,
    /// A file could not be read or holds no usable PEM.
    #[error("TLS file {}: {detail}", path.display())]
    File {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        detail: String,
    },
    /// rustls refused the configuration.
    #[error("TLS settings for HTTPS: {0}")]
    Config(#[from] rustls::Error),
}

fn file_error(path: &Path, detail: impl ToString) -> HttpsError {
    HttpsError::File {
        path: path.to_owned(),
        detail: detail.to_string(),
    }
}

/// The acceptor for `files` (HTTP/2 and HTTP/1.1 by ALPN), or `None` when
/// the process serves plaintext.
pub fn acceptor(files: &TlsFiles) -> Result<Option<TlsAcceptor>, HttpsError> {
    let (cert, key) = match (&files.cert, &files.key) {
        (Some(cert), Some(key)) => (cert, key),
        (None, None) => return Ok(None),
        _ => return Err(HttpsError::Incomplete),
    };
    let chain = CertificateDer::pem_file_iter(cert)
        .map_err(|e| file_error(cert, e))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| file_error(cert, e))?;
    let key = PrivateKeyDer::from_pem_file(key).map_err(|e| file_error(key, e))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()?;
    let mut config = match &files.client_ca {
        Some(ca) => {
            let mut roots = RootCertStore::empty();
            for certificate in CertificateDer::pem_file_iter(ca).map_err(|e| file_error(ca, e))? {
                roots
                    .add(certificate.map_err(|e| file_error(ca, e))?)
                    .map_err(|e| file_error(ca, e))?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .map_err(|e| file_error(ca, e))?;
            builder.with_client_cert_verifier(verifier)
        }
        None => builder.with_no_client_auth(),
    }
    .with_single_cert(chain, key)?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Some(TlsAcceptor::from(Arc::new(config))))
}

/// A listener whose connections have finished their TLS handshake.
/// Handshakes run in their own tasks, so a slow client delays only itself.
pub struct TlsListener {
    ready: mpsc::Receiver<(tokio_rustls::server::TlsStream<TcpStream>, SocketAddr)>,
    local: SocketAddr,
}

impl TlsListener {
    /// Accepts on `tcp` and shakes hands with `acceptor`, until dropped.
    pub fn new(tcp: TcpListener, acceptor: TlsAcceptor) -> std::io::Result<Self> {
        let local = tcp.local_addr()?;
        let (send, ready) = mpsc::channel(READY_BACKLOG);
        tokio::spawn(async move {
            loop {
                let accepted = tokio::select! {
                    accepted = tcp.accept() => accepted,
                    () = send.closed() => return,
                };
                let Ok((stream, peer)) = accepted else {
                    // Out of descriptors and the like: breathe, then go on.
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                };
                let _ = stream.set_nodelay(true);
                let (acceptor, send) = (acceptor.clone(), send.clone());
                tokio::spawn(async move {
                    if let Ok(Ok(tls)) =
                        tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await
                    {
                        let _ = send.send((tls, peer)).await;
                    }
                });
            }
        });
        Ok(TlsListener { ready, local })
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = tokio_rustls::server::TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.ready.recv().await {
            Some(ready) => ready,
            // The accept task only ends when this listener is dropped.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<SocketAddr> {
        Ok(self.local)
    }
}

/// Serves `router` on `listener` (HTTP/1.1 and HTTP/2; HTTPS with `tls`)
/// until `shutdown`. Over HTTPS each request carries its connection's
/// [`ClientCertificate`] as `ConnectInfo`.
pub async fn serve(
    listener: TcpListener,
    tls: Option<TlsAcceptor>,
    router: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    use axum::serve::ListenerExt;
    if let Some(acceptor) = tls {
        let listener = TlsListener::new(listener, acceptor)?;
        let service = router.into_make_service_with_connect_info::<ClientCertificate>();
        return axum::serve(listener, service)
            .with_graceful_shutdown(shutdown)
            .await;
    }
    // Small answers: without NODELAY each waits for Nagle.
    let listener = listener.tap_io(|tcp| {
        let _ = tcp.set_nodelay(true);
    });
    axum::serve(listener, router)
        .with_graceful_shutdown(shutdown)
        .await
}

/// The verified client certificate of an HTTPS connection (none over
/// plaintext or without mTLS).
#[derive(Clone)]
pub struct ClientCertificate(pub Option<PeerCertificate>);

impl Connected<IncomingStream<'_, TlsListener>> for ClientCertificate {
    fn connect_info(stream: IncomingStream<'_, TlsListener>) -> Self {
        let (_, session) = stream.io().get_ref();
        ClientCertificate(
            session
                .peer_certificates()
                .and_then(|chain| chain.first())
                .map(|leaf| PeerCertificate::verified(leaf.clone().into_owned())),
        )
    }
}
