//! PostgreSQL store URLs: what idem reads from them, what goes on to the
//! client, and how they are shown without their password.

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

/// How long (ms) the server lets one of our sessions sit idle inside a
/// transaction before ending it and releasing its locks.
#[cfg(feature = "postgres")]
pub const IDLE_IN_TRANSACTION_TIMEOUT_MS: u64 = 5_000;

use crate::StoreError;

/// The schema idem's tables live in unless the URL says `idem_schema=`.
pub const DEFAULT_SCHEMA: &str = "idem";

/// Connections a store's pool opens at most unless the URL says
/// `idem_pool_size=`.
pub const DEFAULT_POOL_SIZE: usize = 16;

/// How the connection is encrypted (`sslmode`), with libpq's meanings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum TlsMode {
    /// Never TLS.
    Disable,
    /// TLS when the server offers it, without checking its certificate
    /// (libpq's default): protects against eavesdroppers, not against an
    /// active man in the middle.
    #[default]
    Prefer,
    /// TLS always, without checking the certificate (as libpq does when no
    /// root certificate is configured).
    Require,
    /// TLS always; the certificate must chain to a trusted root (the
    /// webpki roots, or `sslrootcert=PATH`); its host name is not checked.
    VerifyCa,
    /// TLS always; the certificate must chain to a trusted root and name
    /// the host.
    VerifyFull,
}

impl TlsMode {
    fn parse(value: &str) -> Option<TlsMode> {
        Some(match value {
            "disable" => TlsMode::Disable,
            "prefer" | "allow" => TlsMode::Prefer,
            "require" => TlsMode::Require,
            "verify-ca" => TlsMode::VerifyCa,
            "verify-full" => TlsMode::VerifyFull,
            _ => return None,
        })
    }
}

/// A parsed `postgres://` (or `postgresql://`) store URL.
///
/// idem reads and removes its own query parameters before the rest goes to
/// the client (`tokio-postgres`, which understands libpq's URL options such
/// as `connect_timeout`, `application_name` or `host=/run/postgresql`):
///
/// - `idem_schema=NAME`: the schema holding idem's tables, so that several
///   services can share one database (default `idem`). Must match
///   `[a-z_][a-z0-9_]{0,62}`: it is the one identifier interpolated into SQL.
/// - `idem_pool_size=N`: connections in the pool (default 16).
/// - `sslmode=disable|prefer|require|verify-ca|verify-full` (see
///   [`TlsMode`]) and `sslrootcert=PATH` (a PEM file of trusted roots for the
///   verifying modes): idem does TLS itself, with rustls.
///
/// `Debug` and [`PostgresUrl::redacted`] never show the password.
#[derive(Clone, PartialEq, Eq)]
pub struct PostgresUrl {
    /// The URL as the client gets it (idem's parameters removed); holds the
    /// password.
    conninfo: String,
    /// The URL as given, password masked: for messages.
    redacted: String,
    /// The schema.
    pub schema: String,
    /// Connections in the pool.
    pub pool_size: usize,
    /// Encryption.
    pub tls: TlsMode,
    /// Trusted roots for the verifying modes, besides the webpki roots.
    pub root_cert: Option<PathBuf>,
}

impl fmt::Debug for PostgresUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresUrl")
            .field("url", &self.redacted)
            .field("schema", &self.schema)
            .field("pool_size", &self.pool_size)
            .field("tls", &self.tls)
            .field("root_cert", &self.root_cert)
            .finish()
    }
}

impl PostgresUrl {
    /// The URL as given with its password masked (`user:***@`, and a
    /// `password=` query parameter likewise).
    pub fn redacted(&self) -> &str {
        &self.redacted
    }

    /// The client's configuration (holds the password).
    #[cfg(feature = "postgres")]
    pub(crate) fn client_config(&self) -> Result<tokio_postgres::Config, StoreError> {
        let mut config: tokio_postgres::Config =
            self.conninfo.parse().map_err(|e: tokio_postgres::Error| {
                StoreError::UnsupportedUrl {
                    url: self.redacted.clone(),
                    // The client's error says only "invalid connection
                    // string"; its source names the parameter.
                    why: match std::error::Error::source(&e) {
                        Some(cause) => format!("{e}: {cause}"),
                        None => e.to_string(),
                    },
                }
            })?;
        config.ssl_mode(match self.tls {
            TlsMode::Disable => tokio_postgres::config::SslMode::Disable,
            TlsMode::Prefer => tokio_postgres::config::SslMode::Prefer,
            TlsMode::Require | TlsMode::VerifyCa | TlsMode::VerifyFull => {
                tokio_postgres::config::SslMode::Require
            }
        });
        if config.get_application_name().is_none() {
            config.application_name("idem");
        }
        // A holder that stalls inside a transaction (a GC pause, SIGSTOP, a
        // hypervisor stall) holds its row lock, and every other worker's call
        // on that key would wait for it forever. The server ends such a
        // session instead: its transaction rolls back (nothing half-written),
        // the stalled holder's call fails when it wakes, and the others go
        // on. Our transactions never sit idle on purpose: two round trips
        // with no work in between. A URL's own `options` take precedence.
        let mut options =
            format!("-c idle_in_transaction_session_timeout={IDLE_IN_TRANSACTION_TIMEOUT_MS}");
        if let Some(own) = config.get_options() {
            options = format!("{options} {own}");
        }
        config.options(&options);
        Ok(config)
    }

