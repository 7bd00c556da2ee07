//! OpenTelemetry traces over OTLP (the `otel` feature): every `tracing`
//! span of the library, the sidecar and the CLI becomes an OpenTelemetry
//! span, exported over OTLP/HTTP with protobuf when the standard variables
//! say where (`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`, else
//! `OTEL_EXPORTER_OTLP_ENDPOINT` + `/v1/traces`). Without either nothing is
//! installed: no layer, no exporter, no thread. The SDK reads the rest of
//! the standard variables itself (`OTEL_SERVICE_NAME`,
//! `OTEL_RESOURCE_ATTRIBUTES`, `OTEL_EXPORTER_OTLP_HEADERS`, `…_TIMEOUT`,
//! `OTEL_BSP_*`); the service name defaults to `idem`.
//!
//! The spans are sent in batches from the SDK's own thread, and flushed
//! when the command ends ([`Exporting::shutdown`]), `idem serve`'s drain
//! included.

use std::sync::Arc;
use std::time::Duration;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_http::{HttpClient, HttpError, hyper::HyperClient};
use opentelemetry_otlp::{Protocol, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_subscriber::Layer;
use tracing_subscriber::registry::LookupSpan;

/// The spans exported: the idem crates' own, down to debug (the engine's
/// begin and finish spans are debug-level, to stay out of a service's log
/// at info), and anything else at info.
const EXPORTED: &str = "info,idem=debug,idem_serve=debug,idem_cli=debug,idem_store=debug";

/// The export installed for this process, to flush when it ends.
pub struct Exporting {
    provider: SdkTracerProvider,
}

impl Exporting {
    /// Sends what is still buffered and stops the exporter (bounded by the
    /// SDK's export timeout): called as the command ends.
    pub fn shutdown(self) {
        if let Err(e) = self.provider.shutdown() {
            crate::shown::tell!("idem: the last traces could not be exported: {e}");
        }
    }
}

/// The OTLP layer for the subscriber, when an endpoint is configured, and
/// the handle that flushes it; `None` (nothing installed) otherwise. An
/// exporter that cannot be built is told on stderr and skipped: traces
/// are never a reason for a command not to run.
pub fn layer<S>() -> Option<(impl Layer<S>, Exporting)>
where
    S: tracing::Subscriber + for<'a> LookupSpan<'a>,
{
    let configured = |name: &str| std::env::var_os(name).is_some_and(|v| !v.is_empty());
    if !configured("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        && !configured("OTEL_EXPORTER_OTLP_ENDPOINT")
    {
        return None;
    }
    let client = match OwnRuntimeClient::new() {
        Ok(client) => client,
        Err(e) => {
            crate::shown::tell!("idem: traces are not exported: {e}");
            return None;
        }
    };
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(Protocol::HttpBinary)
        .with_http_client(client)
        .build();
    let exporter = match exporter {
        Ok(exporter) => exporter,
        Err(e) => {
            crate::shown::tell!("idem: traces are not exported: {e}");
            return None;
        }
    };
    let mut resource = Resource::builder();
    // The SDK's default is `unknown_service`; OTEL_SERVICE_NAME (or a
    // `service.name` in OTEL_RESOURCE_ATTRIBUTES) still wins.
    let named = configured("OTEL_SERVICE_NAME")
        || std::env::var("OTEL_RESOURCE_ATTRIBUTES").is_ok_and(|a| a.contains("service.name="));
    if !named {
        resource = resource.with_service_name("idem");
    }
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(resource.build())
        .build();
    let tracer = provider.tracer("idem");
    // An incoming `traceparent` (a sidecar request's) is read as W3C
    // trace context.
    opentelemetry::global::set_text_map_propagator(
        opentelemetry_sdk::propagation::TraceContextPropagator::new(),
    );
    let layer = tracing_opentelemetry::layer()
        .with_tracer(tracer)
        .with_filter(tracing_subscriber::EnvFilter::new(EXPORTED));
    Some((layer, Exporting { provider }))
}

/// Hyper's client on a runtime of its own. The SDK exports from its own
/// thread, outside any Tokio runtime, and hyper needs one to drive its
/// connections; a runtime with one worker, used only by the exporter,
/// serves every export whatever the command runs on (and outlives the
/// command's runtime, to flush after it).
#[derive(Debug, Clone)]
struct OwnRuntimeClient {
    runtime: Arc<tokio::runtime::Runtime>,
    client: Arc<HyperClient>,
}

impl OwnRuntimeClient {
    fn new() -> std::io::Result<OwnRuntimeClient> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("idem-otlp")
            .enable_all()
            .build()?;
        // The SDK bounds each export by OTEL_EXPORTER_OTLP_TIMEOUT too;
        // this is the request's own deadline.
        let client = HyperClient::with_default_connector(Duration::from_secs(10), None);
        Ok(OwnRuntimeClient {
            runtime: Arc::new(runtime),
            client: Arc::new(client),
        })
    }
}

#[async_trait::async_trait]
impl HttpClient for OwnRuntimeClient {
    async fn send_bytes(
        &self,
        request: http::Request<bytes::Bytes>,
    ) -> Result<http::Response<bytes::Bytes>, HttpError> {
        let client = self.client.clone();
        self.runtime
            .spawn(async move { client.send_bytes(request).await })
            .await?
    }
}
