-- Version 9: the completion as SQL functions, for a service in any language
-- that writes its business rows in its own transaction on this database
-- (a client of `idem serve`, a command under `idem exec`): the same
-- completion `PostgresStore::complete_in` makes from Rust.
--
-- `{s}.complete(namespace, key, fence, status, body)` completes the attempt
-- holding `fence` inside the caller's transaction: it locks the record's
-- row, reads the store clock (the server's), decides as `machine::finish`
-- does (live, the same fence, in progress) and writes what the fast finish
-- writes (the state, the outcome, `updated`, `retain_until`; the holder's
-- columns and its token untouched) with the `completed` entry of the
-- attempt log, as `idem serve` keeps it (the log on; bodies up to 64 KiB,
-- `DEFAULT_MAX_OUTCOME_BYTES`). A refusal RAISEs SQLSTATE IDF01, so the
-- caller's transaction is aborted and its COMMIT rolls back: returning
-- false would let a caller commit its business rows after ignoring it.
-- The DETAIL is one word, the reason: `fenced` (another holder took the
-- key over), `final` (the record is no longer in progress) or `gone` (no
-- live record). A request that cannot be right (a key that is not 64
-- hexadecimal digits, a NULL argument, a body too large) RAISEs IDF02 and
-- is checked before the record is read.
--
-- `{s}.log_refused(namespace, key, fence)`, called after the caller's
-- transaction rolled back, appends the refused write of a deposed holder
-- to the attempt log as the library logs it (the rollback took any entry
-- the refusal could have written), once per key, fence and reason: under
-- the record's row lock, as the library's write is, so two calls at once
-- cannot both append it.
--
-- `{s}.completed_under(namespace, key, fence, status, body)` answers,
-- when the answer to the caller's COMMIT was lost, whether that completion
-- committed: read under the row lock, so it waits until the old
-- transaction is over on the server. Call it in a transaction of its own.
--
-- Plain SQL would read the clock before the row lock is granted; PL/pgSQL
-- reads it after. Every name is schema-qualified, and the search path is
-- pinned: a caller's search path cannot redirect what these functions
-- call.

-- The checks every function shares: every argument given, the key as
-- `begin` hands it out (64 hexadecimal digits); its bytes.
CREATE FUNCTION {s}.checked_key(namespace text, key text, fence bigint, status integer)
    RETURNS bytea
    LANGUAGE plpgsql IMMUTABLE
    SET search_path = pg_catalog, pg_temp
AS $idem$
BEGIN
    IF namespace IS NULL OR key IS NULL OR fence IS NULL OR status IS NULL THEN
        RAISE EXCEPTION 'idem: a completion names its namespace, key, fence and status (none may be NULL)'
            USING ERRCODE = 'IDF02';
    END IF;
    IF key !~ '^[0-9a-fA-F]{64}$' THEN
        RAISE EXCEPTION 'idem: % is not a key (64 hexadecimal digits, as begin hands it out)',
            left(key, 80)
            USING ERRCODE = 'IDF02';
    END IF;
    RETURN decode(key, 'hex');
END
$idem$;

-- The record of the key whose bytes are `k` in `namespace`, its row
-- locked until the caller's transaction ends (waiting for a transaction
-- that holds it); a row of NULLs when there is none. Each function reads
-- the record this way, then the clock: the clock is read once the lock
-- is held.
CREATE FUNCTION {s}.locked_record(namespace text, k bytea)
    RETURNS {s}.records
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
AS $idem$
#variable_conflict use_column
DECLARE
    r {s}.records%ROWTYPE;
BEGIN
    SELECT * INTO r FROM {s}.records AS x
        WHERE x.namespace = locked_record.namespace AND x.key = locked_record.k FOR UPDATE;
    RETURN r;
END
$idem$;

-- Whether `r` (from `locked_record`) counts as absent at the store clock
-- `now_ms`, as `machine::is_expired` says: no record, or one past its
-- retention, unless it is in progress under a live lease.
CREATE FUNCTION {s}.counts_as_absent(r {s}.records, now_ms bigint)
    RETURNS boolean
    LANGUAGE sql IMMUTABLE
    SET search_path = pg_catalog, pg_temp
AS $idem$
    SELECT r.namespace IS NULL OR (r.retain_until < now_ms
        AND NOT (r.state = 'in-progress' AND r.lease_until > now_ms))
$idem$;

CREATE FUNCTION {s}.complete(namespace text, key text, fence bigint,
        status integer DEFAULT 0, body bytea DEFAULT '\x'::bytea)
    RETURNS void
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
AS $idem$
#variable_conflict use_column
DECLARE
    k bytea;
    r {s}.records%ROWTYPE;
    now_ms bigint;
    refused text;
    why text;
