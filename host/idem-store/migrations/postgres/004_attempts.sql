-- Version 4: the attempt log. Append-only; an entry is written in the same
-- transaction (or statement) as the record change it describes, and
-- removed with its record by gc. One secondary index (a key's timeline,
-- and gc deleting a collected record's entries); time-range reads scan by
-- id (`at_ms` grows with it). No CHECK constraints: each would be planned
-- again on every insert (see version 3); the store writes only what it
-- built.
CREATE SEQUENCE {s}.attempt_seq AS bigint MINVALUE 1 START 1 NO CYCLE;
CREATE TABLE {s}.attempts (
    id               bigint  PRIMARY KEY DEFAULT nextval('{s}.attempt_seq'),
    namespace        text    NOT NULL,
    key              bytea   NOT NULL,
    fence            bigint  NOT NULL,
    event            text    NOT NULL,
    run_id           text,
    trigger          text,
    attempt          bigint,
    host             text,
    pid              bigint,
    at_ms            bigint  NOT NULL,
    policy_digest    text,
    operation_digest bytea,
    actor            text,
    detail           text
);
ALTER SEQUENCE {s}.attempt_seq OWNED BY {s}.attempts.id;
CREATE INDEX attempts_by_key ON {s}.attempts (namespace, key);
