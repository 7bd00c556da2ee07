-- Version 7: the gate a downstream keeps (the `Gates` port): per gate and
-- key, the highest fence seen, the admission in flight or done, and the
-- result stored for a repeat. Times are the store clock's, in ms.
CREATE TABLE {s}.gate_entries (
    gate            text   NOT NULL,
    key             text   NOT NULL,
    highest_fence   bigint NOT NULL CHECK (highest_fence >= 0),
    admission       bigint NOT NULL CHECK (admission >= 0),
    admitted_fence  bigint NOT NULL CHECK (admitted_fence >= 0),
    state           text   NOT NULL CHECK (state IN ('in-flight', 'done', 'free')),
    in_flight_until bigint NOT NULL,
    fingerprint     bytea,
    result          bytea,
    created_ms      bigint NOT NULL,
    updated_ms      bigint NOT NULL,
    PRIMARY KEY (gate, key)
);