BEGIN
    k := {s}.checked_key(complete.namespace, complete.key, complete.fence, complete.status);
    IF octet_length(complete.body) > 65536 THEN
        RAISE EXCEPTION 'idem: the outcome of key % is % bytes; the store keeps at most 65536',
            complete.key, octet_length(complete.body)
            USING ERRCODE = 'IDF02';
    END IF;
    r := {s}.locked_record(complete.namespace, k);
    now_ms := floor(extract(epoch FROM clock_timestamp()) * 1000)::int8;
    -- The order of `machine::fenced` and `machine::held`: a record that
    -- counts as absent, then another fence, then a state that is not in
    -- progress.
    IF {s}.counts_as_absent(r, now_ms) THEN
        refused := 'gone';
        why := 'there is no live record of it (never claimed, or collected after its retention)';
    ELSIF r.fence <> complete.fence THEN
        refused := 'fenced';
        why := format('the record is at fence %s: another holder took the key over', r.fence);
    ELSIF r.state <> 'in-progress' THEN
        refused := 'final';
        why := format('the record is %s, no longer in progress', r.state);
    END IF;
    IF refused IS NOT NULL THEN
        RAISE EXCEPTION 'idem: the completion of key % under fence % was refused: %; this transaction cannot commit',
            complete.key, complete.fence, why
            USING ERRCODE = 'IDF01', DETAIL = refused,
                HINT = 'roll the transaction back: none of its writes may commit without the completion';
    END IF;
    UPDATE {s}.records AS x SET
        state = 'completed',
        outcome_status = complete.status,
        outcome_body = COALESCE(complete.body, '\x'::bytea),
        outcome_error = NULL,
        updated = now_ms,
        retain_until = CASE WHEN x.retention_ms > 9223372036854775807 - now_ms
            THEN 9223372036854775807 ELSE now_ms + x.retention_ms END
        WHERE x.namespace = complete.namespace AND x.key = k AND x.fence = complete.fence;
    IF NOT FOUND THEN
        -- The row is locked and was just read under this fence.
        RAISE EXCEPTION 'idem: the completion of key % under fence % changed no row under its lock',
            complete.key, complete.fence
            USING ERRCODE = 'XX000';
    END IF;
    INSERT INTO {s}.attempts (namespace, key, fence, event, run_id, trigger, attempt, host,
            pid, at_ms, policy_digest, operation_digest, actor, detail)
        VALUES (r.namespace, r.key, r.fence, 'completed', r.holder_run_id, r.holder_trigger,
            r.holder_attempt, r.holder_host, r.holder_pid, now_ms, r.policy_digest,
            NULL, NULL, NULL);
END
$idem$;

CREATE FUNCTION {s}.completed_under(namespace text, key text, fence bigint,
        status integer DEFAULT 0, body bytea DEFAULT '\x'::bytea)
    RETURNS boolean
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
AS $idem$
#variable_conflict use_column
DECLARE
    k bytea;
    r {s}.records%ROWTYPE;
BEGIN
    k := {s}.checked_key(completed_under.namespace, completed_under.key,
        completed_under.fence, completed_under.status);
    r := {s}.locked_record(completed_under.namespace, k);
    RETURN r.namespace IS NOT NULL AND r.fence = completed_under.fence AND r.state = 'completed'
        AND r.outcome_status = completed_under.status
        AND r.outcome_body = COALESCE(completed_under.body, '\x'::bytea);
END
$idem$;

CREATE FUNCTION {s}.log_refused(namespace text, key text, fence bigint)
    RETURNS boolean
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
AS $idem$
#variable_conflict use_column
DECLARE
    k bytea;
    r {s}.records%ROWTYPE;
    now_ms bigint;
    why text;
BEGIN
    k := {s}.checked_key(log_refused.namespace, log_refused.key, log_refused.fence, 0);
    r := {s}.locked_record(log_refused.namespace, k);
    now_ms := floor(extract(epoch FROM clock_timestamp()) * 1000)::int8;
    -- What `logged_if_fenced` logs: a holder deposed by a higher fence, or
    -- one whose record was sent to review while it was away; nothing for a
    -- record gone, final under its own fence, or still its own.
    IF {s}.counts_as_absent(r, now_ms) THEN
        RETURN false;
    ELSIF log_refused.fence < r.fence THEN
        why := format('finishing refused: the record is at fence %s', r.fence);
    ELSIF log_refused.fence = r.fence AND r.state = 'outcome-unknown' THEN
        why := 'finishing refused: the record was sent to review (outcome-unknown)';
    ELSE
        RETURN false;
    END IF;
    INSERT INTO {s}.attempts (namespace, key, fence, event, run_id, trigger, attempt, host,
            pid, at_ms, policy_digest, operation_digest, actor, detail)
        SELECT r.namespace, r.key, log_refused.fence, 'fenced', NULL, NULL, NULL, NULL, NULL,
            now_ms, NULL, NULL, NULL, why
        WHERE NOT EXISTS (SELECT 1 FROM {s}.attempts AS a
            WHERE a.namespace = r.namespace AND a.key = r.key AND a.fence = log_refused.fence
            AND a.event = 'fenced' AND a.detail IS NOT DISTINCT FROM why);
    RETURN FOUND;
END
$idem$;
