//! Record rows of the PostgreSQL store, through the shared codec
//! (`crate::codec`): reading a named column, and a record's values as
//! statement parameters.

use tokio_postgres::Row;
use tokio_postgres::types::ToSql;

use super::Inner;
use crate::codec::{self, ColumnReader, RecordRow, record_values};
use crate::vocabulary::Record;
use crate::vocabulary::StoreError;

impl ColumnReader for Row {
    fn opt_text(&self, column: &str) -> Result<Option<String>, String> {
        self.try_get(column).map_err(|e| e.to_string())
    }

    fn opt_bytes(&self, column: &str) -> Result<Option<Vec<u8>>, String> {
        self.try_get(column).map_err(|e| e.to_string())
    }

    fn opt_i64(&self, column: &str) -> Result<Option<i64>, String> {
        self.try_get(column).map_err(|e| e.to_string())
    }

    fn opt_i32(&self, column: &str) -> Result<Option<i32>, String> {
        self.try_get(column).map_err(|e| e.to_string())
    }

    fn opt_bool(&self, column: &str) -> Result<Option<bool>, String> {
        self.try_get(column).map_err(|e| e.to_string())
    }
}

impl Inner {
    /// The record in `row`'s columns named `{prefix}{column}`; `None` when
    /// the row holds none (a LEFT JOIN that matched nothing).
    pub(super) fn decode_prefixed(
        &self,
        row: &Row,
        prefix: &str,
    ) -> Result<Option<Record>, StoreError> {
        codec::decode(row, prefix, &self.name)
    }
}

/// A record's values as parameters, in [`codec::COLUMNS`] order.
pub(super) fn values(row: &RecordRow) -> [&(dyn ToSql + Sync); codec::COLUMNS.len()] {
    record_values!(row, dyn ToSql + Sync)
}
