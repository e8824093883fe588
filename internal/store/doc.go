// Package store owns inorder's own tables (cursor, parked, audit, instance; see package migrations): every
// statement on them and the advisory-lock protocol live here and nowhere else. Its centre is the locking
// protocol of a process's cursor row, which a processor drives: a dedicated connection, ownership through a
// lease in the row, the row locked FOR UPDATE SKIP LOCKED in one short transaction per batch, and the
// position, halt and hold written inside it. Package cursor is what users and operators see of the same
// row; it calls the functions here and writes no SQL on inorder's tables of its own.
//
// # Ownership
//
// Any number of instances may run a process; one works it at a time. Ownership lives in the cursor row, so
// that it holds through any pooler: the owner's instance name, an epoch that grows by one at every change
// of owner (for people), a token drawn at random at every change of owner (for the fence), and a lease.
// Each batch locks the row with SELECT ... FOR UPDATE SKIP LOCKED in a short transaction; inside it the
// owner renews its lease when a third of it has passed, and an instance takes the process when the lease
// has run out (or was given up at a clean stop). Every write of a position checks the token in that same
// row-locked transaction, so an instance whose lease another has taken can never write one. (An epoch can
// be handed out twice: after a failover that lost the commit by which one instance took the process,
// another takes it under the same epoch. A random 64-bit token practically cannot.) A frozen owner is
// replaced once its lease runs out; one frozen inside a transaction first loses it to
// idle_in_transaction_session_timeout, set with SET LOCAL in every cursor transaction.
//
// On a direct connection the owner also holds a session-level advisory lock keyed by the process name, and
// says so in the row (owner_session): a standby that can take that lock knows the owner's session has
// ended (a crash, a killed backend) and takes over at once instead of waiting out the lease. Through a
// pooler no session can be trusted, and the lease alone decides.
//
// # Pooled connections
//
// The connection sends no start-up parameter but application_name, which every pooler accepts; its
// settings are made per transaction. It notices a pooler at connect (the backend process id it was given is
// made up) and transaction pooling when the backend serving it changes between transactions.
//
// # One repository per process and instance
//
// A Store (a processor.Client's, or the default one of processors without a Client) hands out one
// Repository per database, process name and instance name: asking twice gives the same one, and no
// method takes a name, so a repository can only touch its own row.
//
// # Positions
//
// A position is appended to the checkpoint log (inorder.checkpoint), not written into the cursor row,
// so that an old snapshot held elsewhere in the database costs nothing (see checkpoint.go); the view
// inorder.position is where every reader finds it.
//
// # Files
//
// The repository, which the loop drives, is split by job: repository.go (the type, its configuration),
// lease.go (ownership, the lease and the row lock), position.go (positions and the commits that record
// them), checkpoint.go (the checkpoint log and its rotation), failure.go (a failing record's state),
// register.go (registration, the instance's heartbeat, the source it reads), connection.go (its
// connection, dedicated or borrowed, and its deadlines), park.go (parked records). Every other statement
// on inorder's own tables (cursor, checkpoint, parked, audit, instance; see migrations) is here too: the
// operator actions' (operator.go), the status listing's (status.go), the idle probe's and the rotation's
// turns (probe.go), the advisory-lock protocol (locks.go), the schema's version (schema.go), the looks at
// the coordinating sessions of partitioned processes in pg_stat_activity (coordinator.go), and the look at
// who holds the database's xmin horizon, in the catalog views (xmin.go). Each is a function named for what
// it does, returning typed results; no SQL text leaves the package.
package store
