-- Version 3: the attempt log. Append-only; an entry is written in the same
-- transaction as the record change it describes, and removed with its
-- record by gc. One secondary index (a key's timeline, and gc deleting a
-- collected record's entries): every claim and end pays for each index, so
-- time-range reads scan by id instead (`at_ms` grows with it).
CREATE TABLE attempts (
    id               INTEGER PRIMARY KEY,
    namespace        TEXT    NOT NULL,
    key              BLOB    NOT NULL CHECK (length(key) = 32),
    fence            INTEGER NOT NULL,
    event            TEXT    NOT NULL,
    run_id           TEXT,
    trigger          TEXT,
    attempt          INTEGER,
    host             TEXT,
    pid              INTEGER,
    at_ms            INTEGER NOT NULL,
    policy_digest    TEXT,
    operation_digest BLOB    CHECK (operation_digest IS NULL OR length(operation_digest) = 32),
    actor            TEXT,
    detail           TEXT
);
CREATE INDEX attempts_by_key ON attempts (namespace, key);
