-- inorder 009: ownership that does not depend on a session.
--
-- Which instance works a process used to be a session-level advisory lock, which a pooler in transaction
-- mode hands from client to client with the server connection. Ownership now lives in the cursor row, where
-- any pooler keeps it: the owner's instance name, a lease that the owner renews inside its row-locked batch
-- transactions, and an epoch that grows by one at every change of owner. Every write of a position checks the
-- epoch in the same transaction that holds the row lock, so an instance whose lease another has taken can
-- never write one (fencing).
--
-- owner_session says that the owner also holds the process's session advisory lock on a direct connection:
-- a standby that can take that lock knows the owner's session has ended and need not wait out the lease.
ALTER TABLE inorder.cursor
    ADD COLUMN owner_epoch bigint NOT NULL DEFAULT 0,
    ADD COLUMN owner_instance text,
    ADD COLUMN owner_session boolean NOT NULL DEFAULT false,
    ADD COLUMN owner_since timestamptz,
    ADD COLUMN lease_expires_at timestamptz;
