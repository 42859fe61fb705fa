//! A gRPC service with server reflection as a [`ToolSource`] (`toolmesh bridge grpc`): each selected unary or server-streaming method a tool named `Service_Method`, its schemas from the request and response messages, its idempotency from `idempotency_level`; the service probed by reflection and NOT_SERVING while it does not answer, its descriptors read again on SIGHUP and every `--refresh-secs`.

mod call;
mod reflection;
mod schema;

use crate::error::BridgeError;
use crate::mapping::{Mapped, OfferedTool, ToolSelection, UpstreamKind, map_tools};
use crate::supervisor::{Event, ToolSource};
use crate::{Bridge, HttpsFiles, OutboundAuth, admit};
use call::MethodTool;
use prost_reflect::{DescriptorPool, MethodDescriptor};
use prost_types::method_options::IdempotencyLevel;
use reflection::Described;
use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Notify;
use tokio_rustls::rustls::{
    self, RootCertStore,
    pki_types::{CertificateDer, PrivateKeyDer, pem::PemObject},
};
use tokio_util::sync::CancellationToken;
use tonic::metadata::MetadataMap;
use toolmesh::pb::RiskLevel;
use toolmesh_executor::{DynamicTool, ServeOptions};
use toolmesh_transport::{Connector, Lane};
use tracing::{debug, error, info};

/// How often the service is probed (a reflection listing).
const PROBE_EVERY: Duration = Duration::from_secs(2);
/// Longest a connection, a probe or the reading of descriptors may take
/// before the service counts as gone.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// The version every method is registered at: a service has none of its
/// own, and a changed schema changes the definition's fingerprint anyway.
const METHOD_VERSION: &str = "1.0.0";
/// Services a server runs for its own upkeep, left out unless named with
/// `--services`.
const UPKEEP_PREFIX: &str = "grpc.";

/// Where the gRPC service listens.
#[derive(Debug, Clone)]
pub struct GrpcTarget {
    /// `HOST:PORT`, as messages name it.
    address: String,
    /// `http://HOST:PORT` or `https://HOST:PORT`.
    uri: String,
}

impl GrpcTarget {
    /// `HOST:PORT` or `http://HOST:PORT` (plaintext), or
    /// `https://HOST:PORT` (TLS).
    pub fn parse(text: &str) -> Result<GrpcTarget, BridgeError> {
        let (scheme, rest) = match text.split_once("://") {
            Some((scheme @ ("http" | "https"), rest)) => (scheme, rest),
            _ => ("http", text),
        };
        let address = rest.trim_end_matches('/');
        let bad = |why: &str| BridgeError::BadTarget(text.to_owned(), why.to_owned());
        let uri = format!("{scheme}://{address}");
        let parsed: tonic::codegen::http::Uri =
            uri.parse().map_err(|_| bad("write it as HOST:PORT"))?;
        if parsed.host().is_none() || parsed.port().is_none() || parsed.path() != "/" {
            return Err(bad("write it as HOST:PORT"));
        }
        Ok(GrpcTarget {
            address: address.to_owned(),
            uri,
        })
    }
}

/// What to bridge and how to serve it.
#[derive(Debug, Clone)]
pub struct GrpcBridgeOptions {
    /// The service's address.
    pub target: GrpcTarget,
    /// TLS to the target: the CA to trust, the bridge's client
    /// certificate and key (any given, or an `https://` target, means TLS).
    pub tls: HttpsFiles,
    /// The bridge's own credentials, sent as metadata with every call.
    pub auth: OutboundAuth,
    /// Services to expose, by full name (`demo.v1.Library`) or short name
    /// (`Library`); empty: every service but the server's own `grpc.*`.
    pub services: Vec<String>,
    /// The executor's service name; default `grpc-` and the first exposed
    /// service's short name, lowercased.
    pub name: Option<String>,
    /// Which methods (`tools` globs match full method names such as
    /// `demo.v1.Library.GetBook`), under which names, with what risk.
    pub selection: ToolSelection,
    /// Registry, listen address, token… as for any executor.
    pub serve: ServeOptions,
    /// How often the descriptors are read again (besides on SIGHUP);
    /// none: on SIGHUP only.
    pub refresh_every: Option<Duration>,
}

/// The service as the supervisor follows it.
struct GrpcSource {
    target: GrpcTarget,
    tls: Option<Arc<rustls::ClientConfig>>,
    auth: OutboundAuth,
    services: Vec<String>,
    selection: ToolSelection,
    suspect: Arc<Notify>,
}

