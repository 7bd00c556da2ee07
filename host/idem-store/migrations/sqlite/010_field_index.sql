-- Version 10: the lookup index, written behind the claims (issue 47).
-- One row per field of each record's kept operation: its name, its value
-- as SQLite's JSON reads it (text for a JSON string, an integer or real
-- for a number, 1 or 0 for a boolean) and the record's rowid. A claim
-- writes none of it: an indexer fills it in batches, in rowid (claim)
-- order, when the store is idle, on a lookup and on gc, and
-- `record_fields_mark.indexed` says how far it got. A lookup by field
-- reads the index for the records up to the mark and scans only those
-- after it (see `src/sqlite/field_index.rs`). `value` has no declared type
-- on purpose: no affinity, so the text "150" and the number 150 stay
-- apart (a lookup asks for both, and the host keeps the one whose spelling
-- matches). Nothing is filled here, so migrating a store of any size is
-- instant; the indexer catches up afterwards.
CREATE TABLE record_fields (
    name  TEXT    NOT NULL,
    value         NOT NULL,
    rec   INTEGER NOT NULL,
    PRIMARY KEY (name, value, rec)
) WITHOUT ROWID;
CREATE TABLE record_fields_mark (
    id      INTEGER PRIMARY KEY CHECK (id = 1),
    indexed INTEGER NOT NULL CHECK (indexed >= 0)
);
INSERT INTO record_fields_mark (id, indexed) VALUES (1, 0);