    /// The same URL with another `idem_schema` (for tests and tools that
    /// give each user a schema of its own).
    pub fn with_schema(&self, schema: &str) -> Result<PostgresUrl, StoreError> {
        check_schema(schema).map_err(|why| StoreError::UnsupportedUrl {
            url: self.redacted.clone(),
            why,
        })?;
        Ok(PostgresUrl {
            schema: schema.to_string(),
            ..self.clone()
        })
    }
}

/// Whether `url` names a PostgreSQL store.
pub(crate) fn is_postgres(url: &str) -> bool {
    url.split_once("://").is_some_and(|(scheme, _)| {
        scheme.eq_ignore_ascii_case("postgres") || scheme.eq_ignore_ascii_case("postgresql")
    })
}

/// A schema name idem accepts: `[a-z_][a-z0-9_]{0,62}`, and not one of
/// PostgreSQL's own (`pg_*`, `information_schema`).
pub(crate) fn check_schema(schema: &str) -> Result<(), String> {
    let mut bytes = schema.bytes();
    let first_ok = bytes
        .next()
        .is_some_and(|b| b.is_ascii_lowercase() || b == b'_');
    let rest_ok = bytes.all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
    if !first_ok || !rest_ok || schema.len() > 63 {
        return Err(format!(
            "idem_schema `{schema}` must be 1 to 63 of [a-z0-9_], not starting with a digit"
        ));
    }
    if schema.starts_with("pg_") || schema == "information_schema" {
        return Err(format!("idem_schema `{schema}` is reserved by PostgreSQL"));
    }
    Ok(())
}

/// Masks the password of a URL: in its user info and in a `password=`
/// query parameter.
pub(crate) fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    let authority = match authority.rsplit_once('@') {
        Some((userinfo, host)) => match userinfo.split_once(':') {
            Some((user, _password)) => format!("{user}:***@{host}"),
            None => format!("{userinfo}@{host}"),
        },
        None => authority.to_string(),
    };
    let tail = match tail.split_once('?') {
        Some((path, query)) => {
            let query: Vec<String> = query
                .split('&')
                .map(|pair| match pair.split_once('=') {
                    Some(("password", _)) => "password=***".to_string(),
                    _ => pair.to_string(),
                })
                .collect();
            format!("{path}?{}", query.join("&"))
        }
        None => tail.to_string(),
    };
    format!("{scheme}://{authority}{tail}")
}

/// Decodes `%XX` escapes (a file path in `sslrootcert` may hold them).
fn percent_decode(value: &str) -> Result<String, String> {
    let bytes = value.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = value
                .get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or_else(|| format!("bad percent escape in `{value}`"))?;
            out.push(hex);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| format!("`{value}` is not UTF-8"))
}

impl FromStr for PostgresUrl {
    type Err = StoreError;

