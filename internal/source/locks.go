package source

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inorder-dev/inorder/internal/store"
)

// A row becomes visible when its transaction commits, but its created_at is set earlier. A reader that
// moves its position to 12:00:00.200 skips a row dated 12:00:00.000 whose transaction commits at
// 12:00:00.300. The horizon is the time below which every row that will ever commit is already visible;
// the processor reads only below it.
//
// It is found by watching transactions in pg_locks, which any role may read. What must be watched depends
// on what created_at holds:
//
//   - The time of the insert itself (DEFAULT clock_timestamp()): the writers of the table. A transaction
//     that inserts into a table holds RowExclusiveLock on it from before its created_at default is
//     evaluated (the lock is taken when the statement is parsed or its cached plan revalidated; for COPY
//     when it begins) until the transaction ends. HorizonWriters.
//   - The time its transaction began (now(), current_timestamp, transaction_timestamp()) or its statement
//     began (statement_timestamp()): every transaction of the database that could still insert, because
//     a transaction may work for a long time before it first touches the table, and its rows then carry
//     its start. Every transaction holds an ExclusiveLock on its own virtual transaction id from its
//     start to its end. HorizonTransactions.
//
// A transaction absent from pg_locks at some instant can only create rows dated after that instant. So
// for each transaction in flight the tracker remembers the last poll at which it was not there (not there
// as a writer, for HorizonWriters), and the horizon is the earliest of those instants (and of now), less a
// small guard. A transaction already present at the first poll has no such instant; it holds the horizon
// until it ends. A prepared transaction keeps its virtual transaction id in pg_locks (with no pid) until
// COMMIT PREPARED or ROLLBACK PREPARED, so it stays tracked across PREPARE.
//
// The guard covers clock steps and, for transaction time, the few microseconds between the instant a
// statement arrives (which now() reports for the first statement of a transaction) and the lock on its
// virtual transaction id that the server takes right after.
//
// The poll is stamped with statement_timestamp(), the instant the statement arrived, which is before
// pg_locks is read: a transaction missing from pg_locks took its lock after that instant, so its rows are
// later. (clock_timestamp() would be read after the scan of pg_locks, which takes tens of milliseconds
// when the lock table is crowded; a writer that locked and inserted during the scan would then look absent
// at a time later than its own rows.) The records are read in a later statement, so their snapshot is
// taken after every transaction that the poll saw as gone had committed or rolled back.
//
// Left out of the transactions watched, because they cannot insert into the source:
//   - the processor's own transaction (the poll runs in it);
//   - transactions of other databases (a transaction cannot write to another database's tables);
//   - transactions that hold the no-insert lock (store.NoInsertLockKey, a transaction-level advisory lock
//     held shared): the cursor transactions of processors with a plain handler, which only move their
//     own cursor row, and the idle probe's statements. A processor with a transactional handler writes in its
//     cursor transaction and does not take it, so it is watched. The lock is matched to the transaction by
//     its virtual transaction id, read in the same scan of pg_locks: it ends with the transaction, so no
//     pooler can lend it to a client that did not take it, as a pooler in transaction mode lends a session's
//     application_name to the next client of its server connection;
//   - backends running VACUUM (pg_stat_progress_vacuum, autovacuum included): VACUUM cannot run inside a
//     transaction block, so the transaction it runs in never inserts.
//
// Everything else is watched: a report, pg_dump, a session idle in transaction, a prepared transaction
// that wrote to the source. They hold such a stream, visibly, until they end.
const horizonSQL = `
	WITH l AS MATERIALIZED (
		SELECT locktype, virtualtransaction, pid, database, relation
		FROM pg_locks
		WHERE (locktype = 'relation' AND mode = 'RowExclusiveLock')
		   OR (locktype = 'virtualxid' AND mode = 'ExclusiveLock')
		   OR (locktype = 'advisory' AND mode = 'ShareLock' AND granted AND objsubid = 1
		       AND classid = $3::bigint::oid AND objid = $4::bigint::oid)
	), db AS (
		SELECT oid FROM pg_database WHERE datname = current_database()
	), tree AS (
		-- The source's partitions and the tables it is a partition of, from pg_inherits, which takes no
		-- lock: pg_partition_tree locks every partition, child before parent, and so deadlocks with a
		-- DETACH PARTITION, which locks the parent first.
		WITH RECURSIVE down(relid) AS (
			SELECT $1::oid UNION ALL SELECT i.inhrelid FROM pg_inherits AS i JOIN down ON i.inhparent = down.relid
		), up(relid) AS (
			SELECT $1::oid UNION ALL SELECT i.inhparent FROM pg_inherits AS i JOIN up ON i.inhrelid = up.relid
		)
		SELECT relid FROM down UNION ALL SELECT relid FROM up
	)
	SELECT statement_timestamp(), transaction_timestamp(),
	       (SELECT pg_get_expr(d.adbin, d.adrelid) FROM pg_attrdef AS d WHERE d.adrelid = $1::oid AND d.adnum = $2::int2),
	       (SELECT g.tgenabled IN ('O', 'A') FROM pg_trigger AS g WHERE g.tgrelid = $1::oid AND g.tgname = $5),
	       ` + shapeExpr + `,
	       x.writer, x.vxid, x.pid
	FROM (SELECT 1) AS one
	LEFT JOIN (
		SELECT true AS writer, l.virtualtransaction AS vxid, coalesce(l.pid, 0) AS pid
		FROM l
		WHERE l.locktype = 'relation'
		  AND l.database = (SELECT oid FROM db)
		  AND (l.relation = $1::oid
		       OR l.relation IN (SELECT relid FROM tree))
		  AND l.pid IS DISTINCT FROM pg_backend_pid()
		UNION ALL
		SELECT false, l.virtualtransaction, l.pid
		FROM l LEFT JOIN pg_stat_activity AS a ON a.pid = l.pid
		WHERE l.locktype = 'virtualxid'
		  AND l.pid <> pg_backend_pid()
		  AND (a.datid IS NULL OR a.datid = (SELECT oid FROM db))
		  AND l.virtualtransaction NOT IN (SELECT m.virtualtransaction FROM l AS m WHERE m.locktype = 'advisory')
		  AND l.pid NOT IN (SELECT p.pid FROM pg_stat_progress_vacuum AS p WHERE p.pid IS NOT NULL)
	) AS x ON true`

