//! Where the upstream MCP server is and how to open a session with it: a child process spoken to over stdio, or a Streamable HTTP URL with the bridge's own headers.

use crate::client::{BridgeClient, Observed};
use crate::error::BridgeError;
use crate::http::{HttpsFiles, HttpsSettings};
use http::{HeaderName, HeaderValue};
use rmcp::model::ProtocolVersion;
use rmcp::service::{RoleClient, RunningService};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess, Transport};
use rmcp::{ClientLifecycleMode, ClientServiceExt};
use std::collections::HashMap;
use std::time::Duration;

/// Longest the upstream may take to answer `initialize`.
pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

/// POSTs to an HTTP upstream in flight at once (rmcp's default is 16, which
/// would queue calls the dispatcher already admitted and bounds by its own
/// per-instance limit).
const HTTP_CONCURRENT_REQUESTS: usize = 128;

/// Environment variables a stdio upstream never inherits: the bridge's own
/// toolmesh credentials and settings are not the upstream's business.
const PRIVATE_ENV_PREFIX: &str = "TOOLMESH_";

/// An open session with the upstream.
pub(crate) type Session = RunningService<RoleClient, BridgeClient>;

/// The upstream MCP server.
#[derive(Clone)]
pub enum Upstream {
    /// A command started by the bridge, spoken to over its stdin/stdout
    /// (started again when it exits).
    Stdio {
        /// The program.
        program: String,
        /// Its arguments.
        args: Vec<String>,
    },
    /// A server reached over Streamable HTTP.
    Http {
        /// `http://host:port/path` or `https://…`.
        url: String,
        /// Headers sent with every request (the bridge's own credentials;
        /// never a caller's).
        headers: HashMap<HeaderName, HeaderValue>,
        /// Sent as `Authorization: Bearer …`.
        bearer: Option<String>,
        /// Certificates trusted besides the system's roots (`--url-ca`)
        /// and the client certificate (`--url-cert`, `--url-key`).
        tls: HttpsSettings,
    },
}

impl std::fmt::Debug for Upstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Header values and the bearer token stay out of logs.
        f.write_str(&self.describe())
    }
}

impl Upstream {
    /// A command line: `command` is the program and its arguments.
    pub fn stdio(command: &[String]) -> Result<Upstream, BridgeError> {
        let Some((program, args)) = command.split_first() else {
            return Err(BridgeError::NoCommand);
        };
        Ok(Upstream::Stdio {
            program: program.clone(),
            args: args.to_vec(),
        })
    }

    /// A Streamable HTTP endpoint with `headers` (each `Name: value`), an
    /// optional bearer token and, for `https://`, the `tls` files: a CA to
    /// trust besides the system's roots, a client certificate and its key.
    pub fn http(
        url: &str,
        headers: &[String],
        bearer: Option<String>,
        tls: &HttpsFiles,
    ) -> Result<Upstream, BridgeError> {
        let parsed: http::Uri = url.parse().map_err(|e: http::uri::InvalidUri| {
            BridgeError::BadUrl(url.to_owned(), e.to_string())
        })?;
        match parsed.scheme_str() {
            Some("http" | "https") if parsed.host().is_some() => {}
            _ => {
                return Err(BridgeError::BadUrl(
                    url.to_owned(),
                    "write it as http://HOST:PORT/PATH or https://HOST:PORT/PATH".to_owned(),
                ));
            }
        }
        let tls = tls.load()?;
        let mut parsed_headers = HashMap::new();
        for header in headers {
            let (name, value) = parse_header(header)?;
            parsed_headers.insert(name, value);
        }
        Ok(Upstream::Http {
            url: url.to_owned(),
            headers: parsed_headers,
            bearer: bearer.filter(|b| !b.is_empty()),
            tls,
        })
    }

    /// How messages name the upstream: the command line or the URL.
    pub fn describe(&self) -> String {
        match self {
            Upstream::Stdio { program, args } => {
                let mut line = program.clone();
                for arg in args {
                    line.push(' ');
                    line.push_str(arg);
                }
                format!("`{line}`")
            }
            Upstream::Http { url, .. } => url.clone(),
        }
    }

    /// Whether the bridge starts the upstream itself (and so restarts it).
    pub fn is_child(&self) -> bool {
        matches!(self, Upstream::Stdio { .. })
    }

