//! Who a request comes from: its bearer token and its verified client certificate.

/// The bearer token of a request (`authorization: Bearer TOKEN`, the
/// prefix in any case, or a bare token), if any.
pub fn bearer(metadata: &tonic::metadata::MetadataMap) -> Option<&str> {
    bearer_token(metadata.get("authorization")?.to_str().ok()?)
}

/// The token of an `Authorization` header value: `Bearer TOKEN` (the
/// prefix in any case) or a bare token; `None` when there is no token.
/// Every front door (gRPC, `/mcp`, the admin page) reads headers with it.
pub fn bearer_token(value: &str) -> Option<&str> {
    let value = value.trim();
    let token = match value.get(..7) {
        Some(prefix) if prefix.eq_ignore_ascii_case("bearer ") => value[7..].trim(),
        // "Bearer" with nothing after it (the header's spaces trimmed).
        _ if value.eq_ignore_ascii_case("bearer") => "",
        _ => value,
    };
    (!token.is_empty()).then_some(token)
}

/// Sends `token` as `authorization: Bearer TOKEN`; false (and nothing
/// set) when the token has characters a header cannot carry.
pub fn set_bearer(metadata: &mut tonic::metadata::MetadataMap, token: &str) -> bool {
    match format!("Bearer {token}").parse() {
        Ok(value) => {
            metadata.insert("authorization", value);
            true
        }
        Err(_) => false,
    }
}

/// The verified client certificate of a request, as a test: is it valid
/// for this DNS name? `None` without mTLS.
pub fn peer_certificate<T>(request: &tonic::Request<T>) -> Option<PeerCertificate> {
    let certs = request.peer_certs()?;
    let leaf = certs.first()?.clone();
    Some(PeerCertificate(leaf))
}

/// A client certificate the TLS handshake verified against the client CA.
#[derive(Debug, Clone)]
pub struct PeerCertificate(rustls_pki_types::CertificateDer<'static>);

impl PeerCertificate {
    /// A certificate the caller's TLS stack verified (the leaf of the
    /// client's chain).
    pub fn verified(leaf: rustls_pki_types::CertificateDer<'static>) -> Self {
        PeerCertificate(leaf)
    }

    /// Whether the certificate is issued for `dns_name`.
    pub fn is_valid_for(&self, dns_name: &str) -> bool {
        let Ok(cert) = webpki::EndEntityCert::try_from(&self.0) else {
            return false;
        };
        rustls_pki_types::ServerName::try_from(dns_name)
            .is_ok_and(|name| cert.verify_is_valid_for_subject_name(&name).is_ok())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bearer tokens round-trip through metadata, with or without the prefix.
    #[test]
    fn bearer_tokens() {
        let mut metadata = tonic::metadata::MetadataMap::new();
        assert_eq!(bearer(&metadata), None);
        assert!(set_bearer(&mut metadata, "tok-1"));
        assert_eq!(bearer(&metadata), Some("tok-1"));
        metadata.insert("authorization", "BEARER  tok-2 ".parse().unwrap());
        assert_eq!(bearer(&metadata), Some("tok-2"));
        metadata.insert("authorization", "tok-3".parse().unwrap());
        assert_eq!(bearer(&metadata), Some("tok-3"));
        metadata.insert("authorization", "Bearer ".parse().unwrap());
        assert_eq!(bearer(&metadata), None);
        assert!(!set_bearer(&mut metadata, "bad\ntoken"));
    }

    /// Header values: the prefix in any case, spaces around, a bare token;
    /// a prefix with no token is none.
    #[test]
    fn bearer_token_values() {
        assert_eq!(bearer_token("Bearer tok"), Some("tok"));
        assert_eq!(bearer_token(" bearer  tok "), Some("tok"));
        assert_eq!(bearer_token("BEARER tok"), Some("tok"));
        assert_eq!(bearer_token("tok"), Some("tok"));
        assert_eq!(bearer_token("Bearer"), None);
        assert_eq!(bearer_token("  "), None);
    }
}
