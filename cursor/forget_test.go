package cursor_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/inorder-dev/inorder/cursor"
	"github.com/inorder-dev/inorder/internal/harness/pgtest"
	"github.com/inorder-dev/inorder/internal/store"
	"github.com/inorder-dev/inorder/processor/processortest"
)

// TestForgetRefusedWhileRunningThenStartsAfresh: forget is refused while an instance works the process;
// once it stopped, forget removes the cursor row with an audit entry that outlives it, and the process run
// again starts from the beginning.
func TestForgetRefusedWhileRunningThenStartsAfresh(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	o := newOutbox(t)
	require.NoError(t, o.write(ctx, 5, 0))
	first := &processortest.Recorder[booking]{}
	run := o.run(t, "billing", first)
	processortest.WaitCaughtUp(t, o.kit, "billing", nil)
	ops := cursor.ActionOpts{Actor: "ops", Reason: "retired", Wait: time.Second}

	_, err := cursor.Forget(ctx, o.db.Pool, "billing", ops)
	require.ErrorIs(t, err, cursor.ErrBusy)
	require.ErrorContains(t, err, "an instance is running it; stop every instance first", "the owner's lock refuses it")
	_, err = cursor.Forget(ctx, o.db.Pool, "nobody", ops)
	require.ErrorIs(t, err, cursor.ErrUnknownProcess)
	_, err = cursor.Forget(ctx, o.db.Pool, "billing", cursor.ActionOpts{})
	require.ErrorContains(t, err, "an actor is required")
	require.Equal(t, "5", o.position(t, "billing").ID, "a refused forget leaves the row")

	require.NoError(t, run.Stop())
	await(t, "the stopped instance's session to end", func() bool { return sessions(t, o.db) == 0 })
	e, err := cursor.Forget(ctx, o.db.Pool, "billing", ops)
	require.NoError(t, err)
	require.Equal(t, "forget", e.Action)
	require.Equal(t, "5", e.PositionBefore.ID)
	require.Equal(t, "public.bookings", e.Detail.Table)
	require.Equal(t, []cursor.StreamPosition{{Process: "billing", Position: *e.PositionBefore}}, e.Detail.Streams)
	infos, err := cursor.Read(ctx, o.db.Pool, cursor.ReadOpts{Process: "billing"})
	require.NoError(t, err)
	require.Empty(t, infos, "the cursor row is gone")
	entries, err := cursor.Audit(ctx, o.db.Pool, cursor.AuditOpts{Process: "billing"})
	require.NoError(t, err)
	require.Len(t, entries, 1, "the audit entry outlives the cursor row")
	require.Equal(t, e.ID, entries[0].ID)
	require.Equal(t, e.Detail, entries[0].Detail)
	require.Equal(t, "retired", entries[0].Reason)

	again := &processortest.Recorder[booking]{}
	o.run(t, "billing", again)
	processortest.WaitCaughtUp(t, o.kit, "billing", nil)
	require.Equal(t, first.IDs(), again.IDs(), "run again, the process starts from the beginning")
}

// TestForgetRefusedWhileAnInstanceStandsBy: an instance connected for the process, owning it or not,
// keeps it from being forgotten.
func TestForgetRefusedWhileAnInstanceStandsBy(t *testing.T) {
	t.Parallel()
	cursors := store.New(nil)
	ctx := context.Background()
	_, cfg := setup(t)
	db, _ := setup(t)
	cfg.ConnConfig.Database = db.Name
	standby, err := cursors.Open(ctx, "billing", cfg) // connected and registered, not owning it
	require.NoError(t, err)
	ops := cursor.ActionOpts{Actor: "ops"}
	_, err = cursor.Forget(ctx, db.Pool, "billing", ops)
	require.ErrorIs(t, err, cursor.ErrBusy)
	require.ErrorContains(t, err, "an instance runs it (billing by ")
	require.NoError(t, standby.Release(ctx))
	await(t, "the released instance's session to end", func() bool { return sessions(t, db) == 0 })
	_, err = cursor.Forget(ctx, db.Pool, "billing", ops)
	require.NoError(t, err)
}

// TestForgetAPartitionedProcess removes a partitioned process with its partitions, not while it runs,
// and not one partition alone.
func TestForgetAPartitionedProcess(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	o := newOutbox(t)
	require.NoError(t, o.write(ctx, 30, 0))
	first := &processortest.Recorder[booking]{}
	run := o.runSplit(t, "split", first)
	processortest.WaitCaughtUp(t, o.kit, "split", nil)
	ops := cursor.ActionOpts{Actor: "ops", Wait: time.Second}
	_, err := cursor.Forget(ctx, o.db.Pool, "split", ops)
	require.ErrorIs(t, err, cursor.ErrBusy)
	require.NoError(t, run.Stop())
	_, err = cursor.Forget(ctx, o.db.Pool, "split#0/2", ops)
	require.ErrorContains(t, err, `it is a partition of "split"; forget the whole process`)
	await(t, "the stopped instance's sessions to end", func() bool { return sessions(t, o.db) == 0 })

	e, err := cursor.Forget(ctx, o.db.Pool, "split", ops)
	require.NoError(t, err)
	var names []string
	for _, s := range e.Detail.Streams {
		names = append(names, s.Process)
		if s.Process != "split" {
			require.False(t, s.Position.IsBeginning(), "%s's position is kept in the audit", s.Process)
		}
	}
	require.Equal(t, []string{"split", "split#0/2", "split#1/2"}, names)
	var rows int
	require.NoError(t, o.db.Pool.QueryRow(ctx, "SELECT count(*) FROM inorder.cursor").Scan(&rows))
	require.Zero(t, rows)

	again := &processortest.Recorder[booking]{}
	o.runSplit(t, "split", again)
	processortest.WaitCaughtUp(t, o.kit, "split", nil)
	require.ElementsMatch(t, first.IDs(), again.IDs(), "run again, every partition starts from the beginning")
}

// sessions counts the sessions of inorder instances on the database: a stopped instance's session
// ends a moment after it closed it.
func sessions(t *testing.T, db *pgtest.DB) int {
	t.Helper()
	var n int
	require.NoError(t, db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity
		WHERE application_name LIKE 'inorder%' AND datname = current_database()`).Scan(&n))
	return n
}
