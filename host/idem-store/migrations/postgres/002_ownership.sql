-- Version 2: partitioned ownership (memberships and their epoch sequence)
-- and job leases.
CREATE SEQUENCE {s}.epoch_seq AS bigint MINVALUE 1 START 1 NO CYCLE;
CREATE TABLE {s}.memberships (
    grp     text    PRIMARY KEY,
    epoch   bigint  NOT NULL CHECK (epoch > 0),
    members text[]  NOT NULL,
    updated bigint  NOT NULL
);
CREATE TABLE {s}.job_leases (
    job         text   PRIMARY KEY,
    holder      text   NOT NULL,
    fence       bigint NOT NULL CHECK (fence > 0),
    lease_until bigint NOT NULL,
    acquired    bigint NOT NULL
);
