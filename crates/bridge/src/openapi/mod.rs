//! An HTTP API described by an OpenAPI 3.0 or 3.1 document as a [`ToolSource`] (`toolmesh bridge openapi`): each selected operation a tool named by its `operationId`, its schemas from its parameters, JSON body and 2xx response; the API probed and the bridge NOT_SERVING while it does not answer, the document read again on SIGHUP and every `--refresh-secs`.

mod call;
mod document;

use crate::error::BridgeError;
use crate::http::client;
use crate::mapping::{Mapped, OfferedTool, ServerIdentity, ToolSelection, UpstreamKind, map_tools};
use crate::supervisor::{Event, ToolSource};
use crate::{Bridge, HttpsSettings, OutboundAuth, admit};
use arc_swap::ArcSwap;
use call::{Api, OperationTool};
use document::{Document, Operation};
use reqwest::Url;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use toolmesh_executor::{DynamicTool, ServeOptions};
use tracing::{error, info, warn};

/// How often the API is probed and the credentials read again.
const PROBE_EVERY: Duration = Duration::from_secs(2);
/// Longest reading the document or a probe may take before the API counts
/// as gone.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// Where the document is: fetched from a URL or read from a file.
#[derive(Debug, Clone)]
pub enum SpecLocation {
    /// `http://…` or `https://…`.
    Url(Url),
    /// Any other text: a path.
    File(PathBuf),
}

impl SpecLocation {
    /// `http(s)://…` is a URL, anything else a file.
    pub fn parse(text: &str) -> Result<SpecLocation, BridgeError> {
        if text.starts_with("http://") || text.starts_with("https://") {
            let url = Url::parse(text)
                .map_err(|e| BridgeError::BadSpec(text.to_owned(), e.to_string()))?;
            Ok(SpecLocation::Url(url))
        } else if text.trim().is_empty() {
            Err(BridgeError::BadSpec(
                text.to_owned(),
                "give the document's URL or file".to_owned(),
            ))
        } else {
            Ok(SpecLocation::File(PathBuf::from(text)))
        }
    }

    /// A `--base-url`: an http(s) URL.
    pub fn base_url(text: &str) -> Result<Url, BridgeError> {
        Url::parse(text)
            .ok()
            .filter(|url| matches!(url.scheme(), "http" | "https") && url.has_host())
            .ok_or_else(|| BridgeError::BadBaseUrl(text.to_owned()))
    }

    fn describe(&self) -> String {
        match self {
            SpecLocation::Url(url) => url.to_string(),
            SpecLocation::File(path) => path.display().to_string(),
        }
    }
}

/// What to bridge and how to serve it.
#[derive(Debug, Clone)]
pub struct OpenApiBridgeOptions {
    /// The document.
    pub spec: SpecLocation,
    /// Where the operations' paths are appended; default the document's
    /// first server, else the origin of its URL.
    pub base_url: Option<Url>,
    /// The bridge's own credentials.
    pub auth: OutboundAuth,
    /// The executor's service name; default `openapi-` and the document's
    /// title.
    pub name: Option<String>,
    /// Which operations (`tools` globs match operationIds), under which
    /// names, with what risk.
    pub selection: ToolSelection,
    /// Registry, listen address, token… as for any executor.
    pub serve: ServeOptions,
    /// How often the document is read again (besides on SIGHUP); none: on
    /// SIGHUP only.
    pub refresh_every: Option<Duration>,
}

/// The API as the supervisor follows it.
struct OpenApiSource {
    spec: SpecLocation,
    base_url: Option<Url>,
    auth: OutboundAuth,
    selection: ToolSelection,
    client: reqwest::Client,
    suspect: Arc<Notify>,
}

/// The document as last read, and the API its tools call.
struct OpenApiConnection {
    text: String,
    document: Document,
    api: Arc<Api>,
}

