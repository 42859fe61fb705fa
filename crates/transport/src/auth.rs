//! Who a request comes from: its bearer token and its verified client
//! certificate, and how long a stream opened with that token may run.

use futures_util::{Stream, StreamExt, stream};
use tonic::Status;

/// The bearer token of a request (`authorization: Bearer TOKEN`, the
/// prefix in any case, or a bare token), if any.
pub fn bearer(metadata: &tonic::metadata::MetadataMap) -> Option<&str> {
    bearer_token(metadata.get("authorization")?.to_str().ok()?)
}

/// The token of an `Authorization` header value: `Bearer TOKEN` (the
/// prefix in any case) or a bare token; `None` when there is no token;
/// the whole value when it holds more than one word after the prefix.
/// Every front door (gRPC, `/mcp`, the admin page) reads headers with it.
pub fn bearer_token(value: &str) -> Option<&str> {
    let value = value.trim();
    let token = match value.get(..7) {
        Some(prefix) if prefix.eq_ignore_ascii_case("bearer ") => value[7..].trim(),
        // "Bearer" with nothing after it (the header's spaces trimmed).
        _ if value.eq_ignore_ascii_case("bearer") => "",
        _ => value,
    };
    // More than `Bearer` and one token (`Bearer Bearer T`, two tokens) is
    // handed on whole, so that reading it again strips nothing more and
    // the identity check refuses it by name.
    let token = if has_whitespace(token) { value } else { token };
    (!token.is_empty()).then_some(token)
}

/// Whether `text` holds whitespace as [`char::is_whitespace`] counts it.
/// Tokens are long (a JWT is hundreds of bytes) and ASCII, so bytes are
/// read in blocks, each folded without an early exit (which the compiler
/// turns into vector compares); only text with an ASCII space or a
/// non-ASCII byte is read again character by character.
pub fn has_whitespace(text: &str) -> bool {
    let suspect = text.as_bytes().chunks(64).any(|block| {
        block.iter().fold(0u8, |seen, &b| {
            seen | u8::from(b == b' ') | u8::from(b.wrapping_sub(b'\t') < 5) | (b & 0x80)
        }) != 0
    });
    suspect && text.contains(char::is_whitespace)
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

    /// Whether the certificate is issued for `name`: a DNS name, or a
    /// SPIFFE ID (`spiffe://trust-domain/path`) that must be the
    /// certificate's SPIFFE ID exactly (see [`PeerCertificate::spiffe_id`]).
    pub fn is_valid_for(&self, name: &str) -> bool {
        if is_spiffe_id(name) {
            return self.spiffe_id().is_some_and(|id| id == name);
        }
        let Ok(cert) = webpki::EndEntityCert::try_from(&self.0) else {
            return false;
        };
        rustls_pki_types::ServerName::try_from(name)
            .is_ok_and(|name| cert.verify_is_valid_for_subject_name(&name).is_ok())
    }

    /// The workload's SPIFFE ID: the certificate's one `spiffe://` URI
    /// subject alternative name. `None` when it has none, or more than one
    /// URI name (an X.509-SVID carries exactly one), or the ID is malformed.
    pub fn spiffe_id(&self) -> Option<String> {
        let cert = webpki::EndEntityCert::try_from(&self.0).ok()?;
        let mut uris = cert.valid_uri_names();
        let only = uris.next()?;
        if uris.next().is_some() || !is_spiffe_id(only) {
            return None;
        }
        Some(only.to_owned())
    }
}

/// Whether `id` is a well-formed SPIFFE ID: `spiffe://`, a trust domain
/// of lowercase letters, digits, `.`, `-` and `_`, then an optional path of
/// non-empty segments of letters, digits, `.`, `-` and `_` (no `.` or `..`
/// segment), with no query, fragment, port or user.
pub fn is_spiffe_id(id: &str) -> bool {
    let Some(rest) = id.strip_prefix("spiffe://") else {
        return false;
    };
    let (domain, path) = rest
        .split_once('/')
        .map_or((rest, None), |(d, p)| (d, Some(p)));
    let domain_ok = !domain.is_empty()
        && domain.len() <= 255
        && domain.bytes().all(|b| {
            b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'.' | b'-' | b'_')
        });
    let path_ok = path.is_none_or(|path| {
        path.split('/').all(|segment| {
            !segment.is_empty()
                && segment != "."
                && segment != ".."
                && segment
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_'))
        })
    });
    domain_ok && path_ok && id.len() <= 2048
}

