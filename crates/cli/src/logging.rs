//! One tracing setup for every command: filter from TOOLMESH_LOG (or
//! RUST_LOG), text or JSON lines on stderr.

use crate::args::LogFormat;
use tracing_subscriber::EnvFilter;

/// Installs the global subscriber; `default` is the filter when no env var is set.
pub(crate) fn init(format: LogFormat, default: &str) {
    let filter = std::env::var("TOOLMESH_LOG")
        .ok()
        .or_else(|| std::env::var("RUST_LOG").ok())
        .and_then(|f| EnvFilter::try_new(f).ok())
        .unwrap_or_else(|| EnvFilter::new(default));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Json => builder.json().try_init(),
        LogFormat::Text => builder.compact().try_init(),
    };
}
