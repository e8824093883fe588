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

-- What ordered the process's position when it was last recorded: clock, writers or transactions (NULL
-- before this version). A process that takes up the clock after reading by created_at moves its position
-- back to when the clock was added, since rows inserted since may be dated before it by created_at.
ALTER TABLE inorder.cursor ADD COLUMN source_horizon text;

-- Rows a processor found committed behind its position after it had passed them: with the insert clock
-- none should ever be, so each is counted here (and logged, with where it lies) rather than passed in
-- silence. late_at is when the last was found.
ALTER TABLE inorder.cursor ADD COLUMN late_rows bigint NOT NULL DEFAULT 0;
ALTER TABLE inorder.cursor ADD COLUMN late_at timestamptz;

-- What a stream waits for while its source table does not fit it after a migration (a column it needs
-- dropped or renamed), and what to do; NULL while it reads.
ALTER TABLE inorder.cursor ADD COLUMN source_wait text;
