//! One raw HTTP/1.1 exchange over HTTPS, trusting a test CA and presenting a client certificate when given.

use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName, pem::PemObject};
use std::path::Path;
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_rustls::rustls::{ClientConfig, RootCertStore, crypto::ring};

/// Sends `request` to `addr` over TLS (server name `localhost`), trusting
/// `ca` and presenting `client` (certificate, key) when given; the whole
/// answer, or why the connection or handshake failed.
pub async fn exchange(
    addr: std::net::SocketAddr,
    ca: &Path,
    client: Option<(&Path, &Path)>,
    request: &str,
) -> std::io::Result<String> {
    let mut roots = RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_file(ca).unwrap())
        .unwrap();
    let builder = ClientConfig::builder_with_provider(Arc::new(ring::default_provider()))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots);
    let config = match client {
        None => builder.with_no_client_auth(),
        Some((cert, key)) => builder
            .with_client_auth_cert(
                vec![CertificateDer::from_pem_file(cert).unwrap()],
                PrivateKeyDer::from_pem_file(key).unwrap(),
            )
            .unwrap(),
    };
    let tcp = tokio::net::TcpStream::connect(addr).await?;
    let mut tls = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await?;
    tls.write_all(request.as_bytes()).await?;
    let mut answer = Vec::new();
    let read = tls.read_to_end(&mut answer).await;
    // A server that requires a client certificate refuses it after the
    // handshake: the refusal surfaces here, with nothing read.
    if answer.is_empty() {
        read?;
    }
    Ok(String::from_utf8_lossy(&answer).into_owned())
}
