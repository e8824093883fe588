package xmin_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/inorder-dev/inorder/internal/harness/pgtest"
	"github.com/inorder-dev/inorder/internal/store"
	"github.com/inorder-dev/inorder/internal/xmin"
)

// holderOf returns the holder of kind with pid among holders, or nil.
func holderOf(holders []xmin.Holder, kind xmin.HolderKind, pid int) *xmin.Holder {
	for i := range holders {
		if holders[i].Kind == kind && holders[i].PID == pid {
			return &holders[i]
		}
	}
	return nil
}

// watcher connects to url, for a look as the role it names.
func watcher(t *testing.T, url string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), url)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}

// TestXminHoldNamesASessionPastTheThreshold: a report idle in a REPEATABLE READ transaction holds the xmin
// horizon. A look names it once it has held it past the threshold, with what pg_stat_activity says of it,
// and not before; once it ends, no look names it.
func TestXminHoldNamesASessionPastTheThreshold(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	h := pgtest.HoldSnapshot(t, db.URL, "nightly-report")

	hold, err := xmin.Look(ctx, db.Pool, time.Hour)
	require.NoError(t, err)
	require.Nil(t, holderOf(hold.Holders, xmin.Backend, h.PID), "held for less than the threshold: not reported")
	require.Positive(t, hold.Next, "it passes the threshold in under an hour, if it holds on")
	require.LessOrEqual(t, hold.Next, time.Hour)

	const after = time.Second
	watch := xmin.NewWatch(after)
	var x *xmin.Holder
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		hold, err := watch.Look(ctx, db.Pool)
		require.NoError(c, err)
		x = holderOf(hold.Holders, xmin.Backend, h.PID)
		require.NotNil(c, x, "the report is named within a few seconds of the threshold")
		require.True(c, hold.Held())
	}, 20*time.Second, 20*time.Millisecond)
	require.GreaterOrEqual(t, x.Held, after, "reported only past the threshold")
	require.Equal(t, db.Name, x.Database)
	require.Equal(t, "nightly-report", x.Application)
	require.Equal(t, "idle in transaction", x.State)
	require.False(t, x.StartHidden, "the superuser sees every session's start")
	require.False(t, x.XactStart.IsZero())
	require.False(t, x.QueryStart.IsZero())
	require.Equal(t, x.XactStart, x.Since, "held since its transaction began")
	require.Equal(t, xmin.SinceTransactionStart, x.SinceFrom)
	require.False(t, x.OwnXid, "a snapshot, not a transaction id of its own")
	require.NotZero(t, x.Xmin)
	require.GreaterOrEqual(t, x.XminAge, int64(0))

	// A single look times it too, since its start is visible.
	hold, err = xmin.Look(ctx, db.Pool, after)
	require.NoError(t, err)
	require.NotNil(t, holderOf(hold.Holders, xmin.Backend, h.PID))

	h.End()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		hold, err := watch.Look(ctx, db.Pool)
		require.NoError(c, err)
		require.Nil(c, holderOf(hold.Holders, xmin.Backend, h.PID), "it ended")
	}, 20*time.Second, 20*time.Millisecond)
}

