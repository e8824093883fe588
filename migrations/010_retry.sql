-- inorder 010: retry, an operator action that ends the backoff of a retrying or halted stream at once, is
-- audited like the others.
ALTER TABLE inorder.audit DROP CONSTRAINT audit_action_check;
ALTER TABLE inorder.audit ADD CONSTRAINT audit_action_check
    CHECK (action IN ('skip', 'rewind', 'pause', 'resume', 'repartition', 'prune', 'forget', 'retry'));
