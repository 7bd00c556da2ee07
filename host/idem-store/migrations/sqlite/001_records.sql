-- Version 1: the records and the store-wide fence sequence.
CREATE TABLE fence_seq (
    id   INTEGER PRIMARY KEY CHECK (id = 1),
    last INTEGER NOT NULL CHECK (last >= 0)
);
INSERT INTO fence_seq (id, last) VALUES (1, 0);
CREATE TABLE records (
    namespace      TEXT    NOT NULL,
    key            BLOB    NOT NULL CHECK (length(key) = 32),
    policy_digest  TEXT    NOT NULL,
    fingerprint    BLOB    NOT NULL CHECK (length(fingerprint) = 32),
    partition      TEXT    NOT NULL,
    state          TEXT    NOT NULL CHECK (state IN ('in-progress', 'completed',
                       'failed-retryable', 'failed-permanent', 'outcome-unknown')),
    fence          INTEGER NOT NULL,
    lease_until    INTEGER NOT NULL,
    attempts       INTEGER NOT NULL,
    created        INTEGER NOT NULL,
    updated        INTEGER NOT NULL,
    retention_ms   INTEGER NOT NULL,
    retain_until   INTEGER NOT NULL,
    outcome_status INTEGER,
    outcome_body   BLOB,
    outcome_error  TEXT,
    holder_run_id  TEXT,
    holder_trigger TEXT,
    holder_attempt INTEGER,
    holder_host    TEXT    NOT NULL,
    holder_pid     INTEGER NOT NULL,
    PRIMARY KEY (namespace, key)
) WITHOUT ROWID;
CREATE INDEX records_retain_until ON records (retain_until);
CREATE INDEX records_updated ON records (updated);
