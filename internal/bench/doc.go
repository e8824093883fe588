// Package bench measures inorder's throughput beside the limits of the PostgreSQL server it runs on,
// measured in the same run on the same throwaway cluster, and prints one table of figures and ratios.
//
// Run it with `make bench`. The figures drift with the machine; the ratios to the Postgres limits are
// what to compare between runs and machines:
//
//   - postgres: single-row UPDATE+COMMIT: one connection, autocommit `UPDATE t SET v = v + 1 WHERE id = 1`
//     repeated: the rate of durable commits (fsync on), which bounds a per-record checkpoint.
//   - postgres: UPDATE inside one transaction: the same UPDATE repeated between one BEGIN and one COMMIT:
//     the round trip alone.
//   - postgres: keyset read: 1000-row pages of a 100k-row table read by (created_at, id) through its
//     index, each page after the last row of the one before, scanned into Go values: the rate at which a
//     reader can walk the table, which bounds a per-batch checkpoint.
//   - inorder noop: a processor with a handler that does nothing, over a backlog inserted before it
//     starts, from Run until the cursor row's position is the backlog's last row, with a checkpoint per
//     record and per batch.
//   - pubsub to pstest: the Pub/Sub handler publishing an outbox with ten ordering keys through the real
//     client over gRPC to the in-process fake, with one and with 100 messages in flight.
//
// Each measure gets a fresh database. The package's test (without -bench) runs every measure on a few
// rows, so the benchmark code keeps working; it prints nothing.
package bench
