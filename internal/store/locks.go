package store

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"regexp"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// The advisory-lock protocol: which lock keys exist, who holds each, and what taking one tells.
//
//   - LockKey(process), session-level, exclusive: the owner of a process on a direct connection holds it
//     between batches and says so in its row (owner_session); a standby that finds no session holding it
//     knows the owner's session ended. Forget takes it (transaction-level) to refuse while one runs.
//   - InstancesLockKey(process), session-level, shared: every running instance of a partitioned process
//     holds it on its coordinating connection (HoldInstances). Repartition and Forget take it
//     exclusively (transaction-level, without waiting) to refuse while an instance runs.
//   - NoInsertLockKey, transaction-level, shared: a transaction that inserts into no source table says so
//     (package source's horizon leaves such transactions out).
//   - PruneLockKey, transaction-level: a prune batch holds it exclusively (LockForPrune); a process
//     registering its cursor row (a trigger, migration 7) and a rewind hold it shared (HoldOffPrune).
//   - TurnLockKey, transaction-level, exclusive: whatever changes the checkpoint log's turns holds it (the
//     rotation's turn step, and migration 13's functions that attach, drop and name partitions), so that
//     two instances' probers never change them at once.
//
// The keys are defined here, and so is every statement whose purpose is to take or release one of them
// (the functions below). Four statements of this package also take one as a part of a larger statement,
// so that it costs no round trip of its own:
//
//   - the cursor transaction's row lock (lockStatement, lock.go) takes the no-insert lock unless
//     the transaction carries a handler's writes;
//   - the look at a vacant lease (Lease.vacant, lease.go) tries the owner's lock, in the
//     statement that reads the lease, when the lease says its owner held it on a session that may be gone;
//   - the claim (Lease.claim, lease.go) tries the owner's lock in the UPDATE that records
//     owner_session;
//   - the idle probe's statement (Prober.probe, probe.go) takes the no-insert lock (probeNoInsert).
//
// Outside this package, migration 7's trigger takes PruneLockKey shared, with the key as a literal; and
// migrations.Migrate serialises concurrent migrations with a transaction-level lock of its own, which is
// no part of this protocol.

// Querier is what the owner's statements run on: a *pgx.Conn, a pgx.Tx or a pool.
type Querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// LockKey is the key of the session-level advisory lock that makes an instance the owner of process name
// between batches: 64 bits of a SHA-256 of the name, so distinct names practically never share a key.
// pg_locks shows it as classid = key>>32, objid = key&0xffffffff, objsubid = 1.
func LockKey(name string) int64 {
	sum := sha256.Sum256([]byte("inorder.cursor:" + name))
	return int64(binary.BigEndian.Uint64(sum[:8]))
}

// InstancesLockKey is the key of the advisory lock that every running instance of partitioned process
// name holds shared on its coordinating connection, from before it checks the partition count until it
// stops. Repartition takes it exclusively: an instance between two partitions owns none of their locks,
// but holds this one.
func InstancesLockKey(name string) int64 { return LockKey(name + "#instances") }

// NoInsertLockKey is the key of the transaction-level advisory lock that every cursor transaction of a
// processor with a plain handler holds shared, and the probe's statements too: it says "this transaction
// inserts into no source table". The transactions horizon leaves such transactions out (see package
// source). A transaction-level lock ends with its transaction, so no pooler can lend it to a client that
// did not take it, as it can a session's application_name. Its value spells "inorderN"; pg_locks shows it
// as classid = key>>32, objid = key&0xffffffff, objsubid = 1.
const NoInsertLockKey int64 = 0x696e6f726465724e

// PruneLockKey is the advisory lock a prune batch holds exclusively while it reads the positions and
// deletes, and that everything which could make a process need rows it had passed holds shared: a
// process registering its cursor row (a trigger, migration 7) and Rewind. Its value spells "inorderp";
// migrations/007_retention.sql names it as a literal.
const PruneLockKey int64 = 0x696e6f7264657270

// TurnLockKey is the advisory lock under which the checkpoint log's turns change (see turn.go). Its value
// spells "inorderT"; migrations/013_checkpoint_log.sql names it as a literal.
const TurnLockKey int64 = 0x696e6f7264657254

