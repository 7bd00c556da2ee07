//! TLS for PostgreSQL connections, with rustls (ring provider).
//!
//! libpq's `sslmode` meanings: `prefer` and `require` encrypt without
//! checking the server's certificate (a server's default certificate is
//! usually self-signed, e.g. Debian's "snakeoil"); `verify-ca` checks the
//! chain against the webpki roots (plus `sslrootcert`), `verify-full` also
//! the host name. Checking the chain in `require` mode would refuse most
//! servers that libpq accepts.

use std::sync::Arc;

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, verify_tls12_signature, verify_tls13_signature};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme,
};
use tokio_postgres_rustls::MakeRustlsConnect;

use super::url::{PostgresUrl, TlsMode};
use crate::{ConnectErrorKind, StoreError};

/// The connector for `url`'s `sslmode` (also built for `disable`, where the
/// client never uses it).
pub(crate) fn connector(url: &PostgresUrl) -> Result<MakeRustlsConnect, StoreError> {
    let refuse = |detail: String| StoreError::Connect {
        url: url.redacted().to_string(),
        kind: ConnectErrorKind::Tls,
        detail,
    };
    // An explicit provider: the process-wide default would panic if another
    // crate in the binary enabled a second one. rustls 0.23.48 deprecates
    // ring's provider because ring has no post-quantum key exchange; ring is
    // kept because it builds without cmake or a C toolchain's extras, and
    // PostgreSQL servers negotiate X25519 or ECDHE today. An aws-lc-rs
    // choice would be a feature of its own.
    #[allow(deprecated)]
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| refuse(e.to_string()))?;
    let config = match url.tls {
        TlsMode::Disable | TlsMode::Prefer | TlsMode::Require => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(EncryptOnly(provider)))
            .with_no_client_auth(),
        TlsMode::VerifyCa | TlsMode::VerifyFull => {
            let mut roots = RootCertStore::empty();
            roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
            if let Some(path) = &url.root_cert {
                let certs = CertificateDer::pem_file_iter(path)
                    .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
                    .map_err(|e| refuse(format!("sslrootcert `{}`: {e}", path.display())))?;
                if certs.is_empty() {
                    return Err(refuse(format!(
                        "sslrootcert `{}` holds no certificate",
                        path.display()
                    )));
                }
                for cert in certs {
                    roots
                        .add(cert)
                        .map_err(|e| refuse(format!("sslrootcert `{}`: {e}", path.display())))?;
                }
            }
            let webpki = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .map_err(|e| refuse(e.to_string()))?;
            let verifier: Arc<dyn ServerCertVerifier> = if url.tls == TlsMode::VerifyCa {
                Arc::new(ChainOnly(webpki))
            } else {
                webpki
            };
            builder
                .dangerous()
                .with_custom_certificate_verifier(verifier)
                .with_no_client_auth()
        }
    };
    Ok(MakeRustlsConnect::new(config))
}

/// `prefer`/`require`: any certificate, but the handshake's signatures are
/// still checked (so the session key is bound to the certificate shown).
#[derive(Debug)]
struct EncryptOnly(Arc<CryptoProvider>);

impl ServerCertVerifier for EncryptOnly {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// `verify-ca`: the chain must be trusted; the host name may differ.
#[derive(Debug)]
struct ChainOnly(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for ChainOnly {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
        {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}
