//! Connections of the PostgreSQL store: the pool, a connection that never
//! goes back with a transaction open, what an error means (connect, retry,
//! fail), and the one retry rule every call follows.

use deadpool_postgres::Object;
use tokio_postgres::Row;
use tokio_postgres::error::SqlState;
use tokio_postgres::types::{FromSql, ToSql};

use super::Inner;
use crate::vocabulary::{ConnectErrorKind, StoreError};

/// How often a call is retried after a serialization failure, a deadlock
/// or a lost race before it gives up.
const MAX_ATTEMPTS: u32 = 10;

/// A pooled connection that is discarded, not returned to the pool, when
/// dropped while a transaction may be open (an error mid-transaction or a
/// cancelled call): the server then rolls the transaction back.
pub(super) struct Conn {
    object: Option<Object>,
    /// Set while a transaction may be open.
    pub(super) in_transaction: bool,
}

impl std::ops::Deref for Conn {
    type Target = deadpool_postgres::ClientWrapper;

    fn deref(&self) -> &Self::Target {
        // Only `drop` takes the object out.
        self.object.as_ref().expect("a live connection")
    }
}

impl std::ops::DerefMut for Conn {
    fn deref_mut(&mut self) -> &mut Self::Target {
        // Only `drop` takes the object out.
        self.object.as_mut().expect("a live connection")
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        if self.in_transaction
            && let Some(object) = self.object.take()
        {
            drop(Object::take(object));
        }
    }
}

/// One try of a call that may be retried as a whole.
pub(super) enum Attempt<T> {
    /// Settled.
    Done(T),
    /// Changed nothing (a serialization failure, a deadlock, a lost race):
    /// try again.
    Again,
}

/// Counts the tries of one call: [`Retries::again`] allows
/// [`MAX_ATTEMPTS`] in all, then gives up with an error naming the call
/// and what kept conflicting.
pub(super) struct Retries<'a> {
    inner: &'a Inner,
    context: &'static str,
    conflict: &'static str,
    left: u32,
}

impl Retries<'_> {
    /// Whether another try is allowed; the error to return when not.
    pub(super) fn again(&mut self) -> Result<(), StoreError> {
        self.left = self.left.saturating_sub(1);
        if self.left > 0 {
            return Ok(());
        }
        Err(StoreError::Backend {
            store: self.inner.name.clone(),
            context: self.context,
            cause: crate::vocabulary::cause(format!(
                "gave up after {MAX_ATTEMPTS} {}",
                self.conflict
            )),
        })
    }
}

/// Whether a failed call may be retried as a whole: it changed nothing.
pub(super) fn is_retryable(e: &tokio_postgres::Error) -> bool {
    matches!(
        e.code(),
        Some(c) if *c == SqlState::T_R_SERIALIZATION_FAILURE || *c == SqlState::T_R_DEADLOCK_DETECTED
    )
}

/// Whether a SQLSTATE says the request's data was refused: class 22 (data
/// exception: a NUL in text, a value out of range, an invalid encoding) or
/// 23 (integrity constraint violation).
fn refuses_data(code: &SqlState) -> bool {
    matches!(&code.code()[..2], "22" | "23")
}

/// A server error as a person reads it: its message, detail and hint, and
/// its SQLSTATE.
fn server_message(db: &tokio_postgres::error::DbError) -> String {
    let mut text = format!("{} (SQLSTATE {})", db.message(), db.code().code());
    if let Some(detail) = db.detail() {
        text.push_str(&format!("; {detail}"));
    }
    if let Some(hint) = db.hint() {
        text.push_str(&format!("; hint: {hint}"));
    }
    text
}

/// Classifies a failure to connect or to open.
fn connect_kind(e: &tokio_postgres::Error) -> ConnectErrorKind {
    if let Some(code) = e.code() {
        let class = &code.code()[..2];
        return match class {
            "28" => ConnectErrorKind::Auth,
            "3D" => ConnectErrorKind::NoSuchDatabase,
            "42" if *code == SqlState::INSUFFICIENT_PRIVILEGE => ConnectErrorKind::Permission,
            "08" | "57" => ConnectErrorKind::Unreachable,
            _ => ConnectErrorKind::Other,
        };
    }
    let text = e.to_string();
    if text.contains("TLS") || text.contains("tls") || text.contains("SSL") {
        return ConnectErrorKind::Tls;
    }
    let mut source: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(e);
    while let Some(s) = source {
        #[cfg(feature = "tls")]
        if s.downcast_ref::<rustls::Error>().is_some() {
            return ConnectErrorKind::Tls;
        }
        if let Some(io) = s.downcast_ref::<std::io::Error>() {
            #[cfg(feature = "tls")]
            if io
                .get_ref()
                .is_some_and(|inner| inner.is::<rustls::Error>())
            {
                return ConnectErrorKind::Tls;
            }
            let _ = io;
            return ConnectErrorKind::Unreachable;
        }
        source = s.source();
    }
    if text.contains("connect") || text.contains("closed") || text.contains("timeout") {
        ConnectErrorKind::Unreachable
    } else {
        ConnectErrorKind::Other
    }
}