// trySessionLock takes the session-level lock key on q's session without waiting, and reports whether it
// got it: the owner's lock (LockKey), which the instance's shared session or the repository's own
// connection holds between batches.
func trySessionLock(ctx context.Context, q Querier, key int64) (bool, error) {
	var took bool
	err := q.QueryRow(ctx, "SELECT pg_try_advisory_lock($1)", key).Scan(&took)
	return took, err
}

// unlockSession releases the session-level lock key that trySessionLock (or the statements that take the
// owner's lock inside a larger one) took on q's session.
func unlockSession(ctx context.Context, q Querier, key int64) error {
	_, err := q.Exec(ctx, "SELECT pg_advisory_unlock($1)", key)
	return err
}

// HoldOffPrune waits for a prune batch in progress and keeps the next from starting until tx ends.
func HoldOffPrune(ctx context.Context, tx pgx.Tx) error {
	_, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock_shared($1)", PruneLockKey)
	return err
}

// LockForPrune takes the prune lock exclusively until tx ends: rewinds and processes registering wait for
// the batch, and it for them.
func LockForPrune(ctx context.Context, tx pgx.Tx) error {
	_, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", PruneLockKey)
	return err
}

// HoldInstances takes partitioned process name's instances lock shared on conn, the coordinating session
// of an instance, until ReleaseInstances or the session's end. It waits only while a repartition commits.
func HoldInstances(ctx context.Context, conn *pgx.Conn, name string) error {
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock_shared($1)", InstancesLockKey(name)); err != nil {
		return fmt.Errorf("lock the process's instances lock: %w", err)
	}
	return nil
}

// ReleaseInstances gives up the instances lock HoldInstances took.
func ReleaseInstances(ctx context.Context, conn *pgx.Conn, name string) error {
	_, err := conn.Exec(ctx, "SELECT pg_advisory_unlock_shared($1)", InstancesLockKey(name))
	return err
}

// NoInstanceRuns takes partitioned process name's instances lock exclusively until tx ends, without
// waiting, and reports whether it could: false while an instance of the process runs.
func NoInstanceRuns(ctx context.Context, tx pgx.Tx, name string) (bool, error) {
	var idle bool
	err := tx.QueryRow(ctx, "SELECT pg_try_advisory_xact_lock($1)", InstancesLockKey(name)).Scan(&idle)
	return idle, err
}

// NoOwnerRuns takes, until tx ends and without waiting, the owners' locks of streams and, when
// partitioned is not empty, the instances lock of that partitioned process, and reports whether it got
// every one: false while an owner on a direct connection, or an instance of the partitioned process,
// runs. It also keeps a standby from becoming the owner while tx lasts.
func NoOwnerRuns(ctx context.Context, tx pgx.Tx, streams []string, partitioned string) (bool, error) {
	keys := []int64{}
	for _, s := range streams {
		keys = append(keys, LockKey(s))
	}
	if partitioned != "" {
		keys = append(keys, InstancesLockKey(partitioned))
	}
	var free bool
	err := tx.QueryRow(ctx, "SELECT bool_and(pg_try_advisory_xact_lock(k)) FROM unnest($1::bigint[]) AS k", keys).
		Scan(&free)
	return free, err
}

// SessionHolder returns the backend that holds process name's owner lock (LockKey) on its session, and
// false when no session holds it: an owner that said it holds it (owner_session) has then lost its
// session, whatever its lease says. pg_locks shows every backend's locks to every role.
func SessionHolder(ctx context.Context, q Querier, name string) (int32, bool, error) {
	key := LockKey(name)
	var pid int32
	err := q.QueryRow(ctx, `
		SELECT l.pid FROM pg_locks l
		WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
		  AND l.classid = $1::bigint::oid AND l.objid = $2::bigint::oid
		  AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())`,
		int64(uint64(key)>>32), int64(uint64(key)&0xffffffff)).Scan(&pid)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	return pid, true, nil
}

