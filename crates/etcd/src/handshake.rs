//! Telling a failed TLS handshake from an endpoint that is simply down, and
//! naming what to fix.

use crate::error::TlsProblem;
use std::error::Error as _;
use tonic::Status;

/// The status' message and every error under it, `: `-separated.
pub(crate) fn describe(status: &Status) -> String {
    // This crate stands alone (no toolmesh crate under it), so it walks the
    // causes itself, as `toolmesh::error_chain` does from an error.
    let mut text = status.message().to_owned();
    for error in std::iter::successors(status.source(), |&error| error.source()) {
        let part = error.to_string();
        if !text.contains(&part) {
            text.push_str(": ");
            text.push_str(&part);
        }
    }
    text
}

/// A problem that only the server's certificate can cause (no member going
/// down looks like it): this client does not trust it.
pub(crate) fn untrusted_server(status: &Status) -> Option<TlsProblem> {
    let text = describe(status);
    let untrusted = text.contains("invalid peer certificate");
    untrusted.then_some(TlsProblem::UntrustedServer(text))
}

/// The TLS mismatch a failure suggests, `tls` telling whether this client
/// speaks TLS: the connection accepted, then closed (etcd wants TLS, or a
/// client certificate it trusts), or the handshake cut short (etcd speaks
/// plaintext). A member going down can look the same once, so only a
/// failure that repeats means this.
pub(crate) fn suggested_mismatch(status: &Status, tls: bool) -> Option<TlsProblem> {
    if let Some(problem) = untrusted_server(status) {
        return Some(problem);
    }
    let text = describe(status);
    if text.contains("tls handshake eof") && tls {
        Some(TlsProblem::ServerWithoutTls(text))
    } else if closed_after_connect(&text) && tls {
        Some(TlsProblem::ClientCertificateRefused(text))
    } else if closed_after_connect(&text) {
        Some(TlsProblem::ServerWantsTls(text))
    } else {
        None
    }
}

/// Whether the connection was made and then dropped by the server (not
/// refused, not timed out), in the words hyper and h2 use.
fn closed_after_connect(text: &str) -> bool {
    let text = text.to_ascii_lowercase();
    ["connection closed", "broken pipe", "connection reset"]
        .iter()
        .any(|words| text.contains(words))
}
