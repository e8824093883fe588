package cursor

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/inorder-dev/inorder/internal/cursorlock"
)

// Forget deletes the cursor rows of process name (its partitions' too), for a process that is retired or
// is to start afresh. It refuses while an instance runs the process or stands by for it (ErrBusy): stop
// every instance first, and while keys are parked in it (ErrParked): redrive or skip them. Run again afterwards, the process starts like a new one: from the beginning of
// its table, or from then with StartFromNow (`--start-from now`). A process that is forgotten no longer
// holds back Prune.
//
// The audit entry, written in the same transaction, keeps what was removed: the position of every row
// (AuditDetail.Streams) and the table the process read. Name the process, not one of its partitions.
func Forget(ctx context.Context, db DB, name string, opts ActionOpts) (AuditEntry, error) {
	const action = "forget"
	tx, err := beginAction(ctx, db, name, action, opts)
	if err != nil {
		return AuditEntry{}, err
	}
	defer tx.Rollback(ctx) //nolint:errcheck // a no-op after Commit
	fail := func(format string, args ...any) (AuditEntry, error) {
		return AuditEntry{}, fmt.Errorf("forget %q: "+format, append([]any{name}, args...)...)
	}
	row, err := lockRow(ctx, tx, name, action, opts)
	if err != nil {
		return AuditEntry{}, err
	}
	if parent, ok := cursorlock.PartitionOf(name); ok {
		var parts *int32
		err := tx.QueryRow(ctx, "SELECT partitions FROM inorder.cursor WHERE process_name = $1", parent).Scan(&parts)
		if err == nil && parts != nil {
			return fail("it is a partition of %q; forget the whole process: inorder forget --process %s", parent, parent)
		}
	}
	partitioned := row.partitions != nil
	streams, table, err := lockPartitions(ctx, tx, name, row)
	if err != nil {
		return fail("%w", err)
	}
	if err := refuseRunning(ctx, tx, name, partitioned, streams); err != nil {
		return fail("%w", err)
	}
	if err := refuseParked(ctx, tx, streams); err != nil {
		return fail("%w", err)
	}
	if err := removeProcess(ctx, tx, name, partitioned); err != nil {
		return fail("%w", err)
	}
	before := row.state.Position
	e := AuditEntry{Process: name, Action: action, Actor: opts.Actor, Reason: opts.Reason, PositionBefore: &before,
		Detail: &AuditDetail{Table: table, Streams: streams}}
	if err := insertAudit(ctx, tx, &e); err != nil {
		return AuditEntry{}, err
	}
	if err := tx.Commit(ctx); err != nil {
		return fail("commit: %w", err)
	}
	return e, nil
}

// coordinatorOf reports whether app is the coordinating session of an instance of partitioned process
// (processor.Partitioned), which it opens before it registers the process and keeps until it stops.
func coordinatorOf(app, process string) bool {
	want := "inorder-partitions:" + process + "@"
	return strings.HasPrefix(app, want) || (len(app) >= 63 && strings.HasPrefix(want, app))
}

// lockPartitions locks the rows a forget removes besides the process's own, its partitions' when it is
// partitioned, and returns where each stream stands and the table the process read. A partition a
// processor works is locked: refuse rather than wait.
func lockPartitions(ctx context.Context, tx pgx.Tx, name string, row cursorRow) ([]StreamPosition, string, error) {
	streams := []StreamPosition{{Process: name, Position: row.state.Position}}
	table := row.src.Table
	if row.partitions == nil {
		return streams, table, nil
	}
	rows, err := tx.Query(ctx, `SELECT `+cursorlock.StateColumns+`, process_name, coalesce(source_table, '')
		FROM inorder.cursor WHERE `+cursorlock.PartitionRowSQL+` ORDER BY process_name FOR UPDATE NOWAIT`, name)
	var parts []StreamPosition
	if err == nil {
		parts, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (StreamPosition, error) {
			var s StreamPosition
			var src string
			st, _, err := cursorlock.ScanState(r, &s.Process, &src)
			s.Position = st.Position
			if src != "" {
				table = src
			}
			return s, err
		})
	}
	if isLockTimeout(err) {
		return nil, "", fmt.Errorf("%w: a processor is working one of its partitions; stop every instance first", ErrBusy)
	}
	if err != nil {
		return nil, "", err
	}
	return append(streams, parts...), table, nil
}

