//! The lookup index on SQLite: `record_fields` (migration 10), one row per
//! field of each record's kept operation — (name, value, namespace, key) —
//! written and removed in the transaction that writes or deletes the
//! record's operation, and read by a lookup by field (`idem inspect --field
//! invoice_id=R-189`, the console's search) instead of scanning the store.
//!
//! Why a side table and not what SQLite offers on the column itself: an
//! expression index (`json_extract(operation, '$.fields.invoice_id')`)
//! serves only the fields someone declared beforehand, and the operator
//! who looks an invoice up after a bad night has not. The side table serves
//! every field of every operation without a declaration, at the price of
//! its rows in each first claim's commit and of its pages (about 1.7× the
//! records' own at five fields an operation; see `docs/benchmarks.md`,
//! "the lookup index").
//!
//! The rows are made by SQLite's own JSON reader (`json_each`) from the
//! column's text, in the claim and in the migration's backfill alike, so a
//! value is stored as SQLite reads it: text for a JSON string, an integer
//! or real for a number, 1 or 0 for a boolean. A lookup asks for the value
//! both as text and as JSON (`150` as the text "150" and the number 150)
//! and the host keeps the records whose spelling matches
//! ([`ListFilter::keeps`]): the index only narrows, it never decides.
//!
//! [`ListFilter::keeps`]: crate::ListFilter

use rusqlite::Connection;

use super::connection::Inner;
use crate::vocabulary::{KeptOperation, StoreError};

/// The rows of the operation `?1` (its JSON text) under namespace `?2` and
/// key `?3`. Text that is not a JSON object with a `fields` object (which
/// the host never keeps, but a library caller may pass) gives none rather
/// than failing the claim.
const FIELDS_OF: &str = "SELECT f.key, f.value, ?2, ?3 FROM json_each(\
     CASE WHEN json_valid(?1) AND json_type(?1, '$.fields') = 'object' THEN ?1 ELSE '{\"fields\":{}}' END, \
     '$.fields') f WHERE f.value IS NOT NULL";

impl Inner {
    /// Keeps the lookup index in step with a record whose kept operation
    /// went from `before` to `after` (the same text: nothing to do, as on
    /// every finish and take-over).
    pub(super) fn index_fields(
        &self,
        tx: &Connection,
        namespace: &str,
        key: &[u8],
        before: Option<&str>,
        after: Option<&KeptOperation>,
    ) -> Result<(), StoreError> {
        let after = after.and_then(KeptOperation::text);
        if before == after {
            return Ok(());
        }
        if let Some(before) = before {
            self.unindex_fields(tx, namespace, key, before)?;
        }
        if let Some(after) = after {
            tx.prepare_cached(&format!(
                "INSERT OR IGNORE INTO record_fields (name, value, namespace, key) {FIELDS_OF}"
            ))
            .and_then(|mut stmt| stmt.execute(rusqlite::params![after, namespace, key]))
            .map_err(|e| self.err("indexing a record's fields", e))?;
        }
        Ok(())
    }

    /// Removes the lookup rows of a record whose kept operation was
    /// `operation` (its column text; nothing unless it is JSON).
    pub(super) fn unindex_fields(
        &self,
        tx: &Connection,
        namespace: &str,
        key: &[u8],
        operation: &str,
    ) -> Result<(), StoreError> {
        if !operation.starts_with('{') {
            return Ok(());
        }
        tx.prepare_cached(&format!(
            "DELETE FROM record_fields WHERE (name, value, namespace, key) IN ({FIELDS_OF})"
        ))
        .and_then(|mut stmt| stmt.execute(rusqlite::params![operation, namespace, key]))
        .map_err(|e| self.err("removing a record's fields from the index", e))?;
        Ok(())
    }
}
