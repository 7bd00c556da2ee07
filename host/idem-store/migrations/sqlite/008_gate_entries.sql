-- Version 8: the gate a downstream keeps (the `Gates` port): per gate and
-- key, the highest fence seen, the admission in flight or done, and the
-- result stored for a repeat. Times are the store clock's, in ms.
CREATE TABLE gate_entries (
    gate            TEXT    NOT NULL,
    key             TEXT    NOT NULL,
    highest_fence   INTEGER NOT NULL CHECK (highest_fence >= 0),
    admission       INTEGER NOT NULL CHECK (admission >= 0),
    admitted_fence  INTEGER NOT NULL CHECK (admitted_fence >= 0),
    state           TEXT    NOT NULL CHECK (state IN ('in-flight', 'done', 'free')),
    in_flight_until INTEGER NOT NULL,
    fingerprint     BLOB,
    result          BLOB,
    created_ms      INTEGER NOT NULL,
    updated_ms      INTEGER NOT NULL,
    PRIMARY KEY (gate, key)
) WITHOUT ROWID;
