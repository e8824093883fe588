-- inorder 008: retrying and halted, two states.
--
-- A record that fails is first retried with backoff: the stream is retrying, which a one-second blip at
-- the sink should not turn into a page. halted_at is when the stream counted as halted instead: at once
-- for a refusal the sink says is permanent, or once the record has failed for longer than the
-- processor's HaltAfter. NULL while retrying (or not failing at all).
ALTER TABLE inorder.cursor ADD COLUMN halted_at timestamptz;

-- Streams halted before this migration were halted in the old sense: keep them halted.
UPDATE inorder.cursor SET halted_at = halted_last_failure_at WHERE halted_record_id IS NOT NULL;