// UnownedPartitions lists the partitions of process (of n) that no instance owns, by index: no lease runs
// on their cursor rows, or the owner said it holds the partition's lock on its session and no session
// holds it (that session has ended, so a standby takes over at once).
func UnownedPartitions(ctx context.Context, q Querier, process string, n int) ([]int32, error) {
	names, classids, objids := make([]string, n), make([]int64, n), make([]int64, n)
	for i := range n {
		names[i] = PartitionName(process, i, n)
		k := uint64(LockKey(names[i]))
		classids[i], objids[i] = int64(k>>32), int64(k&0xffffffff)
	}
	rows, err := q.Query(ctx, `
		SELECT (k.i - 1)::int
		FROM unnest($1::text[], $2::bigint[], $3::bigint[]) WITH ORDINALITY AS k(name, classid, objid, i)
		LEFT JOIN inorder.cursor AS c ON c.process_name = k.name
		WHERE c.lease_expires_at IS NULL OR c.lease_expires_at <= clock_timestamp()
		   OR (c.owner_session AND NOT EXISTS (
			SELECT 1 FROM pg_locks l
			WHERE l.locktype = 'advisory' AND l.objsubid = 1
			  AND l.classid = k.classid::oid AND l.objid = k.objid::oid
			  AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())))
		ORDER BY k.i`, names, classids, objids)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[int32])
}

// ErrPartitionsChanged is returned by RegisterPartitioned when the process is already split another way.
var ErrPartitionsChanged = errors.New("the process has another number of partitions")

// RegisterPartitioned records that process name is split into n partitions, or checks that it is. A
// different number, or a process that already ran as one stream, is refused: changing the split is an
// explicit operation (drain, then Repartition), since positions do not carry over between splits.
func RegisterPartitioned(ctx context.Context, conn *pgx.Conn, name string, n int) error {
	if _, err := conn.Exec(ctx, `INSERT INTO inorder.cursor (process_name, partitions) VALUES ($1, $2)
		ON CONFLICT (process_name) DO NOTHING`, name, n); err != nil {
		return fmt.Errorf("register partitioned process: %w", err)
	}
	var have *int32
	var ran bool
	if err := conn.QueryRow(ctx, `SELECT partitions, source_table IS NOT NULL FROM inorder.cursor WHERE process_name = $1`,
		name).Scan(&have, &ran); err != nil {
		return fmt.Errorf("register partitioned process: %w", err)
	}
	switch {
	case have == nil && ran:
		return fmt.Errorf("%w: it runs as one stream; to split it, stop it and run: inorder repartition --process %s --partitions %d",
			ErrPartitionsChanged, name, n)
	case have == nil:
		_, err := conn.Exec(ctx, "UPDATE inorder.cursor SET partitions = $2 WHERE process_name = $1 AND partitions IS NULL", name, n)
		return err
	case int(*have) != n:
		return fmt.Errorf("%w: it has %d, asked for %d; drain it and run: inorder repartition --process %s --partitions %d",
			ErrPartitionsChanged, *have, n, name, n)
	}
	return nil
}

// Registered reports whether process name has a cursor row.
func Registered(ctx context.Context, q Querier, name string) (bool, error) {
	var exists bool
	err := q.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM inorder.cursor WHERE process_name = $1)", name).Scan(&exists)
	return exists, err
}

// PartitionName is the process name of partition index of count, "<process>#<index>/<count>": the name
// of its own cursor row. cursor.Process groups the rows back into their process.
func PartitionName(process string, index, count int) string {
	return fmt.Sprintf("%s#%d/%d", process, index, count)
}

// partitionRow is the SQL condition "the row is a partition's of the process named by $1": its name is
// PartitionName's form for that process. A process named "<process>#<something else>" is not one.
const partitionRow = `(starts_with(process_name, $1 || '#') AND regexp_replace(process_name, '#[0-9]+/[0-9]+$', '') = $1)`

// partitionName matches the names PartitionName gives.
var partitionName = regexp.MustCompile(`^(.+)#[0-9]+/[0-9]+$`)

// PartitionOf returns the process whose partition name would be by its form, "<process>#<index>/<count>",
// and false for any other name. Processes are refused such names, so that none is taken for a partition.
func PartitionOf(name string) (process string, ok bool) {
	m := partitionName.FindStringSubmatch(name)
	if m == nil {
		return "", false
	}
	return m[1], true
}
