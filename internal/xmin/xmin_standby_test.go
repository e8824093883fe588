package xmin_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/inorder-dev/inorder/internal/harness/pgcluster"
	"github.com/inorder-dev/inorder/internal/harness/pgtest"
	"github.com/inorder-dev/inorder/internal/xmin"
)

// TestXminHoldNamesAStandbysFeedbackAndItsSlot: a query on a standby with hot_standby_feedback holds the
// primary's xmin horizon, through the walsender serving it, and, once the standby streams through a
// replication slot, through the slot, which keeps holding it after the standby has gone. A watch on the
// primary names each, past the threshold, from when it first saw it (Postgres keeps no start for them).
func TestXminHoldNamesAStandbysFeedbackAndItsSlot(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	primary, err := pgcluster.Start(ctx, pgcluster.Config{Settings: map[string]string{
		"hot_standby_feedback": "on", "wal_receiver_status_interval": "1s", // on the standby
		"max_connections": "20", "shared_buffers": "16MB", "fsync": "off", "synchronous_commit": "off",
	}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = primary.Stop() })
	standby, err := primary.StartStandby(ctx)
	if errors.Is(err, pgcluster.ErrNoBaseBackup) {
		t.Skipf("a standby needs pg_basebackup: %v", err)
	}
	require.NoError(t, err)
	t.Cleanup(func() { _ = standby.Stop() })
	conn, err := pgx.Connect(ctx, primary.URL("postgres"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(ctx) })

	// A report on the standby keeps its snapshot. While the primary hands out no transaction id, nothing
	// can have died since, and the feedback holds nothing back: it is not named, past the threshold.
	report, err := pgx.Connect(ctx, standby.URL("postgres"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = report.Close(ctx) })
	_, err = report.Exec(ctx, "BEGIN ISOLATION LEVEL REPEATABLE READ")
	require.NoError(t, err)
	_, err = report.Exec(ctx, "SELECT 1")
	require.NoError(t, err)
	const after = time.Second
	watch := xmin.NewWatch(after)
	standbyOf := func(hold xmin.Hold) *xmin.Holder {
		for i := range hold.Holders {
			if hold.Holders[i].Kind == xmin.Standby {
				return &hold.Holders[i]
			}
		}
		return nil
	}
	var start time.Time
	early := false
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		hold, err := watch.Look(ctx, conn)
		require.NoError(c, err)
		if start.IsZero() {
			start = hold.Now
		}
		early = early || standbyOf(hold) != nil
		require.GreaterOrEqual(c, hold.Now.Sub(start), 3*after, "the threshold passes")
	}, 30*time.Second, 50*time.Millisecond)
	require.False(t, early, "nothing held back yet: not named")

	// Once the primary hands out a transaction id, the snapshot holds back what a later one deletes: the
	// next look names the feedback, timed from when the watch first saw it.
	pgtest.Burn(t, primary.URL("postgres"))
	hold, err := watch.Look(ctx, conn)
	require.NoError(t, err)
	x := standbyOf(hold)
	require.NotNil(t, x, "named at once")
	require.GreaterOrEqual(t, x.Held, after)
	require.Equal(t, xmin.SinceFirstSeen, x.SinceFrom, "Postgres keeps no start for it")
	require.Empty(t, x.Database, "it holds every database")
	require.NotZero(t, x.PID, "the walsender")
	require.NotEmpty(t, x.Application, "the standby's name")

	named := func(kind xmin.HolderKind, what string, check func(c *assert.CollectT, x xmin.Holder)) {
		t.Helper()
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			hold, err := watch.Look(ctx, conn)
			require.NoError(c, err)
			var x *xmin.Holder
			for i := range hold.Holders {
				if hold.Holders[i].Kind == kind {
					x = &hold.Holders[i]
				}
			}
			require.NotNil(c, x, what)
			require.Equal(c, xmin.SinceFirstSeen, x.SinceFrom)
			require.GreaterOrEqual(c, x.Held, after)
			require.Empty(c, x.Database, "it holds every database")
			check(c, *x)
		}, 30*time.Second, 50*time.Millisecond, what)
	}
	_, err = conn.Exec(ctx, "SELECT pg_create_physical_replication_slot('standby_slot')")
	require.NoError(t, err)
	stby, err := pgx.Connect(ctx, standby.URL("postgres"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = stby.Close(ctx) })
	_, err = stby.Exec(ctx, "ALTER SYSTEM SET primary_slot_name = 'standby_slot'")
	require.NoError(t, err)
	_, err = stby.Exec(ctx, "SELECT pg_reload_conf()")
	require.NoError(t, err)
	named(xmin.Slot, "the slot the standby streams through", func(c *assert.CollectT, x xmin.Holder) {
		require.Equal(c, "standby_slot", x.Slot)
		require.Equal(c, "active", x.State)
		require.NotZero(c, x.PID)
	})

	require.NoError(t, standby.Stop())
	named(xmin.Slot, "the slot, with its standby gone", func(c *assert.CollectT, x xmin.Holder) {
		require.Equal(c, "inactive", x.State)
		require.Zero(c, x.PID)
		require.Equal(c, "replication slot 'standby_slot' (inactive)", x.Name())
	})
}
