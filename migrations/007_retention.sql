-- inorder 007: retention (prune) and forgetting a process, both audited.
--
-- prune deletes the rows of a source table that every process reading it has passed; forget deletes a
-- process's cursor rows. The audit table has no foreign key to inorder.cursor, so an entry outlives the
-- cursor row it is about; detail says what such an action did beyond moving a position (the table and the
-- rows prune deleted, the cursor rows forget removed and where they stood).
ALTER TABLE inorder.audit DROP CONSTRAINT audit_action_check;
ALTER TABLE inorder.audit ADD CONSTRAINT audit_action_check
    CHECK (action IN ('skip', 'rewind', 'pause', 'resume', 'repartition', 'prune', 'forget'));
ALTER TABLE inorder.audit ADD COLUMN detail jsonb;

-- A prune batch holds the advisory lock 7597132158521930352 ("inorderp") exclusively while it reads the
-- positions and deletes; whatever could make a process need rows it had passed holds it shared: a process
-- registering its cursor row (this trigger), and a rewind. So a process that appears while a batch runs
-- starts after the batch commits, at the oldest row left, and never sees a row vanish from under it.
CREATE FUNCTION inorder.cursor_wait_for_prune() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_advisory_xact_lock_shared(7597132158521930352);
    RETURN NULL;
END
$$;

CREATE TRIGGER cursor_wait_for_prune
    BEFORE INSERT ON inorder.cursor
    FOR EACH STATEMENT EXECUTE FUNCTION inorder.cursor_wait_for_prune();
