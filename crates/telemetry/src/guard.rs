//! Host and Origin allow-lists for the HTTP doors (admin listener, `/mcp`): against DNS rebinding and cross-site requests.

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode, Uri, header, uri::Authority};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use std::sync::Arc;

/// The `Host` names accepted when no list is given: loopback only.
pub const LOOPBACK_HOSTS: [&str; 3] = ["localhost", "127.0.0.1", "::1"];

/// Which `Host` and `Origin` values a door accepts.
///
/// Hosts: `host` (any port) or `host:port`; an empty list is
/// [`LOOPBACK_HOSTS`]; `*` is any. Origins: `scheme://host[:port]` (no
/// port: the scheme's default), `null`, or `*`; an empty list accepts an
/// origin whose `host[:port]` is an accepted host (and, with hosts `*`, an
/// origin naming the very host the request was sent to). A request without
/// `Origin` (not from a browser page) passes the origin check.
#[derive(Debug, Clone)]
pub struct HostGuard {
    hosts: Vec<String>,
    origins: Vec<String>,
    /// Whether `Origin: null` passes whatever the origins list says.
    null_origin: bool,
    /// The flag that sets the hosts, named in refusals.
    hosts_flag: &'static str,
    /// The flag that sets the origins, named in refusals.
    origins_flag: &'static str,
}

/// Why a request was refused at the door.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GuardRefusal {
    /// No usable `Host` (nor HTTP/2 `:authority`).
    #[error("the request names no valid Host; send a Host header such as localhost:PORT")]
    BadHost,
    /// A `Host` outside the allow-list (DNS rebinding, or a name to add).
    #[error("Host {host:?} is not allowed here; to serve it, add it to {flag} (or `*` for any)")]
    HostNotAllowed {
        /// The host sent.
        host: String,
        /// The flag to change.
        flag: &'static str,
    },
    /// An `Origin` outside the allow-list (a page of another site).
    #[error(
        "Origin {origin:?} is not allowed here; a browser page of another site may not call this server. To allow it, add it to {flag}"
    )]
    OriginNotAllowed {
        /// The origin sent.
        origin: String,
        /// The flag to change.
        flag: &'static str,
    },
}

impl IntoResponse for GuardRefusal {
    fn into_response(self) -> Response {
        let status = match self {
            GuardRefusal::BadHost => StatusCode::BAD_REQUEST,
            _ => StatusCode::FORBIDDEN,
        };
        (status, self.to_string()).into_response()
    }
}

/// A host (lowercase, without IPv6 brackets) and maybe a port.
#[derive(Debug, PartialEq, Eq)]
struct HostPort {
    host: String,
    port: Option<u16>,
}

impl HostPort {
    fn parse(text: &str) -> Option<HostPort> {
        let authority: Authority = text.trim().parse().ok()?;
        // userinfo (`a@b`) has no place in Host or Origin.
        if authority.as_str().contains('@') {
            return None;
        }
        Some(HostPort {
            host: normalize(authority.host()),
            port: authority.port_u16(),
        })
    }

    /// An allow-list entry: as [`parse`](Self::parse), and a bare IPv6
    /// address (`::1`) too.
    fn parse_allowed(text: &str) -> Option<HostPort> {
        HostPort::parse(text).or_else(|| HostPort::parse(&format!("[{}]", text.trim())))
    }

    /// Whether this allow-list entry admits `sent` (no port: any port).
    fn admits(&self, sent: &HostPort) -> bool {
        self.host == sent.host && self.port.is_none_or(|p| sent.port == Some(p))
    }
}

fn normalize(host: &str) -> String {
    host.trim_start_matches('[')
        .trim_end_matches(']')
        .to_ascii_lowercase()
}

/// An origin: scheme and host, the port made explicit.
#[derive(Debug, PartialEq, Eq)]
struct Origin {
    scheme: String,
    host: HostPort,
}