/// A connection to the service with its descriptors.
struct GrpcConnection {
    /// Calls and reflection go on it, written from the calling task.
    connector: Connector,
    described: Described,
    /// What every call sends besides its own arguments.
    metadata: Arc<MetadataMap>,
}

impl Bridge {
    /// Reaches the service, reads its descriptors, maps its methods and
    /// binds the executor. Fails, naming each, when a selected method
    /// cannot join the mesh, a `--services` name is not served, or no
    /// method is left to expose.
    pub async fn start_grpc(options: GrpcBridgeOptions) -> Result<Bridge, BridgeError> {
        let GrpcBridgeOptions {
            target,
            tls,
            auth,
            services,
            name,
            selection,
            serve,
            refresh_every,
        } = options;
        auth.headers()?;
        let tls = client_tls(&target, &tls)?;
        let source = GrpcSource {
            target,
            tls,
            auth,
            services,
            selection,
            suspect: Arc::new(Notify::new()),
        };
        let connection = source.connect().await?;
        let served = &connection.described.services;
        for wanted in &source.services {
            if !served.iter().any(|s| names_service(wanted, s)) {
                return Err(BridgeError::NoService(
                    wanted.clone(),
                    source.target.address.clone(),
                    served.join(", "),
                ));
            }
        }
        let offered = source.offered(&connection);
        let mapped = map_tools(
            UpstreamKind::Grpc,
            &offered.tools,
            &source.selection,
            METHOD_VERSION,
        );
        let mapped = admit(&source, mapped, &offered.tools, &source.selection)?;
        let service = name.filter(|n| !n.trim().is_empty()).unwrap_or_else(|| {
            let first = served.iter().find(|s| source.exposes_service(s));
            let short = first.map_or("service", |s| s.rsplit('.').next().unwrap_or(s));
            format!("grpc-{}", short.to_ascii_lowercase())
        });
        let tools = source.dynamic_tools(&connection, &offered.methods, &mapped);
        Bridge::assemble(source, connection, &service, tools, serve, refresh_every).await
    }
}

/// The TLS the target is reached with: none for a plaintext `HOST:PORT`
/// without files; else the CA of `files` to trust (without one, the
/// system's roots: the platform's store, or `SSL_CERT_FILE` /
/// `SSL_CERT_DIR`) and its client certificate, read and checked now, for
/// HTTP/2 on rustls with ring like the rest of the mesh's TLS.
fn client_tls(
    target: &GrpcTarget,
    files: &HttpsFiles,
) -> Result<Option<Arc<rustls::ClientConfig>>, BridgeError> {
    let wanted = target.uri.starts_with("https://")
        || files.ca.is_some()
        || files.cert.is_some()
        || files.key.is_some();
    if !wanted {
        return Ok(None);
    }
    let unusable = |flag: &str, path: &Path, why: String| {
        BridgeError::Credentials(format!("{flag} {}: {why}", path.display()))
    };
    let read = |flag: &str, path: &Path| {
        std::fs::read(path).map_err(|e| unusable(flag, path, e.to_string()))
    };
    let certificates = |flag: &str, path: &Path| {
        let pem = read(flag, path)?;
        let chain = CertificateDer::pem_slice_iter(&pem)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| unusable(flag, path, e.to_string()))?;
        if chain.is_empty() {
            return Err(unusable(
                flag,
                path,
                "it holds no PEM certificate".to_owned(),
            ));
        }
        Ok(chain)
    };
    let mut roots = RootCertStore::empty();
    match &files.ca {
        Some(ca) => {
            roots.add_parsable_certificates(certificates("--target-ca", ca)?);
        }
        None => {
            let native = rustls_native_certs::load_native_certs();
            if !native.errors.is_empty() {
                debug!(errors = ?native.errors, "reading the system's roots");
            }
            roots.add_parsable_certificates(native.certs);
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| BridgeError::Credentials(format!("TLS to the target: {e}")))?
        .with_root_certificates(roots);
    let mut config = match (&files.cert, &files.key) {
        (Some(cert), Some(key)) => {
            let chain = certificates("--target-cert", cert)?;
            let secret = PrivateKeyDer::from_pem_slice(&read("--target-key", key)?)
                .map_err(|e| unusable("--target-key", key, e.to_string()))?;
            builder
                .with_client_auth_cert(chain, secret)
                .map_err(|e| unusable("--target-key", key, e.to_string()))?
        }
        (Some(_), None) => return Err(BridgeError::HalfIdentity("--target-cert", "--target-key")),
        (None, Some(_)) => return Err(BridgeError::HalfIdentity("--target-key", "--target-cert")),
        (None, None) => builder.with_no_client_auth(),
    };
    config.alpn_protocols = vec![b"h2".to_vec()];
    Ok(Some(Arc::new(config)))
}

