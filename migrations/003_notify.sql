-- inorder 003: the function behind the optional insert-notification trigger of a source table.
-- `inorder migrate --notify TABLE` creates the trigger; processors run with --listen wake at once on it.
CREATE FUNCTION inorder.notify_insert() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    -- One notification per statement; Postgres also folds identical notifications of one transaction
    -- into one, so a burst of inserts wakes a processor once.
    PERFORM pg_notify('inorder', TG_TABLE_SCHEMA || '.' || TG_TABLE_NAME);
    RETURN NULL;
END
$$;
