package processor

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/inorder-dev/inorder/inordertype"
	"github.com/inorder-dev/inorder/internal/harness/pgcluster"
	"github.com/inorder-dev/inorder/internal/source"
)

// The tracker keys on virtual transaction ids (see tracker), which a server hands out again. A vxid is a
// backend slot and that slot's counter; the counter carries over from one session of the slot to the next
// (PostgreSQL 17 hands the slots out in turn, 96/2 then 97/2, where 16 and older reuse the lowest free one,
// but on every version an id is not repeated while the server runs), and starts again when the server
// does. A processor that reaches the server through a transaction pooler keeps its client connection, and
// its tracker, across a restart of the server behind it; after the restart a new transaction can carry the
// id of one the tracker saw before.
//
// Here one transaction (A) is seen by a poll writing to the source; the server restarts (A is gone); a
// session of the new server takes A's slot and counts up to A's id, and its transaction (B) inserts a row
// and stays open at the next poll, which the tracker, having kept its history, takes for A. The horizon must
// still lie before B's row (it does: B is held where A was known absent, earlier than B's start), so a
// reader that goes to that horizon, then on once B commits, gets B's row: nothing is skipped. Both horizons,
// with no guard, so that the test is about the instant held and not the margin below it. The server is the
// test's own, since it restarts.
func TestAReusedVirtualTransactionIDNeverSkipsARow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, err := pgcluster.Start(ctx, pgcluster.Config{Settings: map[string]string{
		"fsync": "off", "synchronous_commit": "off", "full_page_writes": "off", "max_connections": "40", "autovacuum": "off",
		// No background worker takes a slot either: the logical replication launcher, started with the
		// server, could otherwise take A's slot after the restart before any session asks.
		"max_logical_replication_workers": "0"}})
	if errors.Is(err, pgcluster.ErrNoServer) {
		t.Skip(err)
	}
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Stop() })
	connect := func() *pgx.Conn {
		conn, err := pgx.Connect(ctx, c.URL("postgres"))
		require.NoError(t, err)
		t.Cleanup(func() { _ = conn.Close(context.Background()) })
		return conn
	}
	type querier interface {
		QueryRow(context.Context, string, ...any) pgx.Row
	}
	vxid := func(q querier) (slot string, lxid int) {
		var v string
		require.NoError(t, q.QueryRow(ctx, `SELECT virtualtransaction FROM pg_locks
			WHERE locktype = 'virtualxid' AND pid = pg_backend_pid()`).Scan(&v))
		slot, n, _ := strings.Cut(v, "/")
		lxid, err = strconv.Atoi(n)
		require.NoError(t, err)
		return slot, lxid
	}

	poller := connect()
	_, err = poller.Exec(ctx, `CREATE TABLE events (id bigserial PRIMARY KEY, created_at timestamptz NOT NULL DEFAULT clock_timestamp());
		CREATE INDEX ON events (created_at, id)`)
	require.NoError(t, err)
	tbl, err := source.Inspect(ctx, poller, inordertype.Source{Table: "events"})
	require.NoError(t, err)
	writers, transactions := newTracker(0), newTracker(0)
	poll := func() (w, x horizon, o source.Observation) {
		o, err := tbl.PollLocks(ctx, poller)
		require.NoError(t, err)
		return writers.observe(o, inordertype.HorizonWriters), transactions.observe(o, inordertype.HorizonTransactions), o
	}
	poll() // tracking begins

	// A, a writer, after a few transactions of its session, so that its counter is ahead of where a new
	// session's starts.
	cA := connect()
	for range 10 {
		vxid(cA)
	}
	txA, err := cA.Begin(ctx)
	require.NoError(t, err)
	_, err = txA.Exec(ctx, "INSERT INTO events DEFAULT VALUES")
	require.NoError(t, err)
	slotA, lxidA := vxid(txA)
	vA, pidA := slotA+"/"+strconv.Itoa(lxidA), int(cA.PgConn().PID())
	_, _, o := poll()
	require.Contains(t, o.Writers, vA, "the poll sees A writing")
	seenA := o.Now

	// The server restarts. Sessions open until one gets A's slot (those before it stay open: 16 and older
	// hand out the lowest free slot, 17 the next in turn); it counts up to just before A's id, and begins
	// B. Then the poller comes back on a new connection with the tracker's history, as a processor behind a
	// transaction pooler does.
	require.NoError(t, c.Restart(ctx, 0))
	var cB *pgx.Conn
	for i := 0; cB == nil; i++ {
		require.Less(t, i, 35, "no new session got slot %s back", slotA)
		conn := connect()
		if slot, _ := vxid(conn); slot == slotA {
			cB = conn
		}
	}
	poller = connect()
	for {
		_, lxid := vxid(cB)
		require.Less(t, lxid, lxidA-1, "the new session's counter is already past A's id")
		if lxid == lxidA-2 {
			break // the next look takes lxidA-1, B takes lxidA
		}
	}
	vxid(cB)
	txB, err := cB.Begin(ctx)
	require.NoError(t, err)
	var rowB time.Time
	require.NoError(t, txB.QueryRow(ctx, "INSERT INTO events DEFAULT VALUES RETURNING created_at").Scan(&rowB))
	slotB, lxidB := vxid(txB)
	require.Equal(t, vA, slotB+"/"+strconv.Itoa(lxidB), "B carries A's virtual transaction id")
	require.NotEqual(t, pidA, int(cB.PgConn().PID()))

	w, x, o := poll()
	require.Contains(t, o.Writers, vA)
	require.Equal(t, seenA, writers.seen[vA].firstSeen, "the tracker takes B for A, first seen before the restart")
	require.True(t, w.at.Before(rowB), "writers horizon %s must lie before B's row %s", w.at, rowB)
	require.True(t, x.at.Before(rowB), "transactions horizon %s must lie before B's row %s", x.at, rowB)

	// A reader goes to the horizon, then on once B has committed: B's row comes after where it stood.
	read := func(after, below time.Time) (last time.Time, n int) {
		rows, err := poller.Query(ctx, `SELECT created_at FROM events WHERE created_at > $1 AND created_at < $2
			ORDER BY created_at, id`, after, below)
		require.NoError(t, err)
		ats, err := pgx.CollectRows(rows, pgx.RowTo[time.Time])
		require.NoError(t, err)
		if len(ats) == 0 {
			return after, 0
		}
		return ats[len(ats)-1], len(ats)
	}
	pos, _ := read(time.Time{}, w.at)
	require.True(t, pos.Before(rowB), "the reader stands before B's row")
	require.NoError(t, txB.Commit(ctx))
	w, _, o = poll()
	require.NotContains(t, o.Writers, vA)
	require.True(t, w.at.After(rowB), "with B committed the horizon %s passes its row %s", w.at, rowB)
	_, n := read(pos, w.at)
	require.Equal(t, 1, n, "B's row is read after the position: not skipped")
}
