-- Version 9: whether the attempt holding a record has its effect commit in
-- the same store transaction as its end (an effect in the store's
-- transaction). Such a record in progress past its lease is known not to
-- have had its effect: a duplicate re-executes instead of sending it to
-- review. 0 on every record written before this version: nothing claimed
-- then said so.
ALTER TABLE records ADD COLUMN effect_atomic INTEGER NOT NULL DEFAULT 0 CHECK (effect_atomic IN (0, 1));
