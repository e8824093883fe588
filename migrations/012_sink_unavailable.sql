-- inorder 012: a sink that refuses every record is unavailable, not halted.
--
-- A refusal about the destination rather than the record (a wrong URL, a revoked key, a missing topic, a
-- sink that does not answer) would meet every record: the stream waits and retries it with backoff, never
-- halts or parks on it, and flows again by itself once the sink accepts. halted_unavailable says what an
-- operator should check ("the URL", "the API key") while the failing record is such a refusal; NULL for a
-- record's own failure (retrying or halted) and when nothing fails.
ALTER TABLE inorder.cursor ADD COLUMN halted_unavailable text;
