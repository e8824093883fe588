-- inorder 009: ownership that does not depend on a session.
--
-- Which instance works a process used to be a session-level advisory lock, which a pooler in transaction
-- mode hands from client to client with the server connection. Ownership now lives in the cursor row, where
-- any pooler keeps it: the owner's instance name, a lease that the owner renews inside its row-locked batch
-- transactions, an epoch that grows by one at every change of owner (for people), and a token drawn at random
-- at every change of owner (for the fence: an epoch can be handed out twice, after a failover that lost the
-- taking of the process, or a forget and a new registration; a 64-bit random token practically cannot). Every
-- write of a position checks the token in the same transaction that holds the row lock, so an instance whose
-- lease another has taken can never write one (fencing).
--
-- owner_session says that the owner also holds the process's session advisory lock on a direct connection:
-- a standby that can take that lock knows the owner's session has ended and need not wait out the lease.
ALTER TABLE inorder.cursor
    ADD COLUMN owner_epoch bigint NOT NULL DEFAULT 0,
    ADD COLUMN owner_token bigint NOT NULL DEFAULT 0,
    ADD COLUMN owner_instance text,
    ADD COLUMN owner_session boolean NOT NULL DEFAULT false,
    ADD COLUMN owner_since timestamptz,
    ADD COLUMN lease_expires_at timestamptz;

-- Every running instance of a process, owner or standby, says it is there in a row of its own, renewed at
-- a third of its lease and removed when it stops: status counts the instances, and forget refuses while
-- one runs, through any pooler (a pooler hides which session is whose). A row whose seen_until has passed
-- is an instance that vanished.
CREATE TABLE inorder.instance (
    process_name text NOT NULL,
    instance     text NOT NULL,
    seen_until   timestamptz NOT NULL,
    PRIMARY KEY (process_name, instance)
);

-- The roles that run processors may write their cursor rows: let them say they run, too, so that an upgrade
-- keeps a least-privileged role working.
DO $$
DECLARE
    r record;
BEGIN
    FOR r IN SELECT DISTINCT a.grantee FROM pg_class AS c, aclexplode(c.relacl) AS a
             WHERE c.oid = 'inorder.cursor'::regclass AND a.privilege_type = 'UPDATE' AND a.grantee <> c.relowner
    LOOP
        IF r.grantee = 0 THEN
            GRANT SELECT, INSERT, UPDATE, DELETE ON inorder.instance TO PUBLIC;
        ELSE
            EXECUTE format('GRANT SELECT, INSERT, UPDATE, DELETE ON inorder.instance TO %s', r.grantee::regrole);
        END IF;
    END LOOP;
END
$$;
