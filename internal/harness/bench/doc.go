// Package bench measures inorder's throughput, latency and memory beside the limits of the PostgreSQL
// server (and the Go runtime) it runs on, measured in the same run on the same throwaway cluster, and
// prints one table of figures and ratios, headed by a description of the machine and the server.
//
// Run it with `make bench`. The figures drift with the machine; the ratios to the limits are what to
// compare between runs and machines:
//
//   - postgres: single-row UPDATE+COMMIT: one connection, autocommit `UPDATE t SET v = v + 1 WHERE id = 1`
//     repeated: the rate of durable commits (fsync on), which bounds a per-record checkpoint.
//   - postgres: UPDATE inside one transaction: the same UPDATE repeated between one BEGIN and one COMMIT:
//     the round trip alone.
//   - postgres: keyset read: 1000-row pages of a 100k-row table read by (created_at, id) through its
//     index, each page after the last row of the one before, scanned into Go values: the rate at which a
//     reader can walk the table, which bounds a per-batch checkpoint.
//   - postgres: one batch read at 100k and at 1M rows: the processor's kind of query (after a position,
//     below a horizon, 1000 rows) from the middle of the table, the median of 200 reads, the reads of the
//     two tables taking turns; the 1M figure is a ratio to the 100k one (target ≤ 1.2: the read's cost
//     must not grow with the table).
//   - go: time.Sleep(1ms) loop: the most records a second one stream through the 1ms handler can move.
//   - inorder noop: a processor with a handler that does nothing, over a backlog inserted before it
//     starts, from Run until the process's position (inorder.position, where it stands: the cursor row's
//     own columns lag it) is the backlog's last row, with a checkpoint per record and per batch.
//   - inorder catch-up 1M: the same with a checkpoint per batch of 1000 over a backlog of a million rows,
//     and the RSS of the test process meanwhile: VmHWM reset at its start (/proc/self/clear_refs) and
//     read at its end, VmRSS sampled every 50ms besides; the peak (target ≤ 64 MiB) and its growth over
//     the start.
//   - inorder 1ms handler: NewPartitioned over a backlog spread over 1024 keys, with 1, 4 and 16
//     partitions, in one instance and in two (two runners in this process, each its own
//     instance name), a handler sleeping 1ms per record, checkpoint per batch; ratios to one partition in
//     one instance (target ≥ 2.5 with 4 partitions in one instance). The notes give the speedup the
//     spread of the keys over the partitions allows.
//   - inorder latency: while one writer inserts single rows at 1000 a second for 5s, the time from each
//     row's COMMIT returning in the writer to the handler being called with it, p50 and p99, with a
//     checkpoint per record, polling every 200ms, and with the insert trigger and Listen (targets: p50 ≤
//     10ms, p99 ≤ 50ms). In the NOTIFY run a listener of the test's own gives Postgres' own delivery
//     time. The notes split the latency at the read that brought the row and give the checkpoints'
//     durations, the WAL flushes per row and how busy the machine was.
//   - pubsub to pstest: the Pub/Sub handler publishing an outbox with ten ordering keys through the real
//     client over gRPC to the in-process fake, with one and with 100 messages in flight.
//   - kafka to kfake: the Kafka handler producing an outbox spread over 64 keys with franz-go to kfake, an
//     in-process cluster speaking the Kafka protocol, with one record in flight and with the keyed window
//     of 64, beside plain franz-go clients producing the same records to the same cluster, one record at a
//     time each: one of them, and 64 at once.
//   - fleet: the connections and memory of 1, 10 and 50 processes, each on a table of its own, in one
//     instance of `inorder run --config` (the binary built by the benchmark): owning them, idle once every
//     one has caught up and busy while a row goes into every table every 100ms, and standing by (the same
//     file as a second instance, started once the first owns everything). Connections are the most
//     sessions pg_stat_activity shows at once named "inorder…@<instance>", read every 25ms for 3s; memory is
//     the VmRSS of the OS process at the end of that time (target: connections ≤ --max-conns, 4). The
//     references are the same processes as 1 and 10 `inorder run` OS processes of one process each, as a
//     process ran before --config (50 OS processes are too heavy for a 2-CPU machine), their connections
//     counted and their VmRSS summed; 50 processes in one instance are compared with 1.
//   - 1ms RTT: through one TCP proxy on loopback (internal/harness/tcpproxy) adding 0.5ms each way, a round trip
//     of a client and a server in one cloud region: the keyset read, the single-row commit and the same
//     commit with synchronous_commit off (one round trip each) as limits; the stdout handler writing to a
//     file, with the default batch size, against the keyset read with a checkpoint per batch (target ≥
//     0.5) and against the asynchronous commit with a checkpoint per record (target ≥ 0.9); the webhook
//     run of 64 in flight against the same run on loopback (target ≥ 0.95). The notes give the round
//     trips per batch and per record that the proxy counted.
//   - big rows: an outbox whose payload column holds JSON documents (orders of line items built by the
//     server, internal/harness/jsondoc, compressing about 2x with pglz as documents do): 1,500 rows of 1
//     MiB, 300 of 5 MiB, and one of 200 MiB amid 1,000 of 1 KiB, each table in a fresh database, drained
//     by the binary built by the benchmark (`inorder run --start-from beginning --checkpoint record` and
//     `batch` for 1 MiB, batch for the others, the CLI's defaults otherwise, and the flags in
//     $INORDER_BENCH_BIG_ARGS, to compare settings) with the stdout handler writing to a pipe this process
//     reads, every line checked to deliver the next record in (created_at, id) order or one delivered
//     before; timed from the start of the OS process until inorder.position holds the last row (at most 4
//     minutes; what was delivered by then counts, and the notes say so). Beside it, the rate of a keyset
//     read of the same rows in the same database (every column, 100-row pages, the CLI's first batch;
//     target ≥ 0.5); the OS process's peak RSS, VmHWM read at the end of the drain (target ≤ 128 MiB; for
//     the 200 MiB row ≤ 3x its JSON); and the reads cut off, lines of its log saying that the database did
//     not answer in time or that it is reconnecting (target 0).
//   - snapshot held: two fresh databases at once, one of them with a snapshot held as pg_dump holds one
//     (a REPEATABLE READ, READ ONLY transaction that has read the catalog, then LOCK TABLE ... IN ACCESS
//     SHARE MODE on every table of the database, inorder's own included) from before the rows flow until
//     the bursts are drained; the other is the reference. In each, one process with the CLI's defaults but
//     for the checkpoint delivers single rows inserted at 1,000 a second for 30s by five writers (a key
//     always on the same one), its position advancing under the snapshot; then bursts, each inserted in one
//     statement, the databases taking turns, each timed from its commit until inorder.position holds its
//     last row, the median counting: 3 of 20,000 rows with default flags (a checkpoint per record) and 5 of
//     200,000 with a checkpoint per batch, each a ratio to the same without the snapshot (target ≥ 0.8).
//     Default-flags latency (as in the latency lines) over the flow's last 10s, held over not. inorder's
//     tables in all (pg_total_relation_size of inorder.cursor, checkpoint_0 to 2, the partitions the
//     rotation attaches for turns while a pg_dump holds those, instance, parked and audit), sampled every
//     second: the most while the snapshot is held (target ≤ 16 MiB), then once it has
//     ended and a VACUUM ran, and once the processes have stopped and the rotation's steps have emptied the
//     checkpoint tables, vacuumed (target: no more than the clean run's). The notes give what VACUUM
//     (VERBOSE) of inorder.cursor found not yet removable at the end of the hold, the checkpoint tables'
//     entries and truncations, whether the rotation's lock could be had on them, and pg_stat_user_tables.
//     Every row must be delivered once, in order per key, or the measure fails.
//   - prune beside a stream: two databases at once, one with pg_dump's hold throughout, each with a
//     process with default flags started after a 300,000-row backlog; rows flow at 1,000 a second, and
//     after 8s cursor.Prune deletes each backlog, the two at once, while they keep flowing: the latency of
//     the rows committed while it runs over that of the rows before it, and held over not; and, with the
//     snapshot held, the processor's read from the stream's position after the prune over the same read
//     before it (the notes give EXPLAIN (ANALYZE, BUFFERS) of both).
//   - pgq: PgQ's consumer (the pgq extension, Debian's postgresql-NN-pgq3) over a queue of 100,000 events
//     in ticks of 1,000: per batch one transaction of next_batch, get_batch_events (every column scanned
//     into Go values, then dropped) and finish_batch, from one pgx connection. In turns with it, the noop
//     processor's drain of the same backlog with a checkpoint per batch of 1000, and `inorder run
//     --checkpoint batch --batch-size 1000` (the binary built by the benchmark) writing to /dev/null, the
//     median of three each, each a ratio to PgQ (targets ≥ 1.0 and ≥ 0.8). Without the extension on the
//     server the lines are left out, and the benchmark says which package provides it.
//
// The long scenarios run only with INORDER_BENCH_LONG=1 (`make bench-long`, about 22 minutes), each side on
// a database of its own, all at once:
//
//   - long: pg_dump's hold for 5 minutes while rows flow at 300 a second into the tables of two processes,
//     one with default flags and one with a checkpoint per batch; then bursts of 20,000 rows into each (3,
//     and 5 with a checkpoint per batch), the median a ratio to the same without the hold (target ≥ 0.8);
//     every row delivered once, in order per key; the latency of each minute; then a minute more of rows
//     after the hold, in which every checkpoint table should be emptied at its turn.
//   - long, sizes: 10 minutes at 1,000 records a second with default flags, with no hold, with pg_dump's
//     hold, and with a REPEATABLE READ snapshot that locks nothing: inorder's tables at most over the hold
//     (target ≤ 16 MiB: pg_dump's lock keeps the rotation's TRUNCATE from every checkpoint table, which then
//     grows by an entry per record, so only the snapshot alone can meet it), and once the processes have
//     stopped and the rotation's steps have emptied the checkpoint tables, vacuumed, over the clean run's.
//   - long, pg_dump: 2 minutes of a real pg_dump (/usr/lib/postgresql/*/bin/pg_dump of the database, its
//     output unread, so that it blocks holding its snapshot and locks) beside the transaction that stands
//     for it: the checkpoint tables' growth per entry under each.
//
// Each measure gets a fresh database. The package's test (without -bench) runs every measure on a few
// rows, so the benchmark code keeps working; it prints nothing.
package bench
