//! The admin HTTP listener: `/metrics` plus whatever routes the process adds
//! (the node adds its admin page), behind the [`HostGuard`], over HTTPS
//! when the process has TLS files, every answer with headers that forbid
//! framing, sniffing, caching and referrers.

use crate::exposition::Exposition;
use crate::guard::HostGuard;
use crate::metrics::MetricsRegistry;
use axum::Router;
use axum::http::{HeaderMap, HeaderName, HeaderValue, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use std::net::SocketAddr;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio_rustls::TlsAcceptor;

/// Why the admin listener could not start.
#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    /// The address does not parse.
    #[error("--admin-listen {0:?} is not host:port")]
    Address(String),
    /// The address could not be bound.
    #[error("cannot listen on {addr} (admin): {source}")]
    Listen {
        /// The address asked for.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
}

/// What every admin answer carries: the page loads nothing but itself
/// (inline style), may not be framed, posts forms only to itself.
pub const SECURITY_HEADERS: [(&str, &str); 5] = [
    (
        "content-security-policy",
        "default-src 'none'; style-src 'self' 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    ),
    ("x-frame-options", "DENY"),
    ("x-content-type-options", "nosniff"),
    ("referrer-policy", "no-referrer"),
    ("cache-control", "no-store"),
];

/// How the admin listener is served.
#[derive(Clone)]
pub struct AdminOptions {
    /// HTTPS with this acceptor (see [`crate::https::acceptor`]); `None`
    /// serves plaintext.
    pub tls: Option<TlsAcceptor>,
    /// Which `Host` and `Origin` values are admitted.
    pub guard: HostGuard,
}

/// A running admin listener; stops when dropped or [`stop`](Self::stop)ped.
#[derive(Debug)]
pub struct AdminServer {
    /// Where it listens.
    pub addr: SocketAddr,
    /// `https` or `http`.
    pub scheme: &'static str,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<()>,
}

/// The admin listener's door: `Host` among `hosts` (`--admin-allowed-hosts`,
/// loopback by default), and a browser's `Origin` one of those hosts, or
/// `null`: forms on a page served with `Referrer-Policy: no-referrer` post
/// with `Origin: null`, so the admin page guards its forms with a CSRF
/// token and a `SameSite=Strict` session cookie.
pub fn guard(hosts: &[String]) -> HostGuard {
    HostGuard::new(hosts, "--admin-allowed-hosts", &[], "--admin-allowed-hosts")
        .admitting_null_origin()
}

/// `/metrics` from `metrics`, in the format the request's `Accept` asks
/// for ([`Exposition::negotiate`]): the Prometheus text format to a
/// scraper that names it, OpenMetrics otherwise. Caches are told the
/// answer depends on `Accept`.
pub fn metrics_routes(metrics: MetricsRegistry) -> Router {
    Router::new().route(
        "/metrics",
        get(move |headers: HeaderMap| {
            let accept = headers
                .get_all(header::ACCEPT)
                .iter()
                .filter_map(|value| value.to_str().ok())
                .collect::<Vec<_>>()
                .join(",");
            let format = Exposition::negotiate((!accept.is_empty()).then_some(accept.as_str()));
            let body = metrics.encode_as(format);
            async move {
                (
                    [
                        (header::CONTENT_TYPE, format.content_type()),
                        (header::VARY, "accept"),
                    ],
                    body,
                )
                    .into_response()
            }
        }),
    )
}

impl AdminServer {
    /// Binds `listen` and serves `routes` (with [`metrics_routes`] merged
    /// in by the caller, behind whatever check it wants) as `options` say.
    pub async fn start(
        listen: &str,
        options: AdminOptions,
        routes: Router,
    ) -> Result<AdminServer, AdminError> {
        let addr: SocketAddr = tokio::net::lookup_host(listen)
            .await
            .ok()
            .and_then(|mut addrs| addrs.next())
            .ok_or_else(|| AdminError::Address(listen.to_owned()))?;
        let listener = TcpListener::bind(addr)
            .await
            .map_err(|source| AdminError::Listen { addr, source })?;
        let addr = listener
            .local_addr()
            .map_err(|source| AdminError::Listen { addr, source })?;
        // The guard runs first, so a refusal carries the headers too.
        let app = options
            .guard
            .wrap(routes)
            .layer(axum::middleware::map_response(secure));
        let scheme = if options.tls.is_some() {
            "https"
        } else {
            "http"
        };
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            let shutdown = async {
                let _ = stopped.await;
            };
            if let Err(e) = crate::https::serve(listener, options.tls, app, shutdown).await {
                tracing::warn!(error = %e, "admin listener failed");
            }
        });
        tracing::info!(%addr, scheme, "admin listening");
        Ok(AdminServer {
            addr,
            scheme,
            stop: Some(stop),
            task,
        })
    }

    /// `scheme://host:port` of the listener.
    pub fn url(&self) -> String {
        format!("{}://{}", self.scheme, self.addr)
    }

    /// Stops accepting and waits for the listener to close.
    pub async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let _ = (&mut self.task).await;
    }
}

impl Drop for AdminServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Adds [`SECURITY_HEADERS`] to `response`.
async fn secure(mut response: Response) -> Response {
    let headers = response.headers_mut();
    for (name, value) in SECURITY_HEADERS {
        headers.insert(
            HeaderName::from_static(name),
            HeaderValue::from_static(value),
        );
    }
    response
}