impl Bridge {
    /// Reads the document, reaches the API, maps its operations and binds
    /// the executor. Fails, naming each, when a selected operation cannot
    /// join the mesh or none is left to expose.
    pub async fn start_openapi(options: OpenApiBridgeOptions) -> Result<Bridge, BridgeError> {
        let OpenApiBridgeOptions {
            spec,
            base_url,
            auth,
            name,
            selection,
            serve,
            refresh_every,
        } = options;
        let client = client(&HttpsSettings::default()).map_err(|e| BridgeError::Document {
            spec: spec.describe(),
            reason: toolmesh::error_chain(&e),
        })?;
        auth.headers()?;
        let source = OpenApiSource {
            spec,
            base_url,
            auth,
            selection,
            client,
            suspect: Arc::new(Notify::new()),
        };
        let connection = source.connect().await?;
        warn_left_out(&connection.document);
        let offered = offered(&connection.document);
        let mapped = map_tools(
            UpstreamKind::OpenApi,
            &offered,
            &source.selection,
            &tool_version(&connection),
        );
        let mapped = admit(&source, mapped, &offered, &source.selection)?;
        let service = name
            .filter(|n| !n.trim().is_empty())
            .unwrap_or_else(|| service_name(&connection.document.title));
        let tools = dynamic_tools(&connection, &mapped);
        Bridge::assemble(source, connection, &service, tools, serve, refresh_every).await
    }
}

/// `openapi-` and the title's words, lowercased and joined by `-`.
fn service_name(title: &str) -> String {
    let mut name = String::from("openapi");
    for word in title
        .split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|w| !w.is_empty())
    {
        name.push('-');
        name.push_str(&word.to_ascii_lowercase());
    }
    name
}

/// The version every operation is registered at: the document's
/// `info.version` when it is semver, else 1.0.0.
fn tool_version(connection: &OpenApiConnection) -> String {
    ServerIdentity {
        name: connection.document.title.clone(),
        version: connection.document.version.clone(),
    }
    .tool_version()
}

/// Logs each operation of `document` that cannot be a tool, and why.
fn warn_left_out(document: &Document) {
    for (operation, why) in &document.left_out {
        warn!(operation, "leaving out an operation: {why}");
    }
}

/// The document's operations as tools.
fn offered(document: &Document) -> Vec<OfferedTool> {
    document.operations.iter().map(operation_tool).collect()
}

fn operation_tool(operation: &Operation) -> OfferedTool {
    OfferedTool {
        upstream: operation.id.clone(),
        name: operation.id.clone(),
        description: operation.description.clone(),
        input_schema: operation.input_schema.clone(),
        output_schema: operation.output_schema.clone(),
        risk: operation.risk,
        read_only: operation.read_only,
        idempotent: operation.idempotent,
        streams_progress: false,
    }
}

fn dynamic_tools(connection: &OpenApiConnection, mapped: &Mapped) -> Vec<DynamicTool> {
    mapped
        .tools
        .iter()
        .filter_map(|tool| {
            let operation = connection
                .document
                .operations
                .iter()
                .find(|o| o.id == tool.upstream)?
                .clone();
            let handler = Arc::new(OperationTool::new(operation, Arc::clone(&connection.api)));
            Some(DynamicTool::new(tool.spec.clone(), handler))
        })
        .collect()
}

impl OpenApiSource {
    fn document_error(&self, reason: String) -> BridgeError {
        BridgeError::Document {
            spec: self.spec.describe(),
            reason,
        }
    }

    /// The document's text: fetched (any failure to reach it is the API
    /// gone) or read from its file.
    async fn read_text(&self) -> Result<String, BridgeError> {
        match &self.spec {
            SpecLocation::File(path) => tokio::fs::read_to_string(path)
                .await
                .map_err(|e| self.document_error(e.to_string())),
            SpecLocation::Url(url) => {
                let response = self
                    .client
                    .get(url.clone())
                    .timeout(REQUEST_TIMEOUT)
                    .send()
                    .await
                    .map_err(|e| self.document_error(toolmesh::error_chain(&e)))?;
                let status = response.status();
                if !status.is_success() {
                    return Err(self.document_error(format!("it answered {status}")));
                }
                response
                    .text()
                    .await
                    .map_err(|e| self.document_error(toolmesh::error_chain(&e)))
            }
        }
    }

    /// The document `text` holds, or why it is none.
    fn parse(&self, text: &str) -> Result<Document, BridgeError> {
        document::parse(text).map_err(|e| BridgeError::NotOpenApi {
            spec: self.spec.describe(),
            reason: e.to_string(),
        })
    }

