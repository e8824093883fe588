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
--
-- A pg_dump locks only the tables that exist when it starts, for its whole length. So when it holds the
-- slot the clock names and that slot has grown past a few megabytes, the rotation attaches a fresh
-- partition (a turn, numbered from 3 up) and makes it current in the clock's place, and then takes turns
-- among such partitions, which no dump holds and which it can truncate, until the dump ends; it then gives
-- the turn back to the clock and drops them once they are empty. Creating, attaching and dropping
-- partitions needs the parent's owner, so the roles that run processors do it through the SECURITY DEFINER
-- functions below.
CREATE SEQUENCE inorder.checkpoint_seq;

-- The turn that overrides the clock: none while is_called is false (the clock names the slot), else
-- last_value names it. A sequence, not a row, because its value is overwritten in place: setting it adds
-- no row version for a held snapshot to keep, and reading it walks none. Every role may read it, as every
-- insert into inorder.checkpoint does; only the functions below set it.
CREATE SEQUENCE inorder.checkpoint_turn AS smallint MINVALUE 0 START 0;
GRANT SELECT ON SEQUENCE inorder.checkpoint_turn TO PUBLIC;

ALTER TABLE inorder.cursor ADD COLUMN position_seq bigint NOT NULL DEFAULT 0;

-- The slot current now: the turn, when one overrides the clock and its partition exists, else the slot the
-- database's clock names. Every instance, whatever its version, agrees on it. The partition is looked for
-- because a sequence's value is not read under a dump's snapshot: a dump taken during a turn restores it,
-- without the partition created after the dump began, and every insert would then fail.
CREATE FUNCTION inorder.checkpoint_slot() RETURNS smallint LANGUAGE sql VOLATILE
    AS $$ SELECT CASE WHEN t.is_called AND to_regclass('inorder.checkpoint_' || t.last_value) IS NOT NULL
                      THEN t.last_value::smallint
                      ELSE (floor(extract(epoch FROM clock_timestamp()) / 10)::bigint % 3)::smallint END
          FROM inorder.checkpoint_turn AS t $$;

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

-- inorder.checkpoint_new_turn() attaches a fresh partition, for the smallest slot from 3 up that has none,
-- and returns its slot; NULL when another rotation is changing the turns (the advisory lock, whose key
-- spells "inorderT") or when 16 partitions are attached already. It never waits for a lock: the table is
-- created first and then attached, which takes SHARE UPDATE EXCLUSIVE on the parent and its partitions,
-- compatible with the ACCESS SHARE of a pg_dump and the ROW EXCLUSIVE of the inserts, and taken with
-- NOWAIT (lock_not_available when something else holds it).
CREATE FUNCTION inorder.checkpoint_new_turn() RETURNS smallint LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog SET lock_timeout = '100ms'
    AS $$
DECLARE
    n smallint := 3;
    t text;
    g record;
BEGIN
    IF NOT pg_try_advisory_xact_lock(7597132158521930324)
       OR (SELECT count(*) FROM pg_inherits WHERE inhparent = 'inorder.checkpoint'::regclass) >= 16 THEN
        RETURN NULL;
    END IF;
    WHILE to_regclass(format('inorder.checkpoint_%s', n)) IS NOT NULL LOOP
        n := n + 1;
    END LOOP;
    t := format('inorder.%I', 'checkpoint_' || n);
    LOCK TABLE inorder.checkpoint IN SHARE UPDATE EXCLUSIVE MODE NOWAIT;
    EXECUTE format('CREATE TABLE %s (LIKE inorder.checkpoint INCLUDING DEFAULTS)', t);
    EXECUTE format('CREATE INDEX ON %s (process_name, seq)', t);
    -- The grants of the first partition, so that whoever may truncate it may truncate this one.
    FOR g IN SELECT a.grantee, a.privilege_type FROM pg_class AS c, aclexplode(c.relacl) AS a
             WHERE c.oid = 'inorder.checkpoint_0'::regclass AND a.grantee <> c.relowner LOOP
        EXECUTE format('GRANT %s ON %s TO %s', g.privilege_type, t,
                       CASE g.grantee WHEN 0 THEN 'PUBLIC' ELSE g.grantee::regrole::text END);
    END LOOP;
    EXECUTE format('ALTER TABLE inorder.checkpoint ATTACH PARTITION %s FOR VALUES IN (%s)', t, n);
    RETURN n;
