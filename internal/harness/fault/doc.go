// Package fault is inorder's fault suite: it breaks processors while they work and checks that nothing
// is lost, reordered or skipped. It has no code of its own; everything is in its tests.
//
// Every scenario runs the real `inorder` binary (built once per test run) as child processes against a
// real PostgreSQL server, delivering through the webhook handler to a real HTTP receiver that records
// every request. Writers run all along: several goroutines, each transaction locking a random aggregate
// row (SELECT ... FOR UPDATE), inserting one to three events with that aggregate's next sequence numbers
// and updating the aggregate; some commit late (50–500ms after their inserts), some roll back. Then a
// fault is injected, again and again, while they write:
//
//   - sigkill: the instance that owns the process is killed with SIGKILL at random points and started
//     again each time, with a second instance standing by, so that takeover happens at every kill;
//   - terminate_backend: the processor's cursor backend is ended with pg_terminate_backend, preferably
//     mid-batch; the same child must reconnect by itself and go on;
//   - server_restart: the PostgreSQL server (a cluster of the scenario's own) is stopped with a fast
//     shutdown and started again; processors must reconnect with backoff and never exit, and writers
//     retry, resolving any transaction whose COMMIT went unanswered, so the committed set is exact;
//   - sigterm_in_flight: SIGTERM reaches the child while the receiver holds a request open; the child must
//     exit 0 with the record in flight either recorded in the position or delivered again after restart;
//   - frozen_owner: the owner is frozen with SIGSTOP (while its handler call is in flight, or anywhere)
//     for longer than its lease and idle timeout (PostgreSQL ends the session of one frozen holding the
//     cursor row; the lease of one frozen between batches runs out), and the standby takes over within
//     that bound; then it is thawed with SIGCONT, and no write of the thawed instance may land on the
//     cursor row after the standby's first;
//   - pooled_transaction and pooled_session: the children and the writers go through a real PgBouncer
//     (the Debian package) with its default configuration; `inorder migrate` runs from four instances at
//     once on the empty database, then the owner is killed with SIGKILL again and again, a standby taking
//     over once the killed owner's lease (--lease 2s) has run out, within the lease and a poll interval;
//   - failover: a primary and an asynchronous streaming standby of the scenario's own, every connection
//     with a multi-host URL and target_session_attrs=read-write; replication is cut, the processors deliver
//     rows only the primary has, the primary stops at once and the standby is promoted; the children must
//     go on there by themselves and name every delivered record the failover took back;
//   - dead_connection: the children, two of each stream, reach PostgreSQL through a TCP proxy
//     (internal/harness/tcpproxy) which, while they deliver, makes every connection open through it dead for good, as a NAT or a load balancer that
//     forgot them does: it takes the bytes of both sides and passes nothing on, the sockets stay open, and
//     new connections pass. With the suite's usual flags, delivery must resume by itself within 20s of the
//     cut (a row committed after it delivered), and the owner log within that time that its connection is
//     lost; no delivery may be made by an instance the cursor row does not name as owner;
//   - busy_owner_cut: the owner works through a backlog of a few thousand rows, the receiver answering
//     each in 20ms (--checkpoint batch, --lease 10s), through a TCP proxy whose connections then go dead
//     for good, as above, while a standby connects directly; the standby must deliver within 15s of the
//     cut, and the old owner deliver nothing once it has taken over (each instance posts to a path of its
//     own, so the receiver knows who sent what). The full form runs it on both horizons;
//   - crowded_lock_table: no fault but a crowded lock table on the scenario's own cluster (another session
//     holds 20,000 advisory locks, as a pg_dump of a large schema or a query over thousands of partitions
//     does), so that reading pg_locks takes tens of milliseconds; nothing may be lost;
//   - upgrade: the version before the newest migration, built from the repository's history (the parent of
//     the commit that added the migration, kept in bin/previous/<commit>; a shallow clone fails the scenario
//     with a line saying to fetch the history), migrates an empty database and delivers; this version must
//     refuse that schema in one line naming both versions. This version's `inorder migrate` then runs
//     while the older instances deliver and a session holds ACCESS SHARE on every table, as a pg_dump
//     does: migrate must give up waiting for its lock at least once and finish once the lock is released,
//     and the instances must never stall much longer than its lock timeout and go on delivering rows
//     written after it. Then the
//     owner is replaced four times, the next instance standing by first: by this version with SIGTERM,
//     back to the older with SIGTERM, forward again, and back to the older with SIGKILL. A clean handover
//     must deliver nothing again in either direction; after the kill, the older version (which reads
//     only the cursor row) may deliver again only records the killed instance delivered after its
//     position was last folded into the row;
//   - held_snapshot: the scenario's own cluster holds an old snapshot (21s; 3 minutes in the full form), so
//     that vacuum may remove no row version newer than it: a session idle in a REPEATABLE READ transaction
//     that has read the source, for the first two thirds, and a prepared transaction that wrote a row
//     (PREPARE TRANSACTION; the cluster runs with max_prepared_transactions), for the last two, each alone
//     for a third; the prepared transaction is committed at the end, or rolled back by the test's cleanup
//     whatever happened. A witness (a row updated in a table of its own) proves the hold: VACUUM finds its
//     old versions not yet removable at the end of each holder's third alone, and removes them after. Bursts
//     of rows on top of the writers keep the stream busy (a new one while at most two wait to be delivered).
//     During the hold the source is pruned (`inorder prune`), the receiver refuses one key's records so that
//     the stream (--on-halt park) parks the key, a second prune must keep the parked rows, the operator
//     redrives the key (`inorder redrive`), and `inorder status --json` and the console are read; each is
//     timed (5s for status and the console, 10s for a prune or a redrive). The parked records must be
//     delivered after the redrive, in the order they were parked. inorder.cursor, instance and audit may grow
//     by at most 192KB, 64KB and 64KB during the hold, parked by 2KB a parked record, and the checkpoint
//     tables hold at most 256 bytes a record delivered in the last 80s; beside the stream, a copy of its
//     cursor row updated once per record (the design before the checkpoint log, a row version per record)
//     must pass the cursor's bound, else the bound could not tell the designs apart. A lookup of the
//     process's position (inorder.position) or its instances may read at most twice as many pages at the end
//     of the hold as at its start, and 32 more. The stream's rate in the last third of the hold, and the rate
//     at which it delivers a backlog late in the hold, must be at least a third of those early in it. The
//     full form checks that a checkpoint table was truncated during the hold. There is no stream on the
//     transactions horizon, which waits for the held transaction by design.
//   - big_rows: beside the writers' rows, backlogs of rows whose payload carries a JSON document (128 KiB in
//     the short form, 1 MiB in the full one; internal/harness/jsondoc), the streams reading 5 rows a
//     batch; right after a checkpoint has moved the position amid a backlog's documents, the cursor backend
//     is ended, every other round at once and every other round once the receiver holds the next record;
//     the child must reconnect and go on. Beyond the checks below, no record may be sent again once a
//     position that covers it was durable (the position polled before the delivery arrived): after a lost
//     connection a processor may deliver again only what lies after the position at the moment of the loss.
//     Each loss logs how many records it had sent again. Its children's timeouts are generous (25s for the
//     handler), so that only the losses it makes send anything again.
//
// When the writers have stopped and the position has reached the last committed row, each stream is
// checked: every committed row delivered at least once and no rolled-back one ever; first deliveries in
// the stream's global order, by the insert clock or by created_at, then id (but for a parked key's, which
// come after the redrive) and so, per
// aggregate, in increasing sequence; redeliveries at most
// one per injected crash with `--checkpoint record` and one batch per crash with `--checkpoint batch`;
// the durable position (polled, and logged by a trigger on every committed write of the cursor row) never
// going back and never ahead of what the receiver had received; one owner at a time (every committed write
// of the cursor row made by the instance the row names as owner, under an epoch that never goes back, but
// for the rotation's and an operator's writes that move no position). Each stream prints one line:
//
//	faults: sigkill/sigkill_record writes=1534 delivered=1534 lost=0 redelivered=7 reorders=0 crashes=8
//
// The events table has the insert clock (`inorder migrate --table events`), and the streams on the default
// horizon read it in the clock's order. The streams on `--horizon transactions`, which waits for every
// transaction of the database instead, read by created_at a copy of events without the clock, which a
// trigger writes in each inserting transaction, since a table with the clock refuses that opt-in. In
// upgrade, whose version before knows no clock, events has none and both versions read it by created_at
// with `--horizon writers`.
//
// `make test` runs the short form (one stream per scenario, a few faults each; sigkill and
// crowded_lock_table on the transactions horizon; upgrade with one stream of each checkpoint mode). `make
// faults` sets INORDER_FAULTS=full: more faults, longer writers, both checkpoint modes and both horizons in
// every scenario (held_snapshot: the clock only), and the binary built with the race detector
// (the version before, in upgrade, without).
package fault