// Observation is one poll of pg_locks: when it was taken, the created_at column's default, the state of
// the insert clock's trigger and the fingerprint of the table's columns at that moment, and the
// transactions in flight by virtual transaction id: the writers of the source and every transaction
// watched for transaction time, each with its backend pid (0 for a prepared transaction).
type Observation struct {
	Now     time.Time
	TxStart time.Time // the start of the polling transaction
	Default string
	// Clock is whether the insert clock's trigger is there (Clock.There) and fires for ordinary inserts.
	Clock        ClockState
	Shape        string // the fingerprint of the source's columns (see Table.Shape)
	Writers, Txs map[string]int
}

// ClockState is the insert clock's trigger as a poll found it.
type ClockState struct {
	There, Enabled bool
}

// Stamps reports whether the trigger stamps every insert: there and enabled.
func (c ClockState) Stamps() bool { return c.There && c.Enabled }

// PollLocks reads the transactions in flight that matter to t, and the created_at column's default now.
func (t *Table) PollLocks(ctx context.Context, q Querier) (Observation, error) {
	sql, args := t.LocksQuery()
	rows, err := q.Query(ctx, sql, args...)
	if err != nil {
		return Observation{}, fmt.Errorf("read transactions in flight: %w", err)
	}
	defer rows.Close()
	return ScanLocks(rows)
}

// LocksQuery is the statement PollLocks runs, for a caller that sends it with others in one round trip
// and reads its rows with ScanLocks.
func (t *Table) LocksQuery() (string, []any) {
	key := uint64(store.NoInsertLockKey)
	return horizonSQL, []any{t.OID, t.CreatedAtNum, int64(key >> 32), int64(key & 0xffffffff), ClockTrigger}
}

// ScanLocks reads the rows of LocksQuery's statement.
func ScanLocks(rows pgx.Rows) (Observation, error) {
	o := Observation{Writers: map[string]int{}, Txs: map[string]int{}}
	for rows.Next() {
		var def, shape, vxid *string
		var clock, writer *bool
		var pid *int32
		if err := rows.Scan(&o.Now, &o.TxStart, &def, &clock, &shape, &writer, &vxid, &pid); err != nil {
			return Observation{}, fmt.Errorf("read transactions in flight: %w", err)
		}
		if def != nil {
			o.Default = *def
		}
		if clock != nil {
			o.Clock = ClockState{There: true, Enabled: *clock}
		}
		if shape != nil {
			o.Shape = *shape
		}
		if vxid == nil {
			continue
		}
		p := 0
		if pid != nil {
			p = int(*pid)
		}
		if *writer {
			o.Writers[*vxid] = p
		} else {
			o.Txs[*vxid] = p
		}
	}
	if err := rows.Err(); err != nil {
		return Observation{}, fmt.Errorf("read transactions in flight: %w", err)
	}
	return o, nil
}
