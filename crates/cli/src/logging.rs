//! One tracing setup for every command: filter from TOOLMESH_LOG (or
//! RUST_LOG), text or JSON lines on stderr, and, with an OTLP endpoint,
//! spans exported to it.

use crate::args::LogFormat;
use tracing_subscriber::filter::FilterExt;
use tracing_subscriber::{EnvFilter, Layer};

/// rmcp's own lines by default: its per-request INFO lines (with a debug
/// dump of the client's params) cost more than the calls they describe;
/// the dispatcher logs each call once in its own structured line.
const RMCP_DEFAULT: &str = "rmcp=warn";

/// Installs the global subscriber of `service`: `serving` commands log at info by
/// default (rmcp at warn), client commands at warn; `otlp` exports traces
/// there. Call within the runtime (the exporter's channel lives on it).
pub(crate) fn init(
    format: LogFormat,
    service: &str,
    serving: bool,
    otlp: Option<&str>,
) -> Result<(), toolmesh_telemetry::trace::TraceError> {
    let default = if serving { "info" } else { "warn" };
    let default = format!("{default},{RMCP_DEFAULT}");
    let filter = std::env::var("TOOLMESH_LOG")
        .ok()
        .or_else(|| std::env::var("RUST_LOG").ok())
        .and_then(|f| EnvFilter::try_new(f).ok())
        .unwrap_or_else(|| EnvFilter::new(&default))
        .add_directive(toolmesh_telemetry::trace::log_directive())
        // rmcp on a client hanging up or an error it answered: not news.
        .and(toolmesh_mcp::QuietRmcp);
    // Colour only for a person at a terminal: a file, a pipe or a log
    // collector gets plain text (and NO_COLOR turns it off everywhere).
    let colour = std::io::IsTerminal::is_terminal(&std::io::stderr())
        && std::env::var_os("NO_COLOR").is_none();
    let logs = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(colour);
    let logs = match format {
        LogFormat::Json => logs.json().with_filter(filter).boxed(),
        LogFormat::Text => logs.compact().with_filter(filter).boxed(),
    };
    toolmesh_telemetry::trace::install(logs, service, otlp.filter(|_| serving))?;
    Ok(())
}
