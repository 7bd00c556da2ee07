-- Version 10: the lookup index (issue 47). The fields of each record's
-- kept operation, as `jsonb`, in a GIN index (`jsonb_path_ops`: one hash
-- per field and value, the smallest GIN for containment): `idem inspect
-- --field invoice_id=R-189` and the console's search ask it for the
-- records whose fields contain `{"invoice_id": "R-189"}` instead of
-- scanning them. The column stays `text` (a claim writes it as before);
-- the index is over an expression of it. `idem_kept_fields` reads the
-- column's JSON, and is NULL for a record that kept none (`!off-by-host`)
-- or for text PostgreSQL's `jsonb` refuses, so that no claim can fail on
-- the index; its search path is fixed, as every function's of the schema.
-- Not PARALLEL SAFE: its exception block starts a subtransaction, which a
-- parallel worker may not (a parallel scan calling it would fail).
-- Building the index reads every record once and holds writes to
-- `records` off meanwhile (see docs/guide/stores.md, "Migrations").
CREATE FUNCTION {s}.idem_kept_fields(operation text) RETURNS jsonb
    LANGUAGE plpgsql IMMUTABLE STRICT
    SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF left(operation, 1) <> '{' THEN
        RETURN NULL;
    END IF;
    RETURN operation::jsonb -> 'fields';
EXCEPTION WHEN data_exception THEN
    RETURN NULL;
END
$$;
CREATE INDEX records_by_field ON {s}.records
    USING gin ({s}.idem_kept_fields(operation) jsonb_path_ops)
    WHERE operation LIKE '{%';