    fn from_str(url: &str) -> Result<Self, StoreError> {
        let redacted = redact(url);
        let bad = |why: String| StoreError::UnsupportedUrl {
            url: redacted.clone(),
            why,
        };
        if !is_postgres(url) {
            return Err(bad("not a `postgres://` URL".to_string()));
        }
        let (base, query) = match url.split_once('?') {
            Some((base, query)) => (base, Some(query)),
            None => (url, None),
        };
        let mut schema = DEFAULT_SCHEMA.to_string();
        let mut pool_size = DEFAULT_POOL_SIZE;
        let mut tls = TlsMode::default();
        let mut root_cert = None;
        let mut kept = Vec::new();
        for pair in query
            .into_iter()
            .flat_map(|q| q.split('&'))
            .filter(|p| !p.is_empty())
        {
            let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
            match name {
                "idem_schema" => {
                    check_schema(value).map_err(bad)?;
                    schema = value.to_string();
                }
                "idem_pool_size" => {
                    pool_size = value
                        .parse()
                        .ok()
                        .filter(|n| (1..=1024).contains(n))
                        .ok_or_else(|| {
                            bad(format!(
                                "idem_pool_size must be a number from 1 to 1024, not `{value}`"
                            ))
                        })?;
                }
                "sslmode" => {
                    tls = TlsMode::parse(value).ok_or_else(|| {
                        bad(format!(
                            "sslmode must be disable, prefer, require, verify-ca or verify-full, not `{value}`"
                        ))
                    })?;
                }
                "sslrootcert" => {
                    root_cert = Some(PathBuf::from(percent_decode(value).map_err(bad)?))
                }
                "sslcert" | "sslkey" | "sslcrl" | "sslpassword" => {
                    return Err(bad(format!(
                        "`{name}` (client certificates) is not supported"
                    )));
                }
                _ if name.starts_with("idem_") => {
                    return Err(bad(format!(
                        "unknown query parameter `{name}` (idem's: idem_schema, idem_pool_size)"
                    )));
                }
                _ => kept.push(pair),
            }
        }
        let conninfo = if kept.is_empty() {
            base.to_string()
        } else {
            format!("{base}?{}", kept.join("&"))
        };
        let parsed = PostgresUrl {
            conninfo,
            redacted: redacted.clone(),
            schema,
            pool_size,
            tls,
            root_cert,
        };
        // The client's own checks (host, port, libpq options), now, so that
        // a bad URL is reported before anything connects.
        #[cfg(feature = "postgres")]
        parsed.client_config()?;
        Ok(parsed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn idem_parameters_are_read_and_removed() {
        let url: PostgresUrl =
            "postgres://u:secret@db:5433/app?idem_schema=billing&sslmode=require&idem_pool_size=4&connect_timeout=3"
                .parse()
                .unwrap();
        assert_eq!(url.schema, "billing");
        assert_eq!(url.pool_size, 4);
        assert_eq!(url.tls, TlsMode::Require);
        assert_eq!(
            url.conninfo,
            "postgres://u:secret@db:5433/app?connect_timeout=3"
        );
        assert_eq!(
            url.redacted(),
            "postgres://u:***@db:5433/app?idem_schema=billing&sslmode=require&idem_pool_size=4&connect_timeout=3"
        );
        assert!(!format!("{url:?}").contains("secret"));
        #[cfg(feature = "postgres")]
        {
            let config = url.client_config().unwrap();
            assert_eq!(config.get_dbname(), Some("app"));
            assert_eq!(config.get_password(), Some(&b"secret"[..]));
        }

        let plain: PostgresUrl = "postgresql://localhost/idem".parse().unwrap();
        assert_eq!(
            (plain.schema.as_str(), plain.pool_size, plain.tls),
            (DEFAULT_SCHEMA, DEFAULT_POOL_SIZE, TlsMode::Prefer)
        );
    }

    #[test]
    fn passwords_are_masked() {
        assert_eq!(redact("postgres://u:p@h/db"), "postgres://u:***@h/db");
        assert_eq!(redact("postgres://u@h/db"), "postgres://u@h/db");
        assert_eq!(redact("postgres://h"), "postgres://h");
        assert_eq!(
            redact("postgres://h/db?user=u&password=p&x=1"),
            "postgres://h/db?user=u&password=***&x=1"
        );
        assert_eq!(redact("postgres://u:p:q@h"), "postgres://u:***@h");
    }

    #[test]
    fn schema_names_are_checked_strictly() {
        for ok in ["idem", "_x", "a1_b2", &"a".repeat(63)] {
            assert!(check_schema(ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            "Idem",
            "1abc",
            "a-b",
            "a\"b",
            "a;drop",
            "é",
            "pg_catalog",
            "information_schema",
            &"a".repeat(64),
        ] {
            assert!(check_schema(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn bad_parameters_name_the_url_without_its_password() {
        #[allow(unused_mut)] // Extended when the client is built.
        let mut cases = vec![
            ("postgres://u:pw@h/db?idem_schema=Bad", "idem_schema `Bad`"),
            (
                "postgres://u:pw@h/db?idem_pool_size=0",
                "idem_pool_size must be",
            ),
            ("postgres://u:pw@h/db?sslmode=sometimes", "sslmode must be"),
            (
                "postgres://u:pw@h/db?idem_other=1",
                "unknown query parameter `idem_other`",
            ),
            ("postgres://u:pw@h/db?sslcert=/x", "client certificates"),
        ];
        // The client's own checks, made only where it is built.
        #[cfg(feature = "postgres")]
        cases.extend([
            // The URL itself names it too: check the client's reason.
            (
                "postgres://u:pw@h/db?frobnicate=1",
                "unknown option `frobnicate`",
            ),
            (
                "postgres://u:pw@h:notaport/db",
                "invalid value for option `port`",
            ),
        ]);
        for (url, why) in cases {
            let err = url.parse::<PostgresUrl>().unwrap_err();
            let text = err.to_string();
            assert!(matches!(err, StoreError::UnsupportedUrl { .. }), "{text}");
            assert!(text.contains(why), "{url}: {text}");
            assert!(text.contains("postgres://u:***@h"), "{text}");
            assert!(!text.contains("pw"), "{text}");
        }
    }
}