/// Whether `wanted` (a full or short name) names the service `full`.
fn names_service(wanted: &str, full: &str) -> bool {
    wanted == full || full.rsplit('.').next() == Some(wanted)
}

/// The methods a connection offers, as tools and by upstream name.
struct Offered {
    tools: Vec<OfferedTool>,
    methods: HashMap<String, MethodDescriptor>,
}

impl GrpcSource {
    /// Whether the methods of the service `full` are offered.
    fn exposes_service(&self, full: &str) -> bool {
        if self.services.is_empty() {
            !full.starts_with(UPKEEP_PREFIX)
        } else {
            self.services
                .iter()
                .any(|wanted| names_service(wanted, full))
        }
    }

    /// The unary and server-streaming methods of the exposed services the
    /// target serves, as tools.
    fn offered(&self, connection: &GrpcConnection) -> Offered {
        let mut offered = Offered {
            tools: Vec::new(),
            methods: HashMap::new(),
        };
        let pool: &DescriptorPool = &connection.described.pool;
        for service in pool
            .services()
            .filter(|s| self.exposes_service(s.full_name()))
            .filter(|s| {
                connection
                    .described
                    .services
                    .iter()
                    .any(|served| served == s.full_name())
            })
        {
            for method in service.methods() {
                if method.is_client_streaming() {
                    info!(
                        method = method.full_name(),
                        "leaving out a client-streaming method: the bridge calls unary and server-streaming methods"
                    );
                    continue;
                }
                offered.tools.push(method_tool(&method));
                offered
                    .methods
                    .insert(method.full_name().to_owned(), method);
            }
        }
        offered
    }

    fn dynamic_tools(
        &self,
        connection: &GrpcConnection,
        methods: &HashMap<String, MethodDescriptor>,
        mapped: &Mapped,
    ) -> Vec<DynamicTool> {
        mapped
            .tools
            .iter()
            .filter_map(|tool| {
                let method = methods.get(&tool.upstream)?.clone();
                let handler = Arc::new(MethodTool {
                    path: call::method_path(&method),
                    method,
                    connector: connection.connector.clone(),
                    target: self.target.address.clone(),
                    suspect: Arc::clone(&self.suspect),
                    metadata: Arc::clone(&connection.metadata),
                });
                Some(DynamicTool::new(tool.spec.clone(), handler))
            })
            .collect()
    }
}

/// A method as a tool: `Service_Method`, described by its comments or a
/// line naming it, read-only and idempotent as `idempotency_level` says; a
/// server-streaming one streams progress and answers its messages together.
fn method_tool(method: &MethodDescriptor) -> OfferedTool {
    let service = method.parent_service();
    let level = method
        .method_descriptor_proto()
        .options
        .as_ref()
        .map_or(IdempotencyLevel::IdempotencyUnknown, |o| {
            o.idempotency_level()
        });
    let read_only = level == IdempotencyLevel::NoSideEffects;
    let description = schema::comments(method.parent_file().file_descriptor_proto(), method.path())
        .unwrap_or_else(|| {
            format!(
                "Calls the gRPC method {}/{}: takes a {} and answers a {}.",
                service.full_name(),
                method.name(),
                method.input().full_name(),
                method.output().full_name()
            )
        });
    OfferedTool {
        upstream: method.full_name().to_owned(),
        name: format!("{}_{}", service.name(), method.name()),
        description,
        input_schema: schema::message_schema(&method.input()),
        output_schema: Some(output_schema(method)),
        risk: if read_only {
            RiskLevel::Low
        } else {
            RiskLevel::Medium
        },
        read_only,
        idempotent: read_only || level == IdempotencyLevel::Idempotent,
        streams_progress: method.is_server_streaming(),
    }
}

/// The response message's schema; for a server-streaming method, an object
/// holding every message sent under `messages`.
fn output_schema(method: &MethodDescriptor) -> serde_json::Value {
    let message = schema::message_schema(&method.output());
    if !method.is_server_streaming() {
        return message;
    }
    serde_json::json!({
        "type": "object",
        "properties": {
            call::STREAMED_MESSAGES: {
                "type": "array",
                "items": message,
                "description": "Every message the method sent, in order."
            }
        },
        "required": [call::STREAMED_MESSAGES],
        "additionalProperties": false
    })
}

