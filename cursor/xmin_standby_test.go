package cursor_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/inorder-dev/inorder/cursor"
	"github.com/inorder-dev/inorder/internal/harness/pgcluster"
	"github.com/inorder-dev/inorder/internal/harness/pgtest"
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

	// A report on the standby keeps its snapshot; the primary then hands out a transaction id, which the
	// snapshot holds back.
	report, err := pgx.Connect(ctx, standby.URL("postgres"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = report.Close(ctx) })
	_, err = report.Exec(ctx, "BEGIN ISOLATION LEVEL REPEATABLE READ")
	require.NoError(t, err)
	_, err = report.Exec(ctx, "SELECT 1")
	require.NoError(t, err)
	pgtest.Burn(t, primary.URL("postgres"))

	const after = time.Second
	watch := cursor.NewXminWatch(after)
	named := func(kind cursor.XminHolderKind, what string, check func(c *assert.CollectT, x cursor.XminHolder)) {
		t.Helper()
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			hold, err := watch.Look(ctx, conn)
			require.NoError(c, err)
			var x *cursor.XminHolder
			for i := range hold.Holders {
				if hold.Holders[i].Kind == kind {
					x = &hold.Holders[i]
				}
			}
			require.NotNil(c, x, what)
			require.Equal(c, cursor.SinceFirstSeen, x.SinceFrom)
			require.GreaterOrEqual(c, x.Held, after)
			require.Empty(c, x.Database, "it holds every database")
			check(c, *x)
		}, 30*time.Second, 50*time.Millisecond, what)
	}
	named(cursor.XminStandby, "the standby's feedback, through its walsender", func(c *assert.CollectT, x cursor.XminHolder) {
		require.NotZero(c, x.PID, "the walsender")
		require.NotEmpty(c, x.Application, "the standby's name")
	})

	_, err = conn.Exec(ctx, "SELECT pg_create_physical_replication_slot('standby_slot')")
	require.NoError(t, err)
	stby, err := pgx.Connect(ctx, standby.URL("postgres"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = stby.Close(ctx) })
	_, err = stby.Exec(ctx, "ALTER SYSTEM SET primary_slot_name = 'standby_slot'")
	require.NoError(t, err)
	_, err = stby.Exec(ctx, "SELECT pg_reload_conf()")
	require.NoError(t, err)
	named(cursor.XminSlot, "the slot the standby streams through", func(c *assert.CollectT, x cursor.XminHolder) {
		require.Equal(c, "standby_slot", x.Slot)
		require.Equal(c, "active", x.State)
		require.NotZero(c, x.PID)
	})

	require.NoError(t, standby.Stop())
	named(cursor.XminSlot, "the slot, with its standby gone", func(c *assert.CollectT, x cursor.XminHolder) {
		require.Equal(c, "inactive", x.State)
		require.Zero(c, x.PID)
		require.Equal(c, "replication slot 'standby_slot' (inactive)", x.Name())
	})
}
