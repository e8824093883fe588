-- inorder 014: the insert clock, and the tracking a process's position was taken under.
--
-- An application that writes created_at itself (an ORM's time.Now(), a host whose clock is behind, an
-- event stamped when it was built and inserted later) can date a row earlier than rows a process has
-- already read past, and no horizon over created_at can see that coming. The insert clock is a column,
-- inorder_at, that a BEFORE INSERT trigger calling this function sets to the database's clock at every
-- insert, whatever the insert says; `inorder migrate --table T` (migrations.AddClock) adds the column, the
-- trigger and the index that orders by it to a source table, online. The trigger's argument is when the
-- clock was added (see AddClock). The function needs no privilege of the inserting role: a trigger's
-- function is checked when the trigger is created, not when it fires.
CREATE FUNCTION inorder.insert_clock() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.inorder_at := pg_catalog.clock_timestamp();
    RETURN NEW;
END
$$;

-- What a process found of its source, beside its cursor row: what ordered its position when last recorded
-- (clock, writers or transactions; none before this version), its filter (Source.Where, --where: a
-- boolean expression over the source's columns; NULL for none), which is part of what its position means
-- ("every row up to here that the filter keeps has been handled", so a processor refuses to start with
-- another one), the rows it found committed behind its
-- position after it had passed them (and when the last was found), and what it waits for while its
-- source does not fit it after a migration (a column it needs dropped or renamed). A table of its own, not
-- columns of inorder.cursor: adding a column to inorder.cursor needs its ACCESS EXCLUSIVE lock, which a
-- pg_dump's ACCESS SHARE makes it wait for while every running processor queues behind it; a new table
-- locks nothing that runs. A row is written per tenure or per event, never per record. A process registered
-- anew under a forgotten one's name finds none: forgetting a process deletes it.
CREATE TABLE inorder.source_state (
    process_name text PRIMARY KEY,
    horizon      text,
    filter       text,
    late_rows    bigint NOT NULL DEFAULT 0,
    late_at      timestamptz,
    wait         text
);

-- The roles that run processors (they may update cursor rows) write it; the roles that read cursor rows
-- (status) read it.
DO $$
DECLARE
    r record;
BEGIN
    FOR r IN SELECT DISTINCT a.grantee, a.privilege_type FROM pg_class AS c, aclexplode(c.relacl) AS a
             WHERE c.oid = 'inorder.cursor'::regclass AND a.privilege_type IN ('SELECT', 'UPDATE')
               AND a.grantee <> c.relowner
    LOOP
        EXECUTE format('GRANT %s ON inorder.source_state TO %s',
                       CASE r.privilege_type WHEN 'UPDATE' THEN 'SELECT, INSERT, UPDATE, DELETE' ELSE 'SELECT' END,
                       CASE r.grantee WHEN 0 THEN 'PUBLIC' ELSE r.grantee::regrole::text END);
    END LOOP;
END
$$;