impl GrpcSource {
    /// The services `connector`'s server serves and the descriptors of
    /// those exposed, read by reflection within [`REQUEST_TIMEOUT`].
    async fn describe(&self, connector: &Connector) -> Result<Described, BridgeError> {
        let failed = |reason: String| BridgeError::Reflection {
            target: self.target.address.clone(),
            reason,
        };
        let reading = reflection::describe(connector, |s| self.exposes_service(s));
        match tokio::time::timeout(REQUEST_TIMEOUT, reading).await {
            Ok(described) => described.map_err(failed),
            Err(_) => Err(failed(format!("no answer within {REQUEST_TIMEOUT:?}"))),
        }
    }
}

impl ToolSource for GrpcSource {
    type Connection = GrpcConnection;

    fn kind(&self) -> UpstreamKind {
        UpstreamKind::Grpc
    }

    fn describe(&self) -> String {
        format!("the gRPC service at {}", self.target.address)
    }

    async fn connect(&self) -> Result<GrpcConnection, BridgeError> {
        let failed = |reason: String| BridgeError::Reflection {
            target: self.target.address.clone(),
            reason,
        };
        let connector = Connector::with_client_config(&self.target.address, self.tls.clone())
            .map_err(|e| failed(e.to_string()))?;
        let metadata = MetadataMap::from_headers(self.auth.headers()?);
        connector
            .connect_lane(Lane::current())
            .await
            .map_err(|e| failed(format!("cannot connect: {}", toolmesh::error_chain(&*e))))?;
        let described = self.describe(&connector).await?;
        Ok(GrpcConnection {
            connector,
            described,
            metadata: Arc::new(metadata),
        })
    }

    async fn tools(&self, connection: &GrpcConnection) -> Result<Vec<DynamicTool>, BridgeError> {
        let offered = self.offered(connection);
        let mapped = map_tools(
            UpstreamKind::Grpc,
            &offered.tools,
            &self.selection,
            METHOD_VERSION,
        );
        for problem in &mapped.problems {
            error!(upstream = %self.target.address, "{problem}");
        }
        Ok(self.dynamic_tools(connection, &offered.methods, &mapped))
    }

    async fn reread(&self, connection: &mut GrpcConnection) -> Result<(), BridgeError> {
        connection.described = self.describe(&connection.connector).await?;
        Ok(())
    }

    async fn watch(&self, connection: &mut GrpcConnection, stop: &CancellationToken) -> Event {
        loop {
            tokio::select! {
                () = stop.cancelled() => return Event::Stopped,
                () = tokio::time::sleep(PROBE_EVERY) => {}
                () = self.suspect.notified() => {}
            }
            let probe = reflection::list_services(&connection.connector);
            match tokio::time::timeout(REQUEST_TIMEOUT, probe).await {
                Ok(Ok(_)) => {}
                Ok(Err(status)) => {
                    return Event::Gone(format!(
                        "reflection failed ({:?}: {})",
                        status.code(),
                        status.message()
                    ));
                }
                Err(_) => {
                    return Event::Gone(format!(
                        "no answer to reflection within {REQUEST_TIMEOUT:?}"
                    ));
                }
            }
        }
    }

    async fn close(&self, _connection: GrpcConnection) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A target is HOST:PORT (http:// accepted); anything else is refused
    /// saying how to write it.
    #[test]
    fn targets_are_host_and_port() {
        assert_eq!(
            GrpcTarget::parse("127.0.0.1:50051").unwrap().uri,
            "http://127.0.0.1:50051"
        );
        assert_eq!(GrpcTarget::parse("http://svc:9/").unwrap().address, "svc:9");
        assert_eq!(
            GrpcTarget::parse("https://svc:9").unwrap().uri,
            "https://svc:9"
        );
        for bad in ["svc", "svc:9/path", "ftp://svc:9"] {
            let error = GrpcTarget::parse(bad).unwrap_err().to_string();
            assert!(error.contains("--target"), "{bad}: {error}");
        }
        assert!(names_service("Library", "demo.v1.Library"));
        assert!(names_service("demo.v1.Library", "demo.v1.Library"));
        assert!(!names_service("Lib", "demo.v1.Library"));
    }
}
