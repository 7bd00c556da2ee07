-- Version 5: the attempt log's key index, anchored at its record's
-- creation. A key is a SHA-256, so an index on (namespace, key) put every
-- claim's and every end's entry on a random page of the index: two random
-- page writes per operation, a third of the pages a batch of claims and
-- ends wrote to the write-ahead log. Led by `anchor` (the `created` time of
-- the record the entry is about, which a record keeps for life), the
-- entries of the operations claimed together land together at the index's
-- tail and a batch shares a few pages. A key's timeline is found through
-- its record; gc deletes a record's entries by its anchor and key.
ALTER TABLE attempts ADD COLUMN anchor INTEGER NOT NULL DEFAULT 0;
-- Entries whose record is gone (an answer logged as its record was
-- collected) keep anchor 0: still in the log, in no record's timeline.
UPDATE attempts SET anchor = coalesce(
    (SELECT created FROM records r WHERE r.namespace = attempts.namespace AND r.key = attempts.key),
    0);
DROP INDEX attempts_by_key;
CREATE INDEX attempts_by_record ON attempts (anchor, namespace, key);