    /// Starts (stdio) or reaches (HTTP) the upstream and opens a session:
    /// `initialize` answered within [`CONNECT_TIMEOUT`].
    pub(crate) async fn connect(&self, client: BridgeClient) -> Result<Session, BridgeError> {
        let connecting = async {
            match self {
                Upstream::Stdio { program, args } => {
                    let mut command = tokio::process::Command::new(program);
                    command.args(args);
                    for (name, _) in std::env::vars_os() {
                        if name.to_string_lossy().starts_with(PRIVATE_ENV_PREFIX) {
                            command.env_remove(name);
                        }
                    }
                    let (child, _) = TokioChildProcess::builder(command)
                        .stderr(std::process::Stdio::inherit())
                        .spawn()
                        .map_err(|source| BridgeError::Spawn {
                            command: self.describe(),
                            source,
                        })?;
                    self.open(child, client).await
                }
                Upstream::Http {
                    url,
                    headers,
                    bearer,
                    tls,
                } => {
                    let http = crate::http::client(tls).map_err(|e| BridgeError::Connect {
                        upstream: self.describe(),
                        reason: toolmesh::error_chain(&e),
                    })?;
                    let mut config = StreamableHttpClientTransportConfig::with_uri(url.as_str())
                        .custom_headers(headers.clone())
                        .max_concurrent_requests(HTTP_CONCURRENT_REQUESTS);
                    if let Some(token) = bearer {
                        config = config.auth_header(token.clone());
                    }
                    let transport = StreamableHttpClientTransport::with_client(http, config);
                    self.open(transport, client).await
                }
            }
        };
        match tokio::time::timeout(CONNECT_TIMEOUT, connecting).await {
            Ok(session) => session,
            Err(_) => Err(BridgeError::Connect {
                upstream: self.describe(),
                reason: format!("it did not answer initialize within {CONNECT_TIMEOUT:?}"),
            }),
        }
    }

    /// Opens a session over `transport`, whichever it is: every message
    /// read passes the progress relay ([`Observed`]) first, so progress
    /// reaches callers alike from a stdio child and an HTTP server. The
    /// revision is the upstream's choice: `server/discover` first (MCP
    /// 2026-07-28, stateless), and the `initialize` handshake of earlier
    /// revisions when the upstream answers that it does not know it.
    async fn open<T>(&self, transport: T, client: BridgeClient) -> Result<Session, BridgeError>
    where
        T: Transport<RoleClient> + Send + 'static,
    {
        let observed = Observed::new(transport, client.clone());
        let lifecycle = ClientLifecycleMode::Auto {
            preferred_versions: vec![ProtocolVersion::V_2026_07_28],
            legacy_version: Some(ProtocolVersion::LATEST_WITH_INITIALIZE),
        };
        client
            .serve_with_lifecycle(observed, lifecycle)
            .await
            .map_err(|e| self.connect_error(e))
    }

    fn connect_error(&self, error: rmcp::service::ClientInitializeError) -> BridgeError {
        use rmcp::service::ClientInitializeError::TransportError;
        // What the transport met, with its causes: that is where TLS or the
        // connection says what it refused (rmcp's wrapper names the
        // transport's type instead, and does not chain to it).
        let reason = match &error {
            TransportError { error, context } => {
                format!(
                    "{} ({context})",
                    crate::http::transport_error(&*error.error)
                )
            }
            other => toolmesh::error_chain(other),
        };
        let hint = match self {
            Upstream::Http { url, tls, .. } => {
                tls_hint(&reason, url.starts_with("https://"), tls.identity.is_some())
            }
            Upstream::Stdio { .. } => None,
        };
        let reason = match hint {
            Some(hint) => format!("{reason}; {hint}"),
            None => reason,
        };
        BridgeError::Connect {
            upstream: self.describe(),
            reason,
        }
    }
}

/// What to do about a TLS failure that `reason` describes: an `https://`
/// server that requires a client certificate and got none (it sends the
/// `certificate_required` alert, or just closes or resets the connection
/// after the handshake), or a server certificate from a CA the bridge does
/// not trust.
fn tls_hint(reason: &str, https: bool, has_identity: bool) -> Option<&'static str> {
    let lower = reason.to_ascii_lowercase();
    let client_refused = [
        "certificaterequired",
        "certificate required",
        "close_notify",
        "connection reset",
    ]
    .iter()
    .any(|sign| lower.contains(sign));
    if https && client_refused && !has_identity {
        Some(
            "the server ended the TLS handshake, as a server that requires a client certificate does when given none: give the bridge's certificate and key with --url-cert and --url-key",
        )
    } else if lower.contains("certificate") {
        Some(
            "if the server's certificate comes from a private CA, give that CA's PEM file with --url-ca",
        )
    } else {
        None
    }
}

