-- Version 8: whether the attempt holding a record has its effect commit in
-- the same store transaction as its end (an effect in the store's
-- transaction). Such a record in progress past its lease is known not to
-- have had its effect: a duplicate re-executes instead of sending it to
-- review. false on every record written before this version: nothing
-- claimed then said so. A constant default rewrites nothing (PostgreSQL
-- 11 and later): the migration is instant on a large table.
ALTER TABLE {s}.records ADD COLUMN effect_atomic boolean NOT NULL DEFAULT false;
