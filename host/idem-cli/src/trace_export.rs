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
//!
//! An `https://` endpoint is reached over TLS by rustls (ring, the stack
//! the PostgreSQL store's TLS already uses), trusting the webpki roots and
//! the PEM certificates `OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE` (else
//! `OTEL_EXPORTER_OTLP_CERTIFICATE`) names, as the specification says; a
//! file that cannot be read is told on stderr and, when the endpoint is
//! https, no exporter is installed (an `http://` endpoint needs no
//! certificate, and its spans still go).

use std::sync::Arc;
use std::time::Duration;

use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_http::{HttpClient, HttpError};
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
    let endpoint = [
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        "OTEL_EXPORTER_OTLP_ENDPOINT",
    ]
    .into_iter()
    .find_map(|name| std::env::var(name).ok().filter(|v| !v.is_empty()))
    .unwrap_or_default();
    let tls = tls_config();
    if let Err(e) = &tls {
        if endpoint
            .get(..8)
            .is_some_and(|s| s.eq_ignore_ascii_case("https://"))
        {
            crate::shown::tell!("idem: traces are not exported: {e}");
            return None;
        }
        // The scheme only: an endpoint may carry credentials.
        let scheme = endpoint.split("://").next().unwrap_or_default();
        crate::shown::tell!("idem: {e} (not needed for {scheme}://)");
    }
    let client = match OwnRuntimeClient::new(tls) {
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

/// The TLS configuration for an https endpoint: the webpki roots and the
/// certificates of the standard variable's PEM file, if one is named.
fn tls_config() -> Result<rustls::ClientConfig, String> {
    let mut roots = rustls::RootCertStore {
        roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
    };
    let named = [
        "OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE",
        "OTEL_EXPORTER_OTLP_CERTIFICATE",
    ]
    .into_iter()
    .find_map(|name| {
        std::env::var_os(name)
            .filter(|v| !v.is_empty())
            .map(|v| (name, v))
    });
    if let Some((name, path)) = named {
        use rustls::pki_types::{CertificateDer, pem::PemObject};
        let shown = std::path::Path::new(&path).display().to_string();
        let certificates: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&path)
            .and_then(|certs| certs.collect())
            .map_err(|e| format!("{name} ({shown}): {e}"))?;
        if certificates.is_empty() {
            return Err(format!("{name} ({shown}) holds no PEM certificate"));
        }
        for certificate in certificates {
            roots
                .add(certificate)
                .map_err(|e| format!("{name} ({shown}): {e}"))?;
        }
    }
    // ring, as PostgreSQL's TLS (host/idem-store/src/postgres/tls.rs says
    // why, and why its deprecation for want of post-quantum key exchange
    // is accepted).
    #[allow(deprecated)]
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())
        .map(|builder| builder.with_root_certificates(roots).with_no_client_auth())
}

/// An OTLP/HTTP client on a runtime of its own. The SDK exports from its
/// own thread, outside any Tokio runtime, and hyper needs one to drive its
/// connections; a runtime with one worker, used only by the exporter,
/// serves every export whatever the command runs on (and outlives the
/// command's runtime, to flush after it). Each export is one HTTP/1.1
/// request on a connection of its own (a batch every few seconds at most),
/// over TLS for an https endpoint.
#[derive(Debug, Clone)]
struct OwnRuntimeClient {
    runtime: Arc<tokio::runtime::Runtime>,
    /// Why there is none when the certificate file could not be read: an
    /// https request then fails with it.
    tls: Result<Arc<rustls::ClientConfig>, String>,
}

/// The request's own deadline (the SDK bounds each export by
/// OTEL_EXPORTER_OTLP_TIMEOUT too).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

impl OwnRuntimeClient {
    fn new(tls: Result<rustls::ClientConfig, String>) -> Result<OwnRuntimeClient, String> {
        let tls = tls.map(Arc::new);
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("idem-otlp")
            .enable_all()
            .build()
            .map_err(|e| e.to_string())?;
        Ok(OwnRuntimeClient {
            runtime: Arc::new(runtime),
            tls,
        })
    }
}

#[async_trait::async_trait]
impl HttpClient for OwnRuntimeClient {
    async fn send_bytes(
        &self,
        request: http::Request<bytes::Bytes>,
    ) -> Result<http::Response<bytes::Bytes>, HttpError> {
        let tls = self.tls.clone();
        self.runtime
            .spawn(async move {
                tokio::time::timeout(REQUEST_TIMEOUT, send(tls, request))
                    .await
                    .map_err(|_| HttpError::from("the OTLP request timed out"))?
            })
            .await?
    }
}

/// One request to its endpoint: over TLS when the scheme is https.
async fn send(
    tls: Result<Arc<rustls::ClientConfig>, String>,
    mut request: http::Request<bytes::Bytes>,
) -> Result<http::Response<bytes::Bytes>, HttpError> {
    let uri = request.uri().clone();
    let https = match uri.scheme_str() {
        Some("https") => true,
        Some("http") => false,
        other => return Err(format!("an OTLP endpoint is http or https, not {other:?}").into()),
    };
    let host = uri.host().ok_or("the OTLP endpoint names no host")?;
    let port = uri.port_u16().unwrap_or(if https { 443 } else { 80 });
    // The connection is the endpoint's own: the request names its path,
    // and the host in its header.
    let authority = uri.authority().map(|a| a.as_str()).unwrap_or(host);
    let host_header = http::HeaderValue::from_str(authority)?;
    request
        .headers_mut()
        .entry(http::header::HOST)
        .or_insert(host_header);
    *request.uri_mut() = uri.path_and_query().map_or("/", |p| p.as_str()).parse()?;
    // A bracketed IPv6 literal connects without its brackets.
    let address = host.trim_start_matches('[').trim_end_matches(']');
    let tcp = tokio::net::TcpStream::connect((address, port)).await?;
    if !https {
        return exchange(tcp, request).await;
    }
    let tls = tls?;
    let name = rustls::pki_types::ServerName::try_from(address.to_string())?;
    let stream = tokio_rustls::TlsConnector::from(tls)
        .connect(name, tcp)
        .await?;
    exchange(stream, request).await
}

/// The request and its answer on an open connection.
async fn exchange<S>(
    io: S,
    request: http::Request<bytes::Bytes>,
) -> Result<http::Response<bytes::Bytes>, HttpError>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(io)).await?;
    // Driven until the answer is read; it ends with the connection.
    tokio::spawn(connection);
    let (parts, body) = request.into_parts();
    let response = sender
        .send_request(http::Request::from_parts(parts, Full::new(body)))
        .await?;
    let (parts, body) = response.into_parts();
    let body = body.collect().await?.to_bytes();
    Ok(http::Response::from_parts(parts, body))
}