/// The message of an error with its sources (tokio-postgres puts the
/// server's message in the source).
fn detail(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let more = s.to_string();
        if !text.contains(&more) {
            text.push_str(": ");
            text.push_str(&more);
        }
        source = s.source();
    }
    text
}

impl Inner {
    /// A pooled connection; failing to get one is a connection error.
    pub(super) async fn conn(&self) -> Result<Conn, StoreError> {
        match self.pool.get().await {
            Ok(object) => Ok(Conn {
                object: Some(object),
                in_transaction: false,
            }),
            Err(deadpool_postgres::PoolError::Backend(e)) => Err(self.open_err(&e)),
            Err(e) => Err(StoreError::Connect {
                url: self.name.clone(),
                kind: ConnectErrorKind::Other,
                detail: e.to_string(),
            }),
        }
    }

    /// The tries of one call (see [`Retries`]).
    pub(super) fn retries(&self, context: &'static str, conflict: &'static str) -> Retries<'_> {
        Retries {
            inner: self,
            context,
            conflict,
            left: MAX_ATTEMPTS,
        }
    }

    /// What a statement's result means for a call that may be retried: its
    /// value, [`Attempt::Again`] after a failure that changed nothing, or
    /// the error.
    pub(super) fn settle<T>(
        &self,
        context: &'static str,
        result: Result<T, tokio_postgres::Error>,
    ) -> Result<Attempt<T>, StoreError> {
        match result {
            Ok(value) => Ok(Attempt::Done(value)),
            Err(e) if is_retryable(&e) => Ok(Attempt::Again),
            Err(e) => Err(self.err(context, e)),
        }
    }

    pub(super) fn open_err(&self, e: &tokio_postgres::Error) -> StoreError {
        StoreError::Connect {
            url: self.name.clone(),
            kind: connect_kind(e),
            detail: detail(e),
        }
    }

    pub(super) fn err(&self, context: &'static str, e: tokio_postgres::Error) -> StoreError {
        if e.is_closed() {
            // The connection broke: say so, naming the URL.
            return self.open_err(&e);
        }
        match e.as_db_error() {
            // The server refused the request's data: sending it again gets
            // the same answer, so it is never classed unavailable.
            Some(db) if refuses_data(db.code()) => StoreError::DataRefused {
                store: self.name.clone(),
                context,
                detail: server_message(db),
            },
            // The server's own words, not tokio-postgres's bare "db error".
            Some(db) => StoreError::Backend {
                store: self.name.clone(),
                context,
                cause: crate::vocabulary::cause(server_message(db)),
            },
            None => StoreError::Backend {
                store: self.name.clone(),
                context,
                cause: std::sync::Arc::new(e),
            },
        }
    }

    pub(super) fn corrupt(&self, what: String) -> StoreError {
        StoreError::Corrupt {
            store: self.name.clone(),
            what,
        }
    }

    /// A single autocommit statement, retried after a serialization
    /// failure or deadlock.
    pub(super) async fn query(
        &self,
        context: &'static str,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Row>, StoreError> {
        let mut retries = self.retries(context, "serialization failures");
        loop {
            let conn = self.conn().await?;
            let statement = conn
                .prepare_cached(sql)
                .await
                .map_err(|e| self.err(context, e))?;
            match self.settle(context, conn.query(&statement, params).await)? {
                Attempt::Done(rows) => return Ok(rows),
                Attempt::Again => retries.again()?,
            }
        }
    }

    /// The clock parameters of [`super::sql::NOW`].
    pub(super) fn clock(&self) -> (Option<i64>, i64) {
        let (manual, offset) = self.options.clock.for_database();
        (
            manual.map(|ms| i64::try_from(ms).unwrap_or(i64::MAX)),
            offset,
        )
    }

    pub(super) fn unsigned(&self, v: i64, what: &str) -> Result<u64, StoreError> {
        u64::try_from(v).map_err(|_| self.corrupt(format!("{what} is {v}")))
    }

    /// A named column of a row this store's own statement returned.
    pub(super) fn column<'a, T: FromSql<'a>>(
        &self,
        row: &'a Row,
        name: &str,
    ) -> Result<T, StoreError> {
        row.try_get(name)
            .map_err(|e| self.corrupt(format!("column {name} does not decode: {e}")))
    }
}
