package cursor

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/inorder-dev/inorder/internal/store"
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
	if parent, ok := store.PartitionOf(name); ok {
		if yes, err := store.IsPartitioned(ctx, tx, parent); err == nil && yes {
			return fail("it is a partition of %q; forget the whole process: inorder forget --process %s", parent, parent)
		}
	}
	partitioned := row.Partitions > 0
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
	before := row.State.Position
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

// lockPartitions locks the rows a forget removes besides the process's own, its partitions' when it is
// partitioned, and returns where each stream stands and the table the process read. A partition a
// processor works is locked: refuse rather than wait.
func lockPartitions(ctx context.Context, tx pgx.Tx, name string, row cursorRow) ([]StreamPosition, string, error) {
	streams := []StreamPosition{{Process: name, Position: row.State.Position}}
	table := row.Source.Table
	if row.Partitions == 0 {
		return streams, table, nil
	}
	parts, err := store.LockPartitions(ctx, tx, name)
	if isLockTimeout(err) {
		return nil, "", fmt.Errorf("%w: a processor is working one of its partitions; stop every instance first", ErrBusy)
	}
	if err != nil {
		return nil, "", err
	}
	for _, p := range parts {
		streams = append(streams, StreamPosition{Process: p.Name, Position: p.Position})
		if p.Table != "" {
			table = p.Table
		}
	}
	return streams, table, nil
}

// refuseRunning refuses (ErrBusy) while an instance owns one of the streams. An owner keeps its process's
// advisory lock between batches, and every instance of a partitioned process keeps the process's
// instances lock: taking them here refuses while one runs, and keeps a standby from becoming the owner of
// a row about to vanish. An owner through a pooler holds no advisory lock: its lease says it runs.
func refuseRunning(ctx context.Context, tx pgx.Tx, name string, partitioned bool, streams []StreamPosition) error {
	names := make([]string, len(streams))
	for i, s := range streams {
		names[i] = s.Process
	}
	instances := ""
	if partitioned {
		instances = name
	}
	free, err := store.NoOwnerRuns(ctx, tx, names, instances)
	if err != nil {
		return err
	}
	if !free {
		return fmt.Errorf("%w: an instance is running it; stop every instance first", ErrBusy)
	}
	// One on a direct connection holds the lock, checked above, whatever its lease says.
	leased, ok, err := store.LeasedOwner(ctx, tx, name, partitioned)
	switch {
	case err != nil:
		return err
	case ok:
		return fmt.Errorf("%w: an instance is running it: %s; stop every instance first (a crashed one's lease "+
			"runs out by then)", ErrBusy, leased)
	}
	return nil
}

// removeProcess deletes the process's cursor rows and its instances' rows, refusing (ErrBusy) while an
// instance says it runs. An instance that registered before the delete (standing by, or about to lock)
// has said so, so the instances are read only after it. One that registers later waits for this
// transaction and then registers the process anew; one that registered in between finds its row gone and
// stops (store.ErrForgotten).
func removeProcess(ctx context.Context, tx pgx.Tx, name string, partitioned bool) error {
	if err := store.DeleteCursors(ctx, tx, name, partitioned); err != nil {
		return err
	}
	who, live, err := store.LiveInstance(ctx, tx, name, partitioned)
	switch {
	case err != nil:
		return err
	case live:
		return fmt.Errorf("%w: an instance runs it (%s); stop every instance first", ErrBusy, who)
	}
	if partitioned {
		// The coordinating sessions of a partitioned process's instances, which run on direct or
		// session-pooled connections: read afresh, after the delete.
		a, connected, err := store.ConnectedCoordinator(ctx, tx, name)
		if err != nil {
			return err
		}
		if connected {
			return fmt.Errorf("%w: an instance is connected to it (%s); stop every instance first", ErrBusy, a)
		}
	}
	return store.DeleteInstances(ctx, tx, name, partitioned)
}

// refuseParked refuses (ErrParked) while records are parked in one of the streams: forgetting the process
// would lose them without a word.
func refuseParked(ctx context.Context, tx pgx.Tx, streams []StreamPosition) error {
	names := make([]string, len(streams))
	for i, s := range streams {
		names[i] = s.Process
	}
	keys, records, err := store.CountParked(ctx, tx, names)
	if err != nil {
		return err
	}
	if keys > 0 {
		return fmt.Errorf("%w: %d keys (%d records); redrive or skip them first (inorder parked)", ErrParked, keys, records)
	}
	return nil
}
