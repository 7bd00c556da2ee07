-- Version 1: the records and the store-wide fence sequence.
CREATE SEQUENCE {s}.fence_seq AS bigint MINVALUE 1 START 1 NO CYCLE;
CREATE TABLE {s}.records (
    namespace      text    NOT NULL,
    key            bytea   NOT NULL CHECK (octet_length(key) = 32),
    policy_digest  text    NOT NULL,
    fingerprint    bytea   NOT NULL CHECK (octet_length(fingerprint) = 32),
    partition      text    NOT NULL,
    state          text    NOT NULL CHECK (state IN ('in-progress', 'completed',
                       'failed-retryable', 'failed-permanent', 'outcome-unknown')),
    fence          bigint  NOT NULL CHECK (fence > 0),
    lease_until    bigint  NOT NULL,
    attempts       bigint  NOT NULL,
    created        bigint  NOT NULL,
    updated        bigint  NOT NULL,
    retention_ms   bigint  NOT NULL,
    retain_until   bigint  NOT NULL,
    outcome_status integer,
    outcome_body   bytea,
    outcome_error  text,
    holder_run_id  text,
    holder_trigger text,
    holder_attempt bigint,
    holder_host    text    NOT NULL,
    holder_pid     bigint  NOT NULL,
    PRIMARY KEY (namespace, key)
);
CREATE INDEX records_retain_until ON {s}.records (retain_until);
CREATE INDEX records_updated ON {s}.records (updated);
