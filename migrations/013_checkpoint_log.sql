-- inorder 013: positions recorded by appending, never by rewriting the cursor row per record.
--
-- A row updated for every record becomes, while any session holds an old snapshot (a pg_dump, a report in
-- REPEATABLE READ, a session idle in transaction), a chain of one version per record that vacuum may not
-- remove, and every lock and lookup of the row walks it: the stream slows to a few percent of its speed
-- within minutes. So a processor now writes a position as a new entry in one of the three partitions of
-- inorder.checkpoint, which only ever grow by INSERT and are emptied by TRUNCATE in turn, as PgQ rotates its
-- event tables; the cursor row is rewritten only for ownership and its lease (once per third of the
-- lease), for a failing record, and by operators.
--
-- A process's position is the newest of: the row's own position, numbered position_seq, and its
-- entries numbered above that in the checkpoint tables (seq, from inorder.checkpoint_seq, which only
-- grows: whoever writes a position holds the row lock, so the numbers follow the order of the writes).
-- An entry goes into the partition (the slot) the database's clock names when it is inserted, a new one
-- every 10 seconds in turn, and a partition that holds no process's newest position is truncated, only
-- when nothing else uses it at that instant (LOCK ... NOWAIT: a pg_dump, which holds a lock on every table
-- it dumps, makes it wait for the next turn, and no statement ever queues behind it).
CREATE SEQUENCE inorder.checkpoint_seq;

ALTER TABLE inorder.cursor ADD COLUMN position_seq bigint NOT NULL DEFAULT 0;

-- The slot the database's clock names now: every instance, whatever its version, agrees on it.
CREATE FUNCTION inorder.checkpoint_slot() RETURNS smallint LANGUAGE sql VOLATILE
    AS $$ SELECT (floor(extract(epoch FROM clock_timestamp()) / 10)::bigint % 3)::smallint $$;

-- One partitioned table, so that an owner appends with one statement whatever its table (slot); its three
-- partitions are what the rotation truncates, each on its own.
CREATE TABLE inorder.checkpoint (
    slot                smallint NOT NULL DEFAULT inorder.checkpoint_slot(),
    process_name        text NOT NULL,
    seq                 bigint NOT NULL DEFAULT nextval('inorder.checkpoint_seq'),
    -- The position, as the cursor row holds it (NULL, NULL is the beginning).
    position_created_at timestamptz,
    position_id         text,
    -- records_handled as the cursor row counts it, and what a keyed window had in flight.
    records_handled     bigint NOT NULL,
    in_flight           integer NOT NULL DEFAULT 0,
    in_flight_since     timestamptz,
    at                  timestamptz NOT NULL DEFAULT clock_timestamp()
) PARTITION BY LIST (slot);
CREATE TABLE inorder.checkpoint_0 PARTITION OF inorder.checkpoint FOR VALUES IN (0);
CREATE TABLE inorder.checkpoint_1 PARTITION OF inorder.checkpoint FOR VALUES IN (1);
CREATE TABLE inorder.checkpoint_2 PARTITION OF inorder.checkpoint FOR VALUES IN (2);
-- A process's newest entry: a backward scan of each partition's index, which stops at the first entry.
CREATE INDEX checkpoint_process_seq_idx ON inorder.checkpoint (process_name, seq);

-- A position written into the row by anything but a processor of this version (a running instance of the
-- version before, hand-written SQL) is numbered at once, so that it outranks every entry before it.
CREATE FUNCTION inorder.number_position() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.position_seq := nextval('inorder.checkpoint_seq');
    RETURN NEW;
END
$$;

CREATE TRIGGER cursor_number_position
    BEFORE UPDATE ON inorder.cursor
    FOR EACH ROW WHEN ((NEW.position_created_at, NEW.position_id) IS DISTINCT FROM
                       (OLD.position_created_at, OLD.position_id)
                       AND NEW.position_seq = OLD.position_seq)
    EXECUTE FUNCTION inorder.number_position();

-- Each process's position as it stands: the newest of its cursor row's and its entries. This is what to
-- read rather than inorder.cursor's own position columns, which a running processor updates only from time
-- to time (at least once per rotation of the tables while it delivers).
CREATE VIEW inorder.position AS
SELECT c.process_name,
       CASE WHEN e.seq IS NULL THEN c.position_created_at ELSE e.position_created_at END AS position_created_at,
       CASE WHEN e.seq IS NULL THEN c.position_id ELSE e.position_id END AS position_id,
       coalesce(e.seq, c.position_seq) AS position_seq,
       coalesce(e.records_handled, c.records_handled) AS records_handled,
       CASE WHEN e.seq IS NULL THEN c.in_flight ELSE e.in_flight END AS in_flight,
       CASE WHEN e.seq IS NULL THEN c.in_flight_since ELSE e.in_flight_since END AS in_flight_since,
       CASE WHEN e.seq IS NULL THEN c.updated_at ELSE e.at END AS updated_at
FROM inorder.cursor AS c
LEFT JOIN LATERAL (
    -- The newest entry: the first of each partition's backward index scan, merged.
    SELECT * FROM inorder.checkpoint AS e
    WHERE e.process_name = c.process_name AND e.seq > c.position_seq
    ORDER BY e.seq DESC LIMIT 1
) AS e ON true;

-- The roles that run processors (they may update cursor rows) append positions and rotate the tables; the
-- roles that read cursor rows (status) read them, and the positions as they stand.
DO $$
DECLARE
    r record;
    t text;
BEGIN
    FOR r IN SELECT DISTINCT a.grantee, a.privilege_type FROM pg_class AS c, aclexplode(c.relacl) AS a
             WHERE c.oid = 'inorder.cursor'::regclass AND a.privilege_type IN ('SELECT', 'UPDATE')
               AND a.grantee <> c.relowner
    LOOP
        FOREACH t IN ARRAY ARRAY['checkpoint', 'checkpoint_0', 'checkpoint_1', 'checkpoint_2'] LOOP
            EXECUTE format('GRANT %s ON inorder.%I TO %s',
                           CASE r.privilege_type WHEN 'UPDATE' THEN 'SELECT, INSERT, TRUNCATE' ELSE 'SELECT' END, t,
                           CASE r.grantee WHEN 0 THEN 'PUBLIC' ELSE r.grantee::regrole::text END);
        END LOOP;
        IF r.privilege_type = 'UPDATE' THEN
            EXECUTE format('GRANT USAGE ON SEQUENCE inorder.checkpoint_seq TO %s',
                           CASE r.grantee WHEN 0 THEN 'PUBLIC' ELSE r.grantee::regrole::text END);
        ELSE
            EXECUTE format('GRANT SELECT ON inorder.position TO %s',
                           CASE r.grantee WHEN 0 THEN 'PUBLIC' ELSE r.grantee::regrole::text END);
        END IF;
    END LOOP;
END
$$;

-- A cursor row registered from now on, by any version, is numbered above every entry already appended, so
-- that a process registered again under a forgotten one's name never takes the forgotten one's entries.
ALTER TABLE inorder.cursor ALTER COLUMN position_seq SET DEFAULT nextval('inorder.checkpoint_seq');

-- The schema's version, for every role: a processor checks at start that the schema is as new as it needs,
-- and a role that runs processors need not read inorder.schema_migration. (Functions may be executed by
-- every role unless revoked.)
CREATE FUNCTION inorder.schema_version() RETURNS integer LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path = pg_catalog
    AS $$ SELECT coalesce(max(version), 0) FROM inorder.schema_migration $$;