    /// Where the paths are appended: `--base-url`, else the document's
    /// first server (relative to the document's URL), else the document
    /// URL's origin.
    fn base(&self, document: &Document) -> Result<Url, BridgeError> {
        if let Some(base) = &self.base_url {
            return Ok(base.clone());
        }
        let missing = || {
            self.document_error(
                "it names no server the bridge can use; give the API's address with --base-url"
                    .to_owned(),
            )
        };
        match (&self.spec, &document.server) {
            (SpecLocation::Url(url), Some(server)) => url.join(server).map_err(|_| missing()),
            (SpecLocation::Url(url), None) => url.join("/").map_err(|_| missing()),
            (SpecLocation::File(_), Some(server)) => Url::parse(server).map_err(|_| missing()),
            (SpecLocation::File(_), None) => Err(missing()),
        }
    }

    /// Whether the API answers at all (any status): refused connections
    /// and timeouts say it is gone.
    async fn probe(&self, base: &Url) -> Result<(), String> {
        match self
            .client
            .get(base.clone())
            .timeout(REQUEST_TIMEOUT)
            .send()
            .await
        {
            Ok(_) => Ok(()),
            Err(e) => Err(format!(
                "the HTTP API at {base} does not answer ({})",
                toolmesh::error_chain(&e)
            )),
        }
    }
}

impl ToolSource for OpenApiSource {
    type Connection = OpenApiConnection;

    fn kind(&self) -> UpstreamKind {
        UpstreamKind::OpenApi
    }

    fn describe(&self) -> String {
        format!("the HTTP API described by {}", self.spec.describe())
    }

    async fn connect(&self) -> Result<OpenApiConnection, BridgeError> {
        let text = self.read_text().await?;
        let document = self.parse(&text)?;
        let base = self.base(&document)?;
        if matches!(self.spec, SpecLocation::File(_)) {
            self.probe(&base)
                .await
                .map_err(|reason| self.document_error(reason))?;
        }
        let api = Arc::new(Api {
            client: self.client.clone(),
            base,
            credentials: Arc::new(ArcSwap::from_pointee(self.auth.headers()?)),
            suspect: Arc::clone(&self.suspect),
        });
        Ok(OpenApiConnection {
            text,
            document,
            api,
        })
    }

    async fn tools(&self, connection: &OpenApiConnection) -> Result<Vec<DynamicTool>, BridgeError> {
        let offered = offered(&connection.document);
        let mapped = map_tools(
            UpstreamKind::OpenApi,
            &offered,
            &self.selection,
            &tool_version(connection),
        );
        for problem in &mapped.problems {
            error!(upstream = %self.spec.describe(), "{problem}");
        }
        Ok(dynamic_tools(connection, &mapped))
    }

    async fn reread(&self, connection: &mut OpenApiConnection) -> Result<(), BridgeError> {
        let text = self.read_text().await?;
        if text == connection.text {
            return Ok(());
        }
        let document = self.parse(&text)?;
        info!(spec = %self.spec.describe(), "the document changed");
        warn_left_out(&document);
        connection.text = text;
        connection.document = document;
        Ok(())
    }

    async fn watch(&self, connection: &mut OpenApiConnection, stop: &CancellationToken) -> Event {
        loop {
            tokio::select! {
                () = stop.cancelled() => return Event::Stopped,
                () = tokio::time::sleep(PROBE_EVERY) => {}
                () = self.suspect.notified() => {}
            }
            // A document fetched from the API is the probe (read again
            // into the tools only when a refresh is due); a file's API is
            // probed at its base.
            let answered = match &self.spec {
                SpecLocation::Url(_) => self.read_text().await.map(drop).map_err(|e| e.to_string()),
                SpecLocation::File(_) => self.probe(&connection.api.base).await,
            };
            if let Err(why) = answered {
                return Event::Gone(why);
            }
            match self.auth.headers() {
                Ok(headers) => connection.api.credentials.store(Arc::new(headers)),
                Err(e) => warn!(error = %e, "keeping the credentials read before"),
            }
        }
    }

    async fn close(&self, _connection: OpenApiConnection) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A URL is fetched, anything else is a file; the service name comes
    /// from the title.
    #[test]
    fn locations_and_names() {
        assert!(matches!(
            SpecLocation::parse("http://h:1/openapi.json").unwrap(),
            SpecLocation::Url(_)
        ));
        assert!(matches!(
            SpecLocation::parse("api.yaml").unwrap(),
            SpecLocation::File(_)
        ));
        assert!(SpecLocation::parse("http://").is_err());
        assert_eq!(service_name("Book Shop API v2"), "openapi-book-shop-api-v2");
        assert_eq!(service_name(""), "openapi");
    }
}
