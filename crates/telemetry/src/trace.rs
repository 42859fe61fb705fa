//! OpenTelemetry traces: an OTLP exporter (off unless an endpoint is set),
//! W3C `traceparent`/`tracestate` on gRPC metadata, and the span target the
//! call path uses so that, with no exporter, its spans are never enabled.

use opentelemetry::propagation::{Extractor, Injector, TextMapPropagator};
use opentelemetry::trace::{TraceContextExt, TracerProvider as _};
use opentelemetry_otlp::WithExportConfig;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::SdkTracerProvider;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};
use tonic::metadata::{KeyAndValueRef, MetadataKey, MetadataMap, MetadataValue};
use tracing::Subscriber;
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::Layer;
use tracing_subscriber::filter::{LevelFilter, Targets};
use tracing_subscriber::registry::LookupSpan;

pub use opentelemetry::Context;

/// The target of every span meant for export. Log output filters it out
/// (see [`log_directive`]); the OTLP layer keeps only it.
pub const TARGET: &str = "toolmesh_otel";

/// The env var every OpenTelemetry SDK reads for the collector's address.
pub const OTLP_ENDPOINT_ENV: &str = "OTEL_EXPORTER_OTLP_ENDPOINT";

static ENABLED: AtomicBool = AtomicBool::new(false);
static PROVIDER: OnceLock<SdkTracerProvider> = OnceLock::new();

/// Why tracing could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    /// The exporter could not be built (bad endpoint).
    #[error("cannot export traces to {endpoint}: {source}")]
    Exporter {
        /// The endpoint asked for.
        endpoint: String,
        /// Why.
        source: opentelemetry_otlp::ExporterBuildError,
    },
}

/// The endpoint to export to: the flag, else `OTEL_EXPORTER_OTLP_ENDPOINT`;
/// `None` (or empty) leaves tracing off.
pub fn endpoint(flag: Option<&str>) -> Option<String> {
    flag.map(str::to_owned)
        .or_else(|| std::env::var(OTLP_ENDPOINT_ENV).ok())
        .filter(|e| !e.trim().is_empty())
}

/// Whether spans are exported by this process: call paths skip
/// propagation work when not.
pub fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// The directive log output adds to its filter so exported spans never
/// reach the log layer (and, with no exporter, are never enabled at all).
pub fn log_directive() -> tracing_subscriber::filter::Directive {
    // A constant directive always parses.
    format!("{TARGET}=off")
        .parse()
        .unwrap_or_else(|_| LevelFilter::OFF.into())
}

/// A layer exporting spans of [`TARGET`] to the OTLP collector at `endpoint`
/// as `service`; also installs the W3C propagator. Call within a tokio
/// runtime (the exporter's channel lives on it).
pub fn layer<S>(service: &str, endpoint: &str) -> Result<impl Layer<S>, TraceError>
where
    S: Subscriber + for<'span> LookupSpan<'span> + Send + Sync,
{
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_tonic()
        .with_endpoint(endpoint)
        .build()
        .map_err(|source| TraceError::Exporter {
            endpoint: endpoint.to_owned(),
            source,
        })?;
    let resource = opentelemetry_sdk::Resource::builder()
        .with_service_name(service.to_owned())
        .build();
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(resource)
        .build();
    let tracer = provider.tracer("toolmesh");
    opentelemetry::global::set_text_map_propagator(TraceContextPropagator::new());
    let _ = PROVIDER.set(provider);
    ENABLED.store(true, Ordering::Relaxed);
    Ok(tracing_opentelemetry::layer()
        .with_tracer(tracer)
        .with_filter(Targets::new().with_target(TARGET, LevelFilter::TRACE)))
}

/// Sends the spans still buffered (call before the process exits).
pub fn flush() {
    if let Some(provider) = PROVIDER.get() {
        let _ = provider.force_flush();
    }
}

/// The caller's trace context from gRPC metadata (`traceparent`,
/// `tracestate`); empty when tracing is off or none was sent.
pub fn extract(metadata: &MetadataMap) -> Context {
    if !enabled() {
        return Context::new();
    }
    TraceContextPropagator::new().extract(&MetadataCarrier(metadata))
}

/// The caller's trace context from plain key/value pairs (MCP `_meta`).
pub fn extract_pairs<'a>(pairs: impl IntoIterator<Item = (&'a str, &'a str)>) -> Context {
    if !enabled() {
        return Context::new();
    }
    let map: std::collections::HashMap<String, String> = pairs
        .into_iter()
        .map(|(k, v)| (k.to_ascii_lowercase(), v.to_owned()))
        .collect();
    TraceContextPropagator::new().extract(&map)
}

/// The 32-hex trace id a W3C `traceparent` names, when it is well formed
/// (whether or not tracing is on: a caller's id can be recorded anyway).
pub fn trace_id_of(traceparent: &str) -> Option<String> {
    let map = std::collections::HashMap::from([("traceparent".to_owned(), traceparent.to_owned())]);
    let cx = TraceContextPropagator::new().extract(&map);
    let id = cx.span().span_context().trace_id();
    (id != opentelemetry::trace::TraceId::INVALID).then(|| id.to_string())
}