// TestXminHoldNamesAnotherRolesSessionWithoutItsStart: a role without pg_read_all_stats does not see when
// another role's session began, but still sees that it holds the xmin horizon: a single look names it as
// the oldest holder without timing it, and a watch times it from when it first saw it. One of inorder's
// own cursor transactions (the no-insert lock) whose start is hidden is left out, since a look cannot tell
// one batch from the next.
func TestXminHoldNamesAnotherRolesSessionWithoutItsStart(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	conn := watcher(t, pgtest.Unprivileged(t, db))
	ours := pgtest.HoldSnapshot(t, db.URL, "inorder:billing@host-a")
	ours.Exec(t, "SELECT pg_advisory_xact_lock_shared($1)", store.NoInsertLockKey)
	h := pgtest.HoldSnapshot(t, db.URL, "pg_dump")

	// One look: named, as the oldest holder, once older transactions of other tests have ended.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		hold, err := xmin.Look(ctx, conn, time.Second)
		require.NoError(c, err)
		require.NotNil(c, hold.Oldest)
		require.Equal(c, h.PID, hold.Oldest.PID, "the report of another role holds the oldest xmin")
		require.Nil(c, holderOf(hold.Holders, xmin.Backend, h.PID), "a single look cannot time it")
	}, 20*time.Second, 20*time.Millisecond)

	const after = time.Second
	watch := xmin.NewWatch(after)
	var x *xmin.Holder
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		hold, err := watch.Look(ctx, conn)
		require.NoError(c, err)
		x = holderOf(hold.Holders, xmin.Backend, h.PID)
		require.NotNil(c, x, "the watch times it from when it first saw it")
		require.Nil(c, holderOf(hold.Holders, xmin.Backend, ours.PID), "inorder's own transaction is left out")
	}, 20*time.Second, 20*time.Millisecond)
	require.True(t, x.StartHidden)
	require.Equal(t, xmin.SinceFirstSeen, x.SinceFrom)
	require.GreaterOrEqual(t, x.Held, after)
	require.Equal(t, "pg_dump", x.Application, "named by what every role sees")
	require.Equal(t, db.Name, x.Database)
	require.NotEmpty(t, x.User)
	require.Empty(t, x.State, "hidden")
	require.True(t, x.XactStart.IsZero(), "hidden")

	hold, err := xmin.Look(ctx, conn, after)
	require.NoError(t, err)
	require.Nil(t, holderOf(hold.Holders, xmin.Backend, h.PID), "a single look still cannot time it")
}

// TestXminHoldNamesAPreparedTransaction: a prepared transaction holds the horizon from before it was
// prepared until it is committed or rolled back, and every role sees when it was prepared.
func TestXminHoldNamesAPreparedTransaction(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	gid := "xmin-" + db.Name
	pgtest.Prepare(t, db, gid)
	conn := watcher(t, pgtest.Unprivileged(t, db))

	const after = time.Second
	find := func(hold xmin.Hold) *xmin.Holder {
		for i := range hold.Holders {
			if hold.Holders[i].Kind == xmin.Prepared && hold.Holders[i].GID == gid {
				return &hold.Holders[i]
			}
		}
		return nil
	}
	var x *xmin.Holder
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		hold, err := xmin.Look(ctx, conn, after)
		require.NoError(c, err)
		x = find(hold)
		require.NotNil(c, x, "a single look times it by when it was prepared")
	}, 20*time.Second, 20*time.Millisecond)
	require.Equal(t, db.Name, x.Database)
	require.Equal(t, "postgres", x.User, "its owner")
	require.Zero(t, x.PID)
	require.True(t, x.OwnXid)
	require.False(t, x.Prepared.IsZero())
	require.Equal(t, x.Prepared, x.Since)
	require.Equal(t, xmin.SincePrepared, x.SinceFrom)
	require.GreaterOrEqual(t, x.Held, after)

	hold, err := xmin.Look(ctx, conn, time.Hour)
	require.NoError(t, err)
	require.Nil(t, find(hold), "prepared less than an hour ago")
}

// TestXminHoldOfAnotherDatabase: a session of another database holds this one's horizon by its
// transaction id, which every snapshot taken here counts as running, and is named with its database; its
// snapshot alone holds nothing here (vacuum removes the rows it could see), and is not named.
func TestXminHoldOfAnotherDatabase(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, other := pgtest.New(t), pgtest.New(t)
	reader := pgtest.HoldSnapshot(t, other.URL, "other-report")

	// Vacuum here removes rows deleted after the other database's snapshot was taken: it holds nothing.
	db.Exec(t, "CREATE TABLE gone (id int); INSERT INTO gone SELECT generate_series(1, 1000); DELETE FROM gone")
	db.Exec(t, "VACUUM gone")
	var size int64
	require.NoError(t, db.Pool.QueryRow(ctx, "SELECT pg_relation_size('gone')").Scan(&size))
	require.Zero(t, size, "every deleted row removed and the table truncated")

	writer := pgtest.HoldSnapshot(t, other.URL, "other-writer")
	writer.Exec(t, "CREATE TABLE w (id int)")

	const after = time.Second
	watch := xmin.NewWatch(after)
	var x *xmin.Holder
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		hold, err := watch.Look(ctx, db.Pool)
		require.NoError(c, err)
		x = holderOf(hold.Holders, xmin.Backend, writer.PID)
		require.NotNil(c, x, "the writer of another database is named")
		require.Nil(c, holderOf(hold.Holders, xmin.Backend, reader.PID),
			"the reader of another database, which has held its snapshot longer, is not")
	}, 20*time.Second, 20*time.Millisecond)
	require.Equal(t, other.Name, x.Database)
	require.True(t, x.OwnXid, "by its own transaction id")
	require.Equal(t, "other-writer", x.Application)
}

