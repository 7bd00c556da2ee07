-- Version 2: partitioned ownership (memberships and their epoch sequence)
-- and job leases.
CREATE TABLE epoch_seq (
    id   INTEGER PRIMARY KEY CHECK (id = 1),
    last INTEGER NOT NULL CHECK (last >= 0)
);
INSERT INTO epoch_seq (id, last) VALUES (1, 0);
CREATE TABLE memberships (
    grp     TEXT    NOT NULL PRIMARY KEY,
    epoch   INTEGER NOT NULL CHECK (epoch > 0),
    members TEXT    NOT NULL,
    updated INTEGER NOT NULL
) WITHOUT ROWID;
CREATE TABLE job_leases (
    job         TEXT    NOT NULL PRIMARY KEY,
    holder      TEXT    NOT NULL,
    fence       INTEGER NOT NULL CHECK (fence > 0),
    lease_until INTEGER NOT NULL
) WITHOUT ROWID;
