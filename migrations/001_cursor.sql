-- inorder 001: the cursor table, one row per named process.
CREATE SCHEMA IF NOT EXISTS inorder;

CREATE TABLE inorder.cursor (
    -- process_name names the stream (for example booking_sms_outbox); any text, stored as a value.
    process_name            text PRIMARY KEY CHECK (length(process_name) BETWEEN 1 AND 200),
    -- The position is the (created_at, id) pair of the last record handled; NULL, NULL is the beginning.
    -- position_id is the id as text so that bigint, uuid and text ids all fit; NULL with a non-NULL
    -- position_created_at means "after every row created at or before that time" (start from now).
    position_created_at     timestamptz,
    position_id             text,
    -- The source the process last ran against, so that status can measure what is behind.
    source_table            text,
    source_id_column        text,
    source_created_at_column text,
    -- Halt state: the record that keeps failing, why, how often and since when.
    halted_record_id        text,
    halted_error            text,
    halted_attempts         integer NOT NULL DEFAULT 0,
    halted_first_failure_at timestamptz,
    halted_last_failure_at  timestamptz,
    -- Horizon hold: the writer backend whose open transaction keeps the stream from moving on.
    held_by_pid             integer,
    held_since              timestamptz,
    created_at              timestamptz NOT NULL DEFAULT clock_timestamp(),
    updated_at              timestamptz NOT NULL DEFAULT clock_timestamp(),
    CHECK (position_id IS NULL OR position_created_at IS NOT NULL)
);

CREATE FUNCTION inorder.set_updated_at() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.updated_at := clock_timestamp();
    RETURN NEW;
END
$$;

CREATE TRIGGER cursor_set_updated_at
    BEFORE UPDATE ON inorder.cursor
    FOR EACH ROW EXECUTE FUNCTION inorder.set_updated_at();