impl Origin {
    fn parse(text: &str) -> Option<Origin> {
        let uri: Uri = text.trim().parse().ok()?;
        let scheme = uri.scheme_str()?.to_ascii_lowercase();
        // An origin is scheme://authority and nothing else.
        if !matches!(uri.path(), "" | "/") || uri.query().is_some() {
            return None;
        }
        let mut host = HostPort::parse(uri.authority()?.as_str())?;
        host.port = host.port.or(match scheme.as_str() {
            "http" => Some(80),
            "https" => Some(443),
            _ => None,
        });
        Some(Origin { scheme, host })
    }
}

impl HostGuard {
    /// A guard accepting `hosts` (set by `hosts_flag`) and `origins` (set
    /// by `origins_flag`); see [`HostGuard`] for the forms and defaults.
    pub fn new(
        hosts: &[String],
        hosts_flag: &'static str,
        origins: &[String],
        origins_flag: &'static str,
    ) -> HostGuard {
        let clean = |list: &[String]| {
            list.iter()
                .map(|s| s.trim().to_owned())
                .filter(|s| !s.is_empty())
                .collect::<Vec<_>>()
        };
        let mut hosts = clean(hosts);
        if hosts.is_empty() {
            hosts = LOOPBACK_HOSTS.iter().map(|h| (*h).to_owned()).collect();
        }
        HostGuard {
            hosts,
            origins: clean(origins),
            null_origin: false,
            hosts_flag,
            origins_flag,
        }
    }

    /// This guard, also passing `Origin: null`: what a browser sends for a
    /// form posted from a page served with `Referrer-Policy: no-referrer`
    /// (the admin page), so such a door must defend its forms otherwise
    /// (a CSRF token, a `SameSite=Strict` cookie).
    pub fn admitting_null_origin(mut self) -> HostGuard {
        self.null_origin = true;
        self
    }

    fn any_host(&self) -> bool {
        self.hosts.iter().any(|h| h == "*")
    }

    fn host_allowed(&self, sent: &HostPort) -> bool {
        self.any_host()
            || self
                .hosts
                .iter()
                .filter_map(|h| HostPort::parse_allowed(h))
                .any(|allowed| allowed.admits(sent))
    }

    /// Admits the request with `headers` for `uri`, or says why not.
    pub fn check(&self, uri: &Uri, headers: &HeaderMap) -> Result<(), GuardRefusal> {
        let host_text = match headers.get(header::HOST) {
            Some(value) => value.to_str().map_err(|_| GuardRefusal::BadHost)?,
            // HTTP/2 carries it as :authority.
            None => uri.authority().ok_or(GuardRefusal::BadHost)?.as_str(),
        };
        let host = HostPort::parse(host_text).ok_or(GuardRefusal::BadHost)?;
        if !self.host_allowed(&host) {
            return Err(GuardRefusal::HostNotAllowed {
                host: host_text.chars().take(200).collect(),
                flag: self.hosts_flag,
            });
        }
        let Some(origin) = headers.get(header::ORIGIN) else {
            return Ok(());
        };
        let text = String::from_utf8_lossy(origin.as_bytes());
        if self.origin_allowed(&text, &host) {
            Ok(())
        } else {
            Err(GuardRefusal::OriginNotAllowed {
                origin: text.chars().take(200).collect(),
                flag: self.origins_flag,
            })
        }
    }

    fn origin_allowed(&self, text: &str, request_host: &HostPort) -> bool {
        let text = text.trim();
        if self.origins.iter().any(|o| o == "*") {
            return true;
        }
        if text.eq_ignore_ascii_case("null") {
            return self.null_origin || self.origins.iter().any(|o| o.eq_ignore_ascii_case("null"));
        }
        let Some(origin) = Origin::parse(text) else {
            return false;
        };
        if !self.origins.is_empty() {
            return self
                .origins
                .iter()
                .filter_map(|o| Origin::parse(o))
                .any(|allowed| allowed == origin);
        }
        if self.any_host() {
            // Same origin: the page was loaded from the host it now calls.
            return origin.host.host == request_host.host
                && (request_host.port.is_none() || origin.host.port == request_host.port);
        }
        self.host_allowed(&origin.host)
    }

