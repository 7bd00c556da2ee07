-- Version 4: the canonical operation each record keeps, so that its key
-- can be derived again offline with another version of the policy (`idem
-- diff --store`). NULL on records written before this version; `!reason`
-- when it was not kept (too large, or switched off); else the JSON text.
ALTER TABLE records ADD COLUMN operation TEXT;
