-- inorder 004: partitioned streams.
ALTER TABLE inorder.cursor
    -- On the parent row of a partitioned process: how many partitions it is split into.
    ADD COLUMN partitions integer CHECK (partitions IS NULL OR partitions >= 1),
    -- On a partition's row: which partition it is, and the key column the split hashes, so that status
    -- measures what is behind in this partition only.
    ADD COLUMN source_key_column text,
    ADD COLUMN source_partition integer,
    ADD COLUMN source_partitions integer;

ALTER TABLE inorder.audit DROP CONSTRAINT audit_action_check;
ALTER TABLE inorder.audit ADD CONSTRAINT audit_action_check
    CHECK (action IN ('skip', 'rewind', 'pause', 'resume', 'repartition'));
