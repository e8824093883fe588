-- inorder 011: parking a key.
--
-- A process run with --on-halt park does not halt its whole stream on a record that would halt it: the
-- record's key is parked. The record is stored here, with its error, the position moves past it, and every
-- later record of the key is stored here behind it, in (created_at, id) order, without reaching the
-- handler. The other keys go on. A redrive (an operator's) has the owning processor deliver a key's parked
-- records in order, ahead of the key's new records, and unpark it. A row here is a reference to the
-- record's row in the source table, which a prune keeps.
CREATE TABLE inorder.parked (
    process_name      text NOT NULL,  -- the stream: the process, or one partition's name
    -- The order in which the stream parked its records, which is the stream's own (created_at, id) order:
    -- the owner parks records only as its position passes them. record_id is text, and "10" < "9".
    seq               bigint GENERATED ALWAYS AS IDENTITY,
    key               text NOT NULL,
    record_created_at timestamptz NOT NULL,
    record_id         text NOT NULL,
    -- Why the record is parked: its own failure (the key's first record), or empty for a record parked
    -- behind it.
    error             text NOT NULL DEFAULT '',
    status            int,
    permanent         boolean NOT NULL DEFAULT false,
    attempts          int NOT NULL DEFAULT 0,
    first_failure_at  timestamptz,
    last_failure_at   timestamptz,
    parked_at         timestamptz NOT NULL DEFAULT clock_timestamp(),
    -- Set by an operator's redrive: the owning processor delivers the key's records.
    redrive_at        timestamptz,
    PRIMARY KEY (process_name, key, record_created_at, record_id)
);
CREATE INDEX ON inorder.parked (process_name, seq);

-- An operator's redrive (or skip of a parked record) sets it, which the processor's probe sees as a change
-- of the cursor row; the processor clears it once it has looked.
ALTER TABLE inorder.cursor ADD COLUMN redrive_requested_at timestamptz;

ALTER TABLE inorder.audit DROP CONSTRAINT audit_action_check;
ALTER TABLE inorder.audit ADD CONSTRAINT audit_action_check
    CHECK (action IN ('skip', 'rewind', 'pause', 'resume', 'repartition', 'prune', 'forget', 'retry', 'redrive'));

-- The roles that run processors may write their cursor rows: let them park records too. The roles that may
-- read the cursor rows (status) may read the parked records.
DO $$
DECLARE
    r record;
BEGIN
    FOR r IN SELECT DISTINCT a.grantee, a.privilege_type FROM pg_class AS c, aclexplode(c.relacl) AS a
             WHERE c.oid = 'inorder.cursor'::regclass AND a.privilege_type IN ('SELECT', 'UPDATE')
               AND a.grantee <> c.relowner
    LOOP
        EXECUTE format('GRANT %s ON inorder.parked TO %s',
                       CASE r.privilege_type WHEN 'UPDATE' THEN 'SELECT, INSERT, UPDATE, DELETE' ELSE 'SELECT' END,
                       CASE r.grantee WHEN 0 THEN 'PUBLIC' ELSE r.grantee::regrole::text END);
    END LOOP;
END
$$;