/// Writes `span`'s context as `traceparent`/`tracestate` into `metadata`
/// (nothing when tracing is off).
pub fn inject(span: &tracing::Span, metadata: &mut MetadataMap) {
    if !enabled() {
        return;
    }
    inject_context(&span.context(), metadata);
}

/// Writes `cx` (a caller's context, as from [`extract_pairs`]) as
/// `traceparent`/`tracestate` into `metadata` (nothing when tracing is off
/// or `cx` carries no span).
pub fn inject_context(cx: &Context, metadata: &mut MetadataMap) {
    if !enabled() {
        return;
    }
    TraceContextPropagator::new().inject_context(cx, &mut MetadataInjector(metadata));
}

/// Makes `cx` the parent of `span` (when tracing is on and `cx` carries one).
pub fn set_parent(span: &tracing::Span, cx: Context) {
    if enabled() && cx.span().span_context().is_valid() {
        let _ = span.set_parent(cx);
    }
}

/// The 32-hex trace id of `span`, if it is being exported.
pub fn trace_id(span: &tracing::Span) -> Option<String> {
    if !enabled() {
        return None;
    }
    let cx = span.context();
    let id = cx.span().span_context().trace_id();
    (id != opentelemetry::trace::TraceId::INVALID).then(|| id.to_string())
}

struct MetadataCarrier<'a>(&'a MetadataMap);

impl Extractor for MetadataCarrier<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|v| v.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0
            .iter()
            .filter_map(|kv| match kv {
                KeyAndValueRef::Ascii(k, _) => Some(k.as_str()),
                KeyAndValueRef::Binary(..) => None,
            })
            .collect()
    }
}

struct MetadataInjector<'a>(&'a mut MetadataMap);

impl Injector for MetadataInjector<'_> {
    fn set(&mut self, key: &str, value: String) {
        if let (Ok(key), Ok(value)) = (
            MetadataKey::from_bytes(key.as_bytes()),
            MetadataValue::try_from(value),
        ) {
            self.0.insert(key, value);
        }
    }
}

/// Installs the process' global subscriber: `logs` (already filtered; add
/// [`log_directive`] to its filter) plus, with an `endpoint`, the OTLP
/// layer. Returns false when a global subscriber was already set.
pub fn install<L>(logs: L, service: &str, endpoint: Option<&str>) -> Result<bool, TraceError>
where
    L: Layer<tracing_subscriber::Registry> + Send + Sync + 'static,
{
    use tracing_subscriber::util::SubscriberInitExt;
    let otel = endpoint.map(|e| layer(service, e)).transpose()?;
    Ok(subscriber(logs, otel).try_init().is_ok())
}

/// `logs` over the registry, with `otel` on top when exporting. With no
/// exporter there is no layer at all: an absent (`None`) layer wants every
/// span, so each call would make its spans, and record their fields, for
/// nobody.
fn subscriber<L, O>(logs: L, otel: Option<O>) -> Box<dyn Subscriber + Send + Sync>
where
    L: Layer<tracing_subscriber::Registry> + Send + Sync + 'static,
    O: Layer<tracing_subscriber::layer::Layered<L, tracing_subscriber::Registry>>
        + Send
        + Sync
        + 'static,
{
    use tracing_subscriber::layer::SubscriberExt;
    let logged = tracing_subscriber::registry().with(logs);
    match otel {
        Some(otel) => Box::new(logged.with(otel)),
        None => Box::new(logged),
    }
}

/// Installs a subscriber that logs (filter from `RUST_LOG`) and exports to
/// `endpoint` as `service`, unless tracing is already exported or the
/// process installed its own subscriber (which then decides); nothing
/// without an endpoint. For libraries (the executor SDK, the node) whose
/// host may not have set tracing up.
pub fn install_default(service: &str, endpoint: Option<&str>) -> Result<(), TraceError> {
    let Some(endpoint) = endpoint else {
        return Ok(());
    };
    if enabled() || tracing::dispatcher::has_been_set() {
        return Ok(());
    }
    let logs = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_filter(
            tracing_subscriber::EnvFilter::from_default_env().add_directive(log_directive()),
        );
    install(logs, service, Some(endpoint))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use tracing_subscriber::layer::Identity;

    /// Without an exporter the call path's spans are disabled (nearly
    /// free), while the log layer still gets the spans it filters in.
    #[test]
    fn without_an_exporter_call_spans_are_never_made() {
        let filter = tracing_subscriber::EnvFilter::new("info").add_directive(log_directive());
        let logs = tracing_subscriber::fmt::layer()
            .with_writer(std::io::sink)
            .with_filter(filter);
        tracing::subscriber::with_default(subscriber(logs, None::<Identity>), || {
            let call = tracing::info_span!(target: TARGET, "execute_tool");
            assert!(call.is_disabled(), "a call span was made for nobody");
            let logged = tracing::info_span!("logged");
            assert!(!logged.is_disabled(), "the log layer lost its spans");
        });
    }
}
