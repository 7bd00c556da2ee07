-- Version 5: a policy's life across versions.
-- The canonical operation each record keeps, so that its key can be
-- derived again offline with another version of the policy (`idem diff
-- --store`). NULL on records written before this version; `!reason` when
-- it was not kept (too large, or switched off); else the JSON text.
ALTER TABLE {s}.records ADD COLUMN operation text;
-- Namespace ownership and digest pinning: one JSON document per namespace
-- (active digest, registered digests, dual-read window, history), changed
-- conditionally on its revision; the components activations kept, by
-- digest; and store-wide settings (whether registration is required).
CREATE TABLE {s}.registrations (
    namespace text   NOT NULL PRIMARY KEY,
    revision  bigint NOT NULL,
    document  text   NOT NULL
);
CREATE TABLE {s}.policy_components (
    digest    text  NOT NULL PRIMARY KEY,
    component bytea NOT NULL
);
CREATE TABLE {s}.settings (
    name  text NOT NULL PRIMARY KEY,
    value text NOT NULL
);