// refuseRunning refuses (ErrBusy) while an instance owns one of the streams. An owner keeps its process's
// advisory lock between batches, and every instance of a partitioned process keeps the process's
// instances lock: taking them here refuses while one runs, and keeps a standby from becoming the owner of
// a row about to vanish. An owner through a pooler holds no advisory lock: its lease says it runs.
func refuseRunning(ctx context.Context, tx pgx.Tx, name string, partitioned bool, streams []StreamPosition) error {
	keys := []int64{}
	for _, s := range streams {
		keys = append(keys, cursorlock.LockKey(s.Process))
	}
	if partitioned {
		keys = append(keys, cursorlock.InstancesLockKey(name))
	}
	var free bool
	if err := tx.QueryRow(ctx, "SELECT bool_and(pg_try_advisory_xact_lock(k)) FROM unnest($1::bigint[]) AS k", keys).
		Scan(&free); err != nil {
		return err
	}
	if !free {
		return fmt.Errorf("%w: an instance is running it; stop every instance first", ErrBusy)
	}
	// One on a direct connection holds the lock, checked above, whatever its lease says.
	var leased string
	err := tx.QueryRow(ctx, `SELECT process_name || ' (owned by ' || coalesce(owner_instance, '?') || ' until ' ||
		       to_char(lease_expires_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"') || ')'
		FROM inorder.cursor
		WHERE (process_name = $1 OR ($2 AND `+cursorlock.PartitionRowSQL+`))
		  AND lease_expires_at > clock_timestamp() AND NOT owner_session
		ORDER BY process_name LIMIT 1`, name, partitioned).Scan(&leased)
	switch {
	case err == nil:
		return fmt.Errorf("%w: an instance is running it: %s; stop every instance first (a crashed one's lease "+
			"runs out by then)", ErrBusy, leased)
	case !errors.Is(err, pgx.ErrNoRows):
		return err
	}
	return nil
}

// removeProcess deletes the process's cursor rows and its instances' rows, refusing (ErrBusy) while an
// instance says it runs. An instance that registered before the delete (standing by, or about to lock)
// has said so, so the instances are read only after it. One that registers later waits for this
// transaction and then registers the process anew; one that registered in between finds its row gone and
// stops (cursorlock.ErrForgotten).
func removeProcess(ctx context.Context, tx pgx.Tx, name string, partitioned bool) error {
	if _, err := tx.Exec(ctx, `DELETE FROM inorder.cursor WHERE process_name = $1
		OR ($2 AND `+cursorlock.PartitionRowSQL+")", name, partitioned); err != nil {
		return err
	}
	var who string
	err := tx.QueryRow(ctx, `SELECT process_name || ' by ' || instance FROM inorder.instance
		WHERE (process_name = $1 OR ($2 AND `+cursorlock.PartitionRowSQL+`)) AND seen_until > clock_timestamp()
		ORDER BY process_name, instance LIMIT 1`, name, partitioned).Scan(&who)
	switch {
	case err == nil:
		return fmt.Errorf("%w: an instance runs it (%s); stop every instance first", ErrBusy, who)
	case !errors.Is(err, pgx.ErrNoRows):
		return err
	}
	if partitioned {
		// The coordinating sessions of a partitioned process's instances, which run on direct or
		// session-pooled connections: read afresh, after the delete.
		if _, err := tx.Exec(ctx, "SELECT pg_stat_clear_snapshot()"); err != nil {
			return err
		}
		apps, err := coordinators(ctx, tx)
		if err != nil {
			return err
		}
		for _, a := range apps {
			if coordinatorOf(a, name) {
				return fmt.Errorf("%w: an instance is connected to it (%s); stop every instance first", ErrBusy, a)
			}
		}
	}
	_, err = tx.Exec(ctx, `DELETE FROM inorder.instance WHERE process_name = $1
		OR ($2 AND `+cursorlock.PartitionRowSQL+")", name, partitioned)
	return err
}

// refuseParked refuses (ErrParked) while records are parked in one of the streams: forgetting the process
// would lose them without a word.
func refuseParked(ctx context.Context, tx pgx.Tx, streams []StreamPosition) error {
	names := make([]string, len(streams))
	for i, s := range streams {
		names[i] = s.Process
	}
	var keys, records int
	if err := tx.QueryRow(ctx, `SELECT count(DISTINCT (process_name, key))::int, count(*)::int FROM inorder.parked
		WHERE process_name = ANY($1)`, names).Scan(&keys, &records); err != nil {
		return err
	}
	if keys > 0 {
		return fmt.Errorf("%w: %d keys (%d records); redrive or skip them first (inorder parked)", ErrParked, keys, records)
	}
	return nil
}