/// `Name: value` as a header.
fn parse_header(text: &str) -> Result<(HeaderName, HeaderValue), BridgeError> {
    let bad = |why: &str| BridgeError::BadHeader(text.to_owned(), why.to_owned());
    let (name, value) = text
        .split_once(':')
        .ok_or_else(|| bad("write it as 'Name: value'"))?;
    let name = HeaderName::try_from(name.trim())
        .map_err(|_| bad("the name is not a valid header name"))?;
    let value = HeaderValue::try_from(value.trim())
        .map_err(|_| bad("the value has characters a header cannot carry"))?;
    Ok((name, value))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Headers parse as `Name: value`; anything else, a URL that is not
    /// http(s) and a CA file without a certificate are refused saying how
    /// to write them.
    #[test]
    fn urls_and_headers_are_checked() {
        let upstream = Upstream::http(
            "http://127.0.0.1:9/mcp",
            &["X-Team: blue".into(), "authorization:Bearer abc".into()],
            Some("t".into()),
            &HttpsFiles::default(),
        )
        .unwrap();
        let Upstream::Http { headers, .. } = &upstream else {
            panic!("{upstream:?}")
        };
        let header = |name: &'static str| headers[&HeaderName::from_static(name)].clone();
        assert_eq!(header("x-team"), "blue");
        assert_eq!(header("authorization"), "Bearer abc");
        assert!(!format!("{upstream:?}").contains("abc"));

        let bad = Upstream::http(
            "http://h/mcp",
            &["no colon".into()],
            None,
            &HttpsFiles::default(),
        )
        .unwrap_err();
        assert!(bad.to_string().contains("'Name: value'"), "{bad}");
        assert!(Upstream::http("https://h/mcp", &[], None, &HttpsFiles::default()).is_ok());
        let relative = Upstream::http("/mcp", &[], None, &HttpsFiles::default()).unwrap_err();
        assert!(
            relative.to_string().contains("http://HOST:PORT/PATH"),
            "{relative}"
        );
        let not_pem = std::env::temp_dir().join(format!("bridge-ca-{}.pem", std::process::id()));
        std::fs::write(&not_pem, "not a certificate").unwrap();
        let ca = |path: &std::path::Path| HttpsFiles {
            ca: Some(path.to_owned()),
            ..HttpsFiles::default()
        };
        let bad = Upstream::http("https://h/mcp", &[], None, &ca(&not_pem)).unwrap_err();
        std::fs::remove_file(&not_pem).unwrap();
        assert!(
            bad.to_string().contains("--url-ca") && bad.to_string().contains("PEM"),
            "{bad}"
        );
        let missing = Upstream::http(
            "https://h/mcp",
            &[],
            None,
            &ca(std::path::Path::new("/nonexistent/ca.pem")),
        );
        assert!(
            matches!(missing, Err(BridgeError::BadCa { .. })),
            "{missing:?}"
        );
        assert!(matches!(Upstream::stdio(&[]), Err(BridgeError::NoCommand)));
        let half = HttpsFiles {
            cert: Some("/tmp/cert.pem".into()),
            ..HttpsFiles::default()
        };
        let half = Upstream::http("https://h/mcp", &[], None, &half).unwrap_err();
        assert!(half.to_string().contains("--url-key"), "{half}");
    }

    /// A handshake an https server ends (alert, close or reset) points at a
    /// client certificate when the bridge has none; a refused server certificate
    /// at --url-ca.
    #[test]
    fn tls_failures_say_which_flag_helps() {
        let closed = "connection error: peer closed connection without sending TLS close_notify";
        assert!(
            tls_hint(closed, true, false)
                .unwrap()
                .contains("--url-cert")
        );
        let reset = "connection error: Connection reset by peer (os error 104)";
        assert!(tls_hint(reset, true, false).unwrap().contains("--url-cert"));
        assert_eq!(tls_hint(reset, false, false), None, "plain http: no TLS");
        let alert = "received fatal alert: CertificateRequired";
        assert!(tls_hint(alert, true, false).unwrap().contains("--url-key"));
        let untrusted = "invalid peer certificate: UnknownIssuer";
        assert!(
            tls_hint(untrusted, true, false)
                .unwrap()
                .contains("--url-ca")
        );
        assert!(
            tls_hint(untrusted, true, true)
                .unwrap()
                .contains("--url-ca")
        );
        assert_eq!(tls_hint("connection refused", true, false), None);
    }
}