    /// `router` behind this guard: a refused request gets 400 or 403 with
    /// the reason, and never reaches a route.
    pub fn wrap(self, router: Router) -> Router {
        router.layer(middleware::from_fn_with_state(Arc::new(self), admit))
    }
}

async fn admit(State(guard): State<Arc<HostGuard>>, request: Request, next: Next) -> Response {
    match guard.check(request.uri(), request.headers()) {
        Ok(()) => next.run(request).await,
        Err(refusal) => {
            tracing::warn!(%refusal, "request refused at the door");
            refusal.into_response()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn guard(hosts: &[&str], origins: &[&str]) -> HostGuard {
        let owned = |l: &[&str]| l.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        HostGuard::new(&owned(hosts), "--hosts", &owned(origins), "--origins")
    }

    fn check(
        guard: &HostGuard,
        host: Option<&str>,
        origin: Option<&str>,
    ) -> Result<(), GuardRefusal> {
        let mut headers = HeaderMap::new();
        if let Some(host) = host {
            headers.insert(header::HOST, host.parse().unwrap());
        }
        if let Some(origin) = origin {
            headers.insert(header::ORIGIN, origin.parse().unwrap());
        }
        guard.check(&Uri::from_static("/"), &headers)
    }

    /// By default only loopback names pass, on any port; a rebinding name is refused naming the flag.
    #[test]
    fn loopback_by_default() {
        let g = guard(&[], &[]);
        for host in ["localhost:9090", "127.0.0.1:1", "[::1]:8080", "LOCALHOST"] {
            assert_eq!(check(&g, Some(host), None), Ok(()), "{host}");
        }
        let refused = check(&g, Some("evil.example:9090"), None).unwrap_err();
        assert!(refused.to_string().contains("--hosts"), "{refused}");
        assert_eq!(check(&g, None, None), Err(GuardRefusal::BadHost));
        assert_eq!(check(&g, Some("a b"), None), Err(GuardRefusal::BadHost));
        assert_eq!(
            check(&g, Some("u@localhost"), None),
            Err(GuardRefusal::BadHost)
        );
    }

    /// Origins: absent passes; the default admits allowed hosts only; a list is exact (default ports filled in).
    #[test]
    fn origins() {
        let g = guard(&[], &[]);
        assert_eq!(
            check(&g, Some("localhost:1"), Some("http://localhost:1")),
            Ok(())
        );
        assert_eq!(
            check(&g, Some("localhost:1"), Some("http://127.0.0.1:5")),
            Ok(())
        );
        for bad in [
            "http://evil.example",
            "null",
            "garbage",
            "http://localhost:1/path",
        ] {
            assert!(check(&g, Some("localhost:1"), Some(bad)).is_err(), "{bad}");
        }
        let g = guard(&["*"], &[]);
        assert_eq!(
            check(&g, Some("mesh.example"), Some("https://mesh.example")),
            Ok(())
        );
        assert_eq!(
            check(
                &g,
                Some("mesh.example:8443"),
                Some("https://mesh.example:8443")
            ),
            Ok(())
        );
        assert!(
            check(
                &g,
                Some("mesh.example:8443"),
                Some("https://evil.example:8443")
            )
            .is_err()
        );
        let g = guard(&["*"], &["https://app.example"]);
        assert_eq!(
            check(&g, Some("x"), Some("https://app.example:443")),
            Ok(())
        );
        assert!(check(&g, Some("x"), Some("http://app.example")).is_err());
        let g = guard(&["*"], &["*"]);
        assert_eq!(check(&g, Some("x"), Some("null")), Ok(()));
        let g = guard(&[], &[]).admitting_null_origin();
        assert_eq!(check(&g, Some("localhost"), Some("null")), Ok(()));
        assert!(check(&g, Some("localhost"), Some("http://evil.example")).is_err());
    }
}
