-- inorder 006: a structured halt state. Whether the sink refused the record for good (permanent) or the
-- failure may pass (retryable), the sink's own status code where it has one (an HTTP status), and when
-- the next attempt is due, so that status and operators need not parse the error text.
ALTER TABLE inorder.cursor
    ADD COLUMN halted_permanent boolean NOT NULL DEFAULT false,
    ADD COLUMN halted_status integer,
    ADD COLUMN halted_next_attempt_at timestamptz;
