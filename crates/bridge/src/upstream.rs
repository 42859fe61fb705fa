//! Where the upstream MCP server is and how to open a session with it: a child process spoken to over stdio, or a Streamable HTTP URL with the bridge's own headers.

use crate::client::{BridgeClient, Observed};
use crate::error::BridgeError;
use http::{HeaderName, HeaderValue};
use rmcp::ServiceExt;
use rmcp::service::{RoleClient, RunningService};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
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
        /// `http://host:port/path`.
        url: String,
        /// Headers sent with every request (the bridge's own credentials;
        /// never a caller's).
        headers: HashMap<HeaderName, HeaderValue>,
        /// Sent as `Authorization: Bearer …`.
        bearer: Option<String>,
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

    /// A Streamable HTTP endpoint with `headers` (each `Name: value`) and
    /// an optional bearer token.
    pub fn http(
        url: &str,
        headers: &[String],
        bearer: Option<String>,
    ) -> Result<Upstream, BridgeError> {
        let parsed: http::Uri = url.parse().map_err(|e: http::uri::InvalidUri| {
            BridgeError::BadUrl(url.to_owned(), e.to_string())
        })?;
        match parsed.scheme_str() {
            Some("http") if parsed.host().is_some() => {}
            Some("https") => return Err(BridgeError::HttpsUrl(url.to_owned())),
            _ => {
                return Err(BridgeError::BadUrl(
                    url.to_owned(),
                    "write it as http://HOST:PORT/PATH".to_owned(),
                ));
            }
        }
        let mut parsed_headers = HashMap::new();
        for header in headers {
            let (name, value) = parse_header(header)?;
            parsed_headers.insert(name, value);
        }
        Ok(Upstream::Http {
            url: url.to_owned(),
            headers: parsed_headers,
            bearer: bearer.filter(|b| !b.is_empty()),
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
                    let transport = Observed::new(child, client.clone());
                    client
                        .serve(transport)
                        .await
                        .map_err(|e| self.connect_error(e))
                }
                Upstream::Http {
                    url,
                    headers,
                    bearer,
                } => {
                    let mut config = StreamableHttpClientTransportConfig::with_uri(url.as_str())
                        .custom_headers(headers.clone())
                        .max_concurrent_requests(HTTP_CONCURRENT_REQUESTS);
                    if let Some(token) = bearer {
                        config = config.auth_header(token.clone());
                    }
                    let transport = StreamableHttpClientTransport::from_config(config);
                    client
                        .serve(transport)
                        .await
                        .map_err(|e| self.connect_error(e))
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

    fn connect_error(&self, error: rmcp::service::ClientInitializeError) -> BridgeError {
        BridgeError::Connect {
            upstream: self.describe(),
            reason: error.to_string(),
        }
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

    /// Headers parse as `Name: value`; anything else, an https URL and a
    /// URL that is not http are refused saying how to write them.
    #[test]
    fn urls_and_headers_are_checked() {
        let upstream = Upstream::http(
            "http://127.0.0.1:9/mcp",
            &["X-Team: blue".into(), "authorization:Bearer abc".into()],
            Some("t".into()),
        )
        .unwrap();
        let Upstream::Http { headers, .. } = &upstream else {
            panic!("{upstream:?}")
        };
        let header = |name: &'static str| headers[&HeaderName::from_static(name)].clone();
        assert_eq!(header("x-team"), "blue");
        assert_eq!(header("authorization"), "Bearer abc");
        assert!(!format!("{upstream:?}").contains("abc"));

        let bad = Upstream::http("http://h/mcp", &["no colon".into()], None).unwrap_err();
        assert!(bad.to_string().contains("'Name: value'"), "{bad}");
        let https = Upstream::http("https://h/mcp", &[], None).unwrap_err();
        assert!(https.to_string().contains("https"), "{https}");
        let relative = Upstream::http("/mcp", &[], None).unwrap_err();
        assert!(
            relative.to_string().contains("http://HOST:PORT/PATH"),
            "{relative}"
        );
        assert!(matches!(Upstream::stdio(&[]), Err(BridgeError::NoCommand)));
    }
}
