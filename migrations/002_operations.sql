-- inorder 002: operator actions (pause, skip, rewind) with an audit trail, and a throughput window.
ALTER TABLE inorder.cursor
    -- paused stops the process at its next batch until resumed; the position does not move.
    ADD COLUMN paused boolean NOT NULL DEFAULT false,
    -- records_handled counts advances; the window columns keep the count a minute or two ago, so status
    -- can tell the throughput of the last minute without a time series.
    ADD COLUMN records_handled bigint NOT NULL DEFAULT 0,
    ADD COLUMN window_records bigint NOT NULL DEFAULT 0,
    ADD COLUMN window_started_at timestamptz NOT NULL DEFAULT clock_timestamp();

-- Every operator action on a cursor, written in the same transaction as the change it records.
CREATE TABLE inorder.audit (
    id           bigserial PRIMARY KEY,
    at           timestamptz NOT NULL DEFAULT clock_timestamp(),
    process_name text NOT NULL,
    action       text NOT NULL CHECK (action IN ('skip', 'rewind', 'pause', 'resume')),
    db_role      text NOT NULL DEFAULT current_user,
    actor        text NOT NULL,
    reason       text NOT NULL,
    record_id    text,
    position_before jsonb,
    position_after  jsonb
);
CREATE INDEX audit_process_at_idx ON inorder.audit (process_name, at);
