//! An `https://` endpoint: the binary exports over TLS (rustls) to a
//! receiver with a certificate of a test CA, which it trusts only when
//! `OTEL_EXPORTER_OTLP_CERTIFICATE` names that CA; a certificate file that
//! cannot be read is told, and the command still runs.
//!
//! `fixtures/`: a test CA (`ca.pem`) and the receiver's certificate and
//! key (`server.pem`, `server.key`, for 127.0.0.1 and localhost), made
//! once with `openssl` and valid for a hundred years. Test material only.

use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};

use super::*;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

/// An OTLP/HTTP receiver over TLS: keeps every span sent to it, and counts
/// the connections whose TLS handshake failed.
struct TlsReceiver {
    endpoint: String,
    spans: Arc<Mutex<Vec<Got>>>,
    refused: Arc<AtomicUsize>,
    _runtime: tokio::runtime::Runtime,
}

impl TlsReceiver {
    fn start() -> TlsReceiver {
        use rustls::pki_types::{CertificateDer, PrivateKeyDer, pem::PemObject};
        let certs = CertificateDer::pem_file_iter(fixture("server.pem"))
            .unwrap()
            .collect::<Result<Vec<_>, _>>()
            .unwrap();
        let key = PrivateKeyDer::from_pem_file(fixture("server.key")).unwrap();
        #[allow(deprecated)]
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(certs, key)
            .unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .unwrap();
        let port = listener.local_addr().unwrap().port();
        let spans = Arc::new(Mutex::new(Vec::new()));
        let refused = Arc::new(AtomicUsize::new(0));
        let (kept, failed) = (spans.clone(), refused.clone());
        runtime.spawn(async move {
            loop {
                let (tcp, _) = listener.accept().await.unwrap();
                let (acceptor, kept, failed) = (acceptor.clone(), kept.clone(), failed.clone());
                tokio::spawn(async move {
                    match acceptor.accept(tcp).await {
                        Ok(stream) => {
                            if let Some(request) = one_request(stream).await {
                                kept.lock().unwrap().extend(flatten(request));
                            }
                        }
                        Err(_) => {
                            failed.fetch_add(1, Ordering::SeqCst);
                        }
                    }
                });
            }
        });
        TlsReceiver {
            endpoint: format!("https://localhost:{port}"),
            spans,
            refused,
            _runtime: runtime,
        }
    }
}

/// Reads one HTTP/1.1 POST (its headers, then `content-length` bytes),
/// answers 200 with an empty protobuf body, and decodes what it carried.
async fn one_request<S>(stream: S) -> Option<ExportTraceServiceRequest>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let mut stream = BufReader::new(stream);
    let mut length = 0;
    let mut request_line = String::new();
    stream.read_line(&mut request_line).await.ok()?;
    assert!(
        request_line.starts_with("POST /v1/traces "),
        "{request_line}"
    );
    loop {
        let mut line = String::new();
        stream.read_line(&mut line).await.ok()?;
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        if let Some((name, value)) = line.split_once(':')
            && name.eq_ignore_ascii_case("content-length")
        {
            length = value.trim().parse().ok()?;
        }
    }
    let mut body = vec![0; length];
    stream.read_exact(&mut body).await.ok()?;
    let answer = "HTTP/1.1 200 OK\r\ncontent-type: application/x-protobuf\r\ncontent-length: 0\r\nconnection: close\r\n\r\n";
    stream.get_mut().write_all(answer.as_bytes()).await.ok()?;
    stream.get_mut().shutdown().await.ok()?;
    ExportTraceServiceRequest::decode(body.as_slice()).ok()
}

#[test]
fn exec_exports_over_https_to_a_receiver_whose_ca_it_trusts() {
    let receiver = TlsReceiver::start();
    let dir = tempfile::tempdir().unwrap();
    let mut trusted = exec(dir.path(), &receiver.endpoint);
    trusted.env("OTEL_EXPORTER_OTLP_CERTIFICATE", fixture("ca.pem"));
    succeeded(trusted.output().unwrap());
    let spans = receiver.spans.lock().unwrap().clone();
    assert_eq!(
        named(&spans, "idem.operation").len(),
        1,
        "over TLS, flushed before the exit (was {} built with `--features otel`?): {spans:#?}",
        idem_bin().display()
    );
    assert_eq!(receiver.refused.load(Ordering::SeqCst), 0);

    // Without the CA the receiver's certificate is not trusted: the
    // handshake fails, nothing is sent in the clear, and the command runs.
    let dir = tempfile::tempdir().unwrap();
    succeeded(exec(dir.path(), &receiver.endpoint).output().unwrap());
    assert_eq!(receiver.spans.lock().unwrap().len(), spans.len());
    assert!(
        receiver.refused.load(Ordering::SeqCst) >= 1,
        "the export tried TLS and refused the certificate"
    );
}

/// `idem exec` exporting to `endpoint` with a certificate file that does
/// not exist; it must succeed: its stderr.
fn exec_with_a_missing_ca(endpoint: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("no-such-ca.pem");
    let mut told = exec(dir.path(), endpoint);
    told.env("OTEL_EXPORTER_OTLP_CERTIFICATE", &missing);
    let out = succeeded(told.output().unwrap());
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn a_certificate_file_that_cannot_be_read_is_told_and_nothing_exported() {
    let receiver = TlsReceiver::start();
    let stderr = exec_with_a_missing_ca(&receiver.endpoint);
    assert!(
        stderr.contains("traces are not exported: OTEL_EXPORTER_OTLP_CERTIFICATE"),
        "{stderr}"
    );
    assert!(receiver.spans.lock().unwrap().is_empty());
    assert_eq!(receiver.refused.load(Ordering::SeqCst), 0, "not even tried");
}

#[test]
fn a_certificate_file_that_cannot_be_read_does_not_stop_an_http_export() {
    // The certificate is for https endpoints only: an http one needs none,
    // so a stale variable left in the environment is told and its spans
    // still go.
    let receiver = Receiver::start();
    let stderr = exec_with_a_missing_ca(&receiver.endpoint);
    assert!(
        stderr.contains("OTEL_EXPORTER_OTLP_CERTIFICATE")
            && stderr.contains("not needed for http://"),
        "{stderr}"
    );
    assert_eq!(named(&received(&receiver), "idem.operation").len(), 1);
}
