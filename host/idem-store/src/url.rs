//! Store URLs: `sqlite:PATH`, `sqlite://PATH`, `postgres://…`, `memory:`.

use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use crate::postgres::{is_postgres, redact};
use crate::{PostgresUrl, SqliteOptions, StoreError, Synchronous};

/// A store URL fit to print or log: the password of a PostgreSQL URL
/// masked (`user:***@host`, `password=***`); every other URL unchanged.
/// Works on URLs that do not parse, so an error can name what was given.
pub fn redacted_url(url: &str) -> String {
    if url.contains("://") {
        redact(url)
    } else {
        url.to_string()
    }
}

/// A parsed store URL.
///
/// - `sqlite:PATH` or `sqlite://PATH` (so `sqlite:///var/lib/idem.db` is
///   absolute and `sqlite://idem.db` relative), with an optional query:
///   `synchronous=full|normal`, `busy_timeout_ms=N` and
///   `wal_autocheckpoint=PAGES` (at least 1). Everything after the
///   first `?` is the query, so a path cannot contain `?`.
/// - `postgres://…` or `postgresql://…`: a PostgreSQL database (see
///   [`PostgresUrl`] for the query parameters idem reads).
/// - `memory:` (or `memory://`): a fresh in-memory store.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum StoreUrl {
    /// A SQLite file.
    Sqlite {
        /// The file.
        path: PathBuf,
        /// From the query.
        options: SqliteOptions,
    },
    /// A PostgreSQL database.
    Postgres(PostgresUrl),
    /// An in-memory store.
    Memory,
}

impl FromStr for StoreUrl {
    type Err = StoreError;

    fn from_str(url: &str) -> Result<Self, StoreError> {
        let bad = |why: String| StoreError::UnsupportedUrl {
            url: redacted_url(url),
            why,
        };
        if url == "memory:" || url == "memory://" {
            return Ok(StoreUrl::Memory);
        }
        if is_postgres(url) {
            return url.parse().map(StoreUrl::Postgres);
        }
        let Some(rest) = url.strip_prefix("sqlite:") else {
            let why = match url.split_once(':') {
                Some((scheme, _))
                    if scheme.eq_ignore_ascii_case("postgres")
                        || scheme.eq_ignore_ascii_case("postgresql") =>
                {
                    format!("write `{scheme}://HOST/DB`")
                }
                Some((scheme, _)) if !scheme.is_empty() => format!("unknown scheme `{scheme}:`"),
                _ => "no scheme".to_string(),
            };
            return Err(bad(why));
        };
        let rest = rest.strip_prefix("//").unwrap_or(rest);
        let (path, query) = match rest.split_once('?') {
            Some((path, query)) => (path, Some(query)),
            None => (rest, None),
        };
        if path.is_empty() {
            return Err(bad("no file path after `sqlite:`".to_string()));
        }
        let mut options = SqliteOptions::default();
        for pair in query
            .into_iter()
            .flat_map(|q| q.split('&'))
            .filter(|p| !p.is_empty())
        {
            let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
            match name {
                "synchronous" => {
                    options.synchronous = match value.to_ascii_lowercase().as_str() {
                        "full" => Synchronous::Full,
                        "normal" => Synchronous::Normal,
                        _ => {
                            return Err(bad(format!(
                                "synchronous must be `full` or `normal`, not `{value}`"
                            )));
                        }
                    }
                }
                "busy_timeout_ms" => {
                    let ms: u64 = value.parse().map_err(|_| {
                        bad(format!(
                            "busy_timeout_ms must be a number of milliseconds, not `{value}`"
                        ))
                    })?;
                    options.busy_timeout = Duration::from_millis(ms);
                }
                "wal_autocheckpoint" => {
                    options.wal_autocheckpoint =
                        value.parse().ok().filter(|&n: &u32| n > 0).ok_or_else(|| {
                            bad(format!(
                                "wal_autocheckpoint must be a number of pages, at least 1, not `{value}`"
                            ))
                        })?;
                }
                _ => {
                    return Err(bad(format!(
                        "unknown query parameter `{name}` (known: synchronous, busy_timeout_ms, wal_autocheckpoint)"
                    )));
                }
            }
        }
        Ok(StoreUrl::Sqlite {
            path: PathBuf::from(path),
            options,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sqlite(path: &str, options: SqliteOptions) -> StoreUrl {
        StoreUrl::Sqlite {
            path: PathBuf::from(path),
            options,
        }
    }

    #[test]
    fn sqlite_urls() {
        let d = SqliteOptions::default();
        assert_eq!(
            "sqlite:idem.db".parse::<StoreUrl>().unwrap(),
            sqlite("idem.db", d)
        );
        assert_eq!(
            "sqlite:/var/idem.db".parse::<StoreUrl>().unwrap(),
            sqlite("/var/idem.db", d)
        );
        assert_eq!(
            "sqlite://idem.db".parse::<StoreUrl>().unwrap(),
            sqlite("idem.db", d)
        );
        assert_eq!(
            "sqlite:///var/idem.db".parse::<StoreUrl>().unwrap(),
            sqlite("/var/idem.db", d)
        );
        let normal = SqliteOptions {
            synchronous: Synchronous::Normal,
            busy_timeout: Duration::from_millis(250),
            wal_autocheckpoint: 10_000,
        };
        assert_eq!(
            "sqlite:/x.db?synchronous=NORMAL&busy_timeout_ms=250&wal_autocheckpoint=10000"
                .parse::<StoreUrl>()
                .unwrap(),
            sqlite("/x.db", normal)
        );
        assert_eq!("memory:".parse::<StoreUrl>().unwrap(), StoreUrl::Memory);
    }

    #[test]
    fn bad_urls_name_the_url_and_the_schemes() {
        for (url, why) in [
            ("postgres:db/idem", "write `postgres://HOST/DB`"),
            ("mysql://x", "unknown scheme `mysql:`"),
            ("/just/a/path", "no scheme"),
            ("sqlite:", "no file path"),
            ("sqlite://?synchronous=full", "no file path"),
            ("sqlite:x.db?synchronous=off", "synchronous must be"),
            (
                "sqlite:x.db?busy_timeout_ms=soon",
                "busy_timeout_ms must be",
            ),
            (
                "sqlite:x.db?wal_autocheckpoint=0",
                "wal_autocheckpoint must be",
            ),
            ("sqlite:x.db?wal_autocheckpoint=-5", "at least 1, not `-5`"),
            (
                "sqlite:x.db?journal=wal",
                "unknown query parameter `journal`",
            ),
        ] {
            let err = url.parse::<StoreUrl>().unwrap_err();
            let text = err.to_string();
            assert!(
                matches!(err, StoreError::UnsupportedUrl { .. }),
                "{url}: {text}"
            );
            assert!(text.contains(&format!("`{url}`")), "{text}");
            assert!(text.contains(why), "{url}: {text}");
            assert!(
                text.contains("sqlite:PATH") && text.contains("memory:"),
                "{text}"
            );
        }
    }
}
