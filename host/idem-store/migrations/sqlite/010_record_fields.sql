-- Version 10: the lookup index (issue 47). One row per field of each
-- record's kept operation: its name, its value as SQLite's JSON reads it
-- (text for a JSON string, an integer or real for a number, 1 or 0 for a
-- boolean) and the record's key, written in the transaction that writes
-- the operation. `idem inspect --field invoice_id=R-189` and the console's
-- search read the records through it instead of scanning them. `value`
-- has no declared type on purpose: no affinity, so the text "150" and the
-- number 150 stay apart (a lookup asks for both, and the host keeps the
-- one whose spelling matches). The backfill below reads every record once
-- (see docs/guide/stores.md, "Migrations").
CREATE TABLE record_fields (
    name      TEXT NOT NULL,
    value     NOT NULL,
    namespace TEXT NOT NULL,
    key       BLOB NOT NULL,
    PRIMARY KEY (name, value, namespace, key)
) WITHOUT ROWID;
INSERT OR IGNORE INTO record_fields (name, value, namespace, key)
    SELECT f.key, f.value, r.namespace, r.key
    FROM records r, json_each(CASE WHEN json_valid(r.operation) AND json_type(r.operation, '$.fields') = 'object' THEN r.operation ELSE '{"fields":{}}' END, '$.fields') f
    WHERE r.operation LIKE '{%' AND f.value IS NOT NULL;