// TestXminHoldJSON: the JSON form of a look, as `inorder status --json` prints it under "xmin_hold".
func TestXminHoldJSON(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 21, 22, 5, 0, 0, time.UTC)
	x := xmin.Holder{Kind: xmin.Backend, PID: 4242, Database: "app", User: "report",
		Application: "psql", State: "idle in transaction", XactStart: now.Add(-2 * time.Minute),
		QueryStart: now.Add(-2 * time.Minute), Xmin: 1234, XminAge: 56, Since: now.Add(-2 * time.Minute),
		SinceFrom: xmin.SinceTransactionStart, Held: 2 * time.Minute}
	got, err := xmin.Hold{Now: now, Database: "app", After: time.Minute, Holders: []xmin.Holder{x},
		Oldest: &x}.MarshalJSON()
	require.NoError(t, err)
	holder := `{"kind":"backend","pid":4242,"database":"app","user":"report","application":"psql",` +
		`"state":"idle in transaction","xact_start":"2026-11-21T22:03:00Z","query_start":"2026-11-21T22:03:00Z",` +
		`"start_hidden":false,"xmin":1234,"xmin_age":56,"own_xid":false,"since":"2026-11-21T22:03:00Z",` +
		`"since_from":"transaction start","held_seconds":120}`
	require.JSONEq(t, fmt.Sprintf(`{"database":"app","checked_at":"2026-11-21T22:05:00Z","threshold_seconds":60,`+
		`"held":true,"holders":[%s],"oldest":%s,"cost":%q}`, holder, holder, xmin.HoldCost), string(got))

	got, err = xmin.Hold{Now: now, Database: "app", After: time.Minute}.MarshalJSON()
	require.NoError(t, err)
	require.JSONEq(t, `{"database":"app","checked_at":"2026-11-21T22:05:00Z","threshold_seconds":60,`+
		`"held":false,"holders":[],"oldest":null}`, string(got))
}

// TestXminHolderNames: how status and the console name each kind of holder.
func TestXminHolderNames(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		x    xmin.Holder
		want string
	}{
		{xmin.Holder{Kind: xmin.Backend, PID: 4242, Database: "app", User: "report", Application: "psql"},
			"backend pid 4242 of database app (user report, application psql)"},
		{xmin.Holder{Kind: xmin.Backend, PID: 7, Database: "app"}, "backend pid 7 of database app"},
		{xmin.Holder{Kind: xmin.Prepared, GID: "it's", Database: "app", User: "billing"},
			"prepared transaction 'it''s' of database app (owner billing)"},
		{xmin.Holder{Kind: xmin.Slot, Slot: "replica_1", State: "active", PID: 812, Application: "replica_1"},
			"replication slot 'replica_1' (active, walsender pid 812) (application replica_1)"},
		{xmin.Holder{Kind: xmin.Slot, Slot: "replica_1", State: "inactive"}, "replication slot 'replica_1' (inactive)"},
		{xmin.Holder{Kind: xmin.Standby, PID: 812, Application: "replica_1"},
			"the hot_standby_feedback of a standby, through walsender pid 812 (application replica_1)"},
	} {
		require.Equal(t, tc.want, tc.x.Name())
	}
}
