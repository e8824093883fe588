-- inorder 006: a structured halt state, and the records in flight.
--
-- Whether the sink refused the record for good (permanent) or the failure may pass (retryable), the
-- sink's own status code where it has one (an HTTP status), and when the next attempt is due, so that
-- status and operators need not parse the error text.
--
-- With a keyed window, how many records were in flight at the last checkpoint and since when the oldest
-- of them has been.
ALTER TABLE inorder.cursor
    ADD COLUMN halted_permanent boolean NOT NULL DEFAULT false,
    ADD COLUMN halted_status integer,
    ADD COLUMN halted_next_attempt_at timestamptz,
    ADD COLUMN in_flight integer NOT NULL DEFAULT 0,
    ADD COLUMN in_flight_since timestamptz;
