-- Version 4: a policy's life across versions.
-- The canonical operation each record keeps, so that its key can be
-- derived again offline with another version of the policy (`idem diff
-- --store`). NULL on records written before this version; `!reason` when
-- it was not kept (too large, or switched off); else the JSON text.
ALTER TABLE records ADD COLUMN operation TEXT;
-- Namespace ownership and digest pinning: one JSON document per namespace
-- (active digest, registered digests, dual-read window, history), changed
-- conditionally on its revision; the components activations kept, by
-- digest; and store-wide settings (whether registration is required).
CREATE TABLE registrations (
    namespace TEXT    NOT NULL PRIMARY KEY,
    revision  INTEGER NOT NULL,
    document  TEXT    NOT NULL
) WITHOUT ROWID;
CREATE TABLE policy_components (
    digest    TEXT NOT NULL PRIMARY KEY,
    component BLOB NOT NULL
) WITHOUT ROWID;
CREATE TABLE settings (
    name  TEXT NOT NULL PRIMARY KEY,
    value TEXT NOT NULL
) WITHOUT ROWID;