/// `stream` until `until` (the token it was opened with expires), then an
/// UNAVAILABLE end: the caller reconnects at once and is identified again,
/// with the fresh token it holds by then, or refused. A stream that ends
/// first (as on shutdown) just ends.
pub fn ends_when_token_expires<T: Send + 'static>(
    stream: impl Stream<Item = Result<T, Status>> + Send + 'static,
    until: std::time::SystemTime,
) -> impl Stream<Item = Result<T, Status>> + Send {
    let left = until
        .duration_since(std::time::SystemTime::now())
        .unwrap_or_default();
    // Said only when the time has come.
    let expired = async move {
        (std::time::SystemTime::now() >= until).then(|| {
            Err(Status::unavailable(
                "the token this watch was opened with has expired: reconnect with a fresh one",
            ))
        })
    };
    stream
        .take_until(tokio::time::sleep(left))
        .chain(stream::once(expired).filter_map(std::future::ready))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A leaf for localhost naming `uris` as URI subject alternative names.
    fn leaf(uris: &[&str]) -> PeerCertificate {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(vec!["localhost".to_owned()]).unwrap();
        for uri in uris {
            params
                .subject_alt_names
                .push(rcgen::SanType::URI((*uri).try_into().unwrap()));
        }
        let cert = params.self_signed(&key).unwrap();
        PeerCertificate::verified(cert.der().clone())
    }

    /// A certificate's SPIFFE ID is its one `spiffe://` URI name; it
    /// matches exactly, and DNS names still match as before.
    #[test]
    fn spiffe_ids() {
        let id = "spiffe://example.org/ns/tools/sa/kb";
        let cert = leaf(&[id]);
        assert_eq!(cert.spiffe_id().as_deref(), Some(id));
        assert!(cert.is_valid_for(id));
        assert!(cert.is_valid_for("localhost"));
        assert!(!cert.is_valid_for("spiffe://example.org/ns/tools/sa/other"));
        assert!(!cert.is_valid_for("spiffe://example.org/ns/tools"));
        assert!(!cert.is_valid_for("spiffe://other.org/ns/tools/sa/kb"));
        let plain = leaf(&[]);
        assert_eq!(plain.spiffe_id(), None);
        assert!(!plain.is_valid_for(id));
        let two = leaf(&[id, "spiffe://example.org/ns/tools/sa/b"]);
        assert_eq!(two.spiffe_id(), None, "an SVID carries exactly one URI");
        assert!(!two.is_valid_for(id));
        let web = leaf(&["https://example.org/kb"]);
        assert_eq!(web.spiffe_id(), None);
    }

    /// Malformed SPIFFE IDs are not IDs.
    #[test]
    fn spiffe_id_syntax() {
        for good in [
            "spiffe://example.org",
            "spiffe://example.org/ns/a/sa/b",
            "spiffe://td-1.prod_x/a.b/c-d/e_f",
        ] {
            assert!(is_spiffe_id(good), "{good}");
        }
        for bad in [
            "spiffe://",
            "spiffe:///path",
            "spiffe://Example.org/a",
            "spiffe://example.org:8443/a",
            "spiffe://user@example.org/a",
            "spiffe://example.org/a//b",
            "spiffe://example.org/a/../b",
            "spiffe://example.org/a/",
            "spiffe://example.org/a?x=1",
            "spiffe://example.org/a#f",
            "https://example.org/a",
            "example.org",
        ] {
            assert!(!is_spiffe_id(bad), "{bad}");
        }
    }

    /// Whitespace is found where `char::is_whitespace` finds it, in ASCII
    /// text and beyond it, in the first block of bytes and past it.
    #[test]
    fn whitespace_as_char_counts_it() {
        let mut samples: Vec<String> = (0u8..128)
            .map(|b| format!("ab{}cd", char::from(b)))
            .collect();
        samples.extend(
            [
                '\u{85}', '\u{a0}', '\u{2003}', '\u{3000}', 'é', '\u{1c}', '\u{200b}',
            ]
            .iter()
            .map(|c| format!("é{c}x")),
        );
        samples.extend(["", "token", "é", "Bearer x"].map(str::to_owned));
        // The same past the first block of bytes a fold reads.
        let long: Vec<String> = samples
            .iter()
            .map(|s| format!("{}{s}", "a".repeat(100)))
            .collect();
        samples.extend(long);
        for text in &samples {
            assert_eq!(
                has_whitespace(text),
                text.contains(char::is_whitespace),
                "{text:?}"
            );
        }
    }

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
    /// a prefix with no token is none; more than one word after it is kept
    /// whole, and reading that again strips nothing (it is refused later).
    #[test]
    fn bearer_token_values() {
        assert_eq!(bearer_token("Bearer tok"), Some("tok"));
        assert_eq!(bearer_token(" bearer  tok "), Some("tok"));
        assert_eq!(bearer_token("BEARER tok"), Some("tok"));
        assert_eq!(bearer_token("tok"), Some("tok"));
        assert_eq!(bearer_token("Bearer"), None);
        assert_eq!(bearer_token("  "), None);
        assert_eq!(bearer_token("Bearer Bearer tok"), Some("Bearer Bearer tok"));
        assert_eq!(bearer_token("Bearer a b"), Some("Bearer a b"));
        assert_eq!(
            bearer_token("Bearer Bearer tok").and_then(bearer_token),
            Some("Bearer Bearer tok")
        );
    }
}
