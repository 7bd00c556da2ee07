//! A build without the `tls` feature: connections in plain text only.
//!
//! As libpq built without SSL: `sslmode=disable`, and the default `prefer`
//! (which falls back to plain text anyway), connect unencrypted; a URL that
//! *requires* encryption (`require`, `verify-ca`, `verify-full`) is refused
//! at open, naming the feature, rather than connecting in the clear.

use tokio_postgres::NoTls;

use super::url::{PostgresUrl, TlsMode};
use crate::{ConnectErrorKind, StoreError};

/// The connector for `url`'s `sslmode` in a build without TLS.
pub(crate) fn connector(url: &PostgresUrl) -> Result<NoTls, StoreError> {
    match url.tls {
        TlsMode::Disable | TlsMode::Prefer => Ok(NoTls),
        TlsMode::Require | TlsMode::VerifyCa | TlsMode::VerifyFull => Err(StoreError::Connect {
            url: url.redacted().to_string(),
            kind: ConnectErrorKind::Tls,
            detail: "this URL requires TLS (sslmode), and this build of idem has no TLS: \
                     build with the `tls` feature, or use sslmode=disable"
                .to_string(),
        }),
    }
}