END
$$;

-- inorder.checkpoint_set_turn(n) makes slot n current in the clock's place, or gives the turn back to the
-- clock when n is NULL; it refuses (false) a slot with no partition, which would make every insert fail,
-- and returns false when another rotation is changing the turns.
CREATE FUNCTION inorder.checkpoint_set_turn(n smallint) RETURNS boolean LANGUAGE plpgsql VOLATILE
    SECURITY DEFINER SET search_path = pg_catalog
    AS $$
BEGIN
    IF NOT pg_try_advisory_xact_lock(7597132158521930324) THEN
        RETURN false;
    END IF;
    IF n IS NULL THEN
        PERFORM setval('inorder.checkpoint_turn', 0, false);
        RETURN true;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_inherits WHERE inhparent = 'inorder.checkpoint'::regclass
                   AND inhrelid = to_regclass(format('inorder.%I', 'checkpoint_' || n))) THEN
        RETURN false;
    END IF;
    PERFORM setval('inorder.checkpoint_turn', n, true);
    RETURN true;
END
$$;

-- inorder.checkpoint_drop_turn(n) drops slot n's partition, one checkpoint_new_turn() attached, when it
-- is empty and not current, and reports whether it did. Dropping a partition takes ACCESS EXCLUSIVE on
-- the parent, which every insert and a pg_dump conflict with: it is taken with NOWAIT, so that nothing
-- queues behind it, and it is simply tried again later (false).
CREATE FUNCTION inorder.checkpoint_drop_turn(n smallint) RETURNS boolean LANGUAGE plpgsql VOLATILE
    SECURITY DEFINER SET search_path = pg_catalog SET lock_timeout = '100ms'
    AS $$
DECLARE
    t regclass := to_regclass(format('inorder.%I', 'checkpoint_' || n));
    empty boolean;
BEGIN
    IF n < 3 OR t IS NULL OR NOT pg_try_advisory_xact_lock(7597132158521930324)
       OR NOT EXISTS (SELECT 1 FROM pg_inherits WHERE inhparent = 'inorder.checkpoint'::regclass AND inhrelid = t)
       OR (SELECT is_called AND last_value = n FROM inorder.checkpoint_turn) THEN
        RETURN false;
    END IF;
    BEGIN
        LOCK TABLE inorder.checkpoint IN ACCESS EXCLUSIVE MODE NOWAIT;
        EXECUTE format('LOCK TABLE %s IN ACCESS EXCLUSIVE MODE NOWAIT', t);
    EXCEPTION WHEN lock_not_available THEN
        RETURN false;
    END;
    EXECUTE format('SELECT NOT EXISTS (SELECT 1 FROM %s)', t) INTO empty;
    IF NOT empty THEN
        RETURN false;
    END IF;
    EXECUTE format('DROP TABLE %s', t);
    RETURN true;
END
$$;
REVOKE ALL ON FUNCTION inorder.checkpoint_new_turn(), inorder.checkpoint_set_turn(smallint),
    inorder.checkpoint_drop_turn(smallint) FROM PUBLIC;

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

-- The roles that run processors (they may update cursor rows) append positions, rotate the tables and
-- attach and drop partitions for turns; the roles that read cursor rows (status) read them, and the
-- positions as they stand.
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
            EXECUTE format('GRANT EXECUTE ON FUNCTION inorder.checkpoint_new_turn(), '
                           'inorder.checkpoint_set_turn(smallint), inorder.checkpoint_drop_turn(smallint) TO %s',
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
