-- Version 6: each claim attempt's own identity (16 bytes), so that a claim
-- sent again after its answer was lost (the commit happened, the reply did
-- not arrive) finds its own record and goes on as that claim, where any
-- other claimer finds it in progress. NULL on records written before this
-- version, and on records no token claimed. Adding a NULL column rewrites
-- nothing: the migration is instant on a large table.
ALTER TABLE {s}.records ADD COLUMN holder_token bytea;
